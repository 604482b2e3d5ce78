//! A service killed right after CloseSession answered, before it removed
//! what the session left: the next start finishes the removal. The
//! workspace is removed, never quarantined, and the container is gone.

use sandboxd::pb;

use crate::common;
use crate::served::{RemoveOnDrop, Served, Unmount, service_name};

#[tokio::test]
async fn a_close_cut_short_by_a_crash_is_finished_at_the_next_start() {
    common::prepare_host();
    let service = service_name();
    let label = format!("sandboxd.service={service}");
    let _cleanup = RemoveOnDrop(label.clone());
    let base = tempfile::tempdir().unwrap();
    let state = base.path().join("state");
    let _unmount = Unmount(state.clone());
    let served = Served::start(&service, base.path(), 0).await;
    let mut c = served.client().await;
    let s = c
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    let ws = std::path::PathBuf::from(&s.workspace_path);
    // A workspace holding something would go to the quarantine if its
    // session were merely lost.
    std::fs::write(ws.join("work.txt"), "done\n").unwrap();
    let ran = common::run(&c, &s.session_id, "cat work.txt", 30_000).await;
    assert_eq!(ran.stdout(), "done\n");
    let closed = c
        .close_session(pb::CloseSessionRequest {
            session_id: s.session_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(closed.workspace_removed);
    // Killed at once (SIGKILL): the removal had at most begun.
    drop(served);
    let served = Served::start(&service, base.path(), 0).await;
    let mut c = served.client().await;
    let listed = c
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(listed.sessions.is_empty(), "{listed:?}");
    assert!(
        !ws.exists(),
        "the closed session's workspace is still there"
    );
    let left = |dir: &str| -> Vec<String> {
        std::fs::read_dir(state.join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(left("quarantine"), Vec::<String>::new());
    assert_eq!(left("closing"), Vec::<String>::new());
    assert_eq!(left("volumes"), Vec::<String>::new());
    assert!(common::containers_labelled(&label).is_empty());
    served.sigterm_and_wait().await;
}

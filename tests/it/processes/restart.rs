//! A service killed with -9 while processes run: back, it lists them as
//! interrupted, and new ones start.

use std::time::Duration;

use sandboxd::pb;

use super::{list, start, start_req};
use crate::common;
use crate::served::{RemoveOnDrop, Served, Unmount, service_name};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_9_running_processes_are_listed_as_interrupted() {
    common::prepare_host();
    let service = service_name();
    let _cleanup = RemoveOnDrop(format!("sandboxd.service={service}"));
    let base = tempfile::tempdir().unwrap();
    let _unmount = Unmount(base.path().join("state"));
    let mut served = Served::start(&service, base.path(), 0).await;
    let c = served.client().await;
    let s = c
        .clone()
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    let sid = s.session_id;
    let running = start(&c, start_req(&sid, "sleep 600"))
        .await
        .process
        .unwrap();
    let done = start(&c, start_req(&sid, "exit 4")).await.process.unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while list(&c, &sid)
        .await
        .iter()
        .any(|p| p.process_id == done.process_id && p.state == pb::ProcessState::Running as i32)
    {
        assert!(std::time::Instant::now() < until);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    served.child.kill().unwrap();
    served.child.wait().unwrap();

    let served = Served::start(&service, base.path(), 0).await;
    let c = served.client().await;
    let listed = list(&c, &sid).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    let was_running = listed
        .iter()
        .find(|p| p.process_id == running.process_id)
        .unwrap();
    assert_eq!(
        was_running.state,
        pb::ProcessState::Interrupted as i32,
        "{was_running:?}"
    );
    assert_eq!(was_running.command, "sleep 600");
    assert!(
        was_running
            .notes
            .iter()
            .any(|n| n.contains("service stopped"))
    );
    let was_done = listed
        .iter()
        .find(|p| p.process_id == done.process_id)
        .unwrap();
    assert_eq!(
        (was_done.state, was_done.exit_code),
        (pb::ProcessState::Exited as i32, 4)
    );

    // Its output was not kept, and it takes no input; a new one starts.
    let out = super::read(&c, &sid, &running.process_id, [0, 0], true).await;
    assert!(out.chunks.is_empty());
    assert_eq!(
        out.end.process.unwrap().state,
        pb::ProcessState::Interrupted as i32
    );
    let p = start(&c, start_req(&sid, "echo back"))
        .await
        .process
        .unwrap();
    assert_ne!(p.process_id, running.process_id, "ids are never reused");
    let out = super::read(&c, &sid, &p.process_id, [0, 0], true).await;
    assert_eq!(out.stdout(), "back\n");
    let report = c
        .clone()
        .get_session_report(pb::GetSessionReportRequest {
            session_id: sid.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(report.processes.len(), 3);
    drop(served);
}

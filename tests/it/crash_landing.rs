//! A landing (an upload, a restore) cut short by `kill -9` of the service
//! is all or nothing once the service is back: one killed while landing is
//! finished, one killed while staging changed nothing, no staging
//! directory stays in the workspace, and the journal says what happened.
//! The kill comes at a known moment: once the landing's record, kept in
//! the state directory, says which phase it is in.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandboxd::pb;

use crate::common;
use crate::served::{RemoveOnDrop, Served, Unmount, service_name};

const FILES: usize = 20_000;

/// The landing record of session `id`, if one is there now.
fn record(state: &Path, id: &str) -> Option<String> {
    let dir = state.join("history").join(id);
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("landing."))
        .and_then(|e| std::fs::read(e.path()).ok())
        .map(|b| String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned())
}

/// Kills the service once the record of session `id` says `phase`; false
/// if the call ended first.
async fn kill_at(
    served: &mut Served,
    state: &Path,
    id: &str,
    phase: &str,
    call: &tokio::task::JoinHandle<()>,
) -> bool {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if record(state, id).is_some_and(|r| r.contains(&format!("phase {phase}"))) {
            served.child.kill().unwrap();
            served.child.wait().unwrap();
            return true;
        }
        if call.is_finished() {
            return false;
        }
        assert!(Instant::now() < deadline, "no {phase} record came");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Names at the workspace root that are the service's staging directories.
fn stages(ws: &Path) -> Vec<String> {
    std::fs::read_dir(ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".sandboxd-"))
        .collect()
}

fn journal(state: &Path, id: &str) -> String {
    std::fs::read_to_string(state.join("journals").join(format!("{id}.jsonl"))).unwrap_or_default()
}

fn files(ws: &Path) -> Vec<(PathBuf, String)> {
    let mut all: Vec<_> = std::fs::read_dir(ws.join("d"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let body = std::fs::read_to_string(&p).unwrap();
            (p, body)
        })
        .collect();
    all.sort();
    all
}

/// A service of its own (no warm pool) and a session with a directory
/// `d`; what the service leaves goes when the test ends.
struct Fixture {
    served: Served,
    c: common::Client,
    id: String,
    ws: PathBuf,
    state: PathBuf,
    service: String,
    base: tempfile::TempDir,
    _cleanup: RemoveOnDrop,
    _unmount: Unmount,
}

impl Fixture {
    async fn start() -> Fixture {
        common::prepare_host();
        let service = service_name();
        let cleanup = RemoveOnDrop(format!("sandboxd.service={service}"));
        let base = tempfile::tempdir().unwrap();
        let state = base.path().join("state");
        let unmount = Unmount(state.clone());
        let served = Served::start(&service, base.path(), 0).await;
        let mut c = served.client().await;
        let s = c
            .create_session(pb::CreateSessionRequest::default())
            .await
            .unwrap()
            .into_inner();
        let ws = PathBuf::from(&s.workspace_path);
        std::fs::create_dir(ws.join("d")).unwrap();
        Fixture {
            served,
            c,
            id: s.session_id,
            ws,
            state,
            service,
            base,
            _cleanup: cleanup,
            _unmount: unmount,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_killed_while_landing_is_finished_at_the_next_start() {
    let f = Fixture::start().await;
    let (mut served, mut c, id, ws, state) = (f.served, f.c, f.id, f.ws, f.state);
    for i in 0..FILES {
        std::fs::write(ws.join(format!("d/f{i}")), "v1\n").unwrap();
    }
    let checkpoint = c
        .create_checkpoint(pb::CreateCheckpointRequest {
            session_id: id.clone(),
            label: "v1".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .checkpoint
        .unwrap()
        .checkpoint_id;
    let mut killed = false;
    for _attempt in 0..3 {
        for i in 0..FILES {
            std::fs::write(ws.join(format!("d/f{i}")), "v2\n").unwrap();
        }
        let mut c2 = c.clone();
        let (sid, cp) = (id.clone(), checkpoint.clone());
        let call = tokio::spawn(async move {
            let _ = c2
                .restore_checkpoint(pb::RestoreCheckpointRequest {
                    session_id: sid,
                    checkpoint_id: cp,
                    ..Default::default()
                })
                .await;
        });
        if kill_at(&mut served, &state, &id, "landing", &call).await {
            killed = true;
            call.abort();
            break;
        }
        call.await.unwrap();
    }
    assert!(killed, "the restore never was caught landing");
    // Killed mid-landing: some files are old, some new, and the staging
    // directory is there.
    assert!(!stages(&ws).is_empty());
    assert!(record(&state, &id).is_some());

    let served = Served::start(&f.service, f.base.path(), 0).await;
    let mut c = served.client().await;
    c.get_session(pb::GetSessionRequest {
        session_id: id.clone(),
    })
    .await
    .expect("the session came back");
    let all = files(&ws);
    assert_eq!(all.len(), FILES);
    let stale: Vec<_> = all.iter().filter(|(_, b)| b != "v1\n").collect();
    assert!(
        stale.is_empty(),
        "{} of {FILES} files were not restored, e.g. {:?}",
        stale.len(),
        stale.first()
    );
    assert!(stages(&ws).is_empty(), "{:?}", stages(&ws));
    assert!(record(&state, &id).is_none());
    let journal = journal(&state, &id);
    assert!(
        journal.contains("RestoreCheckpoint") && journal.contains("finished at the start"),
        "{journal}"
    );
    // The session goes on: another restore works.
    std::fs::write(ws.join("d/f0"), "v3\n").unwrap();
    c.restore_checkpoint(pb::RestoreCheckpointRequest {
        session_id: id.clone(),
        checkpoint_id: checkpoint,
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(std::fs::read_to_string(ws.join("d/f0")).unwrap(), "v1\n");
    served.sigterm_and_wait().await;
}

/// A tar of `n` files `d/u<i>` holding `body`, each padded to `size`.
fn archive(n: usize, size: usize) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let body = vec![b'u'; size];
    for i in 0..n {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        b.append_data(&mut h, format!("d/u{i}"), &body[..]).unwrap();
    }
    b.into_inner().unwrap()
}

/// Uploads `bytes` in the background; when `trickle`, the last chunk is
/// held back until the call is dropped (the upload stays in staging).
fn upload(
    c: &common::Client,
    id: &str,
    bytes: Vec<u8>,
    trickle: bool,
) -> tokio::task::JoinHandle<()> {
    use pb::upload_archive_request::Part;
    let mut c = c.clone();
    let id = id.to_string();
    tokio::spawn(async move {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let feed = tokio::spawn(async move {
            let header = pb::UploadArchiveRequest {
                part: Some(Part::Header(pb::UploadArchiveHeader {
                    session_id: id,
                    destination: String::new(),
                })),
            };
            if tx.send(header).await.is_err() {
                return;
            }
            let chunks: Vec<_> = bytes.chunks(64 * 1024).map(<[u8]>::to_vec).collect();
            let last = chunks.len().saturating_sub(1);
            for (i, chunk) in chunks.into_iter().enumerate() {
                if trickle && i == last {
                    tokio::time::sleep(Duration::from_secs(600)).await;
                }
                let msg = pb::UploadArchiveRequest {
                    part: Some(Part::Chunk(chunk)),
                };
                if tx.send(msg).await.is_err() {
                    return;
                }
            }
        });
        let _ = c
            .upload_archive(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await;
        feed.abort();
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_killed_while_staging_or_landing_are_all_or_nothing_after_a_restart() {
    let f = Fixture::start().await;
    let (mut served, mut c, id, ws, state) = (f.served, f.c, f.id, f.ws, f.state);
    std::fs::write(ws.join("d/kept"), "kept\n").unwrap();
    // A first change: the session's starting point is taken.
    c.create_file(pb::CreateFileRequest {
        session_id: id.clone(),
        path: "first.txt".into(),
        content: "first\n".into(),
    })
    .await
    .unwrap();

    // Killed while staging (the archive is not all there yet): nothing
    // changes, and the 4 MiB staged so far go.
    let call = upload(&c, &id, archive(64, 64 * 1024), true);
    let deadline = Instant::now() + Duration::from_secs(60);
    let staged = |ws: &Path| {
        stages(ws)
            .first()
            .and_then(|s| std::fs::read_dir(ws.join(s)).ok())
            .map_or(0, Iterator::count)
    };
    // Killed once part of it is staged.
    while staged(&ws) < 32 {
        assert!(Instant::now() < deadline, "the upload was not staged");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(record(&state, &id).is_some_and(|r| r.contains("phase staging")));
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    call.abort();
    let mut served = Served::start(&f.service, f.base.path(), 0).await;
    let mut c = served.client().await;
    c.get_session(pb::GetSessionRequest {
        session_id: id.clone(),
    })
    .await
    .expect("the session came back");
    assert_eq!(files(&ws).len(), 1, "nothing of the upload landed");
    assert!(stages(&ws).is_empty(), "{:?}", stages(&ws));
    assert!(journal(&state, &id).contains("it was still staging"));
    // The starting point is kept, and nothing of the staging is a change.
    let changed: Vec<String> = changes(&mut c, &id)
        .await
        .changes
        .into_iter()
        .map(|f| f.path)
        .collect();
    assert_eq!(changed, ["first.txt"]);

    // Killed while landing: every file is there after the restart.
    let mut killed = false;
    for attempt in 0..3 {
        let call = upload(&c, &id, archive(FILES, 16), false);
        if kill_at(&mut served, &state, &id, "landing", &call).await {
            killed = true;
            call.abort();
            break;
        }
        call.await.unwrap();
        // It landed whole before it could be caught: take it away again.
        for i in 0..FILES {
            let _ = std::fs::remove_file(ws.join(format!("d/u{i}")));
        }
        assert!(attempt < 2, "the upload never was caught landing");
    }
    assert!(killed);
    let served = Served::start(&f.service, f.base.path(), 0).await;
    let mut c = served.client().await;
    c.get_session(pb::GetSessionRequest {
        session_id: id.clone(),
    })
    .await
    .expect("the session came back");
    let all = files(&ws);
    assert_eq!(all.len(), FILES + 1, "every file of the upload landed");
    assert!(stages(&ws).is_empty(), "{:?}", stages(&ws));
    assert!(record(&state, &id).is_none());
    let journal = journal(&state, &id);
    assert!(
        journal.contains("UploadArchive") && journal.contains("finished at the start"),
        "{journal}"
    );
    let changed = changes(&mut c, &id).await;
    // In path order, cut at the listing's bound.
    assert!(changed.changes.iter().any(|f| f.path == "d/u0"));
    assert!(
        !changed
            .changes
            .iter()
            .any(|f| f.path.starts_with(".sandboxd-"))
    );
    served.sigterm_and_wait().await;
}

async fn changes(c: &mut common::Client, id: &str) -> pb::GetChangesResponse {
    c.get_changes(pb::GetChangesRequest {
        session_id: id.to_string(),
        ..Default::default()
    })
    .await
    .expect("changes since the start are still told")
    .into_inner()
}

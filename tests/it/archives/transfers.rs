//! Downloads of trees a command made (30,000 levels deep, symlinks out),
//! and callers that stall mid-transfer.

use std::io::Read;
use std::path::Path;

use crate::common::{TestServer, assert_refused, run, snapshot};
use sandboxd::pb;

use super::*;

#[tokio::test]
async fn a_download_survives_a_30000_deep_tree_and_keeps_symlinks_as_symlinks() {
    let server = TestServer::with_docker().await;
    let (id, ws) = server.session().await;
    let make = "set -e
mkdir src && echo code > src/main.py
ln -s /etc/shadow src/shadow-link
ln -s ../src src/loop
mkfifo src/pipe
python3 -c '
import os
os.mkdir(\"deep\"); os.chdir(\"deep\")
for _ in range(30000):
    os.mkdir(\"d\"); os.chdir(\"d\")
open(\"f\", \"w\").write(\"bottom\")
'";
    let made = run(&server.client, &id, make, 300_000).await;
    assert_eq!(made.exit.exit_code, 0, "{}", made.stderr());
    let (bytes, done) = download(&server, &id, "", false, false).await.unwrap();
    assert_eq!(done.files, 1, "{done:?}");
    assert_eq!(done.symlinks, 2);
    let why: Vec<(&str, &str)> = done
        .skipped
        .iter()
        .map(|s| (s.path.as_str(), s.why.as_str()))
        .collect();
    assert_eq!(done.skipped_count, 2, "{why:?}");
    assert!(
        why.iter()
            .any(|(p, w)| *p == "src/pipe" && w.contains("special")),
        "{why:?}"
    );
    assert!(
        why.iter()
            .any(|(p, w)| p.starts_with("deep/d/") && w.contains("deeper")),
        "{why:?}"
    );
    let out = untar(&bytes, false);
    let link = std::fs::read_link(out.path().join("src/shadow-link")).unwrap();
    assert_eq!(link, Path::new("/etc/shadow"));
    assert_eq!(
        std::fs::read_to_string(out.path().join("src/main.py")).unwrap(),
        "code\n"
    );
    // One file, alone, by its name.
    let (one, _) = download(&server, &id, "src/main.py", false, false)
        .await
        .unwrap();
    let mut names = Vec::new();
    for e in tar::Archive::new(one.as_slice()).entries().unwrap() {
        let mut e = e.unwrap();
        let mut body = String::new();
        e.read_to_string(&mut body).unwrap();
        names.push((e.path().unwrap().display().to_string(), body));
    }
    assert_eq!(names, [("main.py".to_string(), "code\n".to_string())]);
    // A path that is not there, or outside.
    assert_refused(
        download(&server, &id, "nope", false, false),
        "FILE_NOT_FOUND",
    )
    .await;
    assert_refused(
        download(&server, &id, "../..", false, false),
        "PATH_OUTSIDE_WORKSPACE",
    )
    .await;
    let _ = ws;
    server.stop().await;
}

/// A caller that stops sending mid-upload, or never reads its download, is
/// dropped after the stall time: its blocking thread, writer's turn and
/// download slot come back, and the session goes on serving.
#[tokio::test]
async fn callers_that_stall_are_dropped_and_their_slots_come_back() {
    let server = TestServer::start_with(|c| {
        c.archives.stall = std::time::Duration::from_secs(2);
        c.download_slots = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
        c.upload_slots = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
    })
    .await;
    let (id, ws) = server.session().await;
    std::fs::write(ws.join("big.bin"), vec![7u8; 8 << 20]).unwrap();
    let before = snapshot(&ws);
    // Half an archive, then silence with the stream left open.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    use pb::upload_archive_request::Part;
    tx.send(pb::UploadArchiveRequest {
        part: Some(Part::Header(pb::UploadArchiveHeader {
            session_id: id.clone(),
            destination: String::new(),
        })),
    })
    .await
    .unwrap();
    let mut half = Vec::new();
    raw(
        &mut half,
        b"a.txt",
        tar::EntryType::Regular,
        &[b'a'; 3000],
        b"",
    );
    half.truncate(1024);
    tx.send(pb::UploadArchiveRequest {
        part: Some(Part::Chunk(half)),
    })
    .await
    .unwrap();
    let t = std::time::Instant::now();
    let mut client = server.client.clone();
    let stalled = tokio::spawn(async move {
        client
            .upload_archive(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
    });
    // Another upload waits for the only slot, unread, and gets it once the
    // stalled one is dropped.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let good = archive(|o| raw(o, b"b.txt", tar::EntryType::Regular, b"b", b""));
    let second = upload(&server, &id, "", good).await.unwrap();
    assert_eq!(second.files, 1);
    let status = stalled
        .await
        .unwrap()
        .expect_err("a stalled upload is dropped");
    assert_eq!(
        crate::common::reason(&status),
        "ARCHIVE_MALFORMED",
        "{status:?}"
    );
    assert!(status.message().contains("no data came"), "{status:?}");
    assert!(t.elapsed() < std::time::Duration::from_secs(30));
    drop(tx);
    assert!(!ws.join("a.txt").exists());
    std::fs::remove_file(ws.join("b.txt")).unwrap();
    assert_eq!(snapshot(&ws), before);
    // A download nobody reads holds the only slot until the stall time.
    let unread = server
        .client
        .clone()
        .download_archive(pb::DownloadArchiveRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let (bytes, done) = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        download(&server, &id, "", false, false),
    )
    .await
    .expect("the slot came back")
    .unwrap();
    assert_eq!(done.files, 1);
    assert!(bytes.len() > 8 << 20);
    drop(unread);
    server.stop().await;
}

//! One session never blocks another: a session holds at most one upload
//! and one download slot, and a transfer that falls behind the minimum
//! pace is stopped with `TRANSFER_TOO_SLOW`, naming the bound.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd::pb;
use sandboxd::session::{Config, MinRate};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::archives::{download, end, raw, upload};
use crate::common::{TestServer, reason, snapshot};
use pb::upload_archive_request::Part;

/// Two slots of each kind, a long stall time (so that only the pace can
/// stop a transfer), and a grace of `grace_secs`.
fn tight(c: &mut Config, grace_secs: u64) {
    c.archives.stall = Duration::from_secs(600);
    c.archives.min_rate = MinRate {
        bytes_per_sec: 64 << 10,
        grace: Duration::from_secs(grace_secs),
    };
    c.upload_slots = Arc::new(tokio::sync::Semaphore::new(2));
    c.download_slots = Arc::new(tokio::sync::Semaphore::new(2));
}

fn small_archive(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    raw(&mut out, name, tar::EntryType::Regular, b"hello\n", b"");
    end(out)
}

/// An upload of session `id` whose caller sends the first `head` bytes of
/// an archive at once, then one byte every `every` (at most `trickle`
/// bytes), and keeps the stream open. Returns the call, and the sender
/// (dropping it ends the stream).
fn trickling_upload(
    server: &TestServer,
    id: &str,
    head: usize,
    every: Duration,
    trickle: usize,
) -> tokio::task::JoinHandle<Result<pb::UploadArchiveResponse, tonic::Status>> {
    let (tx, rx) = mpsc::channel(4);
    let header = pb::UploadArchiveRequest {
        part: Some(Part::Header(pb::UploadArchiveHeader {
            session_id: id.to_string(),
            destination: String::new(),
        })),
    };
    // A big file's entry: its bytes never end within the test.
    let mut body = Vec::new();
    let mut h = tar::Header::new_gnu();
    h.set_path("trickled.bin").unwrap();
    h.set_size(256 << 20);
    h.set_mode(0o644);
    h.set_cksum();
    body.extend_from_slice(h.as_bytes());
    body.resize(512 + head, b'x');
    tokio::spawn(async move {
        if tx.send(header).await.is_err() {
            return;
        }
        for c in body.chunks(64 << 10) {
            let chunk = pb::UploadArchiveRequest {
                part: Some(Part::Chunk(c.to_vec())),
            };
            if tx.send(chunk).await.is_err() {
                return;
            }
        }
        for _ in 0..trickle {
            tokio::time::sleep(every).await;
            let byte = pb::UploadArchiveRequest {
                part: Some(Part::Chunk(vec![b'x'])),
            };
            if tx.send(byte).await.is_err() {
                return;
            }
        }
        // Keeps the stream open until the service gives up on it.
        tx.closed().await;
    });
    let mut client = server.client.clone();
    tokio::spawn(async move {
        client
            .upload_archive(ReceiverStream::new(rx))
            .await
            .map(|r| r.into_inner())
    })
}

fn assert_too_slow(status: &tonic::Status) {
    assert_eq!(reason(status), "TRANSFER_TOO_SLOW", "{status:?}");
    let m = status.message();
    assert!(
        m.contains("minimum rate of 65536 bytes per second"),
        "the bound is named: {m}"
    );
    assert!(
        m.contains("Nothing was extracted") || m.contains("as it was"),
        "{m}"
    );
}

/// The finding: one session trickling a byte a second into more uploads
/// than there are slots. Another session's upload goes through at once,
/// and the trickling ones are stopped once their grace is spent, one
/// after the other (each waits for the session's share, unread).
#[tokio::test]
async fn one_session_trickling_into_every_upload_slot_blocks_no_other_session() {
    let server = TestServer::start_with(|c| tight(c, 3)).await;
    let (hog, hog_ws) = server.session().await;
    let (other, other_ws) = server.session().await;
    let hog_before = snapshot(&hog_ws);
    let started = Instant::now();
    let tricklers: Vec<_> = (0..4)
        .map(|_| trickling_upload(&server, &hog, 0, Duration::from_secs(1), 60))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    let done = tokio::time::timeout(
        Duration::from_secs(20),
        upload(&server, &other, "", small_archive(b"mine.txt")),
    )
    .await
    .expect("another session's upload is not blocked")
    .unwrap();
    assert_eq!(done.files, 1);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(
        std::fs::read_to_string(other_ws.join("mine.txt")).unwrap(),
        "hello\n"
    );
    // Each trickler is stopped about its grace after it began to be read;
    // they are read one after the other.
    for t in tricklers {
        let status = tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("a trickling upload is stopped")
            .unwrap()
            .expect_err("a trickling upload is refused");
        assert_too_slow(&status);
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(snapshot(&hog_ws), hog_before, "nothing landed");
    // The slots and shares all came back.
    let done = upload(&server, &hog, "", small_archive(b"after.txt"))
        .await
        .unwrap();
    assert_eq!(done.files, 1);
    server.stop().await;
}

/// Speed earlier buys no trickle later: 4 MiB at once, then a byte a
/// second, is stopped about the grace after the trickle began.
#[tokio::test]
async fn a_fast_start_does_not_buy_a_long_trickle() {
    let server = TestServer::start_with(|c| tight(c, 2)).await;
    let (id, ws) = server.session().await;
    let before = snapshot(&ws);
    let t = Instant::now();
    let status = tokio::time::timeout(
        Duration::from_secs(60),
        trickling_upload(&server, &id, 4 << 20, Duration::from_secs(1), 60),
    )
    .await
    .expect("the trickle is stopped")
    .unwrap()
    .expect_err("refused");
    assert_too_slow(&status);
    // 4 MiB at 64 KiB/s would have earned 64 s; the balance never passes
    // the grace (2 s).
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    assert_eq!(snapshot(&ws), before);
    server.stop().await;
}

/// A caller above the minimum rate is never stopped, however long its
/// upload takes past the grace: the bound is a pace, not a deadline.
#[tokio::test]
async fn an_upload_at_a_steady_pace_above_the_minimum_goes_through() {
    let server = TestServer::start_with(|c| tight(c, 1)).await;
    let (id, ws) = server.session().await;
    let mut archive = Vec::new();
    raw(
        &mut archive,
        b"steady.bin",
        tar::EntryType::Regular,
        &vec![7u8; 3 << 20],
        b"",
    );
    let archive = end(archive);
    let (tx, rx) = mpsc::channel(4);
    tx.send(pb::UploadArchiveRequest {
        part: Some(Part::Header(pb::UploadArchiveHeader {
            session_id: id.clone(),
            destination: String::new(),
        })),
    })
    .await
    .unwrap();
    let feeder = tokio::spawn(async move {
        // 128 KiB every 250 ms: 512 KiB/s, 8 times the minimum, for ~6 s.
        for c in archive.chunks(128 << 10) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let chunk = pb::UploadArchiveRequest {
                part: Some(Part::Chunk(c.to_vec())),
            };
            if tx.send(chunk).await.is_err() {
                return;
            }
        }
    });
    let t = Instant::now();
    let done = server
        .client
        .clone()
        .upload_archive(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    feeder.await.unwrap();
    assert_eq!(done.files, 1);
    assert!(t.elapsed() > Duration::from_secs(3), "it took its time");
    assert_eq!(
        std::fs::metadata(ws.join("steady.bin")).unwrap().len(),
        3 << 20
    );
    server.stop().await;
}

/// Downloads: one session opening more downloads than there are slots and
/// reading none holds one slot at most; another session downloads at
/// once, and the unread ones are stopped with the bound named.
#[tokio::test]
async fn one_session_never_reading_its_downloads_blocks_no_other_session() {
    let server = TestServer::start_with(|c| tight(c, 3)).await;
    let (hog, hog_ws) = server.session().await;
    let (other, other_ws) = server.session().await;
    // Far more than the channel and the transport's windows hold.
    std::fs::write(hog_ws.join("big.bin"), vec![7u8; 32 << 20]).unwrap();
    std::fs::write(other_ws.join("small.txt"), "hi\n").unwrap();
    let mut unread = Vec::new();
    for _ in 0..4 {
        let mut client = server.client.clone();
        let hog = hog.clone();
        unread.push(tokio::spawn(async move {
            let mut stream = client
                .download_archive(pb::DownloadArchiveRequest {
                    session_id: hog,
                    ..Default::default()
                })
                .await?
                .into_inner();
            // Reads nothing for a long while, then everything: the first
            // error (or the end) tells how the service left it.
            tokio::time::sleep(Duration::from_secs(25)).await;
            while stream.message().await?.is_some() {}
            Ok::<(), tonic::Status>(())
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    let (_, done) = tokio::time::timeout(
        Duration::from_secs(20),
        download(&server, &other, "", false, false),
    )
    .await
    .expect("another session's download is not blocked")
    .unwrap();
    assert_eq!(done.files, 1);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    // The unread ones: the first is stopped by the pace while its caller
    // sleeps; the others wait for the session's share meanwhile and are
    // stopped in turn (or end the same way once read).
    let mut slow = 0;
    for d in unread {
        let outcome = tokio::time::timeout(Duration::from_secs(120), d)
            .await
            .expect("each unread download ends")
            .unwrap();
        if let Err(status) = outcome {
            assert_eq!(reason(&status), "TRANSFER_TOO_SLOW", "{status:?}");
            assert!(
                status
                    .message()
                    .contains("minimum rate of 65536 bytes per second"),
                "{status:?}"
            );
            slow += 1;
        }
    }
    assert_eq!(slow, 4, "every unread download was stopped by the pace");
    server.stop().await;
}

//! What a scan of the workspace costs, whatever a command left in it, over
//! gRPC and real Docker: a sparse terabyte file is listed by its size at
//! once; a client that gives up stops the CPU work it asked for; closing a
//! session never waits for a scan; the first command of a session is not
//! held by a huge file; a listing of long paths stays under the message
//! limit; a picture past its memory bound is refused naming that bound.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{Mode, TestServer, assert_refused, run};
use sandboxd::pb;

/// CPU seconds of each thread of this process, by thread id.
fn thread_cpu() -> std::collections::HashMap<String, f64> {
    let mut out = std::collections::HashMap::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
        out.insert(t.file_name().to_string_lossy().into_owned(), ticks / 100.0);
    }
    out
}

/// The most CPU seconds any one thread spent since `before`.
fn busiest_since(before: &std::collections::HashMap<String, f64>) -> f64 {
    thread_cpu()
        .iter()
        .map(|(t, cpu)| cpu - before.get(t).copied().unwrap_or(0.0))
        .fold(0.0, f64::max)
}

/// These tests measure CPU and time: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn changes_req(id: &str) -> pb::GetChangesRequest {
    pb::GetChangesRequest {
        session_id: id.into(),
        since_checkpoint: String::new(),
        max_patch_bytes: 0,
    }
}

/// A sparse file of `size` bytes at `path`, as `truncate -s` makes.
fn sparse(path: &Path, size: u64) {
    std::fs::File::create(path).unwrap().set_len(size).unwrap();
}

#[tokio::test]
async fn a_sparse_terabyte_file_is_listed_by_its_size_in_bounded_time() {
    let _serial = SERIAL.lock().await;
    let server = TestServer::with_docker().await;
    let (id, _ws) = server.session().await;
    let made = run(
        &server.client,
        &id,
        "truncate -s 1T big && truncate -s 32G medium && echo hi > small",
        30_000,
    )
    .await;
    assert_eq!(made.exit.exit_code, 0, "{}", made.stderr());
    let (cpu, t) = (thread_cpu(), Instant::now());
    let got = tokio::time::timeout(
        Duration::from_secs(30),
        server.client.clone().get_changes(changes_req(&id)),
    )
    .await
    .expect("GetChanges answers in bounded time")
    .unwrap()
    .into_inner();
    let (cpu, wall) = (busiest_since(&cpu), t.elapsed());
    eprintln!("GetChanges over 1 TiB + 32 GiB sparse files: {wall:?}, busiest thread {cpu} s CPU");
    assert!(cpu < 5.0, "a thread spent {cpu} s of CPU on GetChanges");
    assert!(wall < Duration::from_secs(10), "{wall:?}");
    let big = got
        .changes
        .iter()
        .find(|c| c.path == "big")
        .expect("listed");
    assert_eq!(big.size_after, 1 << 40);
    assert_eq!(big.omitted, pb::OmittedReason::OmittedTooLarge as i32);
    let medium = got.changes.iter().find(|c| c.path == "medium").unwrap();
    assert_eq!(medium.size_after, 32 << 30);
    assert!(got.changes.iter().any(|c| c.path == "small"));
    // A checkpoint, which must keep contents, refuses the file by name.
    let refused = assert_refused(
        server
            .client
            .clone()
            .create_checkpoint(pb::CreateCheckpointRequest {
                session_id: id.clone(),
                label: String::new(),
            }),
        "FILE_TOO_LARGE",
    )
    .await;
    assert!(
        refused.message().contains("big") || refused.message().contains("medium"),
        "{}",
        refused.message()
    );
    // Changed again (a new size), it is seen again.
    run(&server.client, &id, "truncate -s 2T big", 30_000).await;
    let again = server
        .client
        .clone()
        .get_changes(changes_req(&id))
        .await
        .unwrap()
        .into_inner();
    let big2 = again.changes.iter().find(|c| c.path == "big").unwrap();
    assert_eq!(big2.size_after, 2 << 40);
    assert_ne!(big2.sha256_after, big.sha256_after);
    server.stop().await;
}

/// A file the scan must read (within its per-file bound) and that takes
/// it seconds: zeros, sparse.
const SLOW: u64 = 1 << 30;

#[tokio::test]
async fn a_client_that_gives_up_mid_scan_stops_the_cpu_work() {
    let _serial = SERIAL.lock().await;
    let server = TestServer::with_docker().await;
    let (id, ws) = server.session().await;
    run(&server.client, &id, "true", 30_000).await;
    for i in 0..3 {
        sparse(&ws.join(format!("zeros{i}")), SLOW);
    }
    let gave_up = tokio::time::timeout(
        Duration::from_millis(1500),
        server.client.clone().get_changes(changes_req(&id)),
    )
    .await;
    assert!(gave_up.is_err(), "the scan was expected to take longer");
    // Give the cancel a moment to land, then measure: a scan still hashing
    // would keep one thread busy the whole time. (Per thread: other tests
    // of this process may be busy meanwhile.)
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = thread_cpu();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let busiest = busiest_since(&before);
    assert!(
        busiest < 1.5,
        "a thread spent {busiest} s of CPU after the client left"
    );
    // Nor does the scan hold the history: with the files gone, the next
    // GetChanges answers at once.
    for i in 0..3 {
        std::fs::remove_file(ws.join(format!("zeros{i}"))).unwrap();
    }
    let t = Instant::now();
    server
        .client
        .clone()
        .get_changes(changes_req(&id))
        .await
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // The session is usable at once.
    let t = Instant::now();
    let ok = run(&server.client, &id, "echo ok", 30_000).await;
    assert_eq!(ok.stdout(), "ok\n");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    server.stop().await;
}

#[tokio::test]
async fn close_session_during_a_long_scan_answers_promptly() {
    let _serial = SERIAL.lock().await;
    let server = TestServer::with_docker().await;
    let (id, ws) = server.session().await;
    let cp = server
        .client
        .clone()
        .create_checkpoint(pb::CreateCheckpointRequest {
            session_id: id.clone(),
            label: "start".into(),
        })
        .await
        .unwrap()
        .into_inner();
    for i in 0..3 {
        sparse(&ws.join(format!("zeros{i}")), SLOW);
    }
    let mut client = server.client.clone();
    let scan_id = id.clone();
    let scanning = tokio::spawn(async move { client.get_changes(changes_req(&scan_id)).await });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !scanning.is_finished(),
        "the scan was expected to take longer"
    );
    // Neither the listing of checkpoints nor closing waits for the scan.
    let t = Instant::now();
    let listed = server
        .client
        .clone()
        .list_checkpoints(pb::ListCheckpointsRequest {
            session_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        listed.checkpoints[0].checkpoint_id,
        cp.checkpoint.unwrap().checkpoint_id
    );
    let closed = tokio::time::timeout(
        Duration::from_secs(20),
        server
            .client
            .clone()
            .close_session(pb::CloseSessionRequest {
                session_id: id.clone(),
            }),
    )
    .await
    .expect("CloseSession answers while a scan runs");
    closed.unwrap();
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    scanning.abort();
    server.stop().await;
}

#[tokio::test]
async fn the_first_command_after_a_huge_sparse_file_is_not_held_by_the_baseline() {
    let _serial = SERIAL.lock().await;
    let server = TestServer::with_docker().await;
    let (id, ws) = server.session().await;
    // Left in the workspace before the session's first change: the
    // baseline is taken just before the first command.
    sparse(&ws.join("huge"), 24 << 30);
    let t = Instant::now();
    let ran = run(&server.client, &id, "echo ok", 30_000).await;
    assert_eq!(ran.stdout(), "ok\n");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    // The baseline was kept (the huge file unread): changes since the
    // start work, and the file is not among them.
    run(&server.client, &id, "echo new > new.txt", 30_000).await;
    let got = server
        .client
        .clone()
        .get_changes(changes_req(&id))
        .await
        .unwrap()
        .into_inner();
    let paths: Vec<&str> = got.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["new.txt"]);
    server.stop().await;
}

/// A command making `files` files under a chain of directories whose path
/// is about 3,800 bytes long.
fn long_paths(files: usize) -> String {
    let name = "d".repeat(250);
    let chain = vec![name; 15].join("/");
    format!("set -e; mkdir -p {chain}; cd {chain}; seq -w 1 {files} | xargs touch")
}

#[tokio::test]
async fn a_listing_of_long_paths_stays_under_the_message_limit_and_says_it_is_cut() {
    let _serial = SERIAL.lock().await;
    let server = TestServer::with_docker().await;
    let (id, _ws) = server.session().await;
    let made = run(&server.client, &id, &long_paths(10_000), 120_000).await;
    assert_eq!(made.exit.exit_code, 0, "{}", made.stderr());
    // Asked twice: a listing past the message limit would fail every time.
    for _ in 0..2 {
        let got = server
            .client
            .clone()
            .get_changes(changes_req(&id))
            .await
            .expect("GetChanges answers")
            .into_inner();
        assert!(got.truncated, "{} changes", got.changes.len());
        assert!(!got.changes.is_empty());
        let bytes: usize = got.changes.iter().map(|c| c.path.len()).sum();
        assert!(bytes <= 4 << 20, "{bytes}");
        assert!(got.patch.len() < 8 << 20, "{}", got.patch.len());
    }
    server.stop().await;
}

#[tokio::test]
async fn a_picture_past_its_memory_bound_is_refused_naming_that_bound() {
    let _serial = SERIAL.lock().await;
    let server = TestServer::with_docker_mode_and(Mode::Supervisor, |c| {
        c.history.scan.max_memory = 4 << 20;
    })
    .await;
    let (id, _ws) = server.session().await;
    let made = run(&server.client, &id, &long_paths(2_000), 120_000).await;
    assert_eq!(made.exit.exit_code, 0, "{}", made.stderr());
    // The first checkpoint: not "too many checkpoints", but the tree.
    let refused = assert_refused(
        server
            .client
            .clone()
            .create_checkpoint(pb::CreateCheckpointRequest {
                session_id: id.clone(),
                label: String::new(),
            }),
        "TREE_TOO_LARGE",
    )
    .await;
    assert!(
        refused.message().contains(&(4u64 << 20).to_string()),
        "{}",
        refused.message()
    );
    let refused = assert_refused(
        server.client.clone().get_changes(changes_req(&id)),
        "TREE_TOO_LARGE",
    )
    .await;
    assert!(
        refused.message().contains("memory"),
        "{}",
        refused.message()
    );
    // Removed, the session works again.
    run(&server.client, &id, "rm -rf dddd*", 60_000).await;
    server
        .client
        .clone()
        .create_checkpoint(pb::CreateCheckpointRequest {
            session_id: id.clone(),
            label: String::new(),
        })
        .await
        .unwrap();
    server.stop().await;
}

/// This process's resident memory now, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

#[tokio::test]
async fn a_scan_of_200k_long_paths_stays_within_its_memory_bound() {
    let _serial = SERIAL.lock().await;
    let server = TestServer::with_docker().await;
    let (id, _ws) = server.session().await;
    let made = run(&server.client, &id, &long_paths(200_000), 300_000).await;
    assert_eq!(made.exit.exit_code, 0, "{}", made.stderr());
    let before = rss();
    // Sampled while the scan runs: the process's peak is of no use, other
    // tests of this process having set it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut peak = 0;
            for _ in 0..60_000 {
                peak = peak.max(rss());
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            peak
        })
    };
    let t = Instant::now();
    let refused = assert_refused(
        server.client.clone().get_changes(changes_req(&id)),
        "TREE_TOO_LARGE",
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let grew = sampler.join().unwrap().saturating_sub(before);
    eprintln!(
        "scan of 200,000 paths of ~3,800 bytes: refused in {:?}, peak RSS grew {} MiB",
        t.elapsed(),
        grew >> 20
    );
    assert!(
        refused.message().contains("memory"),
        "{}",
        refused.message()
    );
    // The picture's bound is 64 MiB: a generous margin for the allocator
    // and the rest of the process.
    assert!(grew < 256 << 20, "peak RSS grew {grew} bytes");
    server.stop().await;
}

#[tokio::test]
async fn checkpoints_past_their_memory_share_are_refused_as_such_not_as_too_many() {
    let server = TestServer::start_with(|c| c.history.max_memory = 200_000).await;
    let (id, ws) = server.session().await;
    // About 90 KB a picture: the baseline and one checkpoint fit, a second
    // does not.
    let long = "n".repeat(200);
    for i in 0..300 {
        std::fs::write(ws.join(format!("{long}{i:03}")), "x").unwrap();
    }
    let req = || pb::CreateCheckpointRequest {
        session_id: id.clone(),
        label: String::new(),
    };
    let mut client = server.client.clone();
    client.create_checkpoint(req()).await.unwrap();
    let refused = assert_refused(client.create_checkpoint(req()), "CHECKPOINT_MEMORY_FULL").await;
    assert!(
        refused.message().contains("200000"),
        "{}",
        refused.message()
    );
    server.stop().await;
}

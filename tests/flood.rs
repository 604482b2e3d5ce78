//! A command printing 1 GiB completes with flat service memory. Alone in its
//! own test binary so no other test shares the process whose memory is read.

// Public: this binary uses only part of the shared support (the `it`
// binary checks that all of it is used).
#[path = "it/common/mod.rs"]
pub mod common;

use common::{TestServer, run};

/// Peak resident memory of this process (the in-process service), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gigabyte_of_output_completes_with_flat_service_memory() {
    let srv = TestServer::with_docker().await;
    let (sid, _) = srv.session().await;
    // Warm up every code path once so the baseline includes them.
    run(&srv.client, &sid, "head -c 10000000 /dev/zero", 60_000).await;
    let before = peak_rss_kib();
    let ran = run(
        &srv.client,
        &sid,
        "head -c 1073741824 /dev/zero | tr '\\0' 'x'",
        300_000,
    )
    .await;
    let growth_mib = (peak_rss_kib().saturating_sub(before)) / 1024;
    assert_eq!(ran.exit.exit_code, 0);
    assert!(!ran.exit.timed_out);
    let out = ran.exit.stdout.as_ref().unwrap();
    assert_eq!(out.total_bytes, 1 << 30);
    assert!(out.truncated);
    assert_eq!(out.text.len() + out.tail.len(), 4000);
    // The benchmark holds the exact figure; this only catches growth with
    // the output (1 GiB would be ~1024 MiB).
    assert!(
        growth_mib < 64,
        "peak RSS grew by {growth_mib} MiB for 1 GiB of output"
    );
    eprintln!(
        "1 GiB drained in {:?}, peak RSS growth {growth_mib} MiB",
        ran.elapsed
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_flooding_a_gigabyte_leaves_service_memory_flat() {
    use sandboxd::pb;
    let srv = TestServer::with_docker().await;
    let (sid, _) = srv.session().await;
    let start = |command: &str| pb::StartProcessRequest {
        session_id: sid.clone(),
        command: command.into(),
        ..Default::default()
    };
    // Warm up every code path once so the baseline includes them.
    let warm = srv
        .client
        .clone()
        .start_process(start("head -c 10000000 /dev/zero"))
        .await
        .unwrap()
        .into_inner()
        .process
        .unwrap();
    let follow = |id: String| pb::ReadProcessOutputRequest {
        session_id: sid.clone(),
        process_id: id,
        follow: true,
        ..Default::default()
    };
    let mut s = srv
        .client
        .clone()
        .read_process_output(follow(warm.process_id))
        .await
        .unwrap()
        .into_inner();
    while s.message().await.unwrap().is_some() {}
    let before = peak_rss_kib();
    let t0 = std::time::Instant::now();
    let p = srv
        .client
        .clone()
        .start_process(start("head -c 1073741824 /dev/zero | tr '\\0' 'x'"))
        .await
        .unwrap()
        .into_inner()
        .process
        .unwrap();
    // Nobody reads it: the service keeps its bounded buffer only.
    let mut s = srv
        .client
        .clone()
        .read_process_output(pb::ReadProcessOutputRequest {
            follow: false,
            ..follow(p.process_id.clone())
        })
        .await
        .unwrap()
        .into_inner();
    while s.message().await.unwrap().is_some() {}
    let ended = loop {
        let list = srv
            .client
            .clone()
            .list_processes(pb::ListProcessesRequest {
                session_id: sid.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .processes;
        let me = list
            .into_iter()
            .find(|q| q.process_id == p.process_id)
            .unwrap();
        if me.state != pb::ProcessState::Running as i32 {
            break me;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(300));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let growth_mib = (peak_rss_kib().saturating_sub(before)) / 1024;
    assert_eq!(ended.exit_code, 0);
    assert_eq!(ended.stdout_bytes, 1 << 30);
    assert!(
        growth_mib < 64,
        "peak RSS grew by {growth_mib} MiB for 1 GiB of process output"
    );
    eprintln!(
        "1 GiB of process output kept in {:?}, peak RSS growth {growth_mib} MiB",
        t0.elapsed()
    );
    srv.stop().await;
}

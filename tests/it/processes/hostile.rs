//! Processes that fight back: one that ignores TERM, one that floods its
//! output, more than the ceiling, and a fork bomb.

use sandboxd::pb;

use super::{list, read, start, start_req, stop};
use crate::common::{Mode, TestServer, reason, run};

/// A readiness condition on a line of output.
fn on_output(pattern: &str) -> Option<pb::Readiness> {
    Some(pb::Readiness {
        condition: Some(pb::readiness::Condition::OutputRegex(pattern.into())),
        timeout_ms: 20_000,
    })
}

#[tokio::test]
async fn a_process_that_ignores_term_is_killed_by_the_ladder() {
    let server = TestServer::with_docker().await;
    let (sid, _) = server.session().await;
    let client = &server.client;
    let mut req = start_req(&sid, "trap '' TERM; echo armed; while :; do sleep 1; done");
    req.ready = on_output("^armed$");
    let started = start(client, req).await;
    assert_eq!(started.ready_state, pb::ReadyState::Ready as i32);
    let p = started.process.unwrap();
    let t0 = std::time::Instant::now();
    let ended = stop(client, &sid, &p.process_id).await;
    assert_eq!(ended.state, pb::ProcessState::Killed as i32, "{ended:?}");
    assert_eq!(ended.killed_by, pb::KilledBy::ProcessGroupKill as i32);
    assert_eq!(ended.exit_code, 137);
    assert!(
        t0.elapsed() >= std::time::Duration::from_secs(2),
        "TERM had its grace"
    );
    // Stopping again answers how it ended, at once.
    let again = stop(client, &sid, &p.process_id).await;
    assert_eq!(again.killed_by, ended.killed_by);
    server.stop().await;
}

#[tokio::test]
async fn a_flood_keeps_its_head_and_latest_tail_and_counts_the_rest() {
    let server = TestServer::with_docker_mode_and(Mode::Supervisor, |c| {
        c.sandbox.process_output_bytes = 16 * 1024;
    })
    .await;
    let (sid, _) = server.session().await;
    let client = &server.client;
    // 20 MB of numbered lines, then a last word on each stream.
    let p = start(
        client,
        start_req(&sid, "seq 1 2500000; echo done-out; echo done-err >&2"),
    )
    .await
    .process
    .unwrap();
    // A reader that follows it gets what it keeps up with; every byte is
    // either read or counted as skipped.
    let followed = read(client, &sid, &p.process_id, [0, 0], true).await;
    let ended = followed.end.process.unwrap();
    assert_eq!(ended.exit_code, 0);
    let total: u64 = (1..=2_500_000u64)
        .map(|n| n.to_string().len() as u64 + 1)
        .sum::<u64>()
        + 9;
    assert_eq!(ended.stdout_bytes, total, "every byte counted");
    assert_eq!(followed.end.stdout_offset, total);
    assert_eq!(followed.skipped[0] + followed.stdout.len() as u64, total);
    assert!(followed.stdout.ends_with(b"2500000\ndone-out\n"));
    // Read afterwards, only the bound is kept: the head and the tail.
    let out = read(client, &sid, &p.process_id, [0, 0], false).await;
    assert!(
        out.stdout.starts_with(b"1\n2\n3\n"),
        "the head is the start"
    );
    assert!(
        out.stdout.ends_with(b"2500000\ndone-out\n"),
        "the tail is the end"
    );
    assert!(
        out.stdout.len() <= 16 * 1024,
        "{} bytes kept",
        out.stdout.len()
    );
    assert_eq!(out.skipped[0] + out.stdout.len() as u64, total);
    assert_eq!(out.stderr, b"done-err\n");
    // Reading on from where the last read ended finds nothing new.
    let again = read(client, &sid, &p.process_id, [total, 9], false).await;
    assert!(again.chunks.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn past_the_ceiling_a_start_is_refused_naming_the_running_ones() {
    let server = TestServer::with_docker_mode_and(Mode::Supervisor, |c| {
        c.sandbox.max_processes = 2;
    })
    .await;
    let (sid, _) = server.session().await;
    let client = &server.client;
    let a = start(client, start_req(&sid, "sleep 600"))
        .await
        .process
        .unwrap();
    let b = start(client, start_req(&sid, "sleep 601"))
        .await
        .process
        .unwrap();
    let refused = client
        .clone()
        .start_process(start_req(&sid, "sleep 602"))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "TOO_MANY_PROCESSES");
    for p in [&a, &b] {
        assert!(refused.message().contains(&p.process_id), "{refused:?}");
    }
    assert!(refused.message().contains("sleep 601"));
    stop(client, &sid, &a.process_id).await;
    let c = start(client, start_req(&sid, "sleep 603"))
        .await
        .process
        .unwrap();
    assert_eq!(c.state, pb::ProcessState::Running as i32);
    // Every start is on the list, the refused one is not.
    let ids: Vec<String> = list(client, &sid)
        .await
        .into_iter()
        .map(|p| p.process_id)
        .collect();
    assert_eq!(ids, [a.process_id, b.process_id, c.process_id]);
    server.stop().await;
}

#[tokio::test]
async fn a_fork_bomb_as_a_process_is_contained_and_a_reset_recovers() {
    let server = TestServer::with_docker().await;
    let (sid, _) = server.session().await;
    let client = &server.client;
    let server_before = start(client, start_req(&sid, "sleep 600"))
        .await
        .process
        .unwrap();
    start(client, start_req(&sid, "b() { b | b & }; b")).await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    // The service still answers: the container's pids limit holds the
    // bomb (a command may not even fork; it still gets a result).
    let during = run(client, &sid, "echo alive", 20_000).await;
    assert!(
        during.elapsed < std::time::Duration::from_secs(20),
        "{during:?}"
    );
    let reset = client
        .clone()
        .reset_sandbox(pb::ResetSandboxRequest {
            session_id: sid.clone(),
        })
        .await
        .unwrap();
    assert!(!reset.into_inner().container_id.is_empty());
    let ok = run(client, &sid, "echo ok", 20_000).await;
    assert_eq!(ok.stdout(), "ok\n");
    // Whatever ran went with the sandbox, and says so.
    let ended = list(client, &sid)
        .await
        .into_iter()
        .find(|p| p.process_id == server_before.process_id)
        .unwrap();
    assert_eq!(ended.state, pb::ProcessState::Killed as i32, "{ended:?}");
    assert_eq!(ended.killed_by, pb::KilledBy::Container as i32);
    assert!(
        ended.notes.iter().any(|n| n.contains("ResetSandbox")),
        "{ended:?}"
    );
    assert!(
        list(client, &sid)
            .await
            .iter()
            .all(|p| p.state != pb::ProcessState::Running as i32)
    );
    // And a new process starts in the fresh container.
    let p = start(client, start_req(&sid, "echo again"))
        .await
        .process
        .unwrap();
    let out = read(client, &sid, &p.process_id, [0, 0], true).await;
    assert_eq!(out.stdout(), "again\n");
    server.stop().await;
}

#[tokio::test]
async fn a_read_only_session_starts_no_process() {
    let server = TestServer::with_docker().await;
    let (sid, _) = server
        .session_with(pb::Policy {
            read_only: true,
            ..Default::default()
        })
        .await;
    let refused = server
        .client
        .clone()
        .start_process(start_req(&sid, "sleep 1"))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "POLICY_DENIED", "{refused:?}");
    let refused = server
        .client
        .clone()
        .start_process(start_req(&sid, "rm -rf /"))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "POLICY_DENIED");
    let (open, _) = server.session().await;
    let refused = server
        .client
        .clone()
        .start_process(start_req(&open, "rm -rf /"))
        .await
        .unwrap_err();
    assert_eq!(
        reason(&refused),
        "COMMAND_REFUSED",
        "the slip guard applies"
    );
    assert!(list(&server.client, &open).await.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn process_after_process_keeps_the_output_of_the_newest_ended_ones_only() {
    let server = TestServer::with_docker().await;
    let (sid, _) = server.session().await;
    let client = &server.client;
    let mut ids = Vec::new();
    for i in 0..40 {
        let p = start(client, start_req(&sid, &format!("echo run-{i}")))
            .await
            .process
            .unwrap();
        // Each one ends before the next starts.
        read(client, &sid, &p.process_id, [0, 0], true).await;
        ids.push(p.process_id);
    }
    // One more start lets go of the oldest ended ones' output.
    start(client, start_req(&sid, "true")).await;
    let oldest = read(client, &sid, &ids[0], [0, 0], false).await;
    assert!(oldest.chunks.is_empty(), "its output was let go");
    let known = oldest.end.process.unwrap();
    assert_eq!(known.state, pb::ProcessState::Exited as i32, "{known:?}");
    assert_eq!(known.stdout_bytes, 6, "how it ended is kept");
    let newest = read(client, &sid, &ids[39], [0, 0], false).await;
    assert_eq!(newest.stdout(), "run-39\n");
    assert_eq!(list(client, &sid).await.len(), 41);
    server.stop().await;
}

/// The review's finding: a thousand follow streams on one connection, none
/// read, of a process with output waiting. A session has 16 readers at
/// most: the rest are refused with a reason, and a place comes back when
/// its reader goes.
#[tokio::test]
async fn unread_output_streams_are_bounded_per_session() {
    let server = TestServer::with_docker().await;
    let (sid, _) = server.session().await;
    let client = &server.client;
    let flood = start(
        client,
        start_req(&sid, "head -c 4000000 /dev/zero | tr '\\0' x; sleep 600"),
    )
    .await
    .process
    .unwrap();
    super::wait_for_output(client, &sid, &flood.process_id, "xxxx").await;
    let follow = || pb::ReadProcessOutputRequest {
        session_id: sid.clone(),
        process_id: flood.process_id.clone(),
        follow: true,
        ..Default::default()
    };
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..1000 {
        match client.clone().read_process_output(follow()).await {
            Ok(stream) => held.push(stream.into_inner()),
            Err(e) => {
                assert_eq!(reason(&e), "TOO_MANY_READERS", "{e:?}");
                refused += 1;
            }
        }
    }
    assert_eq!((held.len(), refused), (16, 984));
    // A reader that goes gives its place back (its stream is reset).
    held.pop();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let again = loop {
        match client.clone().read_process_output(follow()).await {
            Ok(stream) => break stream,
            Err(e) if std::time::Instant::now() < until => {
                assert_eq!(reason(&e), "TOO_MANY_READERS");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the place did not come back: {e:?}"),
        }
    };
    let mut again = again.into_inner();
    assert!(again.message().await.unwrap().is_some(), "it reads");
    drop((held, again));
    stop(client, &sid, &flood.process_id).await;
    server.stop().await;
}

/// The review's finding: a child that left its process's group (`setsid`,
/// or a daemon whose parent exited) survived StopProcess while the process
/// was reported stopped. A process is its whole family now: its stop ends
/// them all.
#[tokio::test]
async fn stop_ends_children_that_left_the_group() {
    let server = TestServer::with_docker().await;
    let (sid, _) = server.session().await;
    let client = &server.client;
    // One child in a session of its own, one daemonised (its parent gone).
    let mut req = start_req(
        &sid,
        "setsid sleep 1000 & echo $! > /workspace/setsid.pid; \
         (sleep 1001 & echo $! > /workspace/daemon.pid) ; echo armed; sleep 600",
    );
    req.ready = on_output("^armed$");
    let started = start(client, req).await;
    assert_eq!(started.ready_state, pb::ReadyState::Ready as i32);
    let p = started.process.unwrap();
    let check = "for f in setsid daemon; do kill -0 $(cat /workspace/$f.pid) 2>/dev/null && echo \"$f survived\"; done; echo checked";
    let before = run(client, &sid, check, 30_000).await;
    assert_eq!(
        before.live_stdout, "setsid survived\ndaemon survived\nchecked\n",
        "both run before the stop: {:?}",
        before.exit
    );
    let ended = stop(client, &sid, &p.process_id).await;
    assert_ne!(ended.state, pb::ProcessState::Running as i32, "{ended:?}");
    let left = run(
        client,
        &sid,
        "for f in setsid daemon; do kill -0 $(cat /workspace/$f.pid) 2>/dev/null && echo \"$f survived\"; done; echo checked",
        30_000,
    )
    .await;
    assert_eq!(left.live_stdout, "checked\n", "{:?}", left.exit);
    server.stop().await;
}

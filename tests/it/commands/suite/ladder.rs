//! Stopping commands: a timeout and a client that walks away run the kill
//! ladder (TERM to the group, KILL, the container) on exactly the
//! command's process group; exit codes are results; stdin is closed; a
//! background child holding the output does not hold the call.

use std::time::Duration;

use crate::common::{Mode, TestServer, run, run_req};
use sandboxd::pb::{self, KilledBy};

/// Processes of the container (other than init, the keep-alive sleep and
/// the ps itself) whose command line contains `needle`.
async fn leftovers(srv: &TestServer, sid: &str, needle: &str) -> Vec<String> {
    let ps = run(&srv.client, sid, "ps -eo pid,pgid,args", 10_000).await;
    ps.stdout()
        .lines()
        .filter(|l| l.contains(needle) && !l.contains("ps -eo"))
        .map(str::to_string)
        .collect()
}

pub async fn timeout_kills_whole_process_group(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let ran = run(&srv.client, &sid, "sleep 1000 & wait", 1000).await;
    assert!(ran.exit.timed_out);
    assert_eq!(ran.exit.killed_by(), KilledBy::ProcessGroupTerm);
    assert!(
        ran.elapsed < Duration::from_secs(4),
        "took {:?}",
        ran.elapsed
    );
    assert!(leftovers(&srv, &sid, "sleep 1000").await.is_empty());
    srv.stop().await;
}

pub async fn ignored_term_escalates_to_kill(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let ran = run(&srv.client, &sid, "trap '' TERM; sleep 1000", 1000).await;
    assert!(ran.exit.timed_out);
    assert_eq!(ran.exit.killed_by(), KilledBy::ProcessGroupKill);
    assert!(
        ran.elapsed < Duration::from_secs(4),
        "took {:?}",
        ran.elapsed
    );
    assert!(leftovers(&srv, &sid, "sleep 1000").await.is_empty());
    // A background child that ignores TERM is killed too, not left behind.
    let ran = run(
        &srv.client,
        &sid,
        "(trap '' TERM; sleep 999) & sleep 1000",
        1000,
    )
    .await;
    assert_eq!(ran.exit.killed_by(), KilledBy::ProcessGroupKill);
    assert!(leftovers(&srv, &sid, "sleep 99").await.is_empty());
    srv.stop().await;
}

pub async fn client_cancel_runs_the_ladder(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let mut events = srv
        .client
        .clone()
        .run_command(run_req(&sid, "sleep 777", 60_000))
        .await
        .unwrap()
        .into_inner();
    // Wait until it runs, then walk away.
    let first = events.message().await.unwrap().unwrap();
    assert!(matches!(
        first.event,
        Some(pb::run_command_event::Event::Started(_))
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(events);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if leftovers(&srv, &sid, "sleep 777").await.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cancelled command still running"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    srv.stop().await;
}

/// The kill ladder signals exactly the timed-out command's process group,
/// whatever another command of the session writes: nothing in the
/// container decides what the ladder signals (a pidfile in the shared /tmp
/// once could be rewritten to point the ladder elsewhere).
pub async fn another_command_cannot_redirect_the_kill_ladder(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    // A background "redirector": rewrites every pidfile it can find to
    // name itself or init, forever.
    let planted = run(
        &srv.client,
        &sid,
        "setsid sh -c 'while :; do for f in /tmp/.sandboxd-*.pid /tmp/*.pid; do echo 1 > \"$f\" 2>/dev/null; done; sleep 0.05; done; : REDIRECTOR' >/dev/null 2>&1 & echo planted",
        10_000,
    )
    .await;
    assert_eq!(planted.stdout(), "planted\n");
    let ran = run(&srv.client, &sid, "sleep 100", 1000).await;
    assert!(ran.exit.timed_out, "{:?}", ran.exit);
    if mode != Mode::Gvisor {
        // Under gVisor a plain exec's group cannot be signalled from the
        // host: the container is the stop there.
        assert_eq!(
            ran.exit.killed_by,
            KilledBy::ProcessGroupTerm as i32,
            "{:?}",
            ran.exit
        );
        // The ladder hit only the command's group: the redirector lives on.
        // Its loop forks (a child not yet turned into `sleep` shows the same
        // command line), so look for the one that leads its group.
        let left = leftovers(&srv, &sid, "REDIRECTOR").await;
        let leaders = left
            .iter()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 1 && f[0] == f[1]
            })
            .count();
        assert_eq!(leaders, 1, "{left:?}");
    }
    srv.stop().await;
}

pub async fn exit_codes_are_results_not_errors(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let ran = run(&srv.client, &sid, "echo out; echo err >&2; exit 3", 0).await;
    assert_eq!(ran.exit.exit_code, 3);
    assert!(!ran.exit.timed_out);
    assert_eq!(ran.exit.killed_by(), KilledBy::None);
    assert_eq!(ran.stdout(), "out\n");
    assert_eq!(ran.stderr(), "err\n");
    assert_eq!(ran.live_stdout, "out\n");
    assert_eq!(ran.live_stderr, "err\n");
    let started = ran.started.expect("started event");
    assert_eq!(started.cwd, "/workspace");
    assert_eq!(started.timeout_ms, 30_000);
    srv.stop().await;
}

pub async fn stdin_is_closed(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let ran = run(&srv.client, &sid, r#"read x; echo "got=$x""#, 20_000).await;
    assert_eq!(ran.stdout(), "got=\n");
    assert!(!ran.exit.timed_out);
    assert!(
        ran.elapsed < Duration::from_secs(5),
        "took {:?}",
        ran.elapsed
    );
    srv.stop().await;
}

pub async fn background_child_holding_output_does_not_hold_the_call(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let ran = run(&srv.client, &sid, "sleep 100 & echo done", 60_000).await;
    assert_eq!(ran.exit.exit_code, 0);
    assert_eq!(ran.stdout(), "done\n");
    assert!(!ran.exit.timed_out);
    // "within about a second of its exit"; generous for a loaded machine.
    assert!(
        ran.elapsed < Duration::from_secs(3),
        "took {:?}",
        ran.elapsed
    );
    srv.stop().await;
}

//! The in-container supervisor runs as root beside the commands: a command
//! can neither kill, read nor reach it, and a supervisor lost anyway
//! replaces its container and gives an honest unknown result.

use std::time::Duration;

use super::{container_of, docker};
use crate::common::{TestServer, run, run_req, try_run};
use sandboxd::pb;

/// The supervisor runs as root in the container: a command can neither
/// kill it, read its memory or environment, nor reach its socket; and a
/// supervisor that dies anyway (killed from outside) is never replaced in
/// the same container: the next command gets a fresh container and says so.
#[tokio::test]
async fn commands_cannot_reach_their_supervisor_and_a_lost_link_replaces_the_container() {
    let srv = TestServer::with_docker().await;
    let (sid, _) = srv.session().await;
    let attack = r#"
        sup=$(for p in /proc/[0-9]*; do grep -q supervise $p/cmdline 2>/dev/null && basename $p; done | head -1)
        echo "supervisor pid: $sup"
        kill -9 "$sup" 2>&1; echo "kill: $?"
        kill -STOP "$sup" 2>&1; echo "stop: $?"
        cat /proc/$sup/environ >/dev/null 2>&1; echo "environ: $?"
        cat /proc/$sup/mem >/dev/null 2>&1; echo "mem: $?"
        ls /proc/$sup/fd >/dev/null 2>&1; echo "fd: $?"
        ls /.sandboxd/run >/dev/null 2>&1; echo "run dir: $?"
        python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect("/.sandboxd/run/sock")' 2>/dev/null; echo "connect: $?"
    "#;
    let ran = run(&srv.client, &sid, attack, 20_000).await;
    let out = ran.stdout();
    // Nor can it make the OOM killer pick the supervisor: commands are its
    // first choice.
    let adj = run(&srv.client, &sid, "cat /proc/self/oom_score_adj", 20_000).await;
    assert_eq!(adj.stdout(), "1000\n", "{}", adj.stderr());
    assert!(!out.contains("supervisor pid: \n"), "{out}");
    for line in [
        "kill: 0",
        "stop: 0",
        "environ: 0",
        "mem: 0",
        "fd: 0",
        "run dir: 0",
        "connect: 0",
    ] {
        assert!(!out.contains(line), "the command could: {line}\n{out}");
    }
    // The supervisor still answers.
    let first = container_of(&sid);
    let again = run(&srv.client, &sid, "echo still here", 20_000).await;
    assert_eq!(again.stdout(), "still here\n");
    assert!(again.exit.notes.is_empty(), "{:?}", again.exit.notes);

    // Kill the supervisor from outside (as only root on the host can): its
    // link dies, and the container it leaves behind is never trusted again.
    let killed = docker(&[
        "exec",
        "-u",
        "0",
        &first,
        "pkill",
        "-9",
        "-f",
        "^/.sandboxd/sandboxd supervise",
    ]);
    assert!(killed.status.success(), "{killed:?}");
    // SIGKILL is delivered when the process is next scheduled: wait until
    // it is gone, so the next command meets a dead link (a command sent in
    // the instant before would get an honest "unknown" instead, as the
    // next test shows).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while docker(&[
        "exec",
        "-u",
        "0",
        &first,
        "pgrep",
        "-f",
        "^/.sandboxd/sandboxd supervise",
    ])
    .status
    .success()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the supervisor outlived SIGKILL"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ran = run(&srv.client, &sid, "echo fresh", 20_000).await;
    assert_eq!(ran.stdout(), "fresh\n", "{:?}", ran.exit);
    assert!(
        ran.exit
            .notes
            .iter()
            .any(|n| n.contains("the sandbox was replaced")),
        "{:?}",
        ran.exit.notes
    );
    let second = container_of(&sid);
    assert_ne!(first, second, "the container whose link died was replaced");
    srv.stop().await;
}

/// A command that dies with its supervisor mid-run gets an honest result:
/// unknown, with the container killed, never a forged or stale one.
#[tokio::test]
async fn a_link_lost_mid_command_reports_an_unknown_result() {
    let srv = TestServer::with_docker().await;
    let (sid, _) = srv.session().await;
    let container = container_of(&sid);
    let client = srv.client.clone();
    let sid2 = sid.clone();
    let running = tokio::spawn(async move {
        try_run(
            &client,
            run_req(&sid2, "echo started; sleep 30; echo 12 passed", 60_000),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = docker(&[
        "exec",
        "-u",
        "0",
        &container,
        "pkill",
        "-9",
        "-f",
        "^/.sandboxd/sandboxd supervise",
    ]);
    assert!(killed.status.success(), "{killed:?}");
    let ran = running.await.unwrap().unwrap();
    assert_eq!(ran.exit.exit_code, -1);
    assert_eq!(ran.exit.killed_by, pb::KilledBy::Container as i32);
    assert!(!ran.stdout().contains("12 passed"));
    assert!(
        ran.exit
            .notes
            .iter()
            .any(|n| n.contains("result is unknown")),
        "{:?}",
        ran.exit
    );
    let next = run(&srv.client, &sid, "echo ok", 20_000).await;
    assert_eq!(next.stdout(), "ok\n");
    assert_ne!(container_of(&sid), container);
    srv.stop().await;
}

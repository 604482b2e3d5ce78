//! The command suite: RunCommand against the real Docker daemon (the
//! timeout and kill ladder, capped output, stdin, background children,
//! isolation, cwd confinement, the slip guard, limits, the warm pool and
//! containers dying under a session), written once and run in every mode
//! commands can reach a container: [`stamp!`] makes one `#[tokio::test]`
//! per suite test in the module that invokes it, running it in that mode.

use std::time::Duration;

use crate::common::{
    Mode, TestServer, assert_refused, assert_refused_unchanged, containers_labelled, edit,
    edit_req, read_req, reason, run, run_req, try_run,
};
use sandboxd::pb::{self, KilledBy};

/// Stamps the suite into the invoking module: one `#[tokio::test]` per
/// suite test, each running it in mode `$mode`. The invoking module's
/// parent holds the suite as `suite`.
macro_rules! stamp {
    ($mode:expr) => {
        super::suite::stamp!(@tests $mode;
            timeout_kills_whole_process_group,
            ignored_term_escalates_to_kill,
            exit_codes_are_results_not_errors,
            output_is_capped_while_streaming,
            multibyte_output_is_never_split,
            stdin_is_closed,
            background_child_holding_output_does_not_hold_the_call,
            network_is_off,
            root_filesystem_is_read_only_and_commands_are_not_root,
            files_are_shared_both_ways_with_the_file_tools,
            cwd_is_pinned_inside_the_workspace,
            slip_guard_refuses_destructive_commands,
            limits_past_the_ceilings_are_refused,
            environment_reaches_commands,
            client_cancel_runs_the_ladder,
            fork_bomb_is_stopped_by_the_pids_limit_without_harming_others,
            closing_a_session_removes_its_container,
            unreachable_docker_fails_commands_but_not_file_tools,
            container_killed_from_outside_is_replaced_on_the_next_command,
            commands_take_the_configured_path,
            sessions_start_from_the_warm_pool_which_refills_and_is_cleaned_up,
            memory_bomb_is_reported_as_out_of_memory,
            full_tmp_fails_cleanly_and_the_session_keeps_working,
            container_killed_during_a_command_ends_it_cleanly,
            another_command_cannot_redirect_the_kill_ladder
        );
    };
    (@tests $mode:expr; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                super::suite::$name($mode).await
            }
        )+
    };
}
pub(crate) use stamp;

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

pub async fn output_is_capped_while_streaming(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let ran = run(&srv.client, &sid, "seq 1 20000", 0).await;
    let expected: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    let out = ran.exit.stdout.as_ref().unwrap();
    assert!(out.truncated);
    assert_eq!(out.total_bytes, expected.len() as u64);
    assert_eq!(out.text.chars().count() + out.tail.chars().count(), 4000);
    assert!(expected.starts_with(&out.text));
    assert!(
        expected.ends_with(&out.tail),
        "the tail keeps the end of the output"
    );
    assert_eq!(out.omitted_bytes, expected.len() as u64 - 4000);
    // Live chunks stop at the cap too.
    assert_eq!(ran.live_stdout.chars().count(), 4000);
    assert!(expected.starts_with(&ran.live_stdout));
    // Caps are per stream and per request.
    let mut req = run_req(&sid, "seq 1 1000 >&2; echo small", 0);
    req.stderr_cap = 100;
    let ran = try_run(&srv.client, req).await.unwrap();
    let err = ran.exit.stderr.as_ref().unwrap();
    assert!(err.truncated);
    assert_eq!(err.text.chars().count() + err.tail.chars().count(), 100);
    assert_eq!(ran.stdout(), "small\n");
    srv.stop().await;
}

pub async fn multibyte_output_is_never_split(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let mut req = run_req(
        &sid,
        "python3 -c \"import sys; sys.stdout.write('é€😀' * 5000)\"",
        0,
    );
    req.stdout_cap = 1001;
    let ran = try_run(&srv.client, req).await.unwrap();
    let out = ran.exit.stdout.as_ref().unwrap();
    assert!(!out.text.contains('\u{fffd}') && !out.tail.contains('\u{fffd}'));
    assert_eq!(out.text.chars().count() + out.tail.chars().count(), 1001);
    assert_eq!(out.total_bytes, 5000 * "é€😀".len() as u64);
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

pub async fn network_is_off(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let script = "import socket\n\
        for host in ['1.1.1.1', '8.8.8.8', '172.17.0.1']:\n\
        \x20   try:\n\
        \x20       socket.create_connection((host, 53), timeout=3)\n\
        \x20       print('CONNECTED', host)\n\
        \x20   except OSError as e:\n\
        \x20       print('refused', host, e.errno)\n";
    std::fs::write(srv_ws(&srv, &sid).await.join("net.py"), script).unwrap();
    let ran = run(
        &srv.client,
        &sid,
        "python3 net.py; python3 -c 'import socket; print(sorted(n for _, n in socket.if_nameindex()))'",
        20_000,
    )
    .await;
    assert!(!ran.stdout().contains("CONNECTED"), "{}", ran.stdout());
    assert_eq!(
        ran.stdout().matches("refused").count(),
        3,
        "{}",
        ran.stdout()
    );
    // Only the loopback interface exists.
    assert!(ran.stdout().ends_with("['lo']\n"), "{}", ran.stdout());
    srv.stop().await;
}

async fn srv_ws(srv: &TestServer, sid: &str) -> std::path::PathBuf {
    let s = srv
        .client
        .clone()
        .get_session(pb::GetSessionRequest {
            session_id: sid.into(),
        })
        .await
        .unwrap()
        .into_inner();
    s.workspace_path.into()
}

pub async fn root_filesystem_is_read_only_and_commands_are_not_root(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let ran = run(
        &srv.client,
        &sid,
        "id -u; grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status; touch /var/tmp/x 2>&1; touch /tmp/ok && echo tmp-writable",
        20_000,
    )
    .await;
    let out = ran.stdout();
    assert!(out.starts_with("1000\n"), "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    // gVisor's /proc does not show the flag (runsc enforces it all the same).
    if mode != Mode::Gvisor {
        assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    }
    // /var/tmp is world-writable: only the read-only root stops the write.
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(out.contains("tmp-writable"), "{out}");
    srv.stop().await;
}

pub async fn files_are_shared_both_ways_with_the_file_tools(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, ws) = srv.session().await;
    let mut c = srv.client.clone();
    // A file a command made can be edited by the file tools...
    run(
        &srv.client,
        &sid,
        "mkdir -p out && echo 'made by cmd' > out/made.txt",
        10_000,
    )
    .await;
    c.edit_file(edit_req(&sid, "out/made.txt", vec![edit("cmd", "command")]))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("out/made.txt")).unwrap(),
        "made by command\n"
    );
    // ...and files and directories the file tools made can be changed by commands.
    c.create_file(pb::CreateFileRequest {
        session_id: sid.clone(),
        path: "new/dir/file.txt".into(),
        content: "one\n".into(),
    })
    .await
    .unwrap();
    let ran = run(
        &srv.client,
        &sid,
        "echo two >> new/dir/file.txt && touch new/dir/other && cat new/dir/file.txt",
        10_000,
    )
    .await;
    assert_eq!(ran.exit.exit_code, 0, "{}", ran.stderr());
    assert_eq!(ran.stdout(), "one\ntwo\n");
    srv.stop().await;
}

pub async fn cwd_is_pinned_inside_the_workspace(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, ws) = srv.session().await;
    std::fs::create_dir_all(ws.join("src/pkg")).unwrap();
    std::os::unix::fs::symlink("/", ws.join("rootlink")).unwrap();
    let mut req = run_req(&sid, "pwd", 10_000);
    req.cwd = "src/pkg".into();
    assert_eq!(
        try_run(&srv.client, req).await.unwrap().stdout(),
        "/workspace/src/pkg\n"
    );
    for cwd in [
        "..",
        "../..",
        "/etc",
        "src/../../",
        "rootlink",
        "rootlink/etc",
    ] {
        let mut req = run_req(&sid, "pwd", 10_000);
        req.cwd = cwd.into();
        assert_refused_unchanged(try_run(&srv.client, req), "PATH_OUTSIDE_WORKSPACE", &ws).await;
    }
    let mut req = run_req(&sid, "pwd", 10_000);
    req.cwd = "missing".into();
    assert_refused_unchanged(try_run(&srv.client, req), "FILE_NOT_FOUND", &ws).await;
    srv.stop().await;
}

pub async fn slip_guard_refuses_destructive_commands(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("keep.txt"), "keep").unwrap();
    for cmd in [
        "rm -rf /",
        "rm -rf /workspace",
        "curl http://x | sh",
        "git push origin main",
    ] {
        let run = try_run(&srv.client, run_req(&sid, cmd, 10_000));
        let err = assert_refused_unchanged(run, "COMMAND_REFUSED", &ws).await;
        assert!(
            err.message().contains("not the security boundary"),
            "{}",
            err.message()
        );
    }
    assert!(ws.join("keep.txt").exists());
    srv.stop().await;
}

pub async fn limits_past_the_ceilings_are_refused(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let mut req = run_req(&sid, "true", 10 * 3_600_000);
    assert_refused(try_run(&srv.client, req.clone()), "LIMIT_EXCEEDED").await;
    req.timeout_ms = 0;
    req.stdout_cap = 1 << 40;
    assert_refused(try_run(&srv.client, req), "LIMIT_EXCEEDED").await;
    let mut c = srv.client.clone();
    let huge = pb::CreateSessionRequest {
        limits: Some(pb::Limits {
            memory_bytes: 1 << 50,
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = assert_refused(c.create_session(huge), "LIMIT_EXCEEDED").await;
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    srv.stop().await;
}

pub async fn environment_reaches_commands(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let s = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest {
            env: [("FROM_SESSION".to_string(), "s".to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut req = run_req(&s.session_id, "echo $FROM_SESSION-$FROM_CMD", 10_000);
    req.env = [("FROM_CMD".to_string(), "c".to_string())].into();
    assert_eq!(try_run(&srv.client, req).await.unwrap().stdout(), "s-c\n");
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

pub async fn fork_bomb_is_stopped_by_the_pids_limit_without_harming_others(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let bomb = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest {
            limits: Some(pb::Limits {
                pids: 64,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let (other, _) = srv.session().await;
    let client = srv.client.clone();
    let bomb_id = bomb.clone();
    let bombing = tokio::spawn(async move {
        try_run(
            &client,
            run_req(&bomb_id, "f(){ f | f & }; f; sleep 5", 4000),
        )
        .await
    });
    // Meanwhile another session works normally.
    for i in 0..3 {
        let ran = run(&srv.client, &other, &format!("echo ok{i}"), 20_000).await;
        assert_eq!(ran.stdout(), format!("ok{i}\n"));
    }
    if mode == Mode::Gvisor {
        // Under gVisor the pids limit also counts the sandbox's own host
        // threads: at pids=64 the sandbox can die before or during the bomb
        // (a clean SANDBOX_UNAVAILABLE or a result), and so can its
        // replacements at that limit (SECURITY.md). The other session's
        // health, shown above, is what holds there.
        if let Err(status) = bombing.await.unwrap() {
            assert_eq!(reason(&status), "SANDBOX_UNAVAILABLE", "{status:?}");
        }
        srv.stop().await;
        return;
    }
    let ran = bombing.await.unwrap().unwrap();
    assert!(ran.exit.timed_out || ran.exit.exit_code != 0);
    assert!(
        ran.elapsed < Duration::from_secs(15),
        "took {:?}",
        ran.elapsed
    );
    // The bombed session recovers: by itself when the bomb died with its
    // command (or burnt out), or, when its shell died of "Cannot fork" and
    // left the bomb running in the background, the next command says so
    // and ResetSandbox brings it back.
    let ran = run(&srv.client, &bomb, "echo alive", 20_000).await;
    if ran.stdout() != "alive\n" {
        assert!(ran.exit.pids_exhausted, "{:?}", ran.exit);
        srv.client
            .clone()
            .reset_sandbox(pb::ResetSandboxRequest {
                session_id: bomb.clone(),
            })
            .await
            .unwrap();
        let ran = run(&srv.client, &bomb, "echo alive", 20_000).await;
        assert_eq!(ran.stdout(), "alive\n", "{:?}", ran.exit);
    }
    srv.stop().await;
}

pub async fn closing_a_session_removes_its_container(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let s = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(!s.container_id.is_empty());
    assert!(s.sandbox_status.is_empty(), "{}", s.sandbox_status);
    assert_eq!(srv.containers(), std::slice::from_ref(&s.container_id));
    srv.client
        .clone()
        .close_session(pb::CloseSessionRequest {
            session_id: s.session_id,
        })
        .await
        .unwrap();
    assert!(srv.containers().is_empty());
    srv.stop().await;
}

/// The same in every mode: no engine answers.
pub async fn unreachable_docker_fails_commands_but_not_file_tools(_mode: Mode) {
    let srv = TestServer::start().await;
    let s = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(s.container_id.is_empty());
    assert!(
        s.sandbox_status.contains("unreachable"),
        "{}",
        s.sandbox_status
    );
    let run = try_run(&srv.client, run_req(&s.session_id, "true", 1000));
    let err = assert_refused(run, "SANDBOX_UNAVAILABLE").await;
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert!(err.message().contains("File tools"), "{}", err.message());
    srv.client
        .clone()
        .create_file(pb::CreateFileRequest {
            session_id: s.session_id.clone(),
            path: "a.txt".into(),
            content: "still works\n".into(),
        })
        .await
        .unwrap();
    let read = srv
        .client
        .clone()
        .read_file(read_req(&s.session_id, "a.txt"))
        .await
        .unwrap();
    assert_eq!(read.into_inner().content, "still works\n");
    srv.stop().await;
}

pub async fn container_killed_from_outside_is_replaced_on_the_next_command(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("kept.txt"), "workspace survives\n").unwrap();
    let before = srv.containers();
    assert_eq!(before.len(), 1);
    let killed = std::process::Command::new("docker")
        .args(["kill", &before[0]])
        .output()
        .unwrap();
    assert!(killed.status.success());
    let ran = run(&srv.client, &sid, "cat kept.txt", 20_000).await;
    assert_eq!(ran.stdout(), "workspace survives\n", "{:?}", ran.exit);
    let after = srv.containers();
    assert_eq!(
        after.len(),
        1,
        "the dead container is removed, one fresh one runs"
    );
    assert_ne!(after, before);
    srv.stop().await;
}

pub async fn commands_take_the_configured_path(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let ran = run(
        &srv.client,
        &sid,
        "tr '\\0' ' ' < /proc/$PPID/cmdline",
        10_000,
    )
    .await;
    let parent = ran.stdout();
    match mode {
        Mode::Supervisor => assert!(
            parent.starts_with("/.sandboxd/sandboxd supervise --user 1000:1000 --connect"),
            "{parent}"
        ),
        Mode::SupervisorStdio | Mode::Gvisor => assert_eq!(
            parent.trim_end(),
            "/.sandboxd/sandboxd supervise --user 1000:1000"
        ),
        Mode::Exec => assert!(parent.starts_with("/bin/sh -c trap"), "{parent}"),
    }
    srv.stop().await;
}

pub async fn sessions_start_from_the_warm_pool_which_refills_and_is_cleaned_up(mode: Mode) {
    let srv = TestServer::with_docker_mode_and(mode, |c| c.sandbox.pool_size = 2).await;
    // The pool fills in the background.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while srv.registry.pool_ready() < 2 {
        assert!(std::time::Instant::now() < deadline, "pool did not fill");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let warm = srv.containers();
    let s = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(
        warm.contains(&s.container_id),
        "the session took a warm container"
    );
    // The pooled container is hardened like any other and runs its commands.
    let ran = run(
        &srv.client,
        &s.session_id,
        "id -u; touch /var/tmp/x 2>&1; ls /workspace | wc -l",
        10_000,
    )
    .await;
    assert!(ran.stdout().starts_with("1000\n"), "{}", ran.stdout());
    assert!(
        ran.stdout().contains("Read-only file system"),
        "{}",
        ran.stdout()
    );
    // Session env reaches pooled containers' commands too.
    let env = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest {
            env: [("SESSION_VAR".to_string(), "pooled".to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        run(&srv.client, &env.session_id, "echo $SESSION_VAR", 10_000)
            .await
            .stdout(),
        "pooled\n"
    );
    // Non-default limits start cold.
    let cold = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest {
            limits: Some(pb::Limits {
                pids: 100,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!warm.contains(&cold.container_id));
    // The pool refills: 3 sessions plus 2 warm containers.
    while srv.registry.pool_ready() < 2 {
        assert!(std::time::Instant::now() < deadline, "pool did not refill");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ids = srv.containers();
    assert_eq!(ids.len(), 5);
    srv.stop().await;
    // Sessions and warm containers alike are gone after shutdown.
    let left: Vec<_> = ids
        .iter()
        .filter(|id| containers_labelled("sandboxd.session").contains(id))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

pub async fn memory_bomb_is_reported_as_out_of_memory(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let s = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest {
            limits: Some(pb::Limits {
                memory_bytes: 96 << 20,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let bomb = "python3 -c 'x = []\nwhile True: x.append(bytearray(8 << 20))'";
    let ran = run(&srv.client, &s.session_id, bomb, 60_000).await;
    assert!(ran.exit.oom_killed, "not reported as OOM: {:?}", ran.exit);
    if mode == Mode::Gvisor {
        // The host kernel's OOM killer ends gVisor's whole sandbox.
        assert_eq!(ran.exit.killed_by(), KilledBy::Container, "{:?}", ran.exit);
    } else {
        assert_eq!(ran.exit.exit_code, 137, "{:?}", ran.exit);
    }
    assert!(!ran.exit.timed_out);
    // The session carries on, and an ordinary command is not marked.
    let ran = run(&srv.client, &s.session_id, "echo alive", 20_000).await;
    assert_eq!(ran.stdout(), "alive\n");
    assert!(!ran.exit.oom_killed);
    // The journal keeps it.
    let report = srv
        .client
        .clone()
        .get_session_report(pb::GetSessionReportRequest {
            session_id: s.session_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let oom: Vec<bool> = report.commands.iter().map(|c| c.oom_killed).collect();
    assert_eq!(oom, vec![true, false]);
    srv.stop().await;
}

pub async fn full_tmp_fails_cleanly_and_the_session_keeps_working(mode: Mode) {
    let srv = TestServer::with_docker_mode_and(mode, |c| c.sandbox.tmp_bytes = 16 << 20).await;
    let (sid, ws) = srv.session().await;
    let ran = run(
        &srv.client,
        &sid,
        "dd if=/dev/zero of=/tmp/fill bs=1M count=64",
        30_000,
    )
    .await;
    assert_ne!(ran.exit.exit_code, 0);
    assert!(
        ran.stderr().contains("No space left on device"),
        "{}",
        ran.stderr()
    );
    // With /tmp still full: commands run, the ladder still stops a
    // runaway, and the file tools work.
    let ran = run(&srv.client, &sid, "echo still here", 20_000).await;
    assert_eq!(ran.stdout(), "still here\n");
    let ran = run(&srv.client, &sid, "sleep 100", 1000).await;
    assert!(ran.exit.timed_out);
    assert!(
        ran.elapsed < Duration::from_secs(15),
        "took {:?}",
        ran.elapsed
    );
    std::fs::write(ws.join("a.txt"), "x\n").unwrap();
    srv.client
        .clone()
        .read_file(read_req(&sid, "a.txt"))
        .await
        .unwrap();
    let ran = run(&srv.client, &sid, "rm -f /tmp/fill && echo freed", 20_000).await;
    assert_eq!(ran.stdout(), "freed\n");
    srv.stop().await;
}

pub async fn container_killed_during_a_command_ends_it_cleanly(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("kept.txt"), "workspace survives\n").unwrap();
    let before = srv.containers();
    assert_eq!(before.len(), 1);
    let client = srv.client.clone();
    let id = sid.clone();
    let running = tokio::spawn(async move {
        try_run(&client, run_req(&id, "echo started; sleep 60", 120_000)).await
    });
    // Kill the container once the command is surely running.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = std::process::Command::new("docker")
        .args(["kill", &before[0]])
        .output()
        .unwrap();
    assert!(killed.status.success());
    let ran = running.await.unwrap().expect("a result, not an error");
    assert_ne!(ran.exit.exit_code, 0);
    assert!(
        ran.elapsed < Duration::from_secs(30),
        "took {:?}",
        ran.elapsed
    );
    let ran = run(&srv.client, &sid, "cat kept.txt", 20_000).await;
    assert_eq!(ran.stdout(), "workspace survives\n");
    let after = srv.containers();
    assert_eq!(after.len(), 1);
    assert_ne!(after, before, "the session got a fresh container");
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
        let left = leftovers(&srv, &sid, "REDIRECTOR").await;
        assert_eq!(left.len(), 1, "{left:?}");
    }
    srv.stop().await;
}

//! What a command gets and gives: output capped per stream while it
//! streams, never splitting a character; the session's and the request's
//! environment; the configured path to the container.

use crate::common::{Mode, TestServer, run, run_req, try_run};
use sandboxd::pb;

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

pub async fn commands_take_the_configured_path(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let ran = run(
        &srv.client,
        &sid,
        "tr '\\0' ' ' < /proc/$PPID/cmdline; echo; tr '\\0' ' ' < /proc/1/cmdline",
        10_000,
    )
    .await;
    let out = ran.stdout();
    let (parent, main) = out.split_once('\n').unwrap();
    // The container's own process (under Docker's init) only keeps it
    // alive: with a supervisor, the few-instruction idle program, not a
    // second copy of the supervisor's binary.
    let main = main.trim_end();
    match mode {
        Mode::Exec => assert!(main.ends_with("-- sleep infinity"), "{main}"),
        _ => assert!(main.ends_with("-- /.sandboxd/idle"), "{main}"),
    }
    match mode {
        // gVisor's fresh workspaces run under runsc with host sockets
        // open (see tests/gvisor/host_sockets.rs).
        Mode::Supervisor | Mode::Gvisor => assert!(
            parent.starts_with(&format!(
                "/.sandboxd/sandboxd supervise --user {}:{} --connect",
                crate::common::UID,
                crate::common::GID
            )),
            "{parent}"
        ),
        Mode::SupervisorStdio => assert_eq!(
            parent.trim_end(),
            format!(
                "/.sandboxd/sandboxd supervise --user {}:{}",
                crate::common::UID,
                crate::common::GID
            )
        ),
        Mode::Exec => assert!(parent.starts_with("/bin/sh -c trap"), "{parent}"),
    }
    srv.stop().await;
}

/// The output travels once when the caller says which events it reads:
/// chunks only (the exit repeats none of their text, and keeps the tail it
/// never streamed), or the result only (no chunks); by default both, so a
/// simple client reads only `exit`. An unknown mode is refused.
pub async fn output_is_sent_once_when_the_caller_says_which_it_reads(mode: Mode) {
    let srv = TestServer::with_docker_mode(mode).await;
    let (sid, _) = srv.session().await;
    let expected: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    let asked = |output: pb::OutputMode, cap: u64| {
        let mut req = run_req(&sid, "seq 1 20000", 0);
        req.stdout_cap = cap;
        req.output = output.into();
        try_run(&srv.client, req)
    };
    let both = asked(pb::OutputMode::Both, 200_000).await.unwrap();
    assert_eq!(both.live_stdout, expected);
    assert_eq!(both.stdout(), expected);
    let chunks = asked(pb::OutputMode::Chunks, 200_000).await.unwrap();
    assert_eq!(chunks.live_stdout, expected);
    let out = chunks.exit.stdout.as_ref().unwrap();
    assert_eq!(out.text, "", "the exit repeated the chunks");
    assert_eq!(out.total_bytes, expected.len() as u64);
    assert!(!out.truncated);
    let result = asked(pb::OutputMode::Result, 200_000).await.unwrap();
    assert_eq!(result.live_stdout, "", "chunks were sent");
    assert_eq!(result.stdout(), expected);
    // Cut at the cap: the chunks carry the start, the exit only the tail.
    let cut = asked(pb::OutputMode::Chunks, 1000).await.unwrap();
    let out = cut.exit.stdout.as_ref().unwrap();
    assert!(out.truncated && out.text.is_empty());
    assert!(expected.starts_with(&cut.live_stdout) && !cut.live_stdout.is_empty());
    assert!(expected.ends_with(&out.tail) && !out.tail.is_empty());
    let mut req = run_req(&sid, "true", 0);
    req.output = 7;
    let refused = try_run(&srv.client, req).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert_eq!(crate::common::reason(&refused), "INVALID_ARGUMENT");
    srv.stop().await;
}

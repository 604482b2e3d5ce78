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
        "tr '\\0' ' ' < /proc/$PPID/cmdline",
        10_000,
    )
    .await;
    let parent = ran.stdout();
    match mode {
        Mode::Supervisor => assert!(
            parent.starts_with(&format!(
                "/.sandboxd/sandboxd supervise --user {}:{} --connect",
                crate::common::UID,
                crate::common::GID
            )),
            "{parent}"
        ),
        Mode::SupervisorStdio | Mode::Gvisor => assert_eq!(
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

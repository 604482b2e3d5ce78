//! Programs that read their input: on a terminal and on a pipe.

use sandboxd::pb;

use super::{read, start, start_req, wait_for_output, write};
use crate::common::{TestServer, reason};

#[tokio::test]
async fn a_repl_on_a_terminal_answers_what_it_is_sent() {
    let server = TestServer::with_docker().await;
    let (sid, _) = server.session().await;
    let client = &server.client;
    let mut req = start_req(&sid, "python3 -i -q");
    req.pty = Some(pb::Pty { rows: 0, cols: 0 });
    req.ready = Some(pb::Readiness {
        condition: Some(pb::readiness::Condition::OutputRegex(r"^>>> $".into())),
        timeout_ms: 20_000,
    });
    let started = start(client, req).await;
    assert_eq!(
        started.ready_state,
        pb::ReadyState::Ready as i32,
        "{started:?}"
    );
    let p = started.process.unwrap();
    assert!(p.pty && p.stdin_open);
    write(client, &sid, &p.process_id, b"print(6*7)\n", false)
        .await
        .unwrap();
    let text = wait_for_output(client, &sid, &p.process_id, "42\r\n").await;
    // The terminal echoes the line, then the answer comes on a line of its own.
    assert!(text.contains("print(6*7)"), "{text:?}");
    assert!(text.lines().any(|l| l.trim_end() == "42"), "{text:?}");

    // A resize reaches the program: it reads its terminal's new size.
    client
        .clone()
        .resize_process(pb::ResizeProcessRequest {
            session_id: sid.clone(),
            process_id: p.process_id.clone(),
            rows: 40,
            cols: 123,
        })
        .await
        .unwrap();
    write(
        client,
        &sid,
        &p.process_id,
        b"import os; print('size', os.get_terminal_size())\n",
        false,
    )
    .await
    .unwrap();
    let text = wait_for_output(client, &sid, &p.process_id, "lines=40").await;
    assert!(text.contains("columns=123, lines=40"), "{text:?}");

    // ^D at the prompt ends the REPL.
    write(client, &sid, &p.process_id, b"", true).await.unwrap();
    let out = read(client, &sid, &p.process_id, [0, 0], true).await;
    let ended = out.end.process.unwrap();
    assert_eq!(ended.state, pb::ProcessState::Exited as i32, "{ended:?}");
    assert_eq!(ended.exit_code, 0);
    assert!(
        out.stderr.is_empty(),
        "a terminal carries everything on stdout"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_pipe_carries_a_line_and_closing_it_ends_cat() {
    let server = TestServer::with_docker().await;
    let (sid, _) = server.session().await;
    let client = &server.client;

    let mut req = start_req(&sid, "read line; echo \"got: $line\"");
    req.stdin = true;
    let p = start(client, req).await.process.unwrap();
    let ack = write(client, &sid, &p.process_id, b"hello\n", false)
        .await
        .unwrap();
    assert_eq!(ack.written, 6);
    let out = read(client, &sid, &p.process_id, [0, 0], true).await;
    assert_eq!(out.stdout(), "got: hello\n");
    assert_eq!(out.end.process.unwrap().exit_code, 0);

    let mut req = start_req(&sid, "cat");
    req.stdin = true;
    let cat = start(client, req).await.process.unwrap();
    write(client, &sid, &cat.process_id, b"one\n", false)
        .await
        .unwrap();
    let closed = write(client, &sid, &cat.process_id, b"two\n", true)
        .await
        .unwrap();
    assert!(closed.closed);
    let out = read(client, &sid, &cat.process_id, [0, 0], true).await;
    assert_eq!(out.stdout(), "one\ntwo\n");
    let ended = out.end.process.unwrap();
    assert_eq!(ended.state, pb::ProcessState::Exited as i32);
    assert_eq!(ended.exit_code, 0);
    assert!(!ended.stdin_open);
    assert_eq!(
        out.end.stdout_offset, 8,
        "the next read starts after the end"
    );

    // Its input is gone now: refused with a reason, nothing sent.
    let refused = write(client, &sid, &cat.process_id, b"three\n", false)
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "PROCESS_ENDED", "{refused:?}");
    server.stop().await;
}

#[tokio::test]
async fn input_resize_and_signals_are_refused_where_they_cannot_apply() {
    let server = TestServer::with_docker().await;
    let (sid, _) = server.session().await;
    let client = &server.client;
    let p = start(client, start_req(&sid, "sleep 600"))
        .await
        .process
        .unwrap();
    let refused = write(client, &sid, &p.process_id, b"x", false)
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "PROCESS_INPUT_CLOSED");
    assert!(
        refused.message().contains("without an input pipe"),
        "{refused:?}"
    );
    let refused = client
        .clone()
        .resize_process(pb::ResizeProcessRequest {
            session_id: sid.clone(),
            process_id: p.process_id.clone(),
            rows: 10,
            cols: 10,
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "NOT_A_TERMINAL");
    let refused = client
        .clone()
        .signal_process(pb::SignalProcessRequest {
            session_id: sid.clone(),
            process_id: p.process_id.clone(),
            signal: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "INVALID_ARGUMENT");
    let refused = client
        .clone()
        .stop_process(pb::StopProcessRequest {
            session_id: sid.clone(),
            process_id: "p424242".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "PROCESS_NOT_FOUND");

    // INT to its group ends it, and says so.
    let signalled = client
        .clone()
        .signal_process(pb::SignalProcessRequest {
            session_id: sid.clone(),
            process_id: p.process_id.clone(),
            signal: pb::ProcessSignal::Int.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .process
        .unwrap();
    let ended = if signalled.state == pb::ProcessState::Running as i32 {
        read(client, &sid, &p.process_id, [0, 0], true)
            .await
            .end
            .process
            .unwrap()
    } else {
        signalled
    };
    assert_eq!(ended.state, pb::ProcessState::Killed as i32, "{ended:?}");
    assert_eq!(ended.exit_code, 130);
    assert_eq!(ended.killed_by, pb::KilledBy::None as i32, "no ladder ran");
    server.stop().await;
}

#[tokio::test]
async fn readiness_that_never_comes_is_said_with_the_output_so_far() {
    let server = TestServer::with_docker().await;
    let (sid, _) = server.session().await;
    let client = &server.client;

    // It exits before its port listens.
    let mut req = start_req(&sid, "echo 'config missing' >&2; exit 3");
    req.ready = Some(pb::Readiness {
        condition: Some(pb::readiness::Condition::Port(8123)),
        timeout_ms: 20_000,
    });
    let started = start(client, req).await;
    assert_eq!(started.ready_state, pb::ReadyState::Exited as i32);
    assert_eq!(started.stderr_tail, "config missing\n");
    let p = started.process.unwrap();
    assert_eq!((p.state, p.exit_code), (pb::ProcessState::Exited as i32, 3));
    assert!(!p.ready);

    // Its pattern never shows: the time limit passes, and it runs on.
    let mut req = start_req(&sid, "echo starting; sleep 600");
    req.ready = Some(pb::Readiness {
        condition: Some(pb::readiness::Condition::OutputRegex("^listening".into())),
        timeout_ms: 500,
    });
    let started = start(client, req).await;
    assert_eq!(started.ready_state, pb::ReadyState::TimedOut as i32);
    assert_eq!(started.stdout_tail, "starting\n");
    let p = started.process.unwrap();
    assert_eq!(p.state, pb::ProcessState::Running as i32);

    // What the answer said stays so: the pattern shows after the answer
    // (the matcher no longer scans), and a port opened after it does not
    // make the process ready either.
    let mut req = start_req(&sid, "sleep 1; echo listening; sleep 600");
    req.ready = Some(pb::Readiness {
        condition: Some(pb::readiness::Condition::OutputRegex("^listening".into())),
        timeout_ms: 300,
    });
    let late = start(client, req).await;
    assert_eq!(late.ready_state, pb::ReadyState::TimedOut as i32);
    let late_id = late.process.unwrap().process_id;
    let mut req = start_req(
        &sid,
        "sleep 1; python3 -c 'import socket,time; s=socket.socket(); s.bind((\"127.0.0.1\", 8124)); s.listen(); time.sleep(600)'",
    );
    req.ready = Some(pb::Readiness {
        condition: Some(pb::readiness::Condition::Port(8124)),
        timeout_ms: 300,
    });
    let late_port = start(client, req).await;
    assert_eq!(late_port.ready_state, pb::ReadyState::TimedOut as i32);
    let late_port_id = late_port.process.unwrap().process_id;
    super::wait_for_output(client, &sid, &late_id, "listening").await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    for p in super::list(client, &sid).await {
        if p.process_id == late_id || p.process_id == late_port_id {
            assert!(!p.ready, "turned ready after the answer said not: {p:?}");
        }
    }
    for id in [late_id, late_port_id] {
        super::stop(client, &sid, &id).await;
    }

    // A pattern that does not compile is refused before anything starts.
    let mut req = start_req(&sid, "sleep 1");
    req.ready = Some(pb::Readiness {
        condition: Some(pb::readiness::Condition::OutputRegex("(unclosed".into())),
        timeout_ms: 0,
    });
    let refused = client.clone().start_process(req).await.unwrap_err();
    assert_eq!(reason(&refused), "INVALID_ARGUMENT");
    assert_eq!(super::list(client, &sid).await.len(), 4);
    server.stop().await;
}

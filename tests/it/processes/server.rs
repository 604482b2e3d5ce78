//! A server in the background and a client in the foreground: the loop
//! agents run most.

use sandboxd::pb;

use super::{list, read, start, start_req, stop};
use crate::common::TestServer;
use crate::common::run;

#[tokio::test]
async fn a_server_started_in_the_background_answers_the_sessions_commands() {
    let server = TestServer::with_docker().await;
    let (sid, _) = server.session().await;
    let client = &server.client;
    let mut req = start_req(&sid, "python3 -m http.server 8000");
    req.ready = Some(pb::Readiness {
        condition: Some(pb::readiness::Condition::Port(8000)),
        timeout_ms: 20_000,
    });
    let started = start(client, req).await;
    let process = started.process.clone().unwrap();
    assert_eq!(
        started.ready_state,
        pb::ReadyState::Ready as i32,
        "{started:?}"
    );
    assert_eq!(process.state, pb::ProcessState::Running as i32);
    assert!(process.ready);
    let pid = process.process_id;

    let fetch = "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/').status)\"";
    let ran = run(client, &sid, fetch, 20_000).await;
    assert_eq!(ran.exit.exit_code, 0, "{}", ran.stderr());
    assert_eq!(ran.stdout().trim(), "200");

    // The access log (http.server writes it to stderr) shows the request.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let log = loop {
        let out = read(client, &sid, &pid, [0, 0], false).await;
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        if log.contains("\"GET / HTTP/1.1\" 200") || std::time::Instant::now() > until {
            break log;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(
        log.contains("\"GET / HTTP/1.1\" 200"),
        "access log: {log:?}"
    );

    let listed = list(client, &sid).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].process_id, pid);
    assert_eq!(listed[0].state, pb::ProcessState::Running as i32);

    let ended = stop(client, &sid, &pid).await;
    assert_eq!(ended.state, pb::ProcessState::Killed as i32, "{ended:?}");
    assert_eq!(ended.killed_by, pb::KilledBy::ProcessGroupTerm as i32);
    assert!(ended.ended_at_ms >= ended.started_at_ms);

    // The port is free again: another server can take it (http.server,
    // as servers do, binds with SO_REUSEADDR: the closed connections'
    // TIME_WAIT does not hold the port).
    let mut again = start_req(&sid, "python3 -m http.server 8000");
    again.ready = Some(pb::Readiness {
        condition: Some(pb::readiness::Condition::Port(8000)),
        timeout_ms: 20_000,
    });
    let again = start(client, again).await;
    assert_eq!(again.ready_state, pb::ReadyState::Ready as i32, "{again:?}");
    let probe = "python3 -c \"import socket; s = socket.socket(); s.bind(('127.0.0.1', 8000))\"";
    let ran = run(client, &sid, probe, 20_000).await;
    assert_ne!(ran.exit.exit_code, 0, "the second server holds the port");
    let second = again.process.unwrap().process_id;
    stop(client, &sid, &second).await;
    let ran = run(
        client,
        &sid,
        probe
            .replace(
                "socket.socket()",
                "socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)",
            )
            .as_str(),
        20_000,
    )
    .await;
    assert_eq!(
        ran.exit.exit_code,
        0,
        "stopped, it let go of the port: {}",
        ran.stderr()
    );

    // The output stays readable after the end, and the report lists it.
    let after = read(client, &sid, &pid, [0, 0], false).await;
    assert!(String::from_utf8_lossy(&after.stderr).contains("GET /"));
    assert_eq!(
        after.end.process.unwrap().state,
        pb::ProcessState::Killed as i32
    );
    let report = client
        .clone()
        .get_session_report(pb::GetSessionReportRequest {
            session_id: sid.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(report.processes.len(), 2);
    assert_eq!(report.processes[0].process_id, pid);
    let tools: Vec<&str> = report.journal.iter().map(|e| e.tool.as_str()).collect();
    for tool in [
        "StartProcess",
        "StopProcess",
        "ProcessEnded",
        "ReadProcessOutput",
    ] {
        assert!(tools.contains(&tool), "{tool} not journaled: {tools:?}");
    }
    server.stop().await;
}

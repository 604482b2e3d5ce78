//! The Prometheus endpoint: scraped over HTTP after a known sequence of
//! calls, its counts are those calls.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{self, Mode, TestServer, edit, edit_req, run_req};
use sandboxd::pb;

/// `GET path` on `addr`: the status line and the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).await.unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// Every sample of a scrape: `name{labels}` to its value.
fn samples(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn value(s: &BTreeMap<String, f64>, name: &str) -> f64 {
    s.get(name).copied().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_counts_the_calls_made() {
    let srv = TestServer::with_docker_mode_and(Mode::Supervisor, |c| {
        c.metrics = Some(Arc::new(sandboxd::metrics::Metrics::new()));
        c.sandbox.pool_size = 0;
    })
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let endpoint = tokio::spawn(sandboxd::server::serve_metrics(
        listener,
        Arc::clone(&srv.registry),
    ));

    let (a, ws) = srv.session().await;
    let (b, _) = srv.session().await;
    std::fs::write(ws.join("f.txt"), "one\n").unwrap();
    let c = &srv.client;
    assert_eq!(common::run(c, &a, "true", 60_000).await.exit.exit_code, 0);
    let mut flood = run_req(&a, "head -c 10000 /dev/zero", 60_000);
    flood.stdout_cap = 100;
    let flooded = common::try_run(c, flood).await.unwrap();
    assert!(flooded.exit.stdout.unwrap().truncated);
    let slow = common::run(c, &a, "sleep 30", 500).await;
    assert!(slow.exit.timed_out);
    common::assert_refused(
        c.clone().run_command(run_req(&b, "rm -rf /", 60_000)),
        "COMMAND_REFUSED",
    )
    .await;
    for _ in 0..2 {
        common::assert_refused(
            c.clone()
                .edit_file(edit_req(&a, "f.txt", vec![edit("two", "three")])),
            "OLD_STRING_NOT_FOUND",
        )
        .await;
    }

    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let s = samples(&body);
    let want = [
        ("sandboxd_sessions_open", 2.0),
        ("sandboxd_sessions_created_total{pooled=\"false\"}", 2.0),
        ("sandboxd_session_start_seconds_count", 2.0),
        ("sandboxd_commands_total{outcome=\"exit\"}", 2.0),
        ("sandboxd_commands_total{outcome=\"timed_out\"}", 1.0),
        ("sandboxd_commands_total{outcome=\"refused\"}", 1.0),
        ("sandboxd_command_seconds_count", 3.0),
        (
            "sandboxd_refusals_total{reason=\"OLD_STRING_NOT_FOUND\"}",
            2.0,
        ),
        ("sandboxd_refusals_total{reason=\"COMMAND_REFUSED\"}", 1.0),
        ("sandboxd_output_bytes_total{stream=\"stdout\"}", 10_000.0),
        ("sandboxd_engine_pending_removals", 0.0),
    ];
    for (name, expected) in want {
        assert_eq!(value(&s, name), expected, "{name} in\n{body}");
    }
    let dropped = value(&s, "sandboxd_output_dropped_bytes_total{stream=\"stdout\"}");
    assert!((9_900.0..10_000.0).contains(&dropped), "{dropped}");
    // The engine's calls are timed: both containers were started.
    assert!(
        value(
            &s,
            "sandboxd_engine_call_seconds_count{op=\"start_container\"}"
        ) >= 2.0,
        "{body}"
    );
    // No session id, path or command line is ever a label.
    for secret in [a.as_str(), b.as_str(), "head -c", ws.to_str().unwrap()] {
        assert!(!body.contains(secret), "{secret} leaked into the metrics");
    }

    // Closing is seen at the next scrape; anything but /metrics is 404.
    c.clone()
        .close_session(pb::CloseSessionRequest { session_id: b })
        .await
        .unwrap();
    let (_, body) = get(addr, "/metrics").await;
    assert_eq!(value(&samples(&body), "sandboxd_sessions_open"), 1.0);
    let (status, _) = get(addr, "/").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    endpoint.abort();
    srv.stop().await;
}

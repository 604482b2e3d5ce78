//! A running command on the web view: linked from its session's page,
//! its output arriving over server-sent events as it is printed, shown as
//! text (terminal sequences visible, never acting), and live streams
//! bounded per viewer.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::{ADMIN, Served};

/// Opens the live stream at `path`: the connection, its reply head read.
fn open_live(served: &Served, path: &str, cookie: &str) -> (TcpStream, String) {
    let mut conn = TcpStream::connect(&served.web).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nCookie: {cookie}\r\nAccept: text/event-stream\r\n\r\n",
        served.web
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte).unwrap() == 0 {
            break;
        }
        head.push(byte[0]);
    }
    (conn, String::from_utf8_lossy(&head).into_owned())
}

/// Reads the stream until `until` appears (or 60 s pass).
fn read_until(conn: &mut TcpStream, until: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(60);
    while !String::from_utf8_lossy(&got).contains(until) && Instant::now() < deadline {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_commands_output_arrives_live_as_text() {
    let served = Served::start(true).await;
    let (id, _) = served.session();
    let admin = served.login(ADMIN);
    let run = served.run_in_background(
        &id,
        r#"sleep 2; for i in 1 2 3; do echo "step $i <b>"; printf '\033[31mred\n'; sleep 1; done"#,
    );
    // The running command is listed, and linked, on its session's page.
    let mut link = None;
    let until = Instant::now() + Duration::from_secs(60);
    while link.is_none() && Instant::now() < until {
        let page = served.get(&format!("/sessions/{id}"), Some(&admin)).body;
        link = page
            .split("href=\"")
            .filter_map(|s| s.split('"').next())
            .find(|href| href.contains("/commands/"))
            .map(str::to_string);
        std::thread::sleep(Duration::from_millis(100));
    }
    let link = link.expect("the running command is linked from its session");
    let page = served.get(&link, Some(&admin));
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Running"), "{}", page.body);
    assert!(page.body.contains("data-stream"), "{}", page.body);

    let (mut conn, head) = open_live(&served, &format!("{link}/live"), &admin);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/event-stream"), "{head}");
    let first = read_until(&mut conn, "step 1");
    assert!(first.contains("event: out"), "{first}");
    assert!(first.contains("step 1 <b>"), "{first}");
    // The command is still running when its first line arrives.
    assert!(!first.contains("event: end"), "{first}");
    let rest = read_until(&mut conn, "event: end");
    let all = format!("{first}{rest}");
    assert!(all.contains("step 3"), "{all}");
    assert!(
        all.contains("event: end") && all.contains("exit 0"),
        "{all}"
    );
    // Terminal sequences arrive visible, never raw.
    assert!(all.contains("^[[31mred"), "{all}");
    assert!(!all.contains('\u{1b}'), "a raw escape was streamed");
    let out = run.join().unwrap();
    assert!(out.status.success(), "{out:?}");

    // Once ended, the page shows the kept output as text.
    let page = served.get(&link, Some(&admin)).body;
    assert!(page.contains("Ended: exit 0"), "{page}");
    assert!(page.contains("step 3 &lt;b&gt;"), "{page}");
    assert!(page.contains("^[[31mred"), "{page}");
    assert!(!page.contains('\u{1b}'));
    // And the timeline links the command.
    let timeline = served.get(&format!("/sessions/{id}"), Some(&admin)).body;
    assert!(timeline.contains(&format!("href=\"{link}\"")), "{timeline}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_streams_are_bounded_per_viewer() {
    let served = Served::start(true).await;
    let (id, token) = served.session();
    let admin = served.login(ADMIN);
    let viewer = served.login(&token);
    let run = served.run_in_background(&id, "sleep 20");
    let mut seq = None;
    let until = Instant::now() + Duration::from_secs(60);
    while seq.is_none() && Instant::now() < until {
        let page = served.get(&format!("/sessions/{id}"), Some(&admin)).body;
        seq = page
            .split("/commands/")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .map(str::to_string);
        std::thread::sleep(Duration::from_millis(100));
    }
    let path = format!("/sessions/{id}/commands/{}/live", seq.expect("running"));
    let mut open = Vec::new();
    for _ in 0..4 {
        let (conn, head) = open_live(&served, &path, &viewer);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        open.push(conn);
    }
    let (_, head) = open_live(&served, &path, &viewer);
    assert!(
        head.starts_with("HTTP/1.1 503"),
        "a fifth live view of the session's viewer: {head}"
    );
    // The operator's streams are a share of their own: its tabs open more.
    let mut operators = Vec::new();
    for _ in 0..6 {
        let (conn, head) = open_live(&served, &path, &admin);
        assert!(head.starts_with("HTTP/1.1 200"), "the operator: {head}");
        operators.push(conn);
    }
    drop(operators);
    // Closing one gives its place back.
    drop(open.pop());
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let (conn, head) = open_live(&served, &path, &viewer);
        if head.starts_with("HTTP/1.1 200") {
            open.push(conn);
            break;
        }
        assert!(
            Instant::now() < until,
            "the place did not come back: {head}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(open);
    let (code, out) = served.cli(None, &["session", "reset", "-s", &id]);
    assert_eq!(code, 0, "{out}");
    let _ = run.join();
}

/// The data of each `event: NAME` in a server-sent events text, joined.
fn events_named(text: &str, name: &str) -> String {
    text.split("\n\n")
        .filter(|block| block.lines().any(|l| l == format!("event: {name}")))
        .map(|block| {
            block
                .lines()
                .filter_map(|l| l.strip_prefix("data: ").or(l.strip_prefix("data:")))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

/// A page opened while a command prints fast, then followed live, shows
/// every line exactly once: the stream starts where the page's snapshot
/// stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_and_its_live_stream_lose_and_repeat_nothing() {
    let served = Served::start(true).await;
    let (id, _) = served.session();
    let admin = served.login(ADMIN);
    let run = served.run_in_background(
        &id,
        "sleep 1; for i in $(seq 1 300); do echo line $i; sleep 0.01; done",
    );
    // The command's page, once it has printed something.
    let until = Instant::now() + Duration::from_secs(60);
    let (snapshot, live) = loop {
        assert!(Instant::now() < until, "the command never showed output");
        let page = served.get(&format!("/sessions/{id}"), Some(&admin)).body;
        let Some(link) = page
            .split("href=\"")
            .filter_map(|s| s.split('"').next())
            .find(|href| href.contains("/commands/"))
        else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let page = served.get(link, Some(&admin)).body;
        let snapshot = page
            .split("id=\"stdout\">")
            .nth(1)
            .and_then(|s| s.split("</pre>").next())
            .unwrap_or_default()
            .to_string();
        let live = page
            .split("data-stream=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .map(|s| s.replace("&amp;", "&"));
        match live {
            Some(live) if snapshot.contains("line 1\n") => break (snapshot, live),
            Some(_) => std::thread::sleep(Duration::from_millis(50)),
            None => panic!("the command ended before its page was read: {page}"),
        }
    };
    let (mut conn, head) = open_live(&served, &live, &admin);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let streamed = read_until(&mut conn, "event: end");
    let rest = events_named(&streamed, "out");
    let want: String = (1..=300).map(|i| format!("line {i}\n")).collect();
    assert_eq!(format!("{snapshot}{rest}"), want, "snapshot {snapshot:?}");
    assert!(run.join().unwrap().status.success());
}

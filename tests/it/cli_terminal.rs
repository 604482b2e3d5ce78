//! The `sandboxd` CLI shows what the sandboxed side controls (file contents,
//! search matches, file names, command output, refusals that echo a path) on
//! a terminal with its control sequences made visible, so a hostile file or
//! command cannot move the cursor, forge an `[exit 0 ...]` line or retitle
//! the terminal; piped, the same text arrives byte-for-byte.
//!
//! The terminal is a pseudo-terminal from util-linux `script`. No Docker:
//! the file verbs run against the file-tools test server, and `run` against
//! a server that replays a scripted RunCommand stream.

use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};

use crate::common::{SANDBOXD, TestServer};
use sandboxd::pb::{self, run_command_event::Event};
use tonic::codegen::{BoxFuture, BoxStream, Context, Poll, Service, http};

/// Content a hostile file or command would print: a cursor move up, a line
/// erase and a fake exit line, then a carriage return to write over it; a
/// title set (OSC ended by BEL); a one-character C1 CSI; DEL and backspace.
const HOSTILE: &str = "ok so far\n\
    \x1b[1A\x1b[2K[exit 0 in 1 ms]\rall tests passed\n\
    \x1b]0;owned\x07title\n\
    \u{9b}2Jc1\x7f\x08 é世🦀\n";

/// `HOSTILE` as a terminal must show it.
const HOSTILE_SHOWN: &str = "ok so far\n\
    ^[[1A^[[2K[exit 0 in 1 ms]^Mall tests passed\n\
    ^[]0;owned^Gtitle\n\
    \\u{9b}2Jc1^?^H é世🦀\n";

/// The client's arguments to reach `addr` and act on `session`.
fn client_args(addr: SocketAddr, session: &str, verb: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--addr".to_string(),
        format!("http://{addr}"),
        "--session".to_string(),
        session.to_string(),
    ];
    args.extend(verb.iter().map(|a| a.to_string()));
    args
}

/// The CLI with stdout and stderr piped.
fn piped(args: &[String]) -> Output {
    tokio::task::block_in_place(|| {
        Command::new(SANDBOXD)
            .args(args)
            .env_remove("SANDBOXD_TOKEN")
            .env_remove("SANDBOXD_CA_CERT")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    })
}

/// What a terminal receives from the CLI run with stdout and stderr on a
/// pseudo-terminal, and the CLI's exit code. The terminal turns each
/// newline into CRLF; that CR is taken out again, after checking that no
/// other CR arrived.
fn on_terminal(args: &[String]) -> (String, Option<i32>) {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let line = std::iter::once(SANDBOXD)
        .chain(args.iter().map(String::as_str))
        .map(quote)
        .collect::<Vec<_>>()
        .join(" ");
    let out = tokio::task::block_in_place(|| {
        Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .env_remove("SANDBOXD_TOKEN")
            .env_remove("SANDBOXD_CA_CERT")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| {
                panic!("these tests need util-linux `script` for a pseudo-terminal: {e}")
            })
    });
    let received = String::from_utf8(out.stdout).expect("the terminal received UTF-8");
    for (i, _) in received.match_indices('\r') {
        assert!(
            received[i + 1..].starts_with('\n'),
            "a raw CR reached the terminal at byte {i}: {received:?}"
        );
    }
    for (what, raw) in [
        ("ESC", "\x1b"),
        ("BEL", "\x07"),
        ("backspace", "\x08"),
        ("DEL", "\x7f"),
        ("C1 CSI", "\u{9b}"),
    ] {
        assert!(
            !received.contains(raw),
            "a raw {what} reached the terminal: {received:?}"
        );
    }
    (received.replace("\r\n", "\n"), out.status.code())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_contents_reach_a_terminal_shown_and_a_pipe_exact() {
    let srv = TestServer::start().await;
    let (sid, _) = srv.session().await;
    srv.client
        .clone()
        .create_file(pb::CreateFileRequest {
            session_id: sid.clone(),
            path: "notes.txt".into(),
            content: HOSTILE.into(),
        })
        .await
        .unwrap();

    let raw = client_args(srv.addr, &sid, &["read", "--raw", "notes.txt"]);
    let out = piped(&raw);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        out.stdout,
        HOSTILE.as_bytes(),
        "piped, the bytes must not change"
    );
    let (shown, code) = on_terminal(&raw);
    assert_eq!(code, Some(0));
    assert_eq!(shown, HOSTILE_SHOWN);

    // Numbered, each line keeps its number in front: a CR cannot go back
    // over it, and the summary is the last line.
    let numbered = client_args(srv.addr, &sid, &["read", "notes.txt"]);
    let out = piped(&numbered);
    assert!(out.status.success(), "{out:?}");
    let piped_text = String::from_utf8(out.stdout).unwrap();
    assert!(
        piped_text.contains("   2  \x1b[1A\x1b[2K[exit 0 in 1 ms]\rall tests passed\n"),
        "{piped_text:?}"
    );
    let (shown, _) = on_terminal(&numbered);
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "   1  ok so far",
            "   2  ^[[1A^[[2K[exit 0 in 1 ms]^Mall tests passed",
            "   3  ^[]0;owned^Gtitle",
            "   4  \\u{9b}2Jc1^?^H é世🦀",
        ]
    );
    assert!(lines[4].starts_with("-- "), "{shown:?}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_matches_reach_a_terminal_shown_and_a_pipe_exact_and_file_names_quoted() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("log.txt"), HOSTILE).unwrap();
    // A command in the sandbox can name files as it likes.
    let name = "x\x1b]0;owned\x07\x1b[2K.txt";
    std::fs::write(ws.join(name), "").unwrap();

    let grep = client_args(srv.addr, &sid, &["grep", "exit", "--glob", "log.txt"]);
    let out = piped(&grep);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "log.txt:2: \x1b[1A\x1b[2K[exit 0 in 1 ms]\rall tests passed\n"
    );
    let (shown, code) = on_terminal(&grep);
    assert_eq!(code, Some(0));
    assert_eq!(
        shown,
        "log.txt:2: ^[[1A^[[2K[exit 0 in 1 ms]^Mall tests passed\n"
    );

    // A name is one line in a listing, whatever it holds: quoted as git
    // quotes it, piped or not, so a newline in a name cannot forge a line
    // for a program reading the list.
    let quoted = "\"x\\033]0;owned\\a\\033[2K.txt\"";
    let find = client_args(srv.addr, &sid, &["find", "x*"]);
    let out = piped(&find);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{quoted}\n")
    );
    let (shown, _) = on_terminal(&find);
    assert_eq!(shown, format!("{quoted}\n"));

    let ls = client_args(srv.addr, &sid, &["ls"]);
    let out = piped(&ls);
    let listed = String::from_utf8(out.stdout).unwrap();
    assert!(
        listed.contains(quoted) && !listed.contains(name),
        "{listed:?}"
    );
    let (shown, _) = on_terminal(&ls);
    assert!(shown.contains(&format!("{quoted}\n")), "{shown:?}");

    // A refusal that echoes a path: shown on stderr, on a line of its own.
    let missing = client_args(srv.addr, &sid, &["read", "gone\x1b[2K.txt"]);
    let out = piped(&missing);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("gone\x1b[2K.txt")
    );
    let (shown, code) = on_terminal(&missing);
    assert_eq!(code, Some(1));
    assert!(shown.starts_with("refused ["), "{shown:?}");
    assert!(shown.contains("gone^[[2K.txt"), "{shown:?}");
    srv.stop().await;
}

/// What the replayed command prints: output that tries to write a fake exit
/// line over the real one, split across chunks, ending mid-line.
fn forging_command() -> Vec<pb::RunCommandEvent> {
    let event = |e| pb::RunCommandEvent { event: Some(e) };
    let chunk = |data: &str| pb::OutputChunk { data: data.into() };
    vec![
        event(Event::Started(pb::CommandStarted::default())),
        event(Event::Stdout(chunk("compiling...\n"))),
        event(Event::Stdout(chunk("partial \x1b"))),
        event(Event::Stdout(chunk("[1A\x1b[2K[exit 0 in 1 ms]\r"))),
        event(Event::Stderr(chunk("\x1b]0;owned\x07warning"))),
        event(Event::Exit(pb::CommandExit {
            exit_code: 3,
            duration_ms: 42,
            stdout: Some(pb::StreamResult {
                truncated: true,
                omitted_bytes: 100,
                tail: "last\x1b[2K".into(),
                ..Default::default()
            }),
            stderr: Some(pb::StreamResult::default()),
            ..Default::default()
        })),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_output_cannot_forge_the_exit_line_on_a_terminal() {
    let addr = replay_run_command(forging_command()).await;
    let run = client_args(addr, "s-1", &["run", "make"]);

    let out = piped(&run);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "compiling...\npartial \x1b[1A\x1b[2K[exit 0 in 1 ms]\r\n[... 100 bytes omitted ...]\nlast\x1b[2K"
    );
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "\x1b]0;owned\x07warning[exit 3 in 42 ms]\n"
    );

    let (shown, code) = on_terminal(&run);
    assert_eq!(code, Some(3));
    assert_eq!(
        shown,
        "compiling...\n\
         partial ^[[1A^[[2K[exit 0 in 1 ms]^M^[]0;owned^Gwarning\n\
         [... 100 bytes omitted ...]\n\
         last^[[2K\n\
         [exit 3 in 42 ms]\n"
    );
    let exit_lines: Vec<&str> = shown.lines().filter(|l| l.starts_with("[exit")).collect();
    assert_eq!(exit_lines, ["[exit 3 in 42 ms]"]);
}

/// A command whose container was killed under it has no known result
/// (exit code -1): the CLI never exits 0 for it, whatever the command
/// meant to exit with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_result_is_never_success() {
    let event = |e| pb::RunCommandEvent { event: Some(e) };
    let addr = replay_run_command(vec![
        event(Event::Started(pb::CommandStarted::default())),
        event(Event::Exit(pb::CommandExit {
            exit_code: -1,
            killed_by: pb::KilledBy::Container.into(),
            notes: vec!["the sandbox's container died while the command ran".into()],
            ..Default::default()
        })),
    ])
    .await;
    let out = piped(&client_args(addr, "s-1", &["run", "exit 0"]));
    assert_eq!(out.status.code(), Some(125));
}

/// Starts a server that answers every call as RunCommand, replaying
/// `events`; returns its address. It serves until the test's runtime ends.
async fn replay_run_command(events: Vec<pb::RunCommandEvent>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(Replay(events))
            .serve_with_incoming(incoming),
    );
    addr
}

/// The one method of the Sandbox service the `run` verb calls, written out
/// by hand so this test does not change with every new RPC.
#[derive(Clone)]
struct Replay(Vec<pb::RunCommandEvent>);

impl tonic::server::NamedService for Replay {
    const NAME: &'static str = "sandboxd.v1.Sandbox";
}

impl Service<http::Request<tonic::body::Body>> for Replay {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let events = self.0.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.server_streaming(ReplayEvents(events), req).await)
        })
    }
}

struct ReplayEvents(Vec<pb::RunCommandEvent>);

impl tonic::server::ServerStreamingService<pb::RunCommandRequest> for ReplayEvents {
    type Response = pb::RunCommandEvent;
    type ResponseStream = BoxStream<pb::RunCommandEvent>;
    type Future = std::future::Ready<Result<tonic::Response<Self::ResponseStream>, tonic::Status>>;

    fn call(&mut self, _: tonic::Request<pb::RunCommandRequest>) -> Self::Future {
        let events = std::mem::take(&mut self.0);
        let stream: Self::ResponseStream = Box::pin(tokio_stream::iter(events.into_iter().map(Ok)));
        std::future::ready(Ok(tonic::Response::new(stream)))
    }
}

//! The client verbs against stand-in services (`client::fake`): whose
//! service a found address reaches, before and after it reconnects, and
//! what `session create` and `run` print of what a hostile service sends.

use super::*;
use crate::cli::client::discover;
use crate::cli::client::fake::{Fake, STRANGER, Serving, Stranger};

/// A console over two buffers, both terminals or both pipes.
fn console(terminal: bool) -> Console<Vec<u8>, Vec<u8>> {
    Console::new(Vec::new(), terminal, Vec::new(), terminal)
}

fn written(con: Console<Vec<u8>, Vec<u8>>) -> (String, String) {
    let (out, err) = con.into_writers();
    (
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// The service `discover` settles on when nothing answers on the user's or
/// the system's socket and the fallback is `fallback`.
async fn found(fallback: &str) -> Service {
    let none = tempfile::tempdir().unwrap();
    let service = discover::find_in(None, &none.path().join("none.sock"), fallback).await;
    assert_eq!(service.addr, fallback);
    service
}

fn create() -> pb::CreateSessionRequest {
    pb::CreateSessionRequest::default()
}

/// What a refusal of a stranger's service must say: what was found and how
/// to point at the right service.
fn assert_names_the_stranger(e: &str, port: u16) {
    for needed in [
        format!("127.0.0.1:{port}"),
        format!("uid {STRANGER}"),
        "nothing was sent".into(),
        "--addr".into(),
        "SANDBOXD_ADDR".into(),
        "XDG_RUNTIME_DIR".into(),
    ] {
        assert!(e.contains(&needed), "{needed:?} missing from: {e}");
    }
}

#[tokio::test]
async fn a_found_address_held_by_another_user_gets_nothing() {
    let stranger = Stranger::listen(0);
    let port = stranger.port;
    let service = found(&format!("http://127.0.0.1:{port}")).await;
    let e = connect::client(&service.addr, None, Some("secret".into()), &service.trust)
        .await
        .expect_err("a stranger's listener is refused")
        .to_string();
    assert_names_the_stranger(&e, port);
    let (_, bytes) = stranger.received();
    assert_eq!(bytes, 0, "the stranger was sent {bytes} bytes");

    // The same port given by the user (--addr) is the user's choice: the
    // stranger gets the connection's first bytes (the test's control).
    let stranger = Stranger::listen(0);
    let given = discover::Service::given(&format!("http://127.0.0.1:{}", stranger.port));
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        connect::client(&given.addr, None, None, &given.trust),
    )
    .await;
    let (_, bytes) = stranger.received();
    assert!(bytes > 0, "an address given is used as given");
}

#[tokio::test]
async fn after_the_service_stops_a_stranger_on_its_port_gets_no_call() {
    let serving = Serving::start(Fake::default(), "127.0.0.1:0").await;
    let port = serving.addr.port();
    let service = found(&serving.url()).await;
    let mut c = connect::client(&service.addr, None, Some("secret".into()), &service.trust)
        .await
        .unwrap();
    c.create_session(create()).await.unwrap();
    serving.stop().await;
    let stranger = Stranger::listen(port);
    // The channel reconnects by itself, call after call: every connection
    // is checked.
    for _ in 0..5 {
        let call = c.create_session(create());
        let status = tokio::time::timeout(std::time::Duration::from_secs(5), call)
            .await
            .expect("the call went to the stranger, which never answers")
            .unwrap_err();
        let e = service
            .trust
            .refusal()
            .unwrap_or_else(|| panic!("no refusal kept; the call said: {status:?}"));
        assert_names_the_stranger(&e, port);
    }
    let (_, bytes) = stranger.received();
    assert_eq!(bytes, 0, "the stranger was sent {bytes} bytes");
}

#[tokio::test]
async fn a_token_from_a_state_directory_goes_only_to_its_owners_listener() {
    // The address is given, but the token was read from root's state
    // directory: only root's service may have it, on every connection.
    let stranger = Stranger::listen(0);
    let dir = tempfile::tempdir().unwrap();
    let mut service = discover::Service::given(&format!("http://127.0.0.1:{}", stranger.port));
    service.trust = service.trust.carrying_token_of(0, dir.path());
    let e = connect::client(&service.addr, None, Some("t0ken".into()), &service.trust)
        .await
        .expect_err("the token's owner does not listen there")
        .to_string();
    assert!(e.contains(&format!("uid {STRANGER}")), "{e}");
    assert!(e.contains(&dir.path().display().to_string()), "{e}");
    assert!(e.contains("SANDBOXD_TOKEN"), "{e}");
    assert_eq!(stranger.received().1, 0);
}

#[tokio::test]
async fn a_found_service_of_ones_own_is_used() {
    let serving = Serving::start(Fake::default(), "127.0.0.1:0").await;
    let service = found(&serving.url()).await;
    let mut c = connect::client(&service.addr, None, None, &service.trust)
        .await
        .unwrap();
    c.create_session(create()).await.unwrap();
    // Over a Unix socket too: the peer's credentials are checked.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(Fake::default())
            .serve_with_incoming(incoming),
    );
    let trust = crate::cli::connect::Trust::own_or_root(String::new());
    let mut c = connect::client(&format!("unix:{}", path.display()), None, None, &trust)
        .await
        .unwrap();
    c.create_session(create()).await.unwrap();
    server.abort();
    serving.stop().await;
}

/// A session whose id and token would run `touch MARKER` in `eval`.
fn hostile_session(marker: &std::path::Path) -> pb::Session {
    let m = marker.display();
    pb::Session {
        session_id: format!("x'; touch {m}; '$(touch {m})`touch {m}`\ntouch {m}"),
        session_token: format!("sbxs_$(touch {m})\ntouch {m}"),
        ..Default::default()
    }
}

/// Runs `eval "$EXPORTED"` in sh, then prints the two variables.
fn eval(exported: &str) -> String {
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            r#"eval "$EXPORTED"; printf '%s|%s' "$SANDBOXD_SESSION" "$SANDBOXD_SESSION_TOKEN""#,
        ])
        .env("EXPORTED", exported)
        .env_remove("SANDBOXD_SESSION")
        .env_remove("SANDBOXD_SESSION_TOKEN")
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn session_create_export_refuses_values_a_shell_would_run() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    let id = "0123456789abcdef";
    let token = format!("sbxs_{}", "0f".repeat(32));
    let hostile = hostile_session(&marker);
    let cases = [
        hostile.clone(),
        pb::Session {
            session_id: id.into(),
            ..hostile.clone()
        },
        pb::Session {
            session_token: token.clone(),
            ..hostile.clone()
        },
    ];
    for session in cases {
        let serving = Serving::start(
            Fake {
                session: session.clone(),
                ..Default::default()
            },
            "127.0.0.1:0",
        )
        .await;
        let service = discover::Service::given(&serving.url());
        let mut c = connect::client(&service.addr, None, None, &service.trust)
            .await
            .unwrap();
        for shown in [Created::Export, Created::Id] {
            if matches!(shown, Created::Id) && session.session_id == id {
                // --quiet prints no token.
                continue;
            }
            let mut con = console(false);
            let e = create_session(&mut c, create(), shown, &mut con)
                .await
                .expect_err("refused");
            let (out, _) = written(con);
            assert!(e.to_string().contains("not one"), "{e}");
            assert_eq!(out, "", "{shown:?} printed for {session:?}");
            let _ = eval(&out);
            assert!(!marker.exists(), "{shown:?}: eval ran the service's text");
        }
        serving.stop().await;
    }

    // What the service makes is printed, quoted, and sets both variables.
    let serving = Serving::start(
        Fake {
            session: pb::Session {
                session_id: id.into(),
                session_token: token.clone(),
                ..Default::default()
            },
            ..Default::default()
        },
        "127.0.0.1:0",
    )
    .await;
    let mut c = connect::client(&serving.url(), None, None, &connect::Trust::anyone())
        .await
        .unwrap();
    let mut con = console(false);
    create_session(&mut c, create(), Created::Export, &mut con)
        .await
        .unwrap()
        .unwrap();
    let (out, _) = written(con);
    assert_eq!(eval(&out), format!("{id}|{token}"));
    serving.stop().await;
}

#[tokio::test]
async fn run_output_reaches_a_terminal_neutralised_unless_raw() {
    use pb::run_command_event::Event;
    // OSC 52 (set the clipboard), clear the screen, retitle the terminal.
    let hostile = "ok\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x1b]0;owned\x07\n";
    let chunk = |data: &str| pb::OutputChunk { data: data.into() };
    let fake = Fake {
        events: vec![
            pb::RunCommandEvent {
                event: Some(Event::Stdout(chunk(hostile))),
            },
            pb::RunCommandEvent {
                event: Some(Event::Stderr(chunk(hostile))),
            },
            pb::RunCommandEvent {
                event: Some(Event::Exit(pb::CommandExit::default())),
            },
        ],
        ..Default::default()
    };
    let serving = Serving::start(fake, "127.0.0.1:0").await;
    let mut c = connect::client(&serving.url(), None, None, &connect::Trust::anyone())
        .await
        .unwrap();
    let shown = "ok^[]52;c;cm0gLXJmIH4=^G^[[2J^[]0;owned^G\n";
    for (terminal, raw, expected) in [
        (true, false, shown),
        (true, true, hostile),
        (false, false, hostile),
    ] {
        let mut con = console(terminal);
        let code = run_streaming(&mut c, pb::RunCommandRequest::default(), raw, &mut con)
            .await
            .unwrap();
        assert_eq!(code, ExitCode::SUCCESS);
        let (out, err) = written(con);
        assert_eq!(out, expected, "terminal {terminal}, raw {raw}");
        assert!(
            err.starts_with(expected),
            "terminal {terminal}, raw {raw}: {err:?}"
        );
    }
    serving.stop().await;
}

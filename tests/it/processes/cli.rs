//! The process verbs of the `sandboxd` command line (`start`, `ps`, `logs`,
//! `send`, `signal`, `stop`), the real binary against a server in this
//! process: a server started ready, listed, its access log read and
//! stopped; a `cat` fed a line and closed; readiness that never comes; a
//! follow ended by Ctrl-C; a refusal with its reason.

use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::common::{SANDBOXD, TestServer, run};

/// What one run of the CLI printed, and how it exited.
struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// The CLI calling `server` about `session`, its output piped.
fn command(server: &TestServer, session: &str, verb: &[&str]) -> Command {
    let mut cmd = Command::new(SANDBOXD);
    cmd.arg("--addr")
        .arg(format!("http://{}", server.addr))
        .args(["--session", session])
        .args(verb)
        .env_remove("SANDBOXD_TOKEN")
        .env_remove("SANDBOXD_CA_CERT")
        .env_remove("SANDBOXD_SESSION_TOKEN")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// Runs the CLI to its end.
async fn cli(server: &TestServer, session: &str, verb: &[&str]) -> Out {
    let out = command(server, session, verb).output().await.unwrap();
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The id `start` printed: alone on stdout, e.g. "p3".
fn id(started: &Out) -> String {
    let id = started.stdout.trim_end_matches('\n');
    assert!(
        id.starts_with('p') && id.len() > 1 && id[1..].bytes().all(|b| b.is_ascii_digit()),
        "only the id on stdout: {started:?}"
    );
    id.to_string()
}

/// Runs the CLI until what it prints passes `done` (or 20 s pass); returns
/// the last run.
async fn cli_until(
    server: &TestServer,
    session: &str,
    verb: &[&str],
    done: impl Fn(&Out) -> bool,
) -> Out {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let out = cli(server, session, verb).await;
        if done(&out) || Instant::now() > until {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_server_is_started_ready_listed_read_and_stopped_from_the_command_line() {
    let server = TestServer::with_docker().await;
    let (sid, _) = server.session().await;
    let started = cli(
        &server,
        &sid,
        &[
            "start",
            "--ready-port",
            "8000",
            "--ready-timeout-ms",
            "20000",
            "--",
            "python3",
            "-m",
            "http.server",
            "8000",
        ],
    )
    .await;
    assert_eq!(started.code, Some(0), "{started:?}");
    let p = id(&started);
    assert!(
        started
            .stderr
            .contains(&format!("[{p} running, ready after ")),
        "{started:?}"
    );

    let ps = cli(&server, &sid, &["ps"]).await;
    assert_eq!(ps.code, Some(0), "{ps:?}");
    let mut lines = ps.stdout.lines();
    assert!(lines.next().unwrap().starts_with("ID "), "{ps:?}");
    let row = lines.next().expect("a row");
    assert!(row.starts_with(&format!("{p} ")), "{ps:?}");
    assert!(row.contains(" running "), "{ps:?}");
    assert!(row.ends_with("  python3 -m http.server 8000"), "{ps:?}");

    let fetch = "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/').status)\"";
    let ran = run(&server.client, &sid, fetch, 20_000).await;
    assert_eq!(ran.stdout().trim(), "200", "{}", ran.stderr());
    // http.server writes its access log to stderr: it comes on stderr.
    let logs = cli_until(&server, &sid, &["logs", &p], |o| {
        o.stderr.contains("\"GET / HTTP/1.1\" 200")
    })
    .await;
    assert_eq!(logs.code, Some(0), "{logs:?}");
    assert!(logs.stderr.contains("\"GET / HTTP/1.1\" 200"), "{logs:?}");
    assert!(!logs.stdout.contains("GET /"), "{logs:?}");
    assert!(
        logs.stderr.ends_with(&format!("[{p} is still running]\n")),
        "{logs:?}"
    );
    let only_stdout = cli(&server, &sid, &["logs", "--stdout-only", &p]).await;
    assert!(!only_stdout.stderr.contains("GET /"), "{only_stdout:?}");

    let stopped = cli(&server, &sid, &["stop", &p]).await;
    assert_eq!(stopped.code, Some(0), "{stopped:?}");
    assert!(
        stopped.stdout.starts_with(&format!(
            "{p} was stopped by SIGTERM to its process group after "
        )),
        "{stopped:?}"
    );
    let ps = cli(&server, &sid, &["ps"]).await;
    assert!(ps.stdout.contains(" killed (SIGTERM) "), "{ps:?}");
    // Its output stays readable after its end.
    let logs = cli(&server, &sid, &["logs", &p]).await;
    assert!(logs.stderr.contains("GET / HTTP/1.1"), "{logs:?}");
    assert!(
        logs.stderr
            .contains(&format!("[{p} was stopped by SIGTERM to its process group")),
        "{logs:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn input_readiness_signals_and_ctrl_c_from_the_command_line() {
    let server = TestServer::with_docker().await;
    let (sid, _) = server.session().await;

    // A line sent to cat comes back on its stdout; closing its input ends it.
    let started = cli(&server, &sid, &["start", "--stdin", "--", "cat"]).await;
    assert_eq!(started.code, Some(0), "{started:?}");
    let cat = id(&started);
    let sent = cli(&server, &sid, &["send", &cat, "hello there"]).await;
    assert_eq!(sent.code, Some(0), "{sent:?}");
    assert_eq!(sent.stdout, format!("{cat} took 12 bytes\n"));
    let logs = cli_until(&server, &sid, &["logs", &cat], |o| {
        o.stdout == "hello there\n"
    })
    .await;
    assert_eq!(logs.stdout, "hello there\n", "{logs:?}");
    let closed = cli(&server, &sid, &["send", &cat, "--close"]).await;
    assert_eq!(closed.code, Some(0), "{closed:?}");
    assert_eq!(
        closed.stdout,
        format!("{cat} took 0 bytes; its input is closed now\n")
    );
    let followed = cli(&server, &sid, &["logs", "-f", &cat]).await;
    assert_eq!(followed.code, Some(0), "{followed:?}");
    assert_eq!(followed.stdout, "hello there\n");
    assert!(
        followed
            .stderr
            .contains(&format!("[{cat} exited with code 0 after ")),
        "{followed:?}"
    );
    let refused = cli(&server, &sid, &["send", &cat, "more"]).await;
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert!(
        refused.stderr.contains("refused [PROCESS_ENDED]"),
        "{refused:?}"
    );

    // Readiness that never comes: exit 1, with what it printed so far.
    let not_ready = cli(
        &server,
        &sid,
        &[
            "start",
            "--ready-match",
            "never printed",
            "--ready-timeout-ms",
            "1500",
            "--",
            "echo booting; echo warming up >&2; sleep 600",
        ],
    )
    .await;
    assert_eq!(not_ready.code, Some(1), "{not_ready:?}");
    let p = id(&not_ready);
    assert!(
        not_ready.stderr.contains(&format!(
            "[{p} running, NOT ready within 1 s: it is left running"
        )),
        "{not_ready:?}"
    );
    assert!(
        not_ready
            .stderr
            .contains("[the end of its stdout so far:]\nbooting\n"),
        "{not_ready:?}"
    );
    assert!(
        not_ready
            .stderr
            .contains("[the end of its stderr so far:]\nwarming up\n"),
        "{not_ready:?}"
    );

    // Ctrl-C ends a follow, not the process.
    let mut follow = command(&server, &sid, &["logs", "-f", "--stdout-only", &p])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = follow.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        while !String::from_utf8_lossy(&seen).contains("booting\n") {
            let n = stdout.read(&mut buf).await.unwrap();
            assert!(n > 0, "the follow ended early");
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(read.is_ok(), "no output followed: {seen:?}");
    let pid = i32::try_from(follow.id().unwrap()).unwrap();
    // SAFETY: kill(2) on the child this test spawned and still holds.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let ended = tokio::time::timeout(Duration::from_secs(10), follow.wait_with_output())
        .await
        .expect("Ctrl-C ended the follow")
        .unwrap();
    let stderr = String::from_utf8_lossy(&ended.stderr);
    assert_eq!(ended.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("[stopped following {p}; it keeps running")),
        "{stderr}"
    );
    let ps = cli(&server, &sid, &["ps"]).await;
    let row = ps
        .stdout
        .lines()
        .find(|l| l.starts_with(&format!("{p} ")))
        .unwrap();
    assert!(row.contains(" running "), "{ps:?}");

    // A signal by name; KILL ends it at once.
    let signalled = cli(&server, &sid, &["signal", &p, "kill"]).await;
    assert_eq!(signalled.code, Some(0), "{signalled:?}");
    assert!(
        signalled
            .stdout
            .starts_with(&format!("sent SIGKILL to the process group of {p}; ")),
        "{signalled:?}"
    );
    let ps = cli_until(&server, &sid, &["ps"], |o| {
        o.stdout.contains("killed (SIGKILL)")
    })
    .await;
    assert!(ps.stdout.contains("killed (SIGKILL)"), "{ps:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_process_the_session_never_started_is_refused_with_its_reason() {
    let server = TestServer::start().await;
    let (sid, _) = server.session().await;
    for verb in [
        &["logs", "p999"][..],
        &["stop", "p999"],
        &["send", "p999", "x"],
    ] {
        let out = cli(&server, &sid, verb).await;
        assert_eq!(out.code, Some(1), "{verb:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{verb:?}: {out:?}");
        assert!(
            out.stderr.starts_with("refused [PROCESS_NOT_FOUND]: "),
            "{verb:?}: {out:?}"
        );
        assert!(
            out.stderr
                .ends_with("`sandboxd ps` lists the session's processes\n"),
            "{verb:?}: {out:?}"
        );
    }
    let out = cli(&server, &sid, &["ps"]).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.starts_with("no processes"), "{out:?}");
    server.stop().await;
}

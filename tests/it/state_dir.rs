//! The service's state directory as `serve` uses it: one live instance per
//! directory, a refused second one that writes nothing there, errors that
//! name the directory the operator must fix, and tests that never touch
//! the operator's default state directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::common::{NO_DOCKER, SANDBOXD, spawn_listening};

/// A `serve` this test started, killed (by pid) when dropped.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `serve` on loopback `port` (0: one it picks) over `state`, without
/// Docker and without a token of its own (it makes one).
fn serve(state: &Path, port: u16) -> Command {
    let mut cmd = Command::new(SANDBOXD);
    cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--pool-size", "0", "--docker-host", NO_DOCKER])
        .arg("--state-dir")
        .arg(state)
        .env_remove("SANDBOXD_TOKEN")
        .env_remove("SANDBOXD_TOKEN_FILE")
        .stdin(Stdio::null());
    cmd
}

fn read(path: PathBuf) -> Vec<u8> {
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A second `serve` on a live instance's state directory is refused, and
/// writes nothing there first: the live one's token and address stay
/// byte-for-byte, whichever way the second one was asked to listen.
#[test]
fn a_second_serve_on_a_live_state_dir_is_refused_and_leaves_token_and_listen_untouched() {
    let base = tempfile::tempdir().unwrap();
    let state = base.path().join("state");
    let (live, addr) = spawn_listening(serve(&state, 0).stdout(Stdio::null()));
    let _live = Served(live);
    let port = addr.port();
    let before = (read(state.join("token")), read(state.join("listen")));
    let token_file = base.path().join("given-token");
    std::fs::write(&token_file, "a-token-of-the-second\n").unwrap();
    let socket = base.path().join("second.sock");
    let seconds: Vec<(&str, Command)> = vec![
        ("another loopback port", serve(&state, 0)),
        ("the same port", serve(&state, port)),
        ("with a token file", {
            let mut c = serve(&state, 0);
            c.arg("--token-file").arg(&token_file);
            c
        }),
        ("on a unix socket", {
            let mut c = Command::new(SANDBOXD);
            c.args(["serve", "--pool-size", "0", "--docker-host", NO_DOCKER])
                .arg("--listen")
                .arg(format!("unix:{}", socket.display()))
                .arg("--state-dir")
                .arg(&state);
            c
        }),
    ];
    for (how, mut second) in seconds {
        let out = second.output().unwrap();
        assert!(!out.status.success(), "{how}: a second instance started");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("another sandboxd instance"),
            "{how}: {stderr}"
        );
        let after = (read(state.join("token")), read(state.join("listen")));
        assert_eq!(
            before, after,
            "{how}: the live instance's token or address changed"
        );
        assert!(
            !socket.exists(),
            "{how}: the refused instance left a socket"
        );
    }
    // The live instance still answers on its address.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
}

/// A journal directory other users could read is refused with its flag's
/// name, not called the state directory.
#[test]
fn an_open_journal_dir_is_refused_naming_its_flag() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().unwrap();
    let journals = base.path().join("journals");
    std::fs::create_dir(&journals).unwrap();
    std::fs::set_permissions(&journals, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = serve(&base.path().join("state"), 0)
        .arg("--journal-dir")
        .arg(&journals)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("journal directory (--journal-dir)")
            && stderr.contains(&journals.display().to_string())
            && stderr.contains("chmod 700"),
        "{stderr}"
    );
    assert!(!stderr.contains("the state directory"), "{stderr}");
    // The state directory's own refusal still names it.
    let open_state = base.path().join("open-state");
    std::fs::create_dir(&open_state).unwrap();
    std::fs::set_permissions(&open_state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = serve(&open_state, 0).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the state directory"), "{stderr}");
}

/// Every `serve` a test starts names a state directory of its own: a test
/// run beside the operator's `serve` never meets its default one.
#[test]
fn every_serve_a_test_starts_names_its_own_state_dir() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut files = vec![root];
    let mut bare = Vec::new();
    let mut seen = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (at, _) in text.match_indices("\"serve\"") {
            seen += 1;
            // The command ends where it is run.
            let rest = &text[at..];
            let end = ["output()", "spawn()", "status()", "spawn_listening("]
                .iter()
                .filter_map(|run| rest.find(run))
                .min()
                .unwrap_or(rest.len());
            let command = &rest[..end];
            let named = command.contains("--state-dir") || command.contains("serve(&");
            if !named {
                let line = text[..at].lines().count();
                bare.push(format!("{}:{line}", path.display()));
            }
        }
    }
    assert!(seen > 3, "no serve found: the scan is broken");
    assert!(
        bare.is_empty(),
        "serve started without --state-dir (it would use the operator's default): {bare:?}"
    );
}

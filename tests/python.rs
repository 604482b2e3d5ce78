//! The Python side, run by pytest from `cargo test`: the client package in
//! `clients/python` against a real service, `sandboxd mcp` checked with
//! the official MCP Python SDK (the `mcp` package from PyPI), and the web
//! view in a real headless Chromium (Debian's `chromium`, installed by the
//! suite when missing, driven over the DevTools protocol).
//!
//! All run in one fresh virtual environment made for this run. The package
//! is installed into it alone first and imported, which shows that it
//! stands on the dependencies it declares; the test tools pinned in
//! `clients/python/requirements-dev.txt` come after. PyPI must be reachable
//! (pip trusts the host's CA bundle); pip's cache makes later runs quick.
//! Each suite starts the services it needs from this build's binary.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The repository.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Longest a suite may run before it is stopped and the test fails.
const SUITE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The virtual environment, made once per run (kept until the process ends).
fn venv() -> &'static Path {
    static VENV: OnceLock<tempfile::TempDir> = OnceLock::new();
    VENV.get_or_init(|| {
        python3();
        let dir = tempfile::Builder::new()
            .prefix("sandboxd-venv-")
            .tempdir()
            .expect("a temporary directory");
        make_venv(dir.path());
        let pip = |args: &[&str], what: &str| {
            run(
                Command::new(dir.path().join("bin/pip"))
                    .args(["--disable-pip-version-check", "install", "-q"])
                    .args(args)
                    .current_dir(root()),
                what,
            )
        };
        pip(&["./clients/python"], "installing the sandboxd package");
        run(
            Command::new(dir.path().join("bin/python"))
                .args(["-c", "import sandboxd, sandboxd.v1.sandbox_pb2_grpc"])
                .current_dir("/"),
            "importing the package with only its declared dependencies",
        );
        pip(
            &["-r", "clients/python/requirements-dev.txt"],
            "installing the test tools",
        );
        dir
    })
    .path()
}

/// Makes sure python3 is here (installing it on a Debian machine without).
fn python3() {
    let needs = [sandboxd::provision::Need {
        program: "python3",
        package: "python3",
    }];
    if let Err(e) = sandboxd::provision::ensure(&needs) {
        panic!("the Python tests need python3: {e}");
    }
}

/// `python3 -m venv dir`; Debian ships venv's bootstrap apart, as
/// python3-venv: installed when missing.
fn make_venv(dir: &Path) {
    let venv = || {
        Command::new("python3")
            .args(["-m", "venv"])
            .arg(dir)
            .output()
            .expect("python3 runs")
    };
    let first = venv();
    if first.status.success() {
        return;
    }
    eprintln!("python3 -m venv failed; installing python3-venv with apt-get");
    run(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "python3-venv"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
        "installing python3-venv",
    );
    let again = venv();
    assert!(
        again.status.success(),
        "python3 -m venv failed: {}",
        String::from_utf8_lossy(&again.stderr)
    );
}

/// Runs `cmd` to its end; panics with its output if it fails.
fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs pytest over `dir` (relative to the repository) in the venv, one
/// suite at a time (each starts services and containers of its own).
fn pytest(dir: &str) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let venv = venv();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let log = tempfile::NamedTempFile::new().expect("a log file");
    let mut child = Command::new(venv.join("bin/python"))
        .args(["-m", "pytest", dir, "-q", "-p", "no:cacheprovider", "-rfE"])
        .current_dir(root())
        .env("SANDBOXD_BIN", env!("CARGO_BIN_EXE_sandboxd"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("SANDBOXD_ADDR")
        .env_remove("SANDBOXD_TOKEN")
        .stdin(Stdio::null())
        .stdout(log.reopen().expect("the log"))
        .stderr(log.reopen().expect("the log"))
        .spawn()
        .expect("pytest starts");
    let deadline = Instant::now() + SUITE_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("pytest can be waited for") {
            break Some(status);
        }
        if Instant::now() > deadline {
            // pytest's own clean-up (stopping its services) runs on SIGTERM.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            std::thread::sleep(Duration::from_secs(30));
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = std::fs::read_to_string(log.path()).unwrap_or_default();
    match status {
        Some(s) if s.success() => println!("{output}"),
        Some(s) => panic!("pytest {dir} failed ({s}):\n{output}"),
        None => panic!("pytest {dir} ran past {SUITE_TIMEOUT:?} and was stopped:\n{output}"),
    }
}

#[test]
fn the_python_client_against_a_real_service() {
    pytest("clients/python/tests");
}

#[test]
fn sandboxd_mcp_checked_with_the_official_mcp_sdk() {
    pytest("tests/mcp");
}

#[test]
fn the_web_view_in_a_real_browser() {
    pytest("tests/browser");
}

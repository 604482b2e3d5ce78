//! A service on this machine as its users reach it: the system service's
//! socket shared with a group (`serve --socket-group`), used by a member of
//! the group and refused to everyone else, and the CLI finding a user's own
//! service on `$XDG_RUNTIME_DIR/sandboxd.sock` with no address given.
//!
//! The throwaway group and users are made with groupadd/useradd and
//! removed at the end, also when a test fails.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{NO_DOCKER, SANDBOXD, unmount_under};

/// Runs a host tool that changes the account databases, retried while
/// another one holds their lock; panics with its words if it fails.
fn account_tool(program: &str, args: &[&str]) {
    let mut last = String::new();
    for _ in 0..20 {
        let out = Command::new(program).args(args).output().unwrap();
        if out.status.success() {
            return;
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("{program} {args:?} failed: {last}");
}

/// A system group made for the test, deleted when dropped.
struct TestGroup {
    name: String,
    gid: u32,
}

impl TestGroup {
    fn new() -> TestGroup {
        let name = format!("sandboxd-test-{}", &sandboxd::secret::random_hex()[..8]);
        account_tool("groupadd", &["--system", &name]);
        let line = Command::new("getent")
            .args(["group", &name])
            .output()
            .unwrap();
        let line = String::from_utf8_lossy(&line.stdout).into_owned();
        let gid = line.split(':').nth(2).and_then(|g| g.parse().ok());
        let mut group = TestGroup { name, gid: 0 };
        group.gid = gid.unwrap_or_else(|| panic!("no gid for {}: {line:?}", group.name));
        group
    }
}

impl Drop for TestGroup {
    fn drop(&mut self) {
        let _ = Command::new("groupdel").arg(&self.name).output();
    }
}

/// A user made for the test (no home, no login), deleted when dropped.
struct TestUser {
    name: String,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

impl TestUser {
    /// A user whose own primary group is the system default and who is a
    /// member of `extra` groups, as `usermod -aG` makes one.
    fn new(extra: &[&TestGroup]) -> TestUser {
        let name = format!("sbxd-test-{}", &sandboxd::secret::random_hex()[..8]);
        let mut args = vec![
            "--system",
            "--no-create-home",
            "--no-user-group",
            "--shell",
            "/usr/sbin/nologin",
        ];
        let list = extra
            .iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join(",");
        if !list.is_empty() {
            args.extend(["--groups", &list]);
        }
        args.push(&name);
        account_tool("useradd", &args);
        let mut user = TestUser {
            name,
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        };
        let id = |flag: &str| {
            let out = Command::new("id")
                .args([flag, &user.name])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(out.status.success(), "id {flag} {}: {text}", user.name);
            text.split_whitespace()
                .map(|n| n.parse::<u32>().unwrap())
                .collect::<Vec<_>>()
        };
        let (uid, gid, groups) = (id("-u")[0], id("-g")[0], id("-G"));
        user.uid = uid;
        user.gid = gid;
        user.groups = groups;
        assert_ne!(user.uid, 0);
        user
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
    }
}

/// A `serve` the test started: SIGTERM and a bounded wait when dropped,
/// then a kill; mounts it left under `state` are detached.
struct Served {
    child: Child,
    state: PathBuf,
    log: PathBuf,
}

impl Served {
    /// Waits (bounded) until the socket at `path` accepts connections.
    fn wait_for(&mut self, path: &Path) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("serve exited with {status}: {}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "serve did not listen on {}: {}",
            path.display(),
            self.log_text()
        );
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: a plain signal to the child this test started.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        unmount_under(&self.state);
    }
}

/// `sandboxd serve` over the state directory `base/state`, without Docker
/// or warm containers, listening on `listen`, logging to `base/serve.log`.
fn serve(base: &Path, listen: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(SANDBOXD);
    cmd.args(["serve", "--listen", listen, "--state-dir"])
        .arg(base.join("state"))
        .args(["--pool-size", "0", "--docker-host", NO_DOCKER])
        .args(extra)
        .env_remove("SANDBOXD_TOKEN")
        .env_remove("SANDBOXD_TOKEN_FILE")
        .env_remove("SANDBOXD_SOCKET_GROUP")
        .stdin(Stdio::null());
    cmd
}

/// Starts `serve` (see [`serve`]) with its output in `base/serve.log`.
fn start(base: &Path, listen: &str, extra: &[&str]) -> Served {
    let log = base.join("serve.log");
    let out = std::fs::File::create(&log).unwrap();
    let child = serve(base, listen, extra)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    Served {
        child,
        state: base.join("state"),
        log,
    }
}

/// The CLI with no address, token or session from the test's environment.
fn cli(args: &[&str]) -> Command {
    let mut cmd = Command::new(SANDBOXD);
    cmd.args(args).stdin(Stdio::null());
    for var in [
        "SANDBOXD_ADDR",
        "SANDBOXD_TOKEN",
        "SANDBOXD_SESSION",
        "SANDBOXD_SESSION_TOKEN",
        "SANDBOXD_CA_CERT",
        "XDG_RUNTIME_DIR",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs `cmd` as `user`: its groups, then its gid, then its uid, dropped
/// in that order before the program starts.
fn as_user(cmd: &mut Command, user: &TestUser) -> Output {
    let (uid, gid, groups) = (user.uid, user.gid, user.groups.clone());
    // SAFETY: the closure only makes three system calls on data prepared
    // before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.env("HOME", "/nonexistent").output().unwrap()
}

/// The `sandboxd` binary where any user may run it: in place when every
/// directory above it lets others through, else a copy in `dir`.
fn binary_for_all(dir: &Path) -> PathBuf {
    let built = Path::new(SANDBOXD);
    let open = built
        .ancestors()
        .skip(1)
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.mode() & 0o001 != 0));
    if open {
        return built.to_path_buf();
    }
    let copy = dir.join("sandboxd");
    std::fs::copy(built, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

fn text(out: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `serve --socket-group` makes the socket 0660 and the group's; a member
/// of the group lists sessions over it with no token, and a user outside
/// the group is refused at connect.
#[test]
fn a_group_socket_lets_its_members_in_and_no_one_else() {
    let base = tempfile::tempdir().unwrap();
    // Others may pass through to the socket; the socket decides.
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let group = TestGroup::new();
    let member = TestUser::new(&[&group]);
    let outsider = TestUser::new(&[]);
    assert!(member.groups.contains(&group.gid) && member.gid != group.gid);
    assert!(!outsider.groups.contains(&group.gid));
    let socket = base.path().join("sandboxd.sock");
    let listen = format!("unix:{}", socket.display());
    let mut served = start(base.path(), &listen, &["--socket-group", &group.name]);
    served.wait_for(&socket);
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert_eq!(
        (meta.mode() & 0o7777, meta.gid(), meta.uid()),
        (0o660, group.gid, 0),
        "the socket's mode, group and owner"
    );
    // Nothing but the socket, the state directory and the log is left
    // beside it (the staging directory is gone).
    let mut names: Vec<_> = std::fs::read_dir(base.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["sandboxd.sock", "serve.log", "state"]);
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = binary_for_all(bin_dir.path());
    let list = || {
        let mut cmd = Command::new(&bin);
        cmd.args(["session", "list"]).env("SANDBOXD_ADDR", &listen);
        for var in [
            "SANDBOXD_TOKEN",
            "SANDBOXD_SESSION_TOKEN",
            "XDG_RUNTIME_DIR",
        ] {
            cmd.env_remove(var);
        }
        cmd.stdin(Stdio::null());
        cmd
    };
    let out = as_user(&mut list(), &member);
    assert!(out.status.success(), "the member: {}", text(&out));
    let out = as_user(&mut list(), &outsider);
    assert!(!out.status.success(), "the outsider got in: {}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PermissionDenied") || err.contains("Permission denied"),
        "the outsider: {}",
        text(&out)
    );
    // A clean stop removes the socket.
    drop(served);
    assert!(!socket.exists(), "the socket outlived the service");
}

/// `--socket-group` without a Unix socket, or naming a group the system
/// does not know, is refused before anything is bound, naming the flag and
/// the group.
#[test]
fn a_socket_group_needs_a_unix_socket_and_a_known_group() {
    let base = tempfile::tempdir().unwrap();
    let out = serve(base.path(), "127.0.0.1:0", &["--socket-group", "root"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--socket-group \"root\"") && err.contains("--listen unix:/PATH"),
        "{err}"
    );
    let unknown = format!(
        "sandboxd-test-none-{}",
        &sandboxd::secret::random_hex()[..6]
    );
    let socket = base.path().join("s.sock");
    let out = serve(
        base.path(),
        &format!("unix:{}", socket.display()),
        &["--socket-group", &unknown],
    )
    .output()
    .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("--socket-group {unknown:?}")) && err.contains("no such group"),
        "{err}"
    );
    assert!(!socket.exists(), "a refused service bound its socket");
}

/// With no address given, the CLI reaches the user's own service on
/// `$XDG_RUNTIME_DIR/sandboxd.sock`; a socket there that is not the
/// user's own is passed by.
#[test]
fn the_cli_finds_the_users_own_service_on_its_private_socket() {
    let base = tempfile::tempdir().unwrap();
    let runtime = base.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let roots = base.path().join("roots");
    let workspace = roots.join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::set_permissions(&roots, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(workspace.join("a.txt"), "hello\n").unwrap();
    let socket = runtime.join("sandboxd.sock");
    let listen = format!("unix:{}", socket.display());
    let roots_flag = roots.display().to_string();
    let mut served = start(base.path(), &listen, &["--allow-root", &roots_flag]);
    served.wait_for(&socket);
    // A session made over the explicit address...
    let out = cli(&["session", "create", "--quiet", "--workspace"])
        .arg(&workspace)
        .env("SANDBOXD_ADDR", &listen)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!id.is_empty());
    // ...is listed with no address at all: the service was found.
    let out = cli(&["session", "list"])
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&id),
        "{}",
        text(&out)
    );
    // A file verb goes there too.
    let out = cli(&["read", "a.txt", "--raw", "--session", &id])
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    // Someone else's socket in the runtime directory is not this user's
    // service: passed by (the next places have nothing of this service).
    std::os::unix::fs::chown(&socket, Some(65534), None).unwrap();
    let out = cli(&["session", "list"])
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(&id),
        "an unowned socket was used: {}",
        text(&out)
    );
    std::os::unix::fs::chown(&socket, Some(0), None).unwrap();
    let out = cli(&["session", "close", &id])
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    drop(served);
}

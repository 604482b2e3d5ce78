//! The service run by an ordinary user of the host, in the `docker` group,
//! over a project in that user's home: what a developer's workstation
//! looks like. Each test makes its own user and removes it after.

mod escapes;
mod project;
mod restart;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::common;

/// A user of the host made for one test: in the `docker` group, with a
/// home closed to others (mode 0700) under a directory anyone may pass.
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    _base: tempfile::TempDir,
}

impl User {
    pub fn new() -> User {
        let base = tempfile::Builder::new()
            .prefix("sandboxd-user-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(base.path(), PermissionsExt::from_mode(0o755)).unwrap();
        let name = format!("sbx{}", &uuid::Uuid::new_v4().simple().to_string()[..9]);
        let home = base.path().join("home");
        let out = Command::new("useradd")
            .args([
                "--no-create-home",
                "--shell",
                "/bin/sh",
                "--groups",
                "docker",
            ])
            .arg("--home-dir")
            .arg(&home)
            .arg(&name)
            .output()
            .unwrap();
        assert!(out.status.success(), "useradd: {out:?}");
        let id = |flag: &str| -> u32 {
            let out = Command::new("id").args([flag, &name]).output().unwrap();
            String::from_utf8(out.stdout)
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        let (uid, gid) = (id("-u"), id("-g"));
        std::fs::create_dir(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&home, PermissionsExt::from_mode(0o700)).unwrap();
        User {
            name,
            uid,
            gid,
            home,
            _base: base,
        }
    }

    /// `program args` run as this user (with its groups), with a plain
    /// environment. `setpriv` and `env` exec what follows, so the child is
    /// `program` itself: a signal to it reaches the program (runuser would
    /// stay in between, and a SIGKILL would leave the program running).
    pub fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .args(["--init-groups", "--"])
            .arg("env")
            .arg("-i")
            .arg(format!("HOME={}", self.home.display()))
            .arg(format!("USER={}", self.name))
            .arg("PATH=/usr/local/bin:/usr/bin:/bin")
            .arg(program)
            .current_dir(&self.home)
            .stdin(Stdio::null());
        cmd
    }

    /// Makes `rel` under the home, as this user's directory (every
    /// directory made on the way is the user's too).
    pub fn mkdir(&self, rel: &str) -> PathBuf {
        let dir = self.home.join(rel);
        std::fs::create_dir_all(&dir).unwrap();
        let mut made = self.home.clone();
        for part in Path::new(rel).components() {
            made.push(part);
            self.own(&made);
        }
        dir
    }

    /// Writes `rel` under the home, as this user's file.
    pub fn write(&self, rel: &str, text: &str) {
        let path = self.home.join(rel);
        std::fs::write(&path, text).unwrap();
        self.own(&path);
    }

    fn own(&self, path: &Path) {
        let out = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", self.uid, self.gid))
            .arg(path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
}

impl Drop for User {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
    }
}

/// The binary, where any user may run it (the build's own may lie under a
/// directory closed to others).
pub fn binary() -> &'static Path {
    static COPY: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = COPY.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("sandboxd-bin-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::copy(common::SANDBOXD, dir.path().join("sandboxd")).unwrap();
        dir
    });
    Box::leak(dir.path().join("sandboxd").into_boxed_path())
}

/// `sandboxd serve` run by `user`, over its home, on a socket there.
pub struct Served<'u> {
    pub user: &'u User,
    pub socket: PathBuf,
    child: Child,
}

impl<'u> Served<'u> {
    pub async fn start(user: &'u User) -> Served<'u> {
        // The sandbox image is built by root (debootstrap needs it); an
        // ordinary user's service uses it.
        common::TestServer::with_docker().await.stop().await;
        let socket = user.home.join("sandboxd.sock");
        let child = Self::spawn(user, &socket);
        let mut served = Served {
            user,
            socket,
            child,
        };
        served.wait_ready().await;
        served
    }

    fn spawn(user: &User, socket: &Path) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(user._base.path().join("serve.log"))
            .unwrap();
        user.command(binary())
            .arg("serve")
            .arg("--listen")
            .arg(format!("unix:{}", socket.display()))
            .arg("--state-dir")
            .arg(user.home.join(".sandboxd-state"))
            .arg("--allow-root")
            .arg(&user.home)
            .args(["--pool-size", "0"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    async fn wait_ready(&mut self) {
        let until = Instant::now() + Duration::from_secs(120);
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            assert!(
                Instant::now() < until,
                "the service did not start: {}",
                self.log()
            );
            assert!(
                self.child.try_wait().unwrap().is_none(),
                "the service exited: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kills the service outright (SIGKILL: nothing of it gets to clean
    /// up) and starts it again over the same state.
    pub async fn kill_and_restart(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.child = Self::spawn(self.user, &self.socket);
        self.wait_ready().await;
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.user._base.path().join("serve.log")).unwrap_or_default()
    }

    /// The CLI run as the user against this service: (exit code, stdout,
    /// stderr).
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let out: Output = self
            .user
            .command(binary())
            .arg("--addr")
            .arg(format!("unix:{}", self.socket.display()))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Opens a session over `dir`; its id. Panics if refused.
    pub fn open(&self, dir: &Path) -> String {
        let (code, out, err) = self.cli(&[
            "session",
            "create",
            "-q",
            "--workspace",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{out}{err}\n{}", self.log());
        out.trim().to_string()
    }

    /// Opens a session over a fresh workspace; its id.
    pub fn open_fresh(&self) -> String {
        let (code, out, err) = self.cli(&["session", "create", "-q"]);
        assert_eq!(code, 0, "{out}{err}\n{}", self.log());
        out.trim().to_string()
    }

    /// Runs `script` with `sh -c` in `session`: (exit code, output).
    pub fn run(&self, session: &str, script: &str) -> (i32, String) {
        let (code, out, err) = self.cli(&["run", "-s", session, "--", script]);
        (code, format!("{out}{err}"))
    }
}

impl Drop for Served<'_> {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        );
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

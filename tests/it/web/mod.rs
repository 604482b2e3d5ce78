//! The read-only web view (`serve --web-listen`), over plain HTTP/1.1 from
//! the tests: who may see what, that every route keeps strangers out, that
//! what commands and clients chose is shown as text, and that looking
//! changes nothing. Each test starts its own `sandboxd serve`.

mod access;
mod live;
mod pages;
mod tabs;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

pub const ADMIN: &str = "the-operators-web-token";
pub const APPROVER: &str = "the-approvers-web-token";

/// `sandboxd serve` with a token, a web view and (when `docker`) the real
/// engine.
pub struct Served {
    child: Child,
    pub grpc: String,
    pub web: String,
    dir: tempfile::TempDir,
}

impl Served {
    pub async fn start(docker: bool) -> Served {
        Self::spawn(docker, true).await
    }

    /// A service without a token (`--no-token`, loopback), file tools
    /// only: its view lets every viewer in.
    pub async fn start_open() -> Served {
        Self::spawn(false, false).await
    }

    /// What the view answers to a request written out whole.
    pub fn raw(&self, request: &str) -> String {
        let mut conn = TcpStream::connect(&self.web).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        conn.write_all(request.as_bytes()).unwrap();
        let mut raw = Vec::new();
        let _ = conn.read_to_end(&mut raw);
        String::from_utf8_lossy(&raw).into_owned()
    }

    async fn spawn(docker: bool, token: bool) -> Served {
        if docker {
            // The default image, built once for every test.
            common::TestServer::with_docker().await.stop().await;
        }
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let token_file = write("token", ADMIN);
        let approver = write("approver", APPROVER);
        // Both ports are the service's pick: the log names them.
        let mut cmd = Command::new(common::SANDBOXD);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .args(["--web-listen", "127.0.0.1:0"])
            .args(["--pool-size", "0", "--lent-pool-size", "0"]);
        if token {
            cmd.arg("--token-file")
                .arg(&token_file)
                .arg("--approver-token-file")
                .arg(&approver);
        } else {
            cmd.arg("--no-token");
        }
        cmd.arg("--state-dir")
            .arg(dir.path().join("state"))
            .args([
                "--service-name",
                &format!("sandboxd-web-{}", uuid::Uuid::new_v4().simple()),
            ])
            .env_remove("SANDBOXD_TOKEN")
            .stdout(Stdio::null());
        if docker {
            // The operator's token may build: a build's progress is on a page.
            cmd.arg("--allow-builds");
        } else {
            cmd.args(["--docker-host", common::NO_DOCKER]);
        }
        let (child, addrs) = tokio::task::spawn_blocking(move || {
            common::spawn_logging(&mut cmd, &["sandboxd listening", "web view at"])
        })
        .await
        .unwrap();
        Served {
            child,
            grpc: addrs[0].to_string(),
            web: addrs[1].to_string(),
            dir,
        }
    }

    /// The CLI against this service with the operator's token (or `token`).
    pub fn cli(&self, token: Option<&str>, args: &[&str]) -> (i32, String) {
        let out = Command::new(common::SANDBOXD)
            .arg("--addr")
            .arg(format!("http://{}", self.grpc))
            .args(args)
            .env("SANDBOXD_TOKEN", token.unwrap_or(ADMIN))
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// Runs `command` in session `id` through the CLI (with the
    /// operator's token) on a thread of its own: its output, when joined.
    pub fn run_in_background(
        &self,
        id: &str,
        command: &str,
    ) -> std::thread::JoinHandle<std::process::Output> {
        let mut cmd = Command::new(common::SANDBOXD);
        cmd.arg("--addr")
            .arg(format!("http://{}", self.grpc))
            .args(["run", "-s", id, "--", command])
            .env("SANDBOXD_TOKEN", ADMIN);
        std::thread::spawn(move || cmd.output().unwrap())
    }

    /// Opens a session: (id, its token).
    pub fn session(&self) -> (String, String) {
        let (code, out) = self.cli(None, &["session", "create", "--export"]);
        assert_eq!(code, 0, "{out}");
        let value = |name: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .unwrap_or_else(|| panic!("{name} in {out}"))
                .trim_matches('\'')
                .to_string()
        };
        (value("SANDBOXD_SESSION"), value("SANDBOXD_SESSION_TOKEN"))
    }

    /// A viewer logged in with `token`: its cookie header.
    pub fn login(&self, token: &str) -> String {
        let reply = self.post("/login", &format!("token={token}"), None);
        assert_eq!(reply.status, 303, "{reply:?}");
        let cookie = reply
            .header("set-cookie")
            .unwrap_or_else(|| panic!("no cookie: {reply:?}"));
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        cookie.split(';').next().unwrap().to_string()
    }

    pub fn get(&self, path: &str, cookie: Option<&str>) -> Reply {
        self.request("GET", path, None, cookie)
    }

    pub fn post(&self, path: &str, form: &str, cookie: Option<&str>) -> Reply {
        self.request("POST", path, Some(form), cookie)
    }

    fn request(&self, method: &str, path: &str, form: Option<&str>, cookie: Option<&str>) -> Reply {
        let mut conn = TcpStream::connect(&self.web).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.web
        );
        if let Some(cookie) = cookie {
            head.push_str(&format!("Cookie: {cookie}\r\n"));
        }
        let body = form.unwrap_or_default();
        if form.is_some() {
            head.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        conn.write_all(head.as_bytes()).unwrap();
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw).unwrap();
        Reply::parse(&raw)
    }

    /// The sessions as ListSessions shows them (without touching them):
    /// the CLI's listing.
    pub fn listing(&self) -> String {
        let (code, out) = self.cli(None, &["session", "list"]);
        assert_eq!(code, 0, "{out}");
        out
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if self.child.try_wait().unwrap().is_some() {
                let _ = &self.dir;
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    fn parse(raw: &[u8]) -> Reply {
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or(raw.len());
        let head = String::from_utf8_lossy(&raw[..split]);
        let body = raw.get(split + 4..).unwrap_or_default();
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect::<Vec<_>>();
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
        let body = if chunked {
            unchunk(body)
        } else {
            body.to_vec()
        };
        Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The body of a chunked reply.
fn unchunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = body.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&body[..end]);
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        let rest = &body[end + 2..];
        if n == 0 || rest.len() < n {
            break;
        }
        out.extend_from_slice(&rest[..n]);
        body = rest[n..].strip_prefix(b"\r\n").unwrap_or(&rest[n..]);
    }
    out
}

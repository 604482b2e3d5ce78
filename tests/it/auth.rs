//! Access: with a token configured, every Sandbox and reflection call needs
//! `authorization: Bearer <token>`; health stays open for probes; and the
//! service refuses to listen beyond loopback without a token. TLS admits a
//! client trusting the CA and no plain-text one; the Unix socket listener
//! is private to its user.

use crate::common;
use crate::common::{TestServer, assert_refused};
use sandboxd::pb::{self, sandbox_client::SandboxClient};
use tonic::transport::Channel;

async fn channel(srv: &TestServer) -> Channel {
    Channel::from_shared(format!("http://{}", srv.addr))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn with_auth<T>(msg: T, value: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut()
        .insert("authorization", value.parse().unwrap());
    req
}

#[tokio::test]
async fn calls_without_the_token_are_unauthenticated() {
    let srv = TestServer::with_token("s3cret-token").await;
    let mut c = SandboxClient::new(channel(&srv).await);
    let list = c.list_sessions(pb::ListSessionsRequest {});
    let err = assert_refused(list, "UNAUTHENTICATED").await;
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    for wrong in [
        "Bearer nope",
        "Bearer s3cret-toke",
        "Bearer s3cret-token2",
        "s3cret-token",
        "Basic s3cret-token",
    ] {
        let err = c
            .create_session(with_auth(pb::CreateSessionRequest::default(), wrong))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated, "{wrong}");
    }
    // Nothing was created by the refused calls.
    let listed = c
        .list_sessions(with_auth(pb::ListSessionsRequest {}, "Bearer s3cret-token"))
        .await
        .unwrap()
        .into_inner();
    assert!(listed.sessions.is_empty());
    let s = c
        .create_session(with_auth(
            pb::CreateSessionRequest::default(),
            "Bearer s3cret-token",
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!s.session_id.is_empty());
    // Health answers without a token, for probes.
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel(&srv).await);
    health
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap();
    srv.stop().await;
}

#[test]
fn serve_refuses_a_public_address_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(common::SANDBOXD)
        .args(["serve", "--listen", "0.0.0.0:0"])
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env_remove("SANDBOXD_TOKEN")
        .env_remove("SANDBOXD_TOKEN_FILE")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without a token"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_sends_the_token() {
    let srv = TestServer::with_token("cli-token").await;
    let run = |token: Option<&str>| {
        let mut cmd = std::process::Command::new(common::SANDBOXD);
        cmd.args(["--addr", &format!("http://{}", srv.addr), "session", "list"]);
        cmd.env_remove("SANDBOXD_TOKEN");
        if let Some(t) = token {
            cmd.args(["--token", t]);
        }
        cmd.output().unwrap()
    };
    let refused = tokio::task::block_in_place(|| run(None));
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("UNAUTHENTICATED"));
    let ok = tokio::task::block_in_place(|| run(Some("cli-token")));
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    srv.stop().await;
}

/// A `sandboxd serve` child process without Docker (file tools only).
struct Served {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Served {
    /// A service on a Unix socket (`unix:<path>`).
    fn start(listen: &str, extra: &[&str]) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let child = Self::command(listen, extra, &dir)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Served { child, _dir: dir }
    }

    /// A service on a loopback port it picks, and that port.
    fn tcp(extra: &[&str]) -> (Served, u16) {
        let dir = tempfile::tempdir().unwrap();
        let (child, addr) = common::spawn_listening(&mut Self::command("127.0.0.1:0", extra, &dir));
        (Served { child, _dir: dir }, addr.port())
    }

    fn command(listen: &str, extra: &[&str], dir: &tempfile::TempDir) -> std::process::Command {
        let mut command = std::process::Command::new(common::SANDBOXD);
        command
            .args(["serve", "--listen", listen, "--pool-size", "0"])
            .args(["--docker-host", common::NO_DOCKER])
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args([
                "--service-name",
                &format!("sandboxd-auth-{}", std::process::id()),
            ])
            .args(extra)
            .env_remove("SANDBOXD_TOKEN");
        command
    }

    /// The instance's state directory.
    fn state(&self) -> std::path::PathBuf {
        self._dir.path().join("state")
    }

    /// SIGTERM, then waits for a clean exit.
    fn stop(mut self) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "serve exited with {status}");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn wait_until(mut ready: impl FnMut() -> bool) {
    for _ in 0..200 {
        if ready() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the service did not come up");
}

/// A CA and a certificate it signed for localhost and 127.0.0.1.
fn pki(dir: &std::path::Path) -> (String, std::path::PathBuf, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &Issuer::from_params(&ca_params, &ca_key))
        .unwrap();
    let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&cert, leaf.pem()).unwrap();
    std::fs::write(&key, leaf_key.serialize_pem()).unwrap();
    (ca.pem(), cert, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_admits_a_client_trusting_the_ca_and_refuses_plain_text() {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
    let dir = tempfile::tempdir().unwrap();
    let (ca_pem, cert, key) = pki(dir.path());
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    let (served, port) = Served::tcp(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--no-token",
    ]);

    // A client trusting the CA connects and works.
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca_pem))
        .domain_name("localhost");
    let channel = Endpoint::from_shared(format!("https://localhost:{port}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let s = SandboxClient::new(channel)
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(!s.session_id.is_empty());

    // A plain-text client gets no service.
    let plain = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await;
    if let Ok(channel) = plain {
        let err = SandboxClient::new(channel)
            .list_sessions(pb::ListSessionsRequest {})
            .await
            .unwrap_err();
        assert_ne!(err.code(), tonic::Code::Ok);
    }

    // A client trusting another CA refuses the server.
    let (other_ca, _, _) = pki(tempfile::tempdir().unwrap().path());
    let other = Endpoint::from_shared(format!("https://localhost:{port}"))
        .unwrap()
        .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(other_ca)))
        .unwrap()
        .connect()
        .await;
    assert!(other.is_err(), "a client trusting another CA connected");

    // The CLI speaks TLS with --ca-cert.
    let out = tokio::task::block_in_place(|| {
        std::process::Command::new(common::SANDBOXD)
            .args(["--addr", &format!("https://localhost:{port}")])
            .arg("--ca-cert")
            .arg(&ca_file)
            .args(["session", "list"])
            .output()
            .unwrap()
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(&s.session_id));
    tokio::task::block_in_place(|| served.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_listener_is_private_and_removed_at_exit() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sandboxd.sock");
    let served = Served::start(&format!("unix:{}", socket.display()), &[]);
    wait_until(|| std::os::unix::net::UnixStream::connect(&socket).is_ok()).await;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket is open to other users");

    let cli = |args: &[&str]| {
        let out = std::process::Command::new(common::SANDBOXD)
            .args(["--addr", &format!("unix:{}", socket.display())])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let id = tokio::task::block_in_place(|| cli(&["session", "create", "-q"]));
    let listed = tokio::task::block_in_place(|| cli(&["session", "list"]));
    assert!(listed.contains(id.trim()));
    tokio::task::block_in_place(|| served.stop());
    assert!(!socket.exists(), "the socket file outlived the service");

    // A path taken by something other than a socket is never replaced.
    std::fs::write(&socket, "not a socket").unwrap();
    let out = std::process::Command::new(common::SANDBOXD)
        .args(["serve", "--listen", &format!("unix:{}", socket.display())])
        .args(["--docker-host", common::NO_DOCKER, "--pool-size", "0"])
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a socket"));
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "not a socket");
}

/// A loopback port is open to every local user: served without a token,
/// the service makes one, keeps it where only its own user can read it, and
/// refuses calls without it.
#[tokio::test]
async fn loopback_tcp_without_a_token_demands_one_only_its_user_can_read() {
    let (served, port) = Served::tcp(&[]);
    // Asked for port 0, the service records the port it took.
    let listen = std::fs::read_to_string(served.state().join("listen")).unwrap();
    assert_eq!(listen.trim(), format!("127.0.0.1:{port}"));
    let file = served.state().join("token");
    let token = std::fs::read_to_string(&file).unwrap().trim().to_string();
    assert_eq!(token.len(), 64, "{token}");
    let mode = std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(&file).unwrap());
    assert_eq!(mode & 0o777, 0o600);
    let nobody = std::process::Command::new("su")
        .args(["nobody", "-s", "/bin/sh", "-c"])
        .arg(format!("cat {}", file.display()))
        .output()
        .unwrap();
    assert!(!nobody.status.success(), "another user read the token");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = SandboxClient::new(channel);
    assert_refused(
        c.list_sessions(pb::ListSessionsRequest {}),
        "UNAUTHENTICATED",
    )
    .await;
    c.list_sessions(with_auth(
        pb::ListSessionsRequest {},
        &format!("Bearer {token}"),
    ))
    .await
    .unwrap();
    served.stop();
    // `--no-token` is the operator's explicit choice.
    let (served, port) = Served::tcp(&["--no-token"]);
    assert!(!served.state().join("token").exists());
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    SandboxClient::new(channel)
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap();
    served.stop();
}

/// A SIGTERM the moment the service says it listens (a supervisor stopping
/// it right after a start) is handled, never left to the default action:
/// the service exits 0 and takes its token and listen files with it.
#[tokio::test]
async fn a_sigterm_right_after_listening_shuts_down_cleanly() {
    for _ in 0..5 {
        let (mut served, _) = Served::tcp(&[]);
        let state = served.state();
        assert!(state.join("token").exists());
        let pid = rustix::process::Pid::from_raw(served.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let status = served.child.wait().unwrap();
        assert!(status.success(), "serve exited with {status}");
        assert!(
            !state.join("token").exists(),
            "the token outlived the service"
        );
        assert!(
            !state.join("listen").exists(),
            "the listen file outlived the service"
        );
    }
}

/// A private service (what `demo`, `bench` and `sandboxd mcp` run) demands
/// a fresh random token on its loopback port: another local user reaching
/// the port gets nowhere, its own client gets in.
#[tokio::test]
async fn a_private_service_demands_a_token_only_its_client_holds() {
    let local = sandboxd::local::Local::builder("sandboxd-test-private")
        .unwrap()
        .build_image(false)
        .private()
        .start()
        .await
        .unwrap();
    let token = local.token.clone().expect("a private service has a token");
    assert_eq!(token.len(), 64);
    let channel = Channel::from_shared(format!("http://{}", local.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut stranger = SandboxClient::new(channel);
    assert_refused(
        stranger.list_sessions(pb::ListSessionsRequest {}),
        "UNAUTHENTICATED",
    )
    .await;
    let mut own = local.client.clone();
    own.list_sessions(pb::ListSessionsRequest {}).await.unwrap();
    local.stop().await.unwrap();
}

/// Wrong tokens are slowed down past a few a minute, one at a time, so a
/// local user cannot guess at the speed the service answers; a right token
/// given meanwhile is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_are_slowed_and_the_right_one_never_is() {
    let srv = TestServer::with_token("the-right-token-here").await;
    let guessing = {
        let channel = channel(&srv).await;
        tokio::spawn(async move {
            let mut c = SandboxClient::new(channel);
            let started = std::time::Instant::now();
            for i in 0..13 {
                let wrong = format!("Bearer guess-number-{i}");
                let err = c
                    .list_sessions(with_auth(pb::ListSessionsRequest {}, &wrong))
                    .await
                    .unwrap_err();
                assert_eq!(err.code(), tonic::Code::Unauthenticated);
            }
            started.elapsed()
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    let mut c = SandboxClient::new(channel(&srv).await);
    let started = std::time::Instant::now();
    c.list_sessions(with_auth(
        pb::ListSessionsRequest {},
        "Bearer the-right-token-here",
    ))
    .await
    .unwrap();
    let right = started.elapsed();
    let guessed = guessing.await.unwrap();
    eprintln!("13 wrong tokens took {guessed:?}; the right one {right:?}");
    // Five answered at once, then 250 ms each.
    assert!(guessed >= std::time::Duration::from_secs(2), "{guessed:?}");
    assert!(right < std::time::Duration::from_secs(1), "{right:?}");
}

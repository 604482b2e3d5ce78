//! Access: with a token configured, every Sandbox and reflection call needs
//! `authorization: Bearer <token>`; health stays open for probes; and the
//! service refuses to listen beyond loopback without a token.

mod common;

use common::{TestServer, reason};
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
    let err = c
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    assert_eq!(reason(&err), "UNAUTHENTICATED");
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
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"))
        .args(["serve", "--listen", "0.0.0.0:0"])
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
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxd"));
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

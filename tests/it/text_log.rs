//! The text log as `serve` writes it: values a client or command chose
//! (here a lent directory's name) are escaped, so they can never forge a
//! line of their own or drive the terminal that shows the log.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, SANDBOXD};
use crate::served::Unmount;
use sandboxd::pb::{self, sandbox_client::SandboxClient};

#[tokio::test]
async fn a_lent_directory_named_with_a_newline_forges_no_line_of_the_text_log() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let state = base.path().join("state");
    let _unmount = Unmount(state.clone());
    let roots = base.path().join("roots");
    std::fs::create_dir(&roots).unwrap();
    let names = [
        "repo\nFORGED  INFO sandboxd: session closed",
        "repo\r\nFORGED-CR",
        "repo\u{1b}[2K\u{1b}[1GFORGED-ESC",
        "repo\u{2028}FORGED-LS",
    ];
    for name in names {
        std::fs::create_dir(roots.join(name)).unwrap();
        std::fs::write(roots.join(name).join("f"), "x\n").unwrap();
    }
    let log = base.path().join("serve.log");
    let mut served = Command::new(SANDBOXD)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--pool-size", "0", "--no-token"])
        .args(["--docker-host", common::NO_DOCKER])
        .arg("--allow-root")
        .arg(&roots)
        .arg("--state-dir")
        .arg(&state)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let addr = format!("http://{}", common::listening_in(&log).await);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut c = loop {
        if let Ok(mut c) = SandboxClient::connect(addr.clone()).await
            && c.list_sessions(pb::ListSessionsRequest {}).await.is_ok()
        {
            break c;
        }
        assert!(Instant::now() < deadline, "the service did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for name in names {
        let s = c
            .create_session(pb::CreateSessionRequest {
                workspace_path: roots.join(name).display().to_string(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        c.close_session(pb::CloseSessionRequest {
            session_id: s.session_id,
        })
        .await
        .unwrap();
    }
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(served.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    served.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    // The names were logged, escaped, on the session's own line.
    assert!(
        text.lines()
            .any(|l| l.contains("session created") && l.contains("repo\\nFORGED")),
        "{text}"
    );
    for line in text.split(['\n', '\r', '\u{2028}']) {
        assert!(
            !line.trim_start().starts_with("FORGED"),
            "a forged line: {line:?}\n{text}"
        );
        assert!(!line.contains('\u{1b}'), "a raw escape: {line:?}");
    }
}

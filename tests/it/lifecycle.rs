//! The whole loop as a user meets it: the baseline task over gRPC, the
//! `sandboxd demo` command, and a service killed with SIGKILL leaving
//! nothing behind once it is back up.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{SANDBOXD, TestServer, containers_labelled, edit, edit_req, read_req, run};
use sandboxd::pb::{self, sandbox_client::SandboxClient};

#[tokio::test]
async fn baseline_red_read_edit_green() {
    let srv = TestServer::with_docker().await;
    let (sid, ws) = srv.session().await;
    std::fs::create_dir(ws.join("shop")).unwrap();
    std::fs::write(
        ws.join("shop/pricing.py"),
        "def total(prices, discount):\n    \"\"\"Sum of prices minus a percentage discount.\"\"\"\n    subtotal = sum(prices)\n    return subtotal - subtotal * discount\n",
    )
    .unwrap();
    std::fs::write(ws.join("shop/__init__.py"), "").unwrap();
    std::fs::write(
        ws.join("test_pricing.py"),
        "import unittest\nfrom shop.pricing import total\n\nclass T(unittest.TestCase):\n    def test_percent(self):\n        self.assertAlmostEqual(total([10, 20], 10), 27.0)\n\nif __name__ == '__main__':\n    unittest.main()\n",
    )
    .unwrap();
    // Run the tests: red.
    let red = run(&srv.client, &sid, "python3 -m unittest 2>&1", 60_000).await;
    assert_ne!(red.exit.exit_code, 0, "{}", red.stdout());
    assert!(red.stdout().contains("FAILED"), "{}", red.stdout());
    // Read the code.
    let read = srv
        .client
        .clone()
        .read_file(read_req(&sid, "shop/pricing.py"))
        .await
        .unwrap()
        .into_inner();
    assert!(read.content.contains("subtotal * discount"));
    // Fix it.
    let mut req = edit_req(
        &sid,
        "shop/pricing.py",
        vec![edit(
            "subtotal - subtotal * discount",
            "subtotal - subtotal * discount / 100",
        )],
    );
    req.expected_sha256 = read.sha256;
    let fixed = srv
        .client
        .clone()
        .edit_file(req)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fixed.replacements, 1);
    // Run the tests again: green.
    let green = run(&srv.client, &sid, "python3 -m unittest 2>&1", 60_000).await;
    assert_eq!(green.exit.exit_code, 0, "{}", green.stdout());
    assert!(green.stdout().contains("OK"), "{}", green.stdout());
    srv.stop().await;
}

#[test]
fn demo_command_shows_red_then_green() {
    common::prepare_host();
    let out = Command::new(SANDBOXD).arg("demo").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for card in [
        "1. RunCommand",
        "2. ReadFile calc.py",
        "3. EditFile calc.py",
        "4. RunCommand",
    ] {
        assert!(stdout.contains(card), "missing {card}:\n{stdout}");
    }
    assert!(stdout.contains("[exit 1 in"), "{stdout}");
    assert!(stdout.contains("[exit 0 in"), "{stdout}");
    assert!(
        stdout.contains("red (exit 1) -> green (exit 0)"),
        "{stdout}"
    );
}

/// A `sandboxd serve` child process.
struct Served {
    child: Child,
    addr: String,
}

impl Served {
    async fn start(service: &str, workspaces: &std::path::Path, pool: usize) -> Served {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = Command::new(SANDBOXD)
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--service-name",
                service,
            ])
            .args(["--pool-size", &pool.to_string(), "--no-token"])
            .arg("--state-dir")
            .arg(workspaces.join("state"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(ch) = tonic::transport::Channel::from_shared(addr.clone())
                .unwrap()
                .connect()
                .await
            {
                let mut health = tonic_health::pb::health_client::HealthClient::new(ch);
                if health
                    .check(tonic_health::pb::HealthCheckRequest::default())
                    .await
                    .is_ok()
                {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "sandboxd serve did not come up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Served { child, addr }
    }

    async fn client(&self) -> common::Client {
        let channel = tonic::transport::Channel::from_shared(self.addr.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        sandboxd::local::client(channel, sandboxd::local::Bearer::default())
    }

    /// SIGTERM, then wait (off the async thread, so client connections of
    /// this test can still answer the server's goodbye).
    async fn sigterm_and_wait(mut self) {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        let mut child = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap());
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "serve exited with {status}");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes the containers carrying a label when the test ends, also when it
/// fails half-way (this test leaks containers on purpose).
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        common::remove_containers_labelled(&self.0);
    }
}

#[tokio::test]
async fn sigkilled_service_leaves_nothing_once_restarted() {
    common::prepare_host();
    let service = format!(
        "sandboxd-test-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    let label = format!("sandboxd.service={service}");
    let _cleanup = RemoveOnDrop(label.clone());
    let workspaces = tempfile::tempdir().unwrap();
    // The first instance keeps a warm container too: it must not leak either.
    let mut first = Served::start(&service, workspaces.path(), 1).await;
    let session = first
        .client()
        .await
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(!session.container_id.is_empty());
    assert!(containers_labelled(&label).contains(&session.container_id));
    // A tree far deeper than any recursion could survive is left behind.
    let deep = "python3 -c 'import os\nfor _ in range(30000):\n    os.mkdir(\"d\"); os.chdir(\"d\")\nprint(\"deep\")'";
    let ran = common::run(&first.client().await, &session.session_id, deep, 120_000).await;
    assert_eq!(ran.stdout(), "deep\n", "{}", ran.stderr());
    // Wait for the pool to refill, so a warm container is there to leak.
    let deadline = Instant::now() + Duration::from_secs(60);
    while containers_labelled(&label).len() < 2 {
        assert!(Instant::now() < deadline, "the pool did not refill");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // SIGKILL: no chance to clean up.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert_eq!(
        containers_labelled(&label).len(),
        2,
        "the kill left the session's and the warm container behind"
    );
    assert!(std::path::Path::new(&session.workspace_path).exists());

    let second = Served::start(&service, workspaces.path(), 0).await;
    assert!(
        containers_labelled(&label).is_empty(),
        "restart did not remove the leaked container"
    );
    assert!(
        !std::path::Path::new(&session.workspace_path).exists(),
        "stale workspace kept"
    );
    assert_eq!(
        common::mounts_under(workspaces.path()),
        Vec::<String>::new(),
        "stale workspace mounts kept"
    );
    // The new instance works, and a clean stop removes its own container.
    let mut c = second.client().await;
    let s = c
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(containers_labelled(&label), [s.container_id]);
    second.sigterm_and_wait().await;
    assert!(containers_labelled(&label).is_empty());
}

/// A killed service's workspaces are removed at the next start even while
/// the engine is down: no mount or volume outlives its instance.
#[tokio::test]
async fn stale_workspaces_are_removed_even_without_docker() {
    /// Unmounts what the test leaves, also when it fails half-way.
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            common::unmount_under(&self.0);
        }
    }
    let base = tempfile::tempdir().unwrap();
    let state = base.path().join("state");
    let _unmount = Unmount(state.clone());
    let start = |port: u16| {
        Command::new(SANDBOXD)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--pool-size", "0", "--no-token"])
            .args(["--docker-host", common::NO_DOCKER])
            .arg("--state-dir")
            .arg(&state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut first = start(port);
    let addr = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut client = loop {
        if let Ok(c) = SandboxClient::connect(addr.clone()).await {
            break c;
        }
        assert!(Instant::now() < deadline, "the service did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let s = client
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    std::fs::write(std::path::Path::new(&s.workspace_path).join("f"), "x").unwrap();
    assert_eq!(common::mounts_under(&state).len(), 1);
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(
        common::mounts_under(&state).len(),
        1,
        "SIGKILL left it mounted"
    );
    let mut second = start(port);
    let deadline = Instant::now() + Duration::from_secs(30);
    // Serving (a call answered) comes after the startup sweep.
    loop {
        if let Ok(mut c) = SandboxClient::connect(addr.clone()).await
            && c.list_sessions(pb::ListSessionsRequest {}).await.is_ok()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the service did not come up again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(common::mounts_under(&state).is_empty());
    assert!(!std::path::Path::new(&s.workspace_path).exists());
    assert_eq!(std::fs::read_dir(state.join("volumes")).unwrap().count(), 0);
    second.kill().unwrap();
    second.wait().unwrap();
}

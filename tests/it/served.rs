//! A `sandboxd serve` a test starts as a child process and drives over
//! gRPC, killed when the test ends, and what such tests leave behind on
//! purpose (containers, mounts), removed even when they fail half-way.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, SANDBOXD};
use sandboxd::pb::{self, sandbox_client::SandboxClient};

/// A `sandboxd serve` child process.
pub(crate) struct Served {
    pub(crate) child: Child,
    addr: String,
}

impl Served {
    pub(crate) async fn start(service: &str, workspaces: &std::path::Path, pool: usize) -> Served {
        Self::start_with(service, workspaces, pool, &[]).await
    }

    pub(crate) async fn start_with(
        service: &str,
        workspaces: &std::path::Path,
        pool: usize,
        extra: &[&str],
    ) -> Served {
        let mut serve = Command::new(SANDBOXD);
        serve
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--service-name",
                service,
            ])
            .args(["--pool-size", &pool.to_string(), "--no-token"])
            .args(if extra.contains(&"--lent-pool-size") {
                &[][..]
            } else {
                &["--lent-pool-size", "0"][..]
            })
            .arg("--state-dir")
            .arg(workspaces.join("state"))
            .args(extra)
            .stdout(Stdio::null());
        let (child, addr) =
            tokio::task::spawn_blocking(move || common::spawn_listening(&mut serve))
                .await
                .unwrap();
        let addr = format!("http://{addr}");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            // Serving (a call answered) comes after the sessions are back
            // and the startup sweep is done.
            if let Ok(ch) = tonic::transport::Channel::from_shared(addr.clone())
                .unwrap()
                .connect()
                .await
                && SandboxClient::new(ch)
                    .list_sessions(pb::ListSessionsRequest {})
                    .await
                    .is_ok()
            {
                break;
            }
            assert!(Instant::now() < deadline, "sandboxd serve did not come up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Served { child, addr }
    }

    pub(crate) async fn client(&self) -> common::Client {
        let channel = tonic::transport::Channel::from_shared(self.addr.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        sandboxd::local::client(channel, sandboxd::local::Bearer::default())
    }

    /// SIGTERM, then wait (off the async thread, so client connections of
    /// this test can still answer the server's goodbye).
    pub(crate) async fn sigterm_and_wait(mut self) {
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
pub(crate) struct RemoveOnDrop(pub(crate) String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        common::remove_containers_labelled(&self.0);
    }
}

/// Unmounts what a test leaves, also when it fails half-way.
pub(crate) struct Unmount(pub(crate) std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        common::unmount_under(&self.0);
    }
}

pub(crate) fn service_name() -> String {
    format!(
        "sandboxd-test-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

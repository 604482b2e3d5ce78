//! Environments against the real engine: a project's toolchain built into
//! an image with network (apt from Debian's mirror, pip from the index
//! through the build CA), run by sessions without it; the cache, shared
//! builds, warm pools, and every refusal leaving nothing behind. Helpers
//! here; the tests in a file per concern.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{TestServer, reason, run};
use sandboxd::pb;
use sandboxd::pb::build_environment_event::Event;

mod cli;
mod images;
mod reach;
mod refusals;
mod sharing;
mod toolchains;

/// A name no other test or run uses.
fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// Removes the images of the environments named, when the test ends (a
/// failed test included): the engine's image store outlives the test.
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for name in &self.0 {
            let ids = Command::new("docker")
                .args(["images", "-q", "--filter"])
                .arg(format!("label=sandboxd.environment={name}"))
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
                .unwrap_or_default();
            let ids: std::collections::BTreeSet<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                let _ = Command::new("docker")
                    .args(["rmi", "-f"])
                    .args(&ids)
                    .output();
            }
        }
    }
}

/// Everything one build call sent.
#[derive(Debug, Default)]
struct Build {
    joined: bool,
    steps: Vec<pb::BuildStep>,
    output: String,
    done: Option<pb::BuildDone>,
}

impl Build {
    fn done(&self) -> &pb::BuildDone {
        self.done.as_ref().expect("the build ended without done")
    }

    fn environment(&self) -> &pb::Environment {
        self.done().environment.as_ref().unwrap()
    }
}

/// Runs a build to its end; the refusal if it failed.
async fn build(
    srv: &TestServer,
    req: pb::BuildEnvironmentRequest,
) -> Result<Build, (tonic::Status, Build)> {
    let mut got = Build::default();
    let mut events = match srv.client.clone().build_environment(req).await {
        Ok(r) => r.into_inner(),
        Err(e) => return Err((e, got)),
    };
    loop {
        match events.message().await {
            Ok(Some(ev)) => match ev.event {
                Some(Event::Joined(_)) => got.joined = true,
                Some(Event::Step(s)) => got.steps.push(s),
                Some(Event::Output(o)) => got.output.push_str(&o.text),
                Some(Event::Done(d)) => got.done = Some(d),
                None => {}
            },
            Ok(None) => return Ok(got),
            Err(e) => return Err((e, got)),
        }
    }
}

fn dockerfile(name: &str, text: &str) -> pb::BuildEnvironmentRequest {
    pb::BuildEnvironmentRequest {
        name: name.into(),
        dockerfile: text.into(),
        ..Default::default()
    }
}

/// A server that lets every caller build.
async fn builder_server(tweak: impl FnOnce(&mut sandboxd::session::Config)) -> TestServer {
    TestServer::with_docker_mode_and(crate::common::Mode::Supervisor, |c| {
        c.allow_builds = true;
        tweak(c);
    })
    .await
}

/// Whether the engine has an image by this reference (docker CLI).
fn image_exists(reference: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", reference])
        .output()
        .unwrap()
        .status
        .success()
}

/// Containers (any state) whose command holds `marker` (docker CLI).
fn containers_running(marker: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Command}}"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(marker))
        .map(str::to_string)
        .collect()
}

/// Waits (up to a minute) until no container's command holds `marker`.
async fn assert_no_container_left(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = containers_running(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "build containers were left: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Opens a session over environment `name` (and a lent `workspace`).
async fn env_session(
    srv: &TestServer,
    name: &str,
    workspace: Option<&std::path::Path>,
) -> pb::Session {
    srv.client
        .clone()
        .create_session(pb::CreateSessionRequest {
            environment: name.into(),
            workspace_path: workspace
                .map(|w| w.display().to_string())
                .unwrap_or_default(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

/// Closes a session.
async fn close(srv: &TestServer, session_id: String) {
    srv.client
        .clone()
        .close_session(pb::CloseSessionRequest { session_id })
        .await
        .unwrap();
}

async fn delete(
    srv: &TestServer,
    name: &str,
) -> Result<pb::DeleteEnvironmentResponse, tonic::Status> {
    srv.client
        .clone()
        .delete_environment(pb::DeleteEnvironmentRequest { name: name.into() })
        .await
        .map(|r| r.into_inner())
}

async fn listed(srv: &TestServer, name: &str) -> Option<pb::Environment> {
    srv.client
        .clone()
        .list_environments(pb::ListEnvironmentsRequest {})
        .await
        .unwrap()
        .into_inner()
        .environments
        .into_iter()
        .find(|e| e.name == name)
}

/// `r` carrying `authorization: Bearer <token>`.
fn with<T>(token: &str, r: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(r);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

/// Runs the CLI against `srv` off the test's thread (the server runs on
/// it); stdout is a pipe, so plain lines come out.
async fn cli(srv: &TestServer, dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let addr = format!("http://{}", srv.addr);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        Command::new(crate::common::SANDBOXD)
            .arg("--addr")
            .arg(&addr)
            .args(&args)
            .current_dir(dir)
            .env_remove("SANDBOXD_TOKEN")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

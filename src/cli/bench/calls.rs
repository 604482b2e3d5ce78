//! The calls every figure makes: sessions opened and closed, commands run
//! to their exit over gRPC, and the `docker` CLI for baselines.

use std::process::{Command, Stdio};

use sandboxd::pb;

use super::{AnyError, Client};

/// Opens a session with the defaults.
pub(super) async fn new_session(client: &Client) -> Result<pb::Session, AnyError> {
    Ok(client
        .clone()
        .create_session(pb::CreateSessionRequest::default())
        .await?
        .into_inner())
}

/// Closes a session.
pub(super) async fn close(client: &Client, session_id: String) -> Result<(), AnyError> {
    client
        .clone()
        .close_session(pb::CloseSessionRequest { session_id })
        .await?;
    Ok(())
}

/// Runs a command over gRPC to its exit event.
pub(super) async fn run_cmd(
    client: &Client,
    sid: &str,
    command: &str,
) -> Result<pb::CommandExit, AnyError> {
    let mut events = client
        .clone()
        .run_command(pb::RunCommandRequest {
            session_id: sid.to_string(),
            command: command.to_string(),
            timeout_ms: 600_000,
            output: pb::OutputMode::Result.into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    while let Some(ev) = events.message().await? {
        if let Some(pb::run_command_event::Event::Exit(exit)) = ev.event {
            return Ok(exit);
        }
    }
    Err("no exit event".into())
}

/// Runs the `docker` CLI, its output dropped.
pub(super) fn docker_cli(args: &[&str]) -> Result<(), AnyError> {
    let status = Command::new("docker")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("docker {} failed: {status}", args.join(" ")).into())
    }
}

//! RunCommand collected into one result, every event checked on the way:
//! one `started` first, output chunks, and an `exit` that ends the stream.

use std::time::Duration;

use sandboxd::pb;

use super::Client;

/// What one RunCommand call produced.
#[derive(Debug)]
pub struct Ran {
    /// The `started` event, if one came.
    pub started: Option<pb::CommandStarted>,
    /// Stdout as it streamed.
    pub live_stdout: String,
    /// Stderr as it streamed.
    pub live_stderr: String,
    /// The final event.
    pub exit: pb::CommandExit,
    /// From the call to the exit event.
    pub elapsed: Duration,
}

impl Ran {
    /// The captured stdout of the exit event.
    pub fn stdout(&self) -> &str {
        &self.exit.stdout.as_ref().unwrap().text
    }

    /// The captured stderr of the exit event.
    pub fn stderr(&self) -> &str {
        &self.exit.stderr.as_ref().unwrap().text
    }
}

/// Runs `command` and collects every event; panics on a refused call.
pub async fn run(client: &Client, session: &str, command: &str, timeout_ms: u64) -> Ran {
    try_run(client, run_req(session, command, timeout_ms))
        .await
        .unwrap()
}

/// A RunCommand request with the defaults for everything else.
pub fn run_req(session: &str, command: &str, timeout_ms: u64) -> pb::RunCommandRequest {
    pb::RunCommandRequest {
        session_id: session.into(),
        command: command.into(),
        timeout_ms,
        ..Default::default()
    }
}

/// Runs `req` and collects every event, or returns the refusal.
pub async fn try_run(client: &Client, req: pb::RunCommandRequest) -> Result<Ran, tonic::Status> {
    use pb::run_command_event::Event;
    let t0 = std::time::Instant::now();
    let mut events = client.clone().run_command(req).await?.into_inner();
    let (mut started, mut live_stdout, mut live_stderr) = (None, String::new(), String::new());
    while let Some(ev) = events.message().await? {
        match ev.event.expect("event") {
            Event::Started(s) => {
                assert!(started.is_none(), "two started events");
                started = Some(s);
            }
            Event::Stdout(c) => live_stdout.push_str(&c.data),
            Event::Stderr(c) => live_stderr.push_str(&c.data),
            Event::Exit(exit) => {
                assert!(events.message().await?.is_none(), "events after exit");
                return Ok(Ran {
                    started,
                    live_stdout,
                    live_stderr,
                    exit,
                    elapsed: t0.elapsed(),
                });
            }
            Event::Rejected(r) => panic!("the command was not approved: {}", r.message),
        }
    }
    panic!("stream ended without an exit event");
}

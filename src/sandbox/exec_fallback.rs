//! The exec fallback: one command as its own Docker exec, with the four
//! gates' runtime half and the kill ladder. Commands take this path when a
//! container has no supervisor (none configured, or it could not start
//! there); the supervised path is [`super::supervisor`].
//!
//! The command runs as `sh -c` under a small shell wrapper in its own exec.
//! Docker starts every exec as a session and process-group leader, so the
//! wrapper's pid is the command's process group. Docker has no API to kill
//! an exec: the service asks the engine for the exec's host pid, checks on
//! the host that the process belongs to the container, and signals the
//! group from the host. Nothing the command can write decides what is
//! signalled. Where the host cannot see the container's processes (a
//! remote engine, gVisor) the ladder goes straight to killing the
//! container. Output is capped while it arrives and drained past the cap.
//! On timeout or when the client goes away the ladder runs: SIGTERM to the
//! group, a grace period, SIGKILL to the group, and finally killing the
//! container as the hard stop. A command whose main process has exited
//! returns shortly after even if a background child still holds its output.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rustix::process::{Pid, Signal};
use tokio::sync::mpsc;
use tokio::time::sleep_until;

use super::capture::Capture;
use super::command::{CommandSpec, Event, ExitReport, KilledBy, TERM_GRACE};
use super::{Error, ExecSpec, ExecState, Output, OutputStream, Runtime};

/// Wait after SIGKILL before killing the container. SIGKILL acts at once;
/// the time is for the engine to notice the exec ended.
const KILL_GRACE: Duration = Duration::from_secs(3);
/// How often a running exec is checked for exit while its output is open.
const EXIT_POLL: Duration = Duration::from_millis(200);
/// Output still accepted after the main process exited.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(300);

/// The wrapper: run the command with stdin closed. A TERM aimed at the
/// group must not end the wrapper before the command, or the exec would
/// look finished while the command lives on: the no-op trap defers it until
/// the command returns.
const WRAPPER: &str = r#"trap : TERM; /bin/sh -c "$1" </dev/null"#;

/// Why the main loop stopped.
enum Stop {
    Finished,
    TimedOut,
    Cancelled,
}

/// A started command, ready to be driven to its end.
pub struct Running {
    rt: Arc<dyn Runtime>,
    container: String,
    exec_id: String,
    host_signals: bool,
    output: OutputStream,
    spec: CommandSpec,
    started: Instant,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("container", &self.container)
            .field("exec_id", &self.exec_id)
            .finish_non_exhaustive()
    }
}

/// Starts `spec` in `container` as `user`. With `host_signals`, the kill
/// ladder signals the command's process group from the host (the engine
/// runs the container's processes as host processes); without, it kills
/// the container. Errors here mean the command never ran.
pub async fn start(
    rt: Arc<dyn Runtime>,
    container: &str,
    user: &str,
    host_signals: bool,
    spec: CommandSpec,
) -> Result<Running, Error> {
    let started = Instant::now();
    let exec = ExecSpec {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            WRAPPER.into(),
            "sandboxd".into(),
            spec.command.clone(),
        ],
        env: spec.env.clone(),
        cwd: spec.cwd.clone(),
        user: user.to_string(),
    };
    let (exec_id, output) = rt.start_exec(container, &exec).await?;
    Ok(Running {
        rt,
        container: container.to_string(),
        exec_id,
        host_signals,
        output,
        spec,
        started,
    })
}

impl Running {
    /// The container the command runs in.
    pub fn container(&self) -> &str {
        &self.container
    }

    /// The engine it runs on.
    pub fn runtime(&self) -> Arc<dyn Runtime> {
        Arc::clone(&self.rt)
    }

    /// Drives the command to its end, sending `Started` and live chunks to
    /// `events` while the receiver listens. Always ends with a report, and
    /// whether the receiver went away (which counts as cancellation).
    pub async fn drive(mut self, events: &mpsc::Sender<Event>) -> (ExitReport, bool) {
        let target = Target {
            rt: self.rt.as_ref(),
            container: &self.container,
            exec_id: &self.exec_id,
            host_signals: self.host_signals,
        };
        drive(&target, &mut self.output, &self.spec, self.started, events).await
    }
}

/// What the kill ladder acts on.
struct Target<'a> {
    rt: &'a dyn Runtime,
    container: &'a str,
    exec_id: &'a str,
    host_signals: bool,
}

async fn drive(
    target: &Target<'_>,
    output: &mut OutputStream,
    spec: &CommandSpec,
    started: Instant,
    events: &mpsc::Sender<Event>,
) -> (ExitReport, bool) {
    let Target {
        rt,
        container,
        exec_id,
        ..
    } = *target;
    let deadline = tokio::time::Instant::from_std(started) + spec.timeout;
    let mut stdout = Capture::new(spec.stdout_cap);
    let mut stderr = Capture::new(spec.stderr_cap);
    let mut client_gone = events
        .send(Event::Started {
            container_id: container.to_string(),
            cwd: spec.cwd.clone(),
            timeout: spec.timeout,
        })
        .await
        .is_err();

    let mut poll = tokio::time::interval(EXIT_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut drain_until: Option<tokio::time::Instant> = None;
    let far = deadline + Duration::from_secs(3600);
    let stop = if client_gone {
        Stop::Cancelled
    } else {
        loop {
            tokio::select! {
                item = output.next() => match item {
                    Some(Ok(chunk)) => {
                        if let Some(ev) = capture(&mut stdout, &mut stderr, chunk) {
                            // A slow client must not stall the timeout.
                            tokio::select! {
                                sent = events.send(ev) => if sent.is_err() { client_gone = true; break Stop::Cancelled },
                                _ = sleep_until(deadline) => break Stop::TimedOut,
                            }
                        }
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "command output stream failed");
                        break Stop::Finished;
                    }
                    None => break Stop::Finished,
                },
                _ = sleep_until(deadline), if drain_until.is_none() => break Stop::TimedOut,
                _ = events.closed() => { client_gone = true; break Stop::Cancelled },
                _ = poll.tick(), if drain_until.is_none() => {
                    if let Ok(ExecState::Exited(_)) = rt.exec_state(exec_id).await {
                        // The command is done; a background child may still
                        // hold the pipes. Take what is in flight, then stop.
                        drain_until = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
                    }
                }
                _ = sleep_until(drain_until.unwrap_or(far)), if drain_until.is_some() => break Stop::Finished,
            }
        }
    };

    let mut killed_by = KilledBy::None;
    if !matches!(stop, Stop::Finished) {
        // Keep draining (never let the writer block) while the ladder runs.
        let ladder = ladder(target);
        tokio::pin!(ladder);
        let mut ladder_done = false;
        let mut output_done = false;
        let mut settle: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                rung = &mut ladder, if !ladder_done => {
                    killed_by = rung;
                    ladder_done = true;
                    if output_done { break; }
                    settle = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
                }
                item = output.next(), if !output_done => match item {
                    Some(Ok(chunk)) => {
                        if let Some(ev) = capture(&mut stdout, &mut stderr, chunk) && !client_gone {
                            client_gone = events.try_send(ev).is_err() && events.is_closed();
                        }
                    }
                    Some(Err(_)) | None => {
                        output_done = true;
                        if ladder_done { break; }
                    }
                },
                _ = sleep_until(settle.unwrap_or(far)), if settle.is_some() => break,
            }
        }
    }

    let exit_code = final_exit_code(rt, exec_id).await;
    let report = ExitReport {
        exit_code,
        timed_out: matches!(stop, Stop::TimedOut),
        cancelled: matches!(stop, Stop::Cancelled),
        killed_by,
        oom_killed: false,
        pids_exhausted: false,
        notes: Vec::new(),
        duration: started.elapsed(),
        stdout: stdout.finish(),
        stderr: stderr.finish(),
    };
    (report, client_gone)
}

/// Feeds a chunk to its capture; returns the live event to forward, if any.
fn capture(stdout: &mut Capture, stderr: &mut Capture, chunk: Output) -> Option<Event> {
    match chunk {
        Output::Stdout(b) => stdout.push(&b).map(Event::Stdout),
        Output::Stderr(b) => stderr.push(&b).map(Event::Stderr),
    }
}

/// The exit code once the exec has ended (briefly waiting for Docker to
/// record it); -1 when unknown, e.g. after the container was killed.
async fn final_exit_code(rt: &dyn Runtime, exec_id: &str) -> i64 {
    for _ in 0..50 {
        match rt.exec_state(exec_id).await {
            Ok(ExecState::Exited(code)) => return code.unwrap_or(-1),
            Ok(ExecState::Running) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(_) => return -1,
        }
    }
    -1
}

/// SIGTERM to the group, grace, SIGKILL to the group, grace, then the
/// container. Returns the rung that ended the command.
async fn ladder(target: &Target<'_>) -> KilledBy {
    let Target {
        rt,
        container,
        exec_id,
        host_signals,
    } = *target;
    if host_signals && let Some(group) = command_group(rt, container, exec_id).await {
        let _ = rustix::process::kill_process_group(group, Signal::TERM);
        if gone(rt, exec_id, group, TERM_GRACE).await {
            return KilledBy::ProcessGroupTerm;
        }
        let _ = rustix::process::kill_process_group(group, Signal::KILL);
        if gone(rt, exec_id, group, KILL_GRACE).await {
            return KilledBy::ProcessGroupKill;
        }
    }
    crate::sandbox::hard_stop(rt, container).await
}

/// The command's process group as a host pid: the exec's main process,
/// which the engine made a group leader, confirmed on the host to be a
/// process of `container` (its cgroup names the container). `None` when
/// the host cannot see it.
async fn command_group(rt: &dyn Runtime, container: &str, exec_id: &str) -> Option<Pid> {
    let pid = rt.exec_pid(exec_id).await?;
    let pid = i32::try_from(pid).ok().and_then(Pid::from_raw)?;
    let cgroup = std::fs::read_to_string(format!("/proc/{}/cgroup", pid.as_raw_nonzero())).ok()?;
    if container.is_empty() || !cgroup.contains(container) {
        tracing::debug!(container, "the exec's process is not visible on this host");
        return None;
    }
    Some(pid)
}

/// Waits up to `grace` for the exec to end and its group to be empty.
async fn gone(rt: &dyn Runtime, exec_id: &str, group: Pid, grace: Duration) -> bool {
    let until = Instant::now() + grace;
    loop {
        let exited = matches!(rt.exec_state(exec_id).await, Ok(ExecState::Exited(_)));
        // Background members that ignored the signal still count; signal 0
        // probes the group and ESRCH means nobody is left.
        if exited && rustix::process::test_kill_process_group(group).is_err() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

//! One supervised command, driven from the host: its frames become the
//! caller's events, a caller that leaves cancels it, and a supervisor that
//! dies, stays silent past the ladder's time, or says something no
//! supervisor says gets the container killed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::Link;
use crate::sandbox::command::{CommandSpec, Event, ExitReport, KilledBy, TERM_GRACE};
use crate::sandbox::supervisor::frames::{self, event};
use crate::sandbox::{Captured, Runtime};

/// Slack past timeout + ladder before the service stops waiting for the
/// supervisor and kills the container itself.
const SILENCE_SLACK: Duration = Duration::from_secs(5);

/// Said when a command's supervisor link died under it (or broke the
/// protocol, which leaves its result as unknown).
const LOST: &str = "the link to the sandbox's supervisor was lost during this command, so its result is unknown; the container was killed and the next command gets a fresh one (the workspace is intact)";
/// Said when the supervisor never reported a command's end.
const SILENT: &str = "the sandbox's supervisor did not report this command's end in time, so the container was killed; the next command gets a fresh one (the workspace is intact)";

/// A command started through a supervisor, ready to be driven.
#[derive(Debug)]
pub struct Supervised {
    pub(in crate::sandbox) rt: Arc<dyn Runtime>,
    pub(in crate::sandbox) link: Arc<Link>,
    pub(in crate::sandbox) container: String,
    pub(in crate::sandbox) id: u64,
    pub(in crate::sandbox) frames: mpsc::Receiver<frames::Event>,
    pub(in crate::sandbox) spec: CommandSpec,
    pub(in crate::sandbox) started: Instant,
}

impl Supervised {
    /// Relays the supervisor's frames as events until the exit. A client
    /// that goes away cancels the command; a supervisor that dies or stays
    /// silent past the ladder's time gets the container killed.
    pub async fn drive(mut self, events: &mpsc::Sender<Event>) -> (ExitReport, bool) {
        let mut client_gone = events
            .send(Event::Started {
                container_id: self.container.clone(),
                cwd: self.spec.cwd.clone(),
                timeout: self.spec.timeout,
            })
            .await
            .is_err();
        if client_gone {
            self.link.cancel(self.id).await;
        }
        let silence = tokio::time::Instant::from_std(self.started)
            + self.spec.timeout
            + TERM_GRACE
            + SILENCE_SLACK;
        let mut cancelled = client_gone;
        let exit = loop {
            tokio::select! {
                frame = self.frames.recv() => match frame.and_then(|f| f.kind) {
                    Some(event::Kind::Exit(exit)) => match exit.killed_by() {
                        Ok(killed_by) if crate::profile::on() => {
                            let t = exit.times.as_deref().copied().unwrap_or_default();
                            crate::profile::mark_at("supervisor: spawn frame decoded", t.received);
                            crate::profile::mark_at("supervisor: command's task ran", t.started);
                            crate::profile::mark_at("supervisor: argv, environment and pipes made", t.cloning);
                            crate::profile::mark_at("supervisor: shell cloned and exec'd", t.cloned);
                            crate::profile::mark_at("supervisor: shell's end and pipes watched", t.spawned);
                            crate::profile::mark_at("supervisor: shell reaped", t.exited);
                            crate::profile::mark_at("supervisor: exit frame made", t.done);
                            crate::profile::mark("host: exit frame reached the command");
                            break Ok((exit, killed_by));
                        }
                        Ok(killed_by) => break Ok((exit, killed_by)),
                        // Not a result this protocol can carry: the link
                        // can no longer be trusted for this command.
                        Err(e) => {
                            tracing::warn!(error = %e, "the supervisor broke the protocol");
                            break Err(LOST);
                        }
                    },
                    Some(event::Kind::Stdout(text)) => {
                        if !client_gone && events.send(Event::Stdout(text)).await.is_err() {
                            client_gone = true;
                            cancelled = true;
                            self.link.cancel(self.id).await;
                        }
                    }
                    Some(event::Kind::Stderr(text)) => {
                        if !client_gone && events.send(Event::Stderr(text)).await.is_err() {
                            client_gone = true;
                            cancelled = true;
                            self.link.cancel(self.id).await;
                        }
                    }
                    // Not a command's: dropped.
                    Some(
                        event::Kind::Ready(_)
                        | event::Kind::Started(_)
                        | event::Kind::Out(_)
                        | event::Kind::Err(_)
                        | event::Kind::Listening(_)
                        | event::Kind::Usage(_)
                        | event::Kind::InputDone(_)
                        | event::Kind::Lent(_),
                    ) => {}
                    // The supervisor died (or the container with it).
                    None => break Err(LOST),
                },
                _ = events.closed(), if !client_gone => {
                    client_gone = true;
                    cancelled = true;
                    self.link.cancel(self.id).await;
                }
                _ = tokio::time::sleep_until(silence) => break Err(SILENT),
            }
        };
        self.link.forget(self.id);
        let report = match exit {
            Ok((exit, killed_by)) => {
                // The group survived SIGKILL: only the container stops it.
                let killed_by = if killed_by == KilledBy::Container {
                    self.kill_container().await
                } else {
                    killed_by
                };
                let mut stderr: Captured = exit.stderr.unwrap_or_default().into();
                if !exit.spawn_error.is_empty() {
                    stderr.text.push_str(&exit.spawn_error);
                }
                ExitReport {
                    exit_code: exit.exit_code,
                    timed_out: exit.timed_out,
                    cancelled,
                    killed_by,
                    oom_killed: false,
                    pids_exhausted: false,
                    notes: Vec::new(),
                    duration: self.started.elapsed(),
                    stdout: exit.stdout.unwrap_or_default().into(),
                    stderr,
                }
            }
            Err(note) => {
                let killed_by = self.kill_container().await;
                ExitReport {
                    exit_code: -1,
                    timed_out: self.started.elapsed() >= self.spec.timeout,
                    cancelled,
                    killed_by,
                    oom_killed: false,
                    pids_exhausted: false,
                    notes: vec![note.to_string()],
                    duration: self.started.elapsed(),
                    stdout: Default::default(),
                    stderr: Default::default(),
                }
            }
        };
        (report, client_gone)
    }

    /// The hard stop: [`KilledBy::Container`], or
    /// [`KilledBy::ContainerFailed`] when the engine failed to kill it.
    async fn kill_container(&self) -> KilledBy {
        crate::sandbox::hard_stop(self.rt.as_ref(), &self.container).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use super::*;
    use crate::sandbox::supervisor::host::blind::Blind;

    /// Drives one command whose supervisor reports `rung` in its exit;
    /// returns the report and how many containers were killed.
    async fn drive_with_rung(rung: u32) -> (ExitReport, usize) {
        let engine = Arc::new(Blind::default());
        let link = Arc::new(Link {
            input: tokio::sync::Mutex::new(Box::pin(tokio::io::sink())),
            routes: Arc::default(),
            next_id: AtomicU64::new(2),
            alive: Arc::new(AtomicBool::new(true)),
            watched: None,
        });
        let (tx, frames) = mpsc::channel(4);
        let exit = frames::Exit {
            exit_code: 143,
            rung,
            ..Default::default()
        };
        tx.send(frames::Event {
            id: 1,
            kind: Some(event::Kind::Exit(exit)),
        })
        .await
        .unwrap();
        let command = Supervised {
            rt: Arc::clone(&engine) as Arc<dyn Runtime>,
            link,
            container: "c".into(),
            id: 1,
            frames,
            spec: CommandSpec {
                command: "sleep 60".into(),
                cwd: "/workspace".into(),
                env: Default::default(),
                timeout: Duration::from_secs(30),
                stdout_cap: 100,
                stderr_cap: 100,
                hints: Default::default(),
            },
            started: Instant::now(),
        };
        let (events, _listening) = mpsc::channel(16);
        let (report, client_gone) = command.drive(&events).await;
        assert!(!client_gone);
        (report, engine.kills.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn the_supervisors_rung_is_taken_as_sent() {
        let (report, kills) = drive_with_rung(1).await;
        assert_eq!(report.killed_by, KilledBy::ProcessGroupTerm);
        assert_eq!(report.exit_code, 143);
        assert_eq!(kills, 0);
        // The group survived SIGKILL: the service kills the container.
        let (report, kills) = drive_with_rung(3).await;
        assert_eq!(report.killed_by, KilledBy::Container);
        assert_eq!(report.exit_code, 143);
        assert_eq!(kills, 1);
    }

    #[tokio::test]
    async fn an_unknown_rung_is_refused_and_the_container_killed() {
        let (report, kills) = drive_with_rung(9).await;
        assert_eq!(report.killed_by, KilledBy::Container);
        assert_eq!(
            report.exit_code, -1,
            "no result of a broken protocol is kept"
        );
        assert_eq!(report.notes, vec![LOST.to_string()]);
        assert_eq!(kills, 1);
    }
}

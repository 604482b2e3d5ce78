//! Long-running processes over the link: starting one, its input, its
//! terminal's size, signals and the ladder. A process's frames have no
//! budget (its output is not capped at the source), but they are only
//! ever queued into a bounded channel the service drains into a bounded
//! buffer, so a flood costs time, never memory.

use std::sync::atomic::Ordering;

use tokio::sync::mpsc;

use super::{Link, Route};
use crate::sandbox::Error;
use crate::sandbox::process::ProcessSpec;
use crate::sandbox::supervisor::frames::{self, request};

/// Frames queued for one process before the link's reader waits.
const QUEUE: usize = 64;

impl Link {
    /// Starts a process; returns its id and its frames.
    pub async fn start_process(
        &self,
        spec: &ProcessSpec,
    ) -> Result<(u64, mpsc::Receiver<frames::Event>), Error> {
        if !self.is_alive() {
            return Err(Error::StartExec("the supervisor is gone".into()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(QUEUE);
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                id,
                Route {
                    tx,
                    budget: u64::MAX,
                },
            );
        let start = frames::StartProcess {
            id,
            command: spec.command.clone(),
            cwd: spec.cwd.clone(),
            env: spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            stdin: spec.stdin,
            pty: spec.pty.map(|(rows, cols)| frames::Resize {
                id: 0,
                rows: rows.into(),
                cols: cols.into(),
            }),
            ready_port: spec.ready_port.into(),
        };
        if let Err(e) = self
            .send(frames::Request {
                kind: Some(request::Kind::Start(start)),
            })
            .await
        {
            self.forget(id);
            return Err(e);
        }
        Ok((id, rx))
    }

    /// Hands bytes to a process's input (the answer comes as a frame).
    pub async fn input(&self, id: u64, data: Vec<u8>, close: bool) -> Result<(), Error> {
        self.send(frames::Request {
            kind: Some(request::Kind::Input(frames::Input { id, data, close })),
        })
        .await
    }

    /// Resizes a process's terminal.
    pub async fn resize(&self, id: u64, rows: u16, cols: u16) -> Result<(), Error> {
        self.send(frames::Request {
            kind: Some(request::Kind::Resize(frames::Resize {
                id,
                rows: rows.into(),
                cols: cols.into(),
            })),
        })
        .await
    }

    /// Sends signal `signal` (2, 9 or 15) to a process's group.
    pub async fn signal(&self, id: u64, signal: i32) -> Result<(), Error> {
        self.send(frames::Request {
            kind: Some(request::Kind::Signal(frames::SignalGroup { id, signal })),
        })
        .await
    }

    /// Runs the kill ladder on a process (its end comes as a frame).
    pub async fn stop(&self, id: u64) -> Result<(), Error> {
        self.send(frames::Request {
            kind: Some(request::Kind::Cancel(id)),
        })
        .await
    }
}

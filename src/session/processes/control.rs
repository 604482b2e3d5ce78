//! Driving a running process: reading its kept output (once, or following
//! it to its end), writing its input, resizing its terminal, signalling
//! its group and stopping it with the ladder. Each call is journaled;
//! input by its size, never its bytes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::output::{self, OutputStream};
use super::parse_id;
use crate::sandbox::process::STOP_DEADLINE;
use crate::sandbox::{KilledBy, ProcessSignal};
use crate::session::error::Error;
use crate::session::failure;
use crate::session::messages::OutputPiece;
use crate::session::process_table::{InputAck, Live, ProcessInfo};
use crate::session::tools::Session;

/// Most bytes one WriteProcessInput carries.
pub const MAX_INPUT: usize = 1 << 20;
/// Characters of a piece of input its journal entry keeps.
const INPUT_SHOWN: usize = 200;
/// How long a process has to take a piece of input.
const INPUT_WAIT: Duration = Duration::from_secs(10);
/// How long after the hard stop a process's end is waited for.
const AFTER_HARD_STOP: Duration = Duration::from_secs(5);

/// A process as a call finds it.
enum Found {
    /// Started by this run of the service.
    Live(Arc<Live>),
    /// Known from the journal only: it ended (or a restart interrupted it).
    Gone(ProcessInfo),
}

/// How a process ended, in words.
fn how(info: &ProcessInfo) -> String {
    match info.state {
        crate::session::process_table::ProcessState::Interrupted => {
            "interrupted by a restart of the service".into()
        }
        crate::session::process_table::ProcessState::Failed => "it could not start".into(),
        _ => format!("exit code {}", info.exit_code),
    }
}

impl Session {
    fn find_process(&self, id: &str) -> Result<Found, failure::Error> {
        let n = parse_id(id)?;
        if let Some(live) = self.processes.get(n) {
            return Ok(Found::Live(live));
        }
        self.journal
            .processes()
            .iter()
            .find(|r| r.id == n)
            .map(|r| Found::Gone(ProcessInfo::from_record(r)))
            .ok_or_else(|| Error::ProcessNotFound { id: id.to_string() }.into())
    }

    /// A process that still runs, or why not.
    fn running_process(&self, id: &str) -> Result<Arc<Live>, failure::Error> {
        match self.find_process(id)? {
            Found::Live(live) if !live.has_ended() => Ok(live),
            Found::Live(live) => Err(Error::ProcessEnded {
                id: id.to_string(),
                how: how(&live.info()),
            }
            .into()),
            Found::Gone(info) => Err(Error::ProcessEnded {
                id: id.to_string(),
                how: how(&info),
            }
            .into()),
        }
    }

    /// ReadProcessOutput: the kept output from `from` (stdout, stderr
    /// offsets) on, then, with `follow`, new output as it comes until the
    /// process ends; the last piece says where to read on from. Readers
    /// are bounded and pulled (see `readers`).
    pub fn read_process_output(
        self: &Arc<Self>,
        id: &str,
        from: [u64; 2],
        follow: bool,
    ) -> Result<OutputStream, failure::Error> {
        let started = Instant::now();
        let summary = format!(
            "{id} from {}/{}{}",
            from[0],
            from[1],
            if follow { ", following" } else { "" }
        );
        let opened = self.find_process(id).and_then(|found| match found {
            Found::Gone(info) => {
                let end = OutputPiece::End {
                    stdout_offset: from[0],
                    stderr_offset: from[1],
                    info,
                };
                OutputStream::open(self, futures_util::stream::iter([end]))
            }
            Found::Live(live) => OutputStream::open(self, output::pieces(live, from, follow)),
        });
        match &opened {
            Ok(_) => self
                .journal
                .ok("ReadProcessOutput", &summary, started, String::new()),
            Err(e) => self.refused("ReadProcessOutput", &summary, started, e),
        }
        opened
    }

    /// WriteProcessInput: hands `data` to the process's input (closing it
    /// after with `close`) and answers once the process took it.
    pub async fn write_process_input(
        &self,
        id: &str,
        data: Vec<u8>,
        close: bool,
    ) -> Result<InputAck, failure::Error> {
        let started = Instant::now();
        // What was typed, not only its size: an approved interactive
        // process runs it without asking (bounded, shown on one line).
        let summary = format!(
            "{id}: {} bytes {}{}",
            data.len(),
            crate::text::code_span(&crate::text::capped(
                &String::from_utf8_lossy(&data),
                INPUT_SHOWN
            )),
            if close { ", then close" } else { "" }
        );
        let result = self.write_input(id, data, close).await;
        self.journaled("WriteProcessInput", &summary, started, result, |a| {
            format!(
                "{} bytes taken{}",
                a.written,
                if a.closed { ", input closed" } else { "" }
            )
        })
    }

    async fn write_input(
        &self,
        id: &str,
        data: Vec<u8>,
        close: bool,
    ) -> Result<InputAck, failure::Error> {
        if data.len() > MAX_INPUT {
            return Err(Error::InvalidArgument {
                field: "data",
                why: format!(
                    "{} bytes is over the {MAX_INPUT} a call may carry",
                    data.len()
                ),
            }
            .into());
        }
        self.policy()
            .check_mutation("WriteProcessInput")
            .map_err(Error::Denied)?;
        let live = self.running_process(id)?;
        let _turn = live.input.lock().await;
        {
            let st = live.state();
            if !st.stdin_open {
                return Err(Error::ProcessInputClosed {
                    id: id.to_string(),
                    never_opened: st.end.is_none() && !live.pty && !live.stdin_asked,
                }
                .into());
            }
            if st.input_stuck {
                return Err(Error::ProcessNotReading {
                    id: id.to_string(),
                    written: 0,
                    why: "it has not yet taken the input written before".into(),
                }
                .into());
            }
        }
        let (tx, rx) = oneshot::channel();
        *live.input_ack.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        live.handle.write(data, close).await?;
        match tokio::time::timeout(INPUT_WAIT, rx).await {
            Ok(Ok(ack)) if ack.error.is_empty() => Ok(ack),
            Ok(Ok(ack)) => Err(Error::ProcessNotReading {
                id: id.to_string(),
                written: ack.written,
                why: ack.error,
            }
            .into()),
            Ok(Err(_)) => Err(Error::ProcessEnded {
                id: id.to_string(),
                how: how(&live.info()),
            }
            .into()),
            Err(_) => {
                // Its answer comes later, or never: until it comes, the
                // input takes nothing more.
                live.input_ack
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                live.state().input_stuck = true;
                Err(Error::ProcessNotReading {
                    id: id.to_string(),
                    written: 0,
                    why: format!(
                        "it did not read it within {} s (its input is full)",
                        INPUT_WAIT.as_secs()
                    ),
                }
                .into())
            }
        }
    }

    /// ResizeProcess.
    pub async fn resize_process(
        &self,
        id: &str,
        rows: u32,
        cols: u32,
    ) -> Result<(), failure::Error> {
        let started = Instant::now();
        let summary = format!("{id}: {rows}x{cols}");
        let result = async {
            let rows = super::side("rows", rows, super::DEFAULT_PTY.0)?;
            let cols = super::side("cols", cols, super::DEFAULT_PTY.1)?;
            let live = self.running_process(id)?;
            if !live.pty {
                return Err(Error::NoTerminal { id: id.to_string() }.into());
            }
            live.handle.resize(rows, cols).await.map_err(Into::into)
        }
        .await;
        self.journaled("ResizeProcess", &summary, started, result, |()| {
            String::new()
        })
    }

    /// SignalProcess: `signal` to the process's group.
    pub async fn signal_process(
        &self,
        id: &str,
        signal: ProcessSignal,
    ) -> Result<ProcessInfo, failure::Error> {
        let started = Instant::now();
        let summary = format!("{id}: SIG{}", signal.name());
        let result = async {
            self.policy()
                .check_mutation("SignalProcess")
                .map_err(Error::Denied)?;
            let live = self.running_process(id)?;
            live.handle.signal(signal).await?;
            // A signal that ends it usually does so at once: answer with
            // the end when it comes quickly.
            live.wait_for(Duration::from_millis(200), |s| s.end.is_some())
                .await;
            Ok(live.info())
        }
        .await;
        self.journaled("SignalProcess", &summary, started, result, |p| {
            format!("{:?}", p.state).to_lowercase()
        })
    }

    /// StopProcess: the kill ladder, then the container as the hard stop;
    /// answers with how it ended. One that already ended answers at once.
    pub async fn stop_process(&self, id: &str) -> Result<ProcessInfo, failure::Error> {
        let started = Instant::now();
        let result = async {
            self.policy()
                .check_mutation("StopProcess")
                .map_err(Error::Denied)?;
            let live = match self.find_process(id)? {
                Found::Gone(info) => return Ok(info),
                Found::Live(live) => live,
            };
            if live.has_ended() {
                return Ok(live.info());
            }
            // A link already gone ends the process by itself.
            let _ = live.handle.stop().await;
            if !live.wait_for(STOP_DEADLINE, |s| s.end.is_some()).await {
                let killed = live.handle.kill_container().await;
                tracing::warn!(session = %self.id, process = id, ?killed, "a process outlived its ladder; its container was killed");
                live.wait_for(AFTER_HARD_STOP, |s| s.end.is_some()).await;
                if killed == KilledBy::ContainerFailed {
                    return Err(crate::sandbox::Error::KillContainer(
                        "the engine did not kill the process's container".into(),
                    )
                    .into());
                }
            }
            Ok(live.info())
        }
        .await;
        self.journaled("StopProcess", id, started, result, |p| {
            format!("exit {}", p.exit_code)
        })
    }
}

//! The private protocol between the service and the in-container
//! supervisor: length-delimited protobuf frames (prost) over the
//! supervisor's stdin (requests) and stdout (events). Both ends are this
//! binary, so the messages live here rather than in the public contract.

use bytes::{Buf, BytesMut};
use prost::Message;

use crate::sandbox::KilledBy;

/// A request to the supervisor.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    /// The request.
    #[prost(oneof = "request::Kind", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub kind: Option<request::Kind>,
}

/// Request kinds.
pub mod request {
    /// What the service asks.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        /// Start a command.
        #[prost(message, tag = "1")]
        Spawn(super::Spawn),
        /// Stop a command (the client went away) or a process: run the
        /// ladder.
        #[prost(uint64, tag = "2")]
        Cancel(u64),
        /// Start a long-running process.
        #[prost(message, tag = "3")]
        Start(super::StartProcess),
        /// Write to a process's input.
        #[prost(message, tag = "4")]
        Input(super::Input),
        /// Resize a process's terminal.
        #[prost(message, tag = "5")]
        Resize(super::Resize),
        /// Send a signal to a process's group.
        #[prost(message, tag = "6")]
        Signal(super::SignalGroup),
        /// The container's workspace was lent a directory: check it, and
        /// run every command from now on as the directory's user.
        #[prost(message, tag = "7")]
        Lend(super::Lend),
    }
}

/// A directory lent to a warm container (see `volume::slot`): answered by
/// [`event::Kind::Lent`] under the same id.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Lend {
    /// Chosen by the service, unique per supervisor.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Device and inode `/workspace` must have now, "dev:ino".
    #[prost(string, tag = "2")]
    pub identity: String,
    /// "uid:gid" every command and process runs as from now on.
    #[prost(string, tag = "3")]
    pub user: String,
}

/// Start a long-running process: like [`Spawn`], with no timeout and no
/// cap (its output streams whole; the service keeps what it keeps).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StartProcess {
    /// Chosen by the service, unique per supervisor.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Run with /bin/sh -c.
    #[prost(string, tag = "2")]
    pub command: String,
    /// Absolute working directory.
    #[prost(string, tag = "3")]
    pub cwd: String,
    /// Extra environment, `KEY=VALUE`.
    #[prost(string, repeated, tag = "4")]
    pub env: Vec<String>,
    /// Open a pipe to its stdin.
    #[prost(bool, tag = "5")]
    pub stdin: bool,
    /// Run it on a terminal of this size.
    #[prost(message, optional, tag = "6")]
    pub pty: Option<Resize>,
    /// Say [`event::Kind::Listening`] once this TCP port listens (0: no).
    #[prost(uint32, tag = "7")]
    pub ready_port: u32,
}

/// Bytes for a process's input.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Input {
    /// The process.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The bytes.
    #[prost(bytes = "vec", tag = "2")]
    pub data: Vec<u8>,
    /// Close the input after them.
    #[prost(bool, tag = "3")]
    pub close: bool,
}

/// A terminal's size (for [`StartProcess::pty`] and resizing).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Resize {
    /// The process (0 inside a start).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Rows.
    #[prost(uint32, tag = "2")]
    pub rows: u32,
    /// Columns.
    #[prost(uint32, tag = "3")]
    pub cols: u32,
}

/// A signal for a process's group.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SignalGroup {
    /// The process.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// INT, TERM or KILL, by number (2, 15, 9); no other is sent.
    #[prost(int32, tag = "2")]
    pub signal: i32,
}

/// What became of a process's input.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InputDone {
    /// Bytes the process took.
    #[prost(uint64, tag = "1")]
    pub written: u64,
    /// The input is closed now.
    #[prost(bool, tag = "2")]
    pub closed: bool,
    /// Why not all were taken.
    #[prost(string, tag = "3")]
    pub error: String,
}

/// Start a command.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Spawn {
    /// Chosen by the service, unique per supervisor.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Run with /bin/sh -c.
    #[prost(string, tag = "2")]
    pub command: String,
    /// Absolute working directory.
    #[prost(string, tag = "3")]
    pub cwd: String,
    /// Extra environment, `KEY=VALUE`.
    #[prost(string, repeated, tag = "4")]
    pub env: Vec<String>,
    /// Wall-clock limit.
    #[prost(uint64, tag = "5")]
    pub timeout_ms: u64,
    /// Characters kept of stdout.
    #[prost(uint64, tag = "6")]
    pub stdout_cap: u64,
    /// Characters kept of stderr.
    #[prost(uint64, tag = "7")]
    pub stderr_cap: u64,
}

/// An event from the supervisor.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    /// The command it is about (0 for `Ready`).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The event.
    #[prost(oneof = "event::Kind", tags = "7, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14")]
    pub kind: Option<event::Kind>,
}

/// Event kinds.
pub mod event {
    /// What happened.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        /// The supervisor is up and reading requests; it carries the
        /// per-link secret the service handed it out of band, proving the
        /// frames come from the supervisor the service started. Always the
        /// first frame.
        #[prost(string, tag = "7")]
        Ready(String),
        /// Live stdout text, within the cap.
        #[prost(string, tag = "4")]
        Stdout(String),
        /// Live stderr text, within the cap.
        #[prost(string, tag = "5")]
        Stderr(String),
        /// The end.
        #[prost(message, tag = "6")]
        Exit(super::Exit),
        /// A process started, with this pid in the container.
        #[prost(uint32, tag = "8")]
        Started(u32),
        /// A process's stdout (or terminal) bytes, all of them.
        #[prost(bytes = "vec", tag = "9")]
        Out(Vec<u8>),
        /// A process's stderr bytes, all of them.
        #[prost(bytes = "vec", tag = "10")]
        Err(Vec<u8>),
        /// The port a process was to open listens.
        #[prost(uint32, tag = "11")]
        Listening(u32),
        /// CPU time of a process's group so far, in milliseconds.
        #[prost(uint64, tag = "12")]
        Usage(u64),
        /// What became of the last [`super::Input`].
        #[prost(message, tag = "13")]
        InputDone(super::InputDone),
        /// The answer to a [`super::Lend`]: empty when the workspace is the
        /// directory lent and the user taken, else why not.
        #[prost(string, tag = "14")]
        Lent(String),
    }
}

/// How a command ended.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Exit {
    /// Exit code, 128+n for signal n, -1 unknown.
    #[prost(int64, tag = "1")]
    pub exit_code: i64,
    /// The timeout fired.
    #[prost(bool, tag = "2")]
    pub timed_out: bool,
    /// The rung of the kill ladder that stopped the command, numbered as
    /// in `From<KilledBy> for u32`; read it with [`Exit::killed_by`].
    #[prost(uint32, tag = "3")]
    pub rung: u32,
    /// Kept stdout.
    #[prost(message, optional, tag = "4")]
    pub stdout: Option<Stream>,
    /// Kept stderr.
    #[prost(message, optional, tag = "5")]
    pub stderr: Option<Stream>,
    /// The command could not be started; why.
    #[prost(string, tag = "6")]
    pub spawn_error: String,
    /// The signal that ended it, 0 if none did.
    #[prost(int32, tag = "7")]
    pub signal: i32,
    /// When the supervisor reached each step of the command, on the
    /// monotonic clock it shares with the host: profile data for
    /// `sandboxd bench`, never acted on.
    #[prost(message, optional, boxed, tag = "8")]
    pub times: Option<Box<Times>>,
}

/// Monotonic nanoseconds at each step of one command in the supervisor.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Times {
    /// Its spawn frame was decoded.
    #[prost(uint64, tag = "1")]
    pub received: u64,
    /// Its shell was forked and exec'd, and its end and pipes watched.
    #[prost(uint64, tag = "2")]
    pub spawned: u64,
    /// Its shell's exit was reaped.
    #[prost(uint64, tag = "3")]
    pub exited: u64,
    /// Its output was closed and its exit frame made.
    #[prost(uint64, tag = "4")]
    pub done: u64,
    /// The task that runs it first ran.
    #[prost(uint64, tag = "5")]
    pub started: u64,
    /// Its argument, environment and pipes were ready, just before the
    /// clone.
    #[prost(uint64, tag = "6")]
    pub cloning: u64,
    /// The clone returned: the shell had exec'd.
    #[prost(uint64, tag = "7")]
    pub cloned: u64,
}

impl Exit {
    /// The rung that stopped the command. A number no rung has is refused,
    /// never taken for some default: a supervisor that sends one is not
    /// speaking this protocol.
    pub fn killed_by(&self) -> Result<KilledBy, UnknownRung> {
        KilledBy::try_from(self.rung)
    }
}

/// A rung number the protocol does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the kill ladder has no rung {0}")]
pub struct UnknownRung(pub u32);

/// The kill ladder's rungs on the wire: 0 the command ended by itself, 1
/// SIGTERM to its group ended it, 2 SIGKILL to its group did, 3 the group
/// survived SIGKILL and the service must kill the container. The numbers
/// are written out rather than taken from the enum's order, so reordering
/// [`KilledBy`] cannot change what a number means.
impl From<KilledBy> for u32 {
    fn from(rung: KilledBy) -> u32 {
        match rung {
            KilledBy::None => 0,
            KilledBy::ProcessGroupTerm => 1,
            KilledBy::ProcessGroupKill => 2,
            // Only the host knows the engine failed it; the wire has the
            // rung as it was asked for.
            KilledBy::Container | KilledBy::ContainerFailed => 3,
        }
    }
}

impl TryFrom<u32> for KilledBy {
    type Error = UnknownRung;

    fn try_from(rung: u32) -> Result<KilledBy, UnknownRung> {
        match rung {
            0 => Ok(KilledBy::None),
            1 => Ok(KilledBy::ProcessGroupTerm),
            2 => Ok(KilledBy::ProcessGroupKill),
            3 => Ok(KilledBy::Container),
            other => Err(UnknownRung(other)),
        }
    }
}

/// The kept part of one stream (see `capture::Captured`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Stream {
    /// Head.
    #[prost(string, tag = "1")]
    pub text: String,
    /// Tail, when truncated.
    #[prost(string, tag = "2")]
    pub tail: String,
    /// Bytes in all.
    #[prost(uint64, tag = "3")]
    pub total_bytes: u64,
    /// Cut at the cap.
    #[prost(bool, tag = "4")]
    pub truncated: bool,
    /// Bytes dropped between head and tail.
    #[prost(uint64, tag = "5")]
    pub omitted_bytes: u64,
}

impl From<crate::sandbox::Captured> for Stream {
    fn from(c: crate::sandbox::Captured) -> Self {
        Stream {
            text: c.text,
            tail: c.tail,
            total_bytes: c.total_bytes,
            truncated: c.truncated,
            omitted_bytes: c.omitted_bytes,
        }
    }
}

impl From<Stream> for crate::sandbox::Captured {
    fn from(s: Stream) -> Self {
        crate::sandbox::Captured {
            text: s.text,
            tail: s.tail,
            total_bytes: s.total_bytes,
            truncated: s.truncated,
            omitted_bytes: s.omitted_bytes,
        }
    }
}

/// Largest frame accepted; real frames are a few KiB (output is capped).
pub const MAX_FRAME: usize = 16 << 20;

/// Encodes one frame.
pub fn encode(msg: &impl Message) -> Vec<u8> {
    msg.encode_length_delimited_to_vec()
}

/// A stream that does not carry valid frames.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// A frame announced more than [`MAX_FRAME`] bytes.
    #[error("frame of {0} bytes is over the limit")]
    TooLarge(usize),
    /// A frame did not decode.
    #[error("bad frame: {0}")]
    Decode(#[from] prost::DecodeError),
}

/// Reassembles frames from a byte stream that may split them anywhere.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: BytesMut,
}

impl Decoder {
    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered and not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame, if one is buffered.
    pub fn next_frame<M: Message + Default>(&mut self) -> Result<Option<M>, FrameError> {
        let mut peek = &self.buf[..];
        let len = match prost::decode_length_delimiter(&mut peek) {
            Ok(len) => len,
            // Not enough bytes for the length yet.
            Err(_) if self.buf.len() < 10 => return Ok(None),
            Err(e) => return Err(FrameError::Decode(e)),
        };
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        let header = self.buf.len() - peek.len();
        if peek.len() < len {
            return Ok(None);
        }
        let msg = M::decode(&peek[..len])?;
        self.buf.advance(header + len);
        Ok(Some(msg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_survive_any_split() {
        let frames = [
            Event {
                id: 1,
                kind: Some(event::Kind::Stdout("hello é".into())),
            },
            Event {
                id: 2,
                kind: Some(event::Kind::Exit(Exit {
                    exit_code: 3,
                    ..Default::default()
                })),
            },
        ];
        let bytes: Vec<u8> = frames.iter().flat_map(encode).collect();
        for chunk in 1..bytes.len() {
            let mut d = Decoder::default();
            let mut got = Vec::new();
            for piece in bytes.chunks(chunk) {
                d.push(piece);
                while let Some(ev) = d.next_frame::<Event>().unwrap() {
                    got.push(ev);
                }
            }
            assert_eq!(got, frames);
        }
    }

    #[test]
    fn every_rung_crosses_the_wire_and_unknown_rungs_are_refused() {
        for (rung, number) in [
            (KilledBy::None, 0),
            (KilledBy::ProcessGroupTerm, 1),
            (KilledBy::ProcessGroupKill, 2),
            (KilledBy::Container, 3),
        ] {
            assert_eq!(u32::from(rung), number);
            let exit = Exit {
                rung: rung.into(),
                ..Default::default()
            };
            let mut d = Decoder::default();
            d.push(&encode(&exit));
            let back = d.next_frame::<Exit>().unwrap().unwrap();
            assert_eq!(back.killed_by(), Ok(rung));
        }
        for number in [4, 255, u32::MAX] {
            let exit = Exit {
                rung: number,
                ..Default::default()
            };
            assert_eq!(exit.killed_by(), Err(UnknownRung(number)));
        }
    }
}

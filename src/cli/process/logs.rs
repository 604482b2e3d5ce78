//! `sandboxd logs`: a process's output as far as the service keeps it, its
//! stdout to stdout and its stderr to stderr, then (with `-f`) what it
//! writes until it ends. Bytes the service no longer keeps are counted on
//! stderr where they were.
//!
//! A stream that is a terminal gets the output neutralised, as command
//! output is (see `terminal`), unless `--raw`; a pipe or a file gets the
//! bytes exactly. A chunk may end inside a UTF-8 character: its first
//! bytes wait for the rest, so a terminal shows the character whole.

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;

use sandboxd::pb;
use tokio::signal::unix::{SignalKind, signal};

use super::{LogsArgs, show};
use crate::cli::connect::Client;
use crate::cli::print::Stdio;
use crate::cli::terminal::unfinished_char;

/// Names of the two streams, by index.
const STREAMS: [&str; 2] = ["stdout", "stderr"];

/// Reads (and with `-f` follows) a process's output and prints it.
pub async fn logs(
    c: &mut Client,
    session_id: String,
    a: LogsArgs,
    con: &mut Stdio,
) -> Result<ExitCode, tonic::Status> {
    use pb::process_output::Kind;
    // Ctrl-C while following ends the following only: the process is not
    // told. Nothing is caught without -f. Caught from before the call, so
    // that no Ctrl-C after output showed kills the CLI instead.
    let mut ctrl_c = if a.follow {
        signal(SignalKind::interrupt()).ok()
    } else {
        None
    };
    let mut stream = c
        .read_process_output(pb::ReadProcessOutputRequest {
            session_id,
            process_id: a.process.clone(),
            stdout_offset: 0,
            stderr_offset: 0,
            follow: a.follow,
        })
        .await?
        .into_inner();
    let mut sink = Sink::new(&a);
    let interrupted = async {
        match ctrl_c.as_mut() {
            Some(ctrl_c) => {
                ctrl_c.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::pin!(interrupted);
    loop {
        let message = tokio::select! {
            message = stream.message() => message?,
            () = &mut interrupted => {
                sink.finish(con);
                sink.status(con, format_args!(
                    "[stopped following {id}; it keeps running: `sandboxd stop {id}` stops it]",
                    id = a.process
                ));
                return Ok(ExitCode::SUCCESS);
            }
        };
        match message.and_then(|m| m.kind) {
            Some(Kind::Chunk(chunk)) => {
                sink.chunk(con, &chunk);
                // A reader that went away (`logs -f p1 | head`) ends it.
                if sink.gone {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            Some(Kind::End(end)) => {
                sink.finish(con);
                let p = end.process.unwrap_or_default();
                sink.status(con, format_args!("[{} {}]", a.process, show::how(&p)));
                show::notes(con, &p);
                return Ok(ExitCode::SUCCESS);
            }
            None => {
                sink.finish(con);
                return Err(tonic::Status::unavailable(format!(
                    "the output of {} ended without its last message; the service may have \
                     stopped. Nothing was changed",
                    a.process
                )));
            }
        }
    }
}

/// Where the output goes: through the console to a terminal (neutralised),
/// straight to a pipe or file (exact), or straight anyway with `--raw`.
struct Sink {
    /// Which streams are printed.
    shown: [bool; 2],
    /// Whether each stream is written straight, not through the console.
    exact: [bool; 2],
    /// Whether each stream is a terminal.
    terminal: [bool; 2],
    /// The first bytes of a character whose rest has not come yet.
    held: [Vec<u8>; 2],
    /// A terminal written straight is mid-line: the next status line must
    /// start on a line of its own.
    mid_line: bool,
    /// A straight write failed (the reader went away).
    gone: bool,
}

impl Sink {
    fn new(a: &LogsArgs) -> Self {
        let terminal = [io::stdout().is_terminal(), io::stderr().is_terminal()];
        Sink {
            shown: [!a.stderr_only, !a.stdout_only],
            // A stream that is no terminal gets the bytes exactly from the
            // console too; written straight, a failed write is seen here.
            exact: terminal.map(|t| a.raw || !t),
            terminal,
            held: Default::default(),
            mid_line: false,
            gone: false,
        }
    }

    /// Prints one chunk, after the count of bytes skipped before it.
    fn chunk(&mut self, con: &mut Stdio, chunk: &pb::ProcessOutputChunk) {
        let i = usize::from(chunk.stream == pb::ProcessStream::Stderr as i32);
        if !self.shown[i] {
            return;
        }
        if chunk.skipped > 0 {
            // What was held can no longer be finished.
            let held = std::mem::take(&mut self.held[i]);
            self.write(con, i, &held);
            self.status(
                con,
                format_args!(
                    "[... {} bytes of {} not kept ...]",
                    chunk.skipped, STREAMS[i]
                ),
            );
        }
        let held = &mut self.held[i];
        held.extend_from_slice(&chunk.data);
        let whole = held.len() - unfinished_char(held);
        let ready: Vec<u8> = held.drain(..whole).collect();
        self.write(con, i, &ready);
    }

    /// Prints what is still held (a character that will not be finished).
    fn finish(&mut self, con: &mut Stdio) {
        for i in 0..2 {
            let held = std::mem::take(&mut self.held[i]);
            self.write(con, i, &held);
        }
    }

    /// Writes bytes of stream `i`.
    fn write(&mut self, con: &mut Stdio, i: usize, bytes: &[u8]) {
        if bytes.is_empty() || self.gone {
            return;
        }
        if !self.exact[i] {
            let text = String::from_utf8_lossy(bytes);
            if i == 0 {
                con.out(format_args!("{text}"));
                con.flush();
            } else {
                con.err(format_args!("{text}"));
            }
            return;
        }
        // Stdout first, so that the two keep their order on one terminal.
        con.flush();
        let written = if i == 0 {
            let mut out = io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        } else {
            io::stderr().lock().write_all(bytes)
        };
        if written.is_err() {
            self.gone = true;
        }
        if self.terminal[i] {
            self.mid_line = !bytes.ends_with(b"\n");
        }
    }

    /// Prints a line of the CLI's own on stderr, on a line of its own.
    fn status(&mut self, con: &mut Stdio, args: std::fmt::Arguments<'_>) {
        if std::mem::take(&mut self.mid_line) && self.terminal[1] {
            let _ = io::stderr().lock().write_all(b"\n");
        }
        con.status(args);
    }
}

#[cfg(test)]
mod tests {
    use super::unfinished_char;

    #[test]
    fn a_character_cut_at_the_end_waits_for_its_rest() {
        assert_eq!(unfinished_char(b""), 0);
        assert_eq!(unfinished_char(b"abc\n"), 0);
        let euro = "x\u{20ac}".as_bytes();
        assert_eq!(unfinished_char(&euro[..2]), 1);
        assert_eq!(unfinished_char(&euro[..3]), 2);
        assert_eq!(unfinished_char(euro), 0);
        let crab = "\u{1f980}".as_bytes();
        assert_eq!(unfinished_char(&crab[..3]), 3);
        // Bytes that are no UTF-8 are not held: they are shown at once.
        assert_eq!(unfinished_char(b"a\x80\x80"), 0);
    }
}

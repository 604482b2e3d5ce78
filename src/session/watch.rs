//! What a viewer sees of a session's commands: each running command's
//! output so far, the output of the last few that ended, and every piece
//! of output as it arrives, for whoever subscribes (the web view). All of
//! it is bounded: a stream's text is kept up to [`SHOWN_BYTES`] (its start
//! and its end, as a command's result keeps them), [`RECENT`] ended
//! commands are kept, and a subscriber that falls behind loses pieces,
//! never holds the command up.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use tokio::sync::broadcast;

use crate::sandbox::{Captured, ExitReport};

/// Text kept of one stream of one command, for viewers.
pub const SHOWN_BYTES: usize = 16 << 10;
/// Ended commands whose output is kept for viewers.
pub const RECENT: usize = 16;
/// Pieces a subscriber may fall behind by before it loses some.
const BACKLOG: usize = 256;

/// One stream's text as a viewer sees it: its start, and (when it was
/// longer than [`SHOWN_BYTES`] or than the command's cap) its end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shown {
    /// The start.
    pub head: String,
    /// The end, when bytes between were dropped.
    pub tail: String,
    /// Bytes dropped between `head` and `tail`.
    pub omitted_bytes: u64,
}

impl Shown {
    fn push(&mut self, text: &str) {
        // The head fills up to its size; past it, what arrives live is
        // counted only (the command's cap keeps the rest for its end).
        let room = if self.omitted_bytes == 0 {
            SHOWN_BYTES.saturating_sub(self.head.len())
        } else {
            0
        };
        let kept = cut_start(text, room);
        self.head.push_str(kept);
        self.omitted_bytes += (text.len() - kept.len()) as u64;
    }

    fn of(c: &Captured) -> Shown {
        let head = cut_start(&c.text, SHOWN_BYTES);
        let tail = cut_end(&c.tail, SHOWN_BYTES);
        let omitted = c.omitted_bytes
            + (c.text.len() - head.len()) as u64
            + (c.tail.len() - tail.len()) as u64;
        Shown {
            head: head.to_string(),
            tail: tail.to_string(),
            omitted_bytes: omitted,
        }
    }
}

fn cut_start(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn cut_end(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// A command as a viewer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// Its sequence number in the session's journal.
    pub seq: u64,
    /// The command line (its first 1024 characters).
    pub command: String,
    /// What it wrote to stdout.
    pub stdout: Shown,
    /// What it wrote to stderr.
    pub stderr: Shown,
    /// How it ended, in brief; `None` while it runs.
    pub ended: Option<String>,
}

/// A piece of a command's life, as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Output arrived (within the command's cap).
    Output {
        /// The command.
        seq: u64,
        /// On stderr rather than stdout.
        stderr: bool,
        /// The text.
        text: String,
    },
    /// The command ended.
    Ended {
        /// The command.
        seq: u64,
        /// How, in brief.
        summary: String,
    },
}

/// The commands of one session, for viewers.
#[derive(Debug)]
pub struct Watch {
    pieces: broadcast::Sender<Piece>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    running: BTreeMap<u64, Watched>,
    recent: VecDeque<Watched>,
}

impl Default for Watch {
    fn default() -> Self {
        Watch {
            pieces: broadcast::channel(BACKLOG).0,
            state: Mutex::default(),
        }
    }
}

impl Watch {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Command `seq` started.
    pub fn started(&self, seq: u64, command: &str) {
        let command: String = command.chars().take(1024).collect();
        self.state().running.insert(
            seq,
            Watched {
                seq,
                command,
                stdout: Shown::default(),
                stderr: Shown::default(),
                ended: None,
            },
        );
    }

    /// Command `seq` wrote `text`. Kept and sent under one lock, so that
    /// a follower sees each piece once: in its snapshot or after it.
    pub fn output(&self, seq: u64, stderr: bool, text: &str) {
        let mut st = self.state();
        if let Some(w) = st.running.get_mut(&seq) {
            if stderr {
                w.stderr.push(text);
            } else {
                w.stdout.push(text);
            }
        }
        if self.pieces.receiver_count() > 0 {
            let _ = self.pieces.send(Piece::Output {
                seq,
                stderr,
                text: text.to_string(),
            });
        }
    }

    /// Command `seq` ended with `report`.
    pub fn ended(&self, seq: u64, report: &ExitReport) {
        let summary = summary(report);
        let mut st = self.state();
        if let Some(mut w) = st.running.remove(&seq) {
            w.stdout = Shown::of(&report.stdout);
            w.stderr = Shown::of(&report.stderr);
            w.ended = Some(summary.clone());
            if st.recent.len() >= RECENT {
                st.recent.pop_front();
            }
            st.recent.push_back(w);
        }
        if self.pieces.receiver_count() > 0 {
            let _ = self.pieces.send(Piece::Ended { seq, summary });
        }
    }

    /// Command `seq` as it stands and every piece after that, taken under
    /// one lock: nothing falls between, and nothing comes twice.
    pub fn follow(&self, seq: u64) -> Option<(Watched, broadcast::Receiver<Piece>)> {
        let st = self.state();
        let now = st
            .running
            .get(&seq)
            .or_else(|| st.recent.iter().find(|w| w.seq == seq))
            .cloned()?;
        Some((now, self.pieces.subscribe()))
    }

    /// Pieces from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Piece> {
        self.pieces.subscribe()
    }

    /// Command `seq` as it stands, if it runs or ended recently.
    pub fn command(&self, seq: u64) -> Option<Watched> {
        let st = self.state();
        st.running
            .get(&seq)
            .or_else(|| st.recent.iter().find(|w| w.seq == seq))
            .cloned()
    }

    /// The commands running now: (sequence number, command line).
    pub fn running(&self) -> Vec<(u64, String)> {
        self.state()
            .running
            .values()
            .map(|w| (w.seq, w.command.clone()))
            .collect()
    }

    /// The sequence numbers of the commands a viewer can open: running,
    /// then recently ended.
    pub fn kept(&self) -> Vec<u64> {
        let st = self.state();
        st.running
            .keys()
            .copied()
            .chain(st.recent.iter().map(|w| w.seq))
            .collect()
    }
}

/// How a command ended, in a few words.
fn summary(r: &ExitReport) -> String {
    if r.timed_out {
        format!("timed out, stopped by {:?}", r.killed_by)
    } else if r.cancelled {
        "cancelled".into()
    } else {
        format!("exit {} in {} ms", r.exit_code, r.duration.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> ExitReport {
        ExitReport {
            exit_code: 0,
            timed_out: false,
            cancelled: false,
            killed_by: crate::sandbox::KilledBy::None,
            oom_killed: false,
            pids_exhausted: false,
            notes: Vec::new(),
            duration: std::time::Duration::from_millis(5),
            stdout: Captured::default(),
            stderr: Captured::default(),
        }
    }

    #[test]
    fn a_stream_keeps_its_start_and_counts_the_rest() {
        let mut s = Shown::default();
        s.push(&"a".repeat(SHOWN_BYTES - 1));
        s.push("bc");
        s.push("d");
        assert_eq!(s.head.len(), SHOWN_BYTES);
        assert!(s.head.ends_with("ab"));
        assert_eq!(s.omitted_bytes, 2);
    }

    #[test]
    fn only_the_last_few_ended_commands_are_kept_and_pieces_reach_subscribers() {
        let w = Watch::default();
        let mut rx = w.subscribe();
        for seq in 0..(RECENT as u64 + 3) {
            w.started(seq, "echo");
            w.output(seq, false, "x");
            w.ended(seq, &report());
        }
        assert_eq!(w.kept().len(), RECENT);
        assert!(w.command(0).is_none());
        let last = w.command(RECENT as u64 + 2).unwrap();
        assert!(last.ended.is_some());
        assert_eq!(
            rx.try_recv().unwrap(),
            Piece::Output {
                seq: 0,
                stderr: false,
                text: "x".into()
            }
        );
    }
}

//! A journal read back from its files after the service stopped, however
//! it stopped: the entries replayed, what rotation dropped, and the
//! commands a crash cut short recorded as interrupted.

use std::io::{self, Write};
use std::sync::Mutex;

use super::sink::{RotatedLine, Sink, file_name, previous_name};
use super::{Files, Journal, ReadLine, StartedLine, State};

/// What recovering a journal found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Entries read back.
    pub entries: u64,
    /// Commands and processes that were running when the service stopped.
    pub interrupted: u64,
    /// Lines that could not be read (a line cut short by the crash).
    pub unreadable: u64,
}

impl Journal {
    /// The journal of `session` as its files hold it (after the service
    /// stopped, however it stopped), appended to from here on. A command
    /// that had started and not ended is recorded as interrupted.
    pub fn recover(session: &str, files: &Files) -> io::Result<(Journal, Recovered)> {
        let dir = &files.dir;
        let previous = dir.read(&previous_name(session))?.unwrap_or_default();
        let current = dir.read(&file_name(session))?.unwrap_or_default();
        let mut found = Recovered::default();
        let mut st = State::default();
        let (mut dropped_lines, mut dropped_bytes) = (0, 0);
        let count = |bytes: &[u8]| {
            bytes
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .filter(|l| {
                    serde_json::from_slice::<serde_json::Value>(l)
                        .map_or(true, |v| v.get("rotated").is_none())
                })
                .count()
        };
        let (previous_lines, lines) = (count(&previous) as u64, count(&current) as u64);
        for line in previous
            .split(|&b| b == b'\n')
            .chain(current.split(|&b| b == b'\n'))
        {
            if line.is_empty() {
                continue;
            }
            let Ok(value) = serde_json::from_slice::<serde_json::Value>(line) else {
                found.unreadable += 1;
                continue;
            };
            if let Some(head) = value.get("rotated") {
                if let Ok(head) = serde_json::from_value::<RotatedLine>(head.clone()) {
                    (dropped_lines, dropped_bytes) = (head.dropped_lines, head.dropped_bytes);
                }
                continue;
            }
            if let Some(started) = value.get("started") {
                match serde_json::from_value::<StartedLine>(started.clone()) {
                    Ok(s) => {
                        st.next_seq = st.next_seq.max(s.seq);
                        st.running.insert(s.seq, (s.command, s.cwd, s.at_ms));
                    }
                    Err(_) => found.unreadable += 1,
                }
                continue;
            }
            match serde_json::from_value::<ReadLine>(value) {
                Ok(read) => {
                    found.entries += 1;
                    st.replay(read);
                }
                Err(_) => found.unreadable += 1,
            }
        }
        let mut file = dir.open_append(&file_name(session))?;
        let mut bytes = current.len() as u64;
        // A line the crash cut short is ended, so the next one stands alone.
        if current.last().is_some_and(|&b| b != b'\n') {
            file.write_all(b"\n")?;
            bytes += 1;
        }
        let sink = Sink {
            file,
            files: files.clone(),
            bytes,
            lines,
            previous_lines,
            previous_bytes: previous.len() as u64,
            dropped_lines,
            dropped_bytes,
        };
        let interrupted = std::mem::take(&mut st.running);
        let journal = Journal {
            session: session.to_string(),
            state: Mutex::new(st),
            sink: Some(Mutex::new(sink)),
        };
        for (seq, (command, cwd, at_ms)) in interrupted {
            found.interrupted += 1;
            journal.interrupted(seq, &command, &cwd, at_ms);
        }
        found.interrupted += journal.interrupt_processes();
        Ok((journal, found))
    }
}

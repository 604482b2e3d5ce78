//! The file a journal appends to, and its rotation: past half the ceiling
//! the file becomes `<session>.jsonl.1` and a new one starts with a head
//! line saying what was dropped, counted as it was written (a rotation
//! never reads a file).

use std::fs::File;
use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use super::Files;

/// The file a journal appends to, and its rotation.
#[derive(Debug)]
pub(super) struct Sink {
    pub(super) files: Files,
    pub(super) file: File,
    /// Bytes and lines in the current file.
    pub(super) bytes: u64,
    pub(super) lines: u64,
    /// Lines and bytes in the file before it (`.1`), counted as they were
    /// written (or read back at a restart): a rotation never reads a file.
    pub(super) previous_lines: u64,
    pub(super) previous_bytes: u64,
    /// Lines and bytes dropped by rotation so far.
    pub(super) dropped_lines: u64,
    pub(super) dropped_bytes: u64,
}

/// The line at the head of a rotated-to file.
#[derive(Serialize, Deserialize)]
pub(super) struct RotatedLine {
    pub(super) dropped_lines: u64,
    pub(super) dropped_bytes: u64,
}

pub(super) fn file_name(session: &str) -> String {
    format!("{session}.jsonl")
}

pub(super) fn previous_name(session: &str) -> String {
    format!("{session}.jsonl.1")
}

impl Sink {
    /// Appends one line (with its newline), rotating first if it would
    /// take the current file past half the ceiling.
    pub(super) fn append(&mut self, session: &str, line: &[u8]) -> io::Result<()> {
        let half = self.files.max_bytes.max(64 << 10) / 2;
        if self.bytes > 0 && self.bytes + line.len() as u64 > half {
            self.rotate(session)?;
        }
        // One write per line, append mode: lines never interleave.
        self.file.write_all(line)?;
        self.bytes += line.len() as u64;
        self.lines += 1;
        Ok(())
    }

    fn rotate(&mut self, session: &str) -> io::Result<()> {
        let dir = &self.files.dir;
        dir.rename(&file_name(session), &previous_name(session))?;
        self.dropped_lines += self.previous_lines;
        self.dropped_bytes += self.previous_bytes;
        self.previous_lines = self.lines;
        self.previous_bytes = self.bytes;
        self.file = dir.create_private(&file_name(session))?;
        self.bytes = 0;
        self.lines = 0;
        let head = RotatedLine {
            dropped_lines: self.dropped_lines,
            dropped_bytes: self.dropped_bytes,
        };
        let mut bytes = serde_json::to_vec(&serde_json::json!({
            "session_id": session,
            "rotated": head,
        }))
        .map_err(io::Error::other)?;
        bytes.push(b'\n');
        self.file.write_all(&bytes)?;
        // Lines count what the journal holds: the head is not one of them.
        self.bytes = bytes.len() as u64;
        self.lines = 0;
        Ok(())
    }
}

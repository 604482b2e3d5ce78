//! What a workspace is about to land, recorded before it starts, so that a
//! landing cut short by a crash of the service is finished at the next
//! start rather than left half done.
//!
//! An upload, a patch and a restore each stage their entries in a
//! directory inside the workspace and then land them, step by step (see
//! [`restore`](super::restore)). A `kill -9` between two steps would leave
//! some files new and some old, and the staging directory behind. So each
//! landing keeps a record in a directory of the service's own, out of
//! every command's reach ([`Intents`]):
//! - before the staging directory is made, its name (a crash while staging
//!   leaves a directory that the next start removes: nothing had changed);
//! - once everything is staged, every step, with the inode of each staged
//!   entry, so that whether a step was done can be told afterwards (a
//!   staged entry placed is gone from the staging directory; one exchanged
//!   is at its path; an entry removed is in the staging directory);
//! - removed when the landing is over (done, or undone after a failure).
//!
//! At start, [`finish`] takes every record left: one made while staging
//! has its staging directory removed; one made while landing has the steps
//! not yet done taken (the landing is finished: the caller never heard
//! back, and the whole of what it sent is there rather than part of it),
//! or, if one cannot be taken, the steps done undone. Records are written
//! whole (a temporary name renamed into place), not synced: they hold
//! against a crash of the service, not of the host, as the workspace's own
//! files do.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::open_dir;
use super::restore::{self, Step};
use crate::workspace::remove::remove_tree_at;

/// Where a workspace's landing records are kept: a directory of the
/// service's own. Cloning shares it.
#[derive(Clone)]
pub struct Intents(Arc<OwnedFd>);

impl std::fmt::Debug for Intents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Intents")
    }
}

/// The first line of every record.
const MAGIC: &str = "sandboxd landing 1";
/// Records are named `landing.<staging directory's suffix>`.
const PREFIX: &str = "landing.";

impl Intents {
    /// Records kept in `dir`.
    pub fn new(dir: OwnedFd) -> Intents {
        Intents(Arc::new(dir))
    }

    fn record_name(stage: &str) -> String {
        let suffix = stage.rsplit('.').next().unwrap_or(stage);
        format!("{PREFIX}{suffix}")
    }

    /// Records that the staging directory `stage` is about to be made.
    pub(super) fn staging(&self, what: &str, stage: &str) -> io::Result<()> {
        let text = format!("{MAGIC}\nwhat {what}\nstage {stage}\nphase staging\nend\n");
        self.write(&Self::record_name(stage), text.as_bytes())
    }

    /// Records every step of a landing from `stage`, about to begin;
    /// `inodes[n]` is the inode of staged entry `n`.
    pub(super) fn landing(
        &self,
        what: &str,
        stage: &str,
        steps: &[Step<'_>],
        inodes: &[u64],
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        let mut text = format!("{MAGIC}\nwhat {what}\nstage {stage}\nphase landing\n");
        match owner {
            Some((uid, gid)) => {
                let _ = writeln!(text, "owner {uid} {gid}");
            }
            None => text.push_str("owner -\n"),
        }
        text.push_str("inodes");
        for ino in inodes {
            let _ = write!(text, " {ino}");
        }
        text.push('\n');
        for step in steps {
            let _ = match *step {
                Step::Remove(p) => writeln!(text, "R {}", hex::encode(p)),
                Step::MakeDir(p) => writeln!(text, "M {}", hex::encode(p)),
                Step::Place(p, n) => writeln!(text, "P {n} {}", hex::encode(p)),
                Step::Exchange(p, n) => writeln!(text, "X {n} {}", hex::encode(p)),
                Step::Chmod(p, mode) => writeln!(text, "C {mode:o} {}", hex::encode(p)),
            };
        }
        text.push_str("end\n");
        self.write(&Self::record_name(stage), text.as_bytes())
    }

    /// The landing from `stage` is over: its record goes.
    pub(super) fn over(&self, stage: &str) {
        let name = Self::record_name(stage);
        if let Err(e) = rustix::fs::unlinkat(&*self.0, name.as_str(), AtFlags::empty())
            && e != rustix::io::Errno::NOENT
        {
            tracing::warn!(error = %e, "cannot remove a landing record");
        }
    }

    fn write(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let tmp = format!(".{name}.tmp");
        let _ = rustix::fs::unlinkat(&*self.0, tmp.as_str(), AtFlags::empty());
        let fd = rustix::fs::openat(
            &*self.0,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        std::fs::File::from(fd).write_all(bytes)?;
        rustix::fs::renameat(&*self.0, tmp.as_str(), &*self.0, name)?;
        Ok(())
    }

    /// The names of the records left, and temporary files removed.
    fn left(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&*self.0)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name.starts_with(PREFIX) {
                names.push(name.to_string());
            } else if name.starts_with(&format!(".{PREFIX}")) && name.ends_with(".tmp") {
                let _ = rustix::fs::unlinkat(&*self.0, name, AtFlags::empty());
            }
        }
        names.sort();
        Ok(names)
    }

    fn read(&self, name: &str) -> io::Result<String> {
        let fd = rustix::fs::openat(
            &*self.0,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut text = String::new();
        std::fs::File::from(fd).read_to_string(&mut text)?;
        Ok(text)
    }
}

/// What became of a landing that a crash cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// What was landing: `upload`, `patch` or `restore`.
    pub what: String,
    /// What was done about it.
    pub outcome: Outcome,
}

/// See [`Finished`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It was still staging: nothing had changed, and the staging
    /// directory was removed.
    Dropped,
    /// It was landing: the steps not yet done were taken.
    Completed {
        /// Steps in all.
        steps: usize,
    },
    /// It was landing and could not be finished: the steps done were
    /// undone (modes aside) as far as they could be.
    Undone {
        /// Why it could not be finished.
        why: String,
        /// Where what could not be put back lies, if anything.
        left_in: Option<String>,
    },
    /// The record could not be read: nothing was done, and it was removed.
    Unreadable(String),
}

/// A record read back.
struct Record {
    what: String,
    stage: String,
    landing: Option<Landing>,
}

struct Landing {
    owner: Option<(u32, u32)>,
    inodes: Vec<u64>,
    steps: Vec<(u8, Vec<u8>, u64)>,
}

fn parse(text: &str) -> Result<Record, String> {
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err("not a landing record".into());
    }
    let field = |line: Option<&str>, key: &str| -> Result<String, String> {
        line.and_then(|l| l.strip_prefix(key))
            .and_then(|rest| rest.strip_prefix(' '))
            .map(str::to_string)
            .ok_or_else(|| format!("no {key}"))
    };
    let what = field(lines.next(), "what")?;
    let stage = field(lines.next(), "stage")?;
    if !stage.starts_with(".sandboxd-") || stage.contains('/') {
        return Err(format!("a staging directory named {stage:?}"));
    }
    let phase = field(lines.next(), "phase")?;
    let bad = |what: &str| format!("a bad {what} line");
    let landing = match phase.as_str() {
        "staging" => None,
        "landing" => {
            let owner = match field(lines.next(), "owner")?.as_str() {
                "-" => None,
                ids => {
                    let (u, g) = ids.split_once(' ').ok_or_else(|| bad("owner"))?;
                    Some((
                        u.parse().map_err(|_| bad("owner"))?,
                        g.parse().map_err(|_| bad("owner"))?,
                    ))
                }
            };
            let inodes = lines
                .next()
                .and_then(|l| l.strip_prefix("inodes"))
                .ok_or_else(|| bad("inodes"))?
                .split_whitespace()
                .map(|n| n.parse().map_err(|_| bad("inodes")))
                .collect::<Result<Vec<u64>, _>>()?;
            let mut steps = Vec::new();
            for line in lines.by_ref() {
                if line == "end" {
                    break;
                }
                let mut parts = line.split(' ');
                let kind = parts.next().unwrap_or_default();
                let (kind, arg) = match kind {
                    "R" | "M" => (kind.as_bytes()[0], 0),
                    "P" | "X" => (
                        kind.as_bytes()[0],
                        parts
                            .next()
                            .and_then(|n| n.parse().ok())
                            .ok_or_else(|| bad("step"))?,
                    ),
                    "C" => (
                        b'C',
                        parts
                            .next()
                            .and_then(|m| u64::from_str_radix(m, 8).ok())
                            .ok_or_else(|| bad("step"))?,
                    ),
                    _ => return Err(bad("step")),
                };
                let path = parts
                    .next()
                    .and_then(|p| hex::decode(p).ok())
                    .ok_or_else(|| bad("step"))?;
                if matches!(kind, b'P' | b'X') && arg as usize >= inodes.len() {
                    return Err(bad("step"));
                }
                steps.push((kind, path, arg));
            }
            Some(Landing {
                owner,
                inodes,
                steps,
            })
        }
        _ => return Err(bad("phase")),
    };
    if !text.ends_with("end\n") {
        return Err("the record is cut short".into());
    }
    Ok(Record {
        what,
        stage,
        landing,
    })
}

/// Takes every landing record left in `intents` for the workspace at
/// `root` (see the module's documentation). Run before any command of the
/// workspace can run again. Blocking.
pub fn finish(root: &OwnedFd, intents: &Intents) -> io::Result<Vec<Finished>> {
    let mut finished = Vec::new();
    for name in intents.left()? {
        let record = intents
            .read(&name)
            .map_err(|e| e.to_string())
            .and_then(|t| parse(&t));
        let record = match record {
            Ok(record) => record,
            Err(why) => {
                tracing::warn!(record = ?name, why = ?why, "a landing record cannot be read");
                let _ = rustix::fs::unlinkat(&*intents.0, name.as_str(), AtFlags::empty());
                finished.push(Finished {
                    what: "unknown".into(),
                    outcome: Outcome::Unreadable(why),
                });
                continue;
            }
        };
        let outcome = match &record.landing {
            None => {
                remove_stage(root, &record.stage);
                Outcome::Dropped
            }
            Some(landing) => resume(root, &record.stage, landing),
        };
        let _ = rustix::fs::unlinkat(&*intents.0, name.as_str(), AtFlags::empty());
        finished.push(Finished {
            what: record.what,
            outcome,
        });
    }
    Ok(finished)
}

fn remove_stage(root: &OwnedFd, stage: &str) {
    match remove_tree_at(root, OsStr::new(stage)) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(stage = ?stage, error = %e, "cannot remove a staging directory"),
    }
}

fn resume(root: &OwnedFd, stage_name: &str, landing: &Landing) -> Outcome {
    let stage = match open_dir(root, stage_name.as_bytes()) {
        Ok(fd) => fd,
        Err(e) => {
            return Outcome::Undone {
                why: format!("its staging directory cannot be opened: {e}"),
                left_in: None,
            };
        }
    };
    let steps: Vec<Step<'_>> = landing
        .steps
        .iter()
        .map(|(kind, path, arg)| match kind {
            b'R' => Step::Remove(path),
            b'M' => Step::MakeDir(path),
            b'P' => Step::Place(path, *arg as usize),
            b'X' => Step::Exchange(path, *arg as usize),
            _ => Step::Chmod(path, *arg as u32),
        })
        .collect();
    let outcome = match restore::resume(root, &stage, &steps, &landing.inodes, landing.owner) {
        Ok(()) => Outcome::Completed { steps: steps.len() },
        Err(e) => {
            let why = format!("cannot {} {}: {}", e.op, e.path, e.source);
            if e.left_in.is_some() {
                // What could not be put back stays, given to its owner.
                return Outcome::Undone {
                    why,
                    left_in: Some(stage_name.to_string()),
                };
            }
            Outcome::Undone { why, left_in: None }
        }
    };
    drop(stage);
    remove_stage(root, stage_name);
    outcome
}

#[cfg(test)]
mod tests;

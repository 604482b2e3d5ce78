//! The sessions' records: what each open session is (its id, the hash of
//! its token, its workspace, image, limits, policy, environment and
//! timeouts), kept in the state directory so that a service that restarts,
//! after a crash or not, brings its sessions back.
//!
//! One file per session, `sessions/<id>.json`: made empty with the
//! session-to-be (a warm entry makes it in the background), written in one
//! call before the session is handed out, removed when it closes. The
//! service's own crash cannot lose a record the kernel has; a host crash in
//! the seconds before the kernel writes it out may leave it absent, empty
//! or cut short, and such a record is dropped (its workspace goes to the
//! quarantine, never away). Sessions are independent and their records
//! small and written once, so a file each needs no compaction, no log
//! replay and no second writer to coordinate, and one damaged record costs
//! only its own session. What changes during a session lives elsewhere:
//! the journal in its own append-only file, the files in the workspace.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::policy::Rules;
use crate::sandbox::Limits;
use crate::state::StateDir;

/// The version of the records this service writes and reads.
const VERSION: u32 = 1;

/// One session, as it is kept.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct Record {
    /// [`VERSION`].
    pub version: u32,
    /// The session's id.
    pub id: String,
    /// Hex sha256 of the session's token.
    pub token_sha256: String,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// Idle timeout.
    pub ttl_ms: u64,
    /// Timeout of its commands that give none.
    pub default_timeout_ms: u64,
    /// Image its containers run.
    pub image: String,
    /// The environment the image was built as.
    pub environment: Option<String>,
    /// Container limits (the workspace's quota included).
    pub limits: Limits,
    /// Environment of every command.
    pub env: BTreeMap<String, String>,
    /// The session's own policy rules (the operator's are added at start).
    pub rules: Rules,
    /// Where its workspace is.
    pub workspace: Place,
    /// Device and inode of the workspace's root.
    pub identity: (u64, u64),
    /// Created unattended.
    #[serde(default)]
    pub unattended: bool,
    /// The plan approved last (its grant is in `rules`).
    #[serde(default)]
    pub plan: Option<super::approvals::ApprovedPlan>,
}

/// Where a session's workspace is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum Place {
    /// A fresh workspace the service made (its volume bears the id).
    Fresh,
    /// A directory lent to the session.
    Lent {
        /// The path the caller named.
        path: PathBuf,
        /// The directory's file handle (see [`crate::volume::handle_of`]),
        /// which finds it again after a restart wherever it lies then.
        #[serde(default)]
        handle: Option<String>,
    },
}

impl Record {
    /// What is kept of `session`, to bring it back after a restart.
    pub fn of(session: &super::tools::Session) -> Record {
        let millis = |d: std::time::Duration| d.as_millis() as u64;
        let (identity, lent) = {
            let volume = session.volume.lock().unwrap_or_else(|e| e.into_inner());
            let volume = volume.as_ref();
            (
                volume.map_or((0, 0), |v| v.identity()),
                volume.is_some_and(|v| !v.owns_workspace()),
            )
        };
        let spec = session.sandbox.spec();
        Record {
            version: VERSION,
            id: session.id.clone(),
            token_sha256: hex::encode(session.token_hash),
            created_ms: session
                .created
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, millis),
            ttl_ms: millis(session.ttl),
            default_timeout_ms: millis(session.default_timeout),
            image: spec.image.clone(),
            environment: session.environment.clone(),
            limits: spec.limits,
            env: session.env.clone(),
            // The rules in force, the operator's included: a session never
            // comes back looser than it was.
            rules: session.policy().rules().clone(),
            workspace: if lent {
                Place::Lent {
                    path: session.workspace.host_path().to_path_buf(),
                    handle: crate::volume::handle_of(session.workspace.root_fd()),
                }
            } else {
                Place::Fresh
            },
            identity,
            unattended: session.unattended,
            plan: session.approved_plan(),
        }
    }

    /// Whether this service reads records like this one.
    pub fn readable(&self) -> bool {
        self.version == VERSION
    }
}

/// Where a durable service keeps its sessions: their records and their
/// journals' files. A session-to-be has both made ahead (see
/// [`Reserved`]), so that opening one from the warm pool creates no file.
#[derive(Debug, Clone)]
pub(super) struct Keep {
    pub records: Records,
    pub journals: crate::journal::Files,
}

/// A session-to-be's record file (empty until the session opens) and its
/// journal (with its file).
#[derive(Debug)]
pub(super) struct Reserved {
    pub record: std::fs::File,
    pub journal: crate::journal::Journal,
}

impl Keep {
    /// Makes `id`'s record file, empty, and its journal. Blocking.
    pub fn reserve(&self, id: &str) -> io::Result<Reserved> {
        let record = self.records.dir.create_private(&name(id))?;
        match crate::journal::Journal::new(id, Some(&self.journals)) {
            Ok(journal) => Ok(Reserved { record, journal }),
            Err(e) => {
                let _ = self.records.dir.remove_file(&name(id));
                Err(e)
            }
        }
    }

    /// Removes what [`Keep::reserve`] made for `id` (a session-to-be that
    /// was not used). Blocking.
    pub fn release(&self, id: &str) {
        let _ = self.records.dir.remove_file(&name(id));
        crate::journal::Journal::remove_files(id, &self.journals);
    }
}

/// Writes `record` into its (reserved, empty) file, in one call: not worth
/// a trip to the blocking pool.
pub(super) fn write(file: &mut std::fs::File, record: &Record) -> io::Result<()> {
    use std::io::Write;
    let bytes = serde_json::to_vec(record).map_err(io::Error::other)?;
    file.write_all(&bytes)
}

/// The records of one service, in `sessions/` of its state directory.
#[derive(Debug, Clone)]
pub(super) struct Records {
    dir: std::sync::Arc<StateDir>,
}

fn name(id: &str) -> String {
    format!("{id}.json")
}

impl Records {
    /// The records in `state`.
    pub fn open(state: &StateDir) -> Result<Records, crate::state::Error> {
        Ok(Records {
            dir: std::sync::Arc::new(state.child("sessions")?),
        })
    }

    /// Keeps `record` of a new session (what [`Keep::reserve`] and the
    /// registry do in two steps): a new file (never one planted in
    /// advance), written in one call, at once for every process, so the
    /// service's own crash cannot lose it. The kernel writes it to the disk
    /// within seconds; a host crash before then, or one in the middle of
    /// the write, leaves no record or one that cannot be read, and the
    /// session's workspace goes to the quarantine. Blocking (one small
    /// write).
    #[cfg(test)]
    pub fn save(&self, record: &Record) -> io::Result<()> {
        let name = name(&record.id);
        let written = self
            .dir
            .create_private(&name)
            .and_then(|mut f| write(&mut f, record));
        if written.is_err() {
            let _ = self.dir.remove_file(&name);
        }
        written
    }

    /// The records kept in `dir` (see [`Records::dir`]).
    pub fn from_dir(dir: std::sync::Arc<StateDir>) -> Records {
        Records { dir }
    }

    /// Where the records are kept.
    pub fn dir(&self) -> std::sync::Arc<StateDir> {
        std::sync::Arc::clone(&self.dir)
    }

    /// Replaces the record of an open session with `record`, atomically
    /// (a crash leaves the old record or the new one, whole). Blocking
    /// (one small write).
    pub fn replace(&self, record: &Record) -> io::Result<()> {
        let bytes = serde_json::to_vec(record).map_err(io::Error::other)?;
        self.dir.write_atomic(&name(&record.id), &bytes)
    }

    /// Forgets session `id`. Blocking.
    pub fn remove(&self, id: &str) -> io::Result<()> {
        self.dir.remove_file(&name(id))
    }

    /// Every record kept, each read or with why it cannot be (by file
    /// name). Leftover temporary files of a write the crash cut short are
    /// removed. Blocking.
    pub fn load(&self) -> io::Result<Vec<(String, Result<Record, String>)>> {
        let mut found = Vec::new();
        for file in self.dir.names()? {
            if file.starts_with('.') && file.ends_with(".tmp") {
                let _ = self.dir.remove_file(&file);
                continue;
            }
            let Some(id) = file.strip_suffix(".json") else {
                continue;
            };
            let read = match self.dir.read(&file) {
                // Reserved for a session-to-be that never opened.
                Ok(Some(bytes)) if bytes.is_empty() => {
                    let _ = self.dir.remove_file(&file);
                    continue;
                }
                Ok(Some(bytes)) => serde_json::from_slice::<Record>(&bytes)
                    .map_err(|e| format!("unreadable record: {e}"))
                    .and_then(|r| {
                        if !r.readable() {
                            Err(format!("record version {} is not {VERSION}", r.version))
                        } else if r.id != id {
                            Err(format!("the record names session {:?}", r.id))
                        } else {
                            Ok(r)
                        }
                    }),
                Ok(None) => continue,
                Err(e) => Err(e.to_string()),
            };
            found.push((id.to_string(), read));
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> Record {
        Record {
            version: VERSION,
            id: id.into(),
            token_sha256: "ab".repeat(32),
            created_ms: 1,
            ttl_ms: 2,
            default_timeout_ms: 3,
            image: "img".into(),
            environment: Some("py".into()),
            limits: Limits::default(),
            env: BTreeMap::from([("A".into(), "b".into())]),
            rules: Rules {
                read_only: true,
                ..Rules::default()
            },
            workspace: Place::Lent {
                path: "/srv/repo".into(),
                handle: Some("1:00ff".into()),
            },
            identity: (4, 5),
            unattended: false,
            plan: None,
        }
    }

    fn records() -> (tempfile::TempDir, Records) {
        let base = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            base.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let state = StateDir::open(&base.path().join("state")).unwrap();
        let records = Records::open(&state).unwrap();
        (base, records)
    }

    #[test]
    fn records_are_kept_read_back_and_forgotten() {
        let (_base, records) = records();
        records.save(&record("a")).unwrap();
        records.save(&record("b")).unwrap();
        let loaded = records.load().unwrap();
        assert_eq!(loaded.len(), 2);
        assert_eq!(loaded[0].1.as_ref().unwrap(), &record("a"));
        records.remove("a").unwrap();
        let ids: Vec<String> = records
            .load()
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(ids, ["b"]);
    }

    #[test]
    fn damaged_and_foreign_records_are_told_apart_and_leftovers_removed() {
        let (base, records) = records();
        let dir = base.path().join("state/sessions");
        records.save(&record("good")).unwrap();
        std::fs::write(dir.join("cut.json"), "{\"version\": 1, \"id\": \"cu").unwrap();
        let mut other = record("x");
        other.id = "someone-else".into();
        std::fs::write(dir.join("x.json"), serde_json::to_vec(&other).unwrap()).unwrap();
        let mut future = record("f");
        future.version = VERSION + 1;
        std::fs::write(dir.join("f.json"), serde_json::to_vec(&future).unwrap()).unwrap();
        std::fs::write(dir.join(".good.json.1234.tmp"), "half").unwrap();
        // A link planted in place of a record is not followed.
        std::os::unix::fs::symlink("/etc/passwd", dir.join("link.json")).unwrap();
        let loaded: BTreeMap<String, Result<Record, String>> =
            records.load().unwrap().into_iter().collect();
        assert!(loaded["good"].is_ok());
        assert!(loaded["cut"].as_ref().unwrap_err().contains("unreadable"));
        assert!(loaded["x"].as_ref().unwrap_err().contains("someone-else"));
        assert!(loaded["f"].as_ref().unwrap_err().contains("version"));
        assert!(loaded["link"].is_err());
        assert!(!dir.join(".good.json.1234.tmp").exists());
    }
}

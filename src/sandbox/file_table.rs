//! The host's file table against the sessions: the open-files limit every
//! process in a session's container gets, and what a session at its limits
//! can hold of the host's `fs.file-max`.
//!
//! The kernel's table of open files is one for the whole host: past
//! `fs.file-max`, every process on it (the service, the engine, every
//! session) gets ENFILE. A session's worst case is its pids limit times
//! [`NOFILE`]. The check at start says what that is on this host; it warns
//! rather than refuses, because the table can be raised at run time
//! (`sysctl fs.file-max`) and each open file also costs kernel memory that
//! is charged to the session's own memory limit.

/// Open files per process in a session's container, soft and hard alike
/// (a command cannot raise it): the usual soft default of Linux systems,
/// the one test suites are written against. With the default 256 pids a
/// session holds at most 262,144 open files.
pub const NOFILE: u64 = 1024;

/// Largest share of the host's table one session at the default limits
/// may hold before the start warns (one eighth).
const WARN_SHARE: f64 = 0.125;

/// Where the kernel says how big the table is.
const FILE_MAX: &str = "/proc/sys/fs/file-max";

/// What one session may hold of the host's file table.
#[derive(Debug, Clone, PartialEq)]
pub struct FileTable {
    /// The host's `fs.file-max`.
    pub file_max: u64,
    /// Open files a session at the default pids limit may hold.
    pub default_session: u64,
    /// Open files a session at the pids ceiling may hold.
    pub max_session: u64,
    /// Sessions at the default limits that together fill the table.
    pub sessions_to_fill: u64,
}

impl FileTable {
    /// The figures for `file_max`, sessions of `default_pids` (ceiling
    /// `max_pids`) processes.
    pub fn new(file_max: u64, default_pids: u64, max_pids: u64) -> FileTable {
        let default_session = default_pids.saturating_mul(NOFILE);
        FileTable {
            file_max,
            default_session,
            max_session: max_pids.saturating_mul(NOFILE),
            sessions_to_fill: file_max.checked_div(default_session).unwrap_or(u64::MAX),
        }
    }

    /// Reads the host's `fs.file-max`.
    pub fn read(default_pids: u64, max_pids: u64) -> std::io::Result<FileTable> {
        let text = std::fs::read_to_string(FILE_MAX)?;
        let file_max = text
            .trim()
            .parse::<u64>()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        Ok(Self::new(file_max, default_pids, max_pids))
    }

    /// Share of the table (0..) one session at the default limits holds.
    pub fn default_share(&self) -> f64 {
        self.default_session as f64 / self.file_max.max(1) as f64
    }

    /// Share of the table one session at the pids ceiling holds.
    pub fn max_share(&self) -> f64 {
        self.max_session as f64 / self.file_max.max(1) as f64
    }

    /// Whether one session at the default limits holds too large a share.
    pub fn too_large(&self) -> bool {
        self.default_share() > WARN_SHARE
    }

    /// Says in the log what was found; `max_sessions` is the operator's
    /// ceiling on open sessions.
    pub fn log(&self, max_sessions: usize) {
        tracing::info!(
            file_max = self.file_max,
            nofile = NOFILE,
            session_files = self.default_session,
            session_share_pct = format!("{:.1}", self.default_share() * 100.0),
            ceiling_session_files = self.max_session,
            ceiling_share_pct = format!("{:.1}", self.max_share() * 100.0),
            sessions_to_fill = self.sessions_to_fill,
            max_sessions,
            "host file table: what a session at its limits may hold"
        );
        if self.too_large() {
            tracing::warn!(
                file_max = self.file_max,
                session_files = self.default_session,
                "one session at the default limits may hold more than an eighth of the host's \
                 file table; raise fs.file-max (sysctl) or lower --pids"
            );
        }
    }
}

/// Reads the host's table and says in the log what sessions of
/// `default` limits (ceiling `max`) may hold of it.
pub fn check(default: &super::Limits, max: &super::Limits, max_sessions: usize) {
    match FileTable::read(default.pids, max.pids) {
        Ok(table) => table.log(max_sessions),
        Err(e) => tracing::warn!(
            error = %e,
            "cannot read {FILE_MAX}: what sessions may hold of the host's file table is unchecked"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_session_is_a_small_share_of_a_usual_table() {
        // The table of a host like the one this was measured on.
        let t = FileTable::new(2_466_239, 256, 4096);
        assert_eq!(t.default_session, 262_144);
        assert!(t.default_share() < 0.11, "{}", t.default_share());
        assert!(!t.too_large());
        assert_eq!(t.sessions_to_fill, 9);
        assert_eq!(t.max_session, 4096 * 1024);
    }

    #[test]
    fn a_small_table_is_warned_of() {
        let t = FileTable::new(1_000_000, 256, 4096);
        assert!(t.too_large());
        let t = FileTable::new(0, 256, 4096);
        assert!(t.too_large());
        assert_eq!(FileTable::new(10, 0, 0).sessions_to_fill, u64::MAX);
    }

    #[test]
    fn this_host_has_a_table() {
        let t = FileTable::read(256, 4096).unwrap();
        assert!(t.file_max > 0);
    }
}

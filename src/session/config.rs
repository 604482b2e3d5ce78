//! Operator settings for sessions, containers and commands, and the one rule
//! every request value set under an operator ceiling follows ([`pick`]): 0
//! means the operator's default, above the ceiling is refused. Refused, not
//! lowered: a caller that asked for more than it may have learns so, with
//! the ceiling, instead of silently getting less.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use super::approvals::ApprovalConfig;
use super::defaults;
use super::error::Error;
use crate::environment::BuildConfig;
use crate::policy::guard::SlipGuard;
use crate::sandbox;
use crate::workspace::Limits;
use crate::workspace::archive::UploadLimits;
use crate::workspace::tree::ScanLimits;

/// Operator settings for sessions.
#[derive(Debug, Clone)]
pub struct Config {
    /// The service's private state directory (fresh workspaces, pins,
    /// supervisor sockets); created 0700 if missing, refused if unsafe.
    pub state_dir: PathBuf,
    /// Existing host directories may be used as workspaces only under these.
    pub allowed_roots: Vec<PathBuf>,
    /// Idle timeout when the request says 0.
    pub default_ttl: Duration,
    /// Ceiling on a requested idle timeout.
    pub max_ttl: Duration,
    /// Ceiling on open sessions.
    pub max_sessions: usize,
    /// The operator's rules for every session: its deny globs and ask rules
    /// (sessions can add more; the other fields are not read).
    pub rules: crate::policy::Rules,
    /// Plans and `ask` calls waiting for a person.
    pub approvals: ApprovalConfig,
    /// Directory where each session's journal is appended as JSON lines
    /// and kept after it closes; without one, journals are kept in the
    /// state directory until their session closes.
    pub journal_dir: Option<PathBuf>,
    /// Ceiling of one session's journal files together.
    pub journal_max_bytes: u64,
    /// Sessions outlive the service: each is recorded in the state
    /// directory, a stop keeps them (only their containers go), and the
    /// next start brings them back. Off for private, embedded services.
    pub durable: bool,
    /// File tool limits.
    pub limits: Limits,
    /// Containers and commands.
    pub sandbox: SandboxConfig,
    /// Whether every caller may build and delete environments (otherwise
    /// only callers the server vouches for, e.g. by the build token).
    pub allow_builds: bool,
    /// How environments are built.
    pub builds: BuildConfig,
    /// Checkpoints and changes.
    pub history: HistoryConfig,
    /// Archives in and out.
    pub archives: ArchiveConfig,
    /// Downloads that run at once over the whole service; more wait.
    pub download_slots: std::sync::Arc<tokio::sync::Semaphore>,
    /// Uploads that run at once over the whole service; more wait, their
    /// streams unread (each running one holds a blocking thread and a few
    /// chunks in memory).
    pub upload_slots: std::sync::Arc<tokio::sync::Semaphore>,
    /// Readers of process output over the whole service
    /// ([`defaults::OUTPUT_READERS`]); past it, a reader is refused.
    pub output_readers: std::sync::Arc<tokio::sync::Semaphore>,
    /// Which sessions hold an upload or download slot: one of each kind
    /// per session, so that one session never holds them all.
    pub transfer_shares: std::sync::Arc<super::slots::Shares>,
    /// Where the service's counters go; `None`: nothing is measured.
    pub metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
}

/// Operator settings for archives in and out of workspaces.
#[derive(Debug, Clone, Copy)]
pub struct ArchiveConfig {
    /// Ceilings of one upload.
    pub upload: UploadLimits,
    /// Bytes a download carries when the request says 0.
    pub download_bytes: u64,
    /// Ceiling on a requested download size.
    pub max_download_bytes: u64,
    /// Longest a transfer waits for its caller (the next chunk of an
    /// upload, room for the next chunk of a download) before giving up.
    pub stall: Duration,
    /// The pace a transfer holding a slot must keep up (see
    /// [`super::slots`]): a caller that trickles is stopped.
    pub min_rate: super::slots::MinRate,
}

impl Default for ArchiveConfig {
    fn default() -> Self {
        ArchiveConfig {
            upload: UploadLimits {
                max_bytes: defaults::UPLOAD_BYTES,
                max_file_bytes: defaults::UPLOAD_FILE_BYTES,
                max_entries: defaults::UPLOAD_ENTRIES,
                max_path_bytes: 4096,
                max_ratio: defaults::UPLOAD_RATIO,
            },
            download_bytes: defaults::DOWNLOAD_BYTES,
            max_download_bytes: defaults::MAX_DOWNLOAD_BYTES,
            stall: Duration::from_secs(defaults::TRANSFER_STALL_SECS),
            min_rate: super::slots::MinRate {
                bytes_per_sec: defaults::TRANSFER_MIN_RATE,
                grace: Duration::from_secs(defaults::TRANSFER_GRACE_SECS),
            },
        }
    }
}

/// Operator settings for checkpoints and changes.
#[derive(Debug, Clone, Copy)]
pub struct HistoryConfig {
    /// Checkpoints a session keeps at once.
    pub max_checkpoints: usize,
    /// Most memory a session's checkpoint pictures take together.
    pub max_memory: usize,
    /// Most changed paths listed.
    pub max_changes: usize,
    /// Bytes of patch when the request says 0.
    pub patch_bytes: u64,
    /// Ceiling on a requested patch size.
    pub max_patch_bytes: u64,
    /// Bounds of every picture of a workspace.
    pub scan: ScanLimits,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            max_checkpoints: defaults::MAX_CHECKPOINTS,
            max_memory: defaults::CHECKPOINT_MEMORY,
            max_changes: defaults::MAX_CHANGES,
            patch_bytes: defaults::PATCH_BYTES,
            max_patch_bytes: defaults::MAX_PATCH_BYTES,
            scan: ScanLimits::default(),
        }
    }
}

/// Operator settings for containers and commands.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Image when the request names none (always allowed).
    pub default_image: String,
    /// Further images sessions may name; any other is refused.
    pub allowed_images: Vec<String>,
    /// "uid:gid" for containers when the workspace is owned by root.
    pub default_user: (u32, u32),
    /// Limits when the request gives none.
    pub default_limits: sandbox::Limits,
    /// Ceilings on requested limits.
    pub max_limits: sandbox::Limits,
    /// Size of each container's /tmp.
    pub tmp_bytes: u64,
    /// Container runtime (e.g. "runsc"); `None` for the engine default.
    pub runtime: Option<String>,
    /// Service name: containers of earlier instances with this name are
    /// removed at startup.
    pub service: String,
    /// This process's id, on every container it starts.
    pub instance: String,
    /// The id of the state directory (set when the registry opens it), on
    /// every container it starts.
    pub state_id: String,
    /// Command timeout when the request gives none.
    pub default_timeout: Duration,
    /// Ceiling on a requested timeout.
    pub max_timeout: Duration,
    /// Characters kept per stream when the request gives none.
    pub default_cap: u64,
    /// Ceiling on a requested cap.
    pub max_cap: u64,
    /// Long-running processes a session may have running at once.
    pub max_processes: usize,
    /// Bytes kept per output stream of each process (head and tail).
    pub process_output_bytes: u64,
    /// The slip guard.
    pub guard: SlipGuard,
    /// Environment of every container; a session's own env overrides it.
    pub default_env: BTreeMap<String, String>,
    /// Host path of the static sandboxd binary mounted as the in-container
    /// supervisor; `None` runs each command as its own Docker exec.
    pub supervisor: Option<PathBuf>,
    /// Host path of the program each container with a supervisor keeps
    /// alive as its main process (see [`sandbox::supervisor::idle`]);
    /// `None`: `sandboxd idle`. Set by the registry.
    pub idle: Option<PathBuf>,
    /// Warm containers kept ready for new fresh-workspace sessions.
    pub pool_size: usize,
    /// Warm containers kept ready for new sessions over an existing
    /// directory (each lent its directory when taken; see `volume::slot`).
    pub lent_pool_size: usize,
    /// Warm containers kept ready per environment, by name.
    pub environment_pools: BTreeMap<String, usize>,
    /// The supervisor connects to a socket the service listens on (Docker
    /// on this host only); otherwise frames travel over the supervisor
    /// exec's stdio.
    pub socket_link: bool,
}

impl SandboxConfig {
    /// Defaults for service `service`.
    pub fn new(service: &str) -> SandboxConfig {
        SandboxConfig {
            default_image: sandbox::image::default_image(),
            allowed_images: Vec::new(),
            default_user: defaults::COMMAND_USER,
            default_limits: sandbox::Limits {
                memory_bytes: defaults::MEMORY_BYTES,
                nano_cpus: defaults::NANO_CPUS,
                pids: defaults::PIDS,
                disk_bytes: defaults::DISK_BYTES,
                inodes: defaults::INODES,
            },
            max_limits: sandbox::Limits {
                memory_bytes: defaults::MAX_MEMORY_BYTES,
                nano_cpus: defaults::MAX_NANO_CPUS,
                pids: defaults::MAX_PIDS,
                disk_bytes: defaults::MAX_DISK_BYTES,
                inodes: defaults::MAX_INODES,
            },
            tmp_bytes: defaults::TMP_BYTES,
            runtime: None,
            service: service.to_string(),
            instance: uuid::Uuid::new_v4().simple().to_string()[..16].to_string(),
            state_id: String::new(),
            default_timeout: Duration::from_millis(defaults::TIMEOUT_MS),
            max_timeout: Duration::from_millis(defaults::MAX_TIMEOUT_MS),
            default_cap: defaults::OUTPUT_CAP,
            max_cap: defaults::MAX_OUTPUT_CAP,
            max_processes: defaults::MAX_PROCESSES,
            process_output_bytes: defaults::PROCESS_OUTPUT_BYTES,
            guard: SlipGuard::new(true, &[])
                .unwrap_or_else(|_| unreachable!("built-in rules compile")),
            supervisor: None,
            idle: None,
            pool_size: 0,
            lent_pool_size: 0,
            environment_pools: BTreeMap::new(),
            socket_link: false,
            default_env: BTreeMap::from([
                ("HOME".to_string(), "/tmp".to_string()),
                ("LANG".to_string(), "C.UTF-8".to_string()),
                // Python caches bytecode keyed on the source's mtime in whole
                // seconds and its size: an edit in the same second as the
                // last run, keeping the size, would run stale code.
                ("PYTHONDONTWRITEBYTECODE".to_string(), "1".to_string()),
                // git refuses a repository owned by another uid ("dubious
                // ownership"), which a checkout owned by root always is for
                // commands. The check guards a user from someone else's
                // repository config; in the sandbox the repository is the
                // work itself, and nothing runs with more than its rights.
                ("GIT_CONFIG_COUNT".to_string(), "1".to_string()),
                ("GIT_CONFIG_KEY_0".to_string(), "safe.directory".to_string()),
                ("GIT_CONFIG_VALUE_0".to_string(), "*".to_string()),
            ]),
        }
    }
}

impl Config {
    /// Defaults suitable for one machine, with state in `state_dir`; no
    /// existing directories allowed.
    pub fn new(state_dir: PathBuf) -> Self {
        Config {
            state_dir,
            allowed_roots: Vec::new(),
            default_ttl: Duration::from_secs(defaults::TTL_SECS),
            max_ttl: Duration::from_secs(defaults::MAX_TTL_SECS),
            max_sessions: defaults::MAX_SESSIONS,
            rules: crate::policy::Rules::default(),
            approvals: ApprovalConfig {
                timeout: defaults::APPROVAL_TIMEOUT,
                absent_after: defaults::APPROVER_ABSENT_AFTER,
                max_pending: defaults::MAX_PENDING_APPROVALS,
                max_pending_per_session: defaults::MAX_PENDING_APPROVALS_PER_SESSION,
            },
            journal_dir: None,
            journal_max_bytes: crate::journal::DEFAULT_MAX_FILE_BYTES,
            durable: false,
            limits: Limits {
                max_file_bytes: defaults::MAX_FILE_BYTES,
                ..Limits::default()
            },
            sandbox: SandboxConfig::new(defaults::SERVICE_NAME),
            allow_builds: false,
            builds: BuildConfig {
                default_base: sandbox::image::alias(),
                ca_cert: None,
                proxy: BTreeMap::new(),
                timeout: Duration::from_secs(defaults::BUILD_TIMEOUT_SECS),
                max_timeout: Duration::from_secs(defaults::MAX_BUILD_TIMEOUT_SECS),
                max_context_bytes: defaults::BUILD_CONTEXT_BYTES,
                output_cap: defaults::BUILD_OUTPUT_CAP,
                max_output_cap: defaults::MAX_BUILD_OUTPUT_CAP,
                max_running: defaults::MAX_RUNNING_BUILDS as usize,
                owner: BTreeMap::new(),
            },
            history: HistoryConfig::default(),
            archives: ArchiveConfig::default(),
            download_slots: std::sync::Arc::new(tokio::sync::Semaphore::new(defaults::DOWNLOADS)),
            upload_slots: std::sync::Arc::new(tokio::sync::Semaphore::new(defaults::UPLOADS)),
            output_readers: std::sync::Arc::new(tokio::sync::Semaphore::new(
                defaults::OUTPUT_READERS,
            )),
            transfer_shares: std::sync::Arc::default(),
            metrics: None,
        }
    }
}

/// The value a request gets for `asked`: `default` when it is zero, `asked`
/// up to `max`, and above `max` a refusal naming `what` (the request field)
/// with both values shown in the field's unit by `shown`.
pub(super) fn pick<T: Copy + PartialOrd + Default>(
    what: &'static str,
    asked: T,
    default: T,
    max: T,
    shown: fn(T) -> u64,
) -> Result<T, Error> {
    if asked == T::default() {
        Ok(default)
    } else if asked > max {
        Err(Error::LimitExceeded {
            what,
            asked: shown(asked),
            max: shown(max),
        })
    } else {
        Ok(asked)
    }
}

/// A count, shown as it is.
fn count(n: u64) -> u64 {
    n
}

/// A time in a field counted in milliseconds.
fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// A time in a field counted in seconds.
fn secs(d: Duration) -> u64 {
    d.as_secs()
}

impl Config {
    /// The idle timeout of a session asking for `asked`.
    pub(super) fn ttl(&self, asked: Duration) -> Result<Duration, Error> {
        pick("ttl_seconds", asked, self.default_ttl, self.max_ttl, secs)
    }

    /// The time limit of a build asking for `asked`.
    pub(super) fn build_timeout(&self, asked: Duration) -> Result<Duration, Error> {
        let b = &self.builds;
        pick("timeout_seconds", asked, b.timeout, b.max_timeout, secs)
    }

    /// Bytes of patch for a GetChanges asking for `asked`.
    pub(super) fn pick_patch_bytes(&self, asked: u64) -> Result<usize, Error> {
        let h = &self.history;
        pick(
            "max_patch_bytes",
            asked,
            h.patch_bytes,
            h.max_patch_bytes,
            count,
        )
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Bytes of file contents for a download asking for `asked`.
    pub(super) fn download_bytes(&self, asked: u64) -> Result<u64, Error> {
        let a = &self.archives;
        pick(
            "max_bytes",
            asked,
            a.download_bytes,
            a.max_download_bytes,
            count,
        )
    }

    /// The output cap of a build asking for `asked`.
    pub(super) fn build_output_cap(&self, asked: u64) -> Result<u64, Error> {
        let b = &self.builds;
        pick("output_cap", asked, b.output_cap, b.max_output_cap, count)
    }
}

impl SandboxConfig {
    /// Limits for a request: defaults for zero fields, refused above the
    /// ceilings. A lent directory has no disk quota (it is not the
    /// service's filesystem), and asking for one there is refused.
    pub(super) fn limits(
        &self,
        asked: sandbox::Limits,
        lent: bool,
    ) -> Result<sandbox::Limits, Error> {
        let (default, max) = (&self.default_limits, &self.max_limits);
        let limits = sandbox::Limits {
            memory_bytes: pick(
                "memory_bytes",
                asked.memory_bytes,
                default.memory_bytes,
                max.memory_bytes,
                count,
            )?,
            nano_cpus: pick(
                "nano_cpus",
                asked.nano_cpus,
                default.nano_cpus,
                max.nano_cpus,
                count,
            )?,
            pids: pick("pids", asked.pids, default.pids, max.pids, count)?,
            disk_bytes: pick(
                "disk_bytes",
                asked.disk_bytes,
                default.disk_bytes,
                max.disk_bytes,
                count,
            )?
            .max(crate::volume::MIN_DISK_BYTES),
            inodes: pick("inodes", asked.inodes, default.inodes, max.inodes, count)?
                .max(crate::volume::MIN_INODES),
        };
        if !lent {
            return Ok(limits);
        }
        if asked.disk_bytes != 0 || asked.inodes != 0 {
            return Err(Error::InvalidArgument {
                field: "limits",
                why: "disk_bytes and inodes apply to fresh workspaces only: an existing \
                      directory lives on the host's own filesystem, which the service \
                      does not size; leave them 0"
                    .into(),
            });
        }
        Ok(sandbox::Limits {
            disk_bytes: 0,
            inodes: 0,
            ..limits
        })
    }

    /// The timeout of a command asking for `asked`, in a session whose
    /// commands default to `default`.
    pub(super) fn timeout(&self, asked: Duration, default: Duration) -> Result<Duration, Error> {
        pick("timeout_ms", asked, default, self.max_timeout, millis)
    }

    /// How long StartProcess waits for readiness when asked for `asked`.
    pub(super) fn ready_timeout(&self, asked: Duration) -> Result<Duration, Error> {
        let default = Duration::from_millis(defaults::READY_TIMEOUT_MS).min(self.max_timeout);
        pick("ready.timeout_ms", asked, default, self.max_timeout, millis)
    }

    /// The default timeout of a session's commands, for a session asking
    /// for `asked`: under the same ceiling as each command's.
    pub(super) fn session_timeout(&self, asked: Duration) -> Result<Duration, Error> {
        pick(
            "default_timeout_ms",
            asked,
            self.default_timeout,
            self.max_timeout,
            millis,
        )
    }

    /// Characters kept of one output stream (`what`) of a command asking
    /// for `asked`.
    pub(super) fn cap(&self, what: &'static str, asked: u64) -> Result<u64, Error> {
        pick(what, asked, self.default_cap, self.max_cap, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_gives_the_default_for_zero_and_refuses_above_the_ceiling() {
        assert_eq!(pick("pids", 0, 256, 4096, count).unwrap(), 256);
        assert_eq!(pick("pids", 1, 256, 4096, count).unwrap(), 1);
        assert_eq!(pick("pids", 4096, 256, 4096, count).unwrap(), 4096);
        assert!(matches!(
            pick("pids", 4097, 256, 4096, count),
            Err(Error::LimitExceeded {
                what: "pids",
                asked: 4097,
                max: 4096
            })
        ));
        let (default, max) = (Duration::from_secs(30), Duration::from_secs(60));
        assert_eq!(
            pick("timeout_ms", Duration::ZERO, default, max, millis).unwrap(),
            default
        );
        assert_eq!(pick("timeout_ms", max, default, max, millis).unwrap(), max);
        assert!(matches!(
            pick(
                "timeout_ms",
                max + Duration::from_millis(1),
                default,
                max,
                millis
            ),
            Err(Error::LimitExceeded {
                what: "timeout_ms",
                asked: 60_001,
                max: 60_000
            })
        ));
    }

    #[test]
    fn a_ttl_above_the_ceiling_is_refused_not_lowered() {
        let config = Config::new(PathBuf::from("/nonexistent"));
        let max = Duration::from_secs(defaults::MAX_TTL_SECS);
        assert_eq!(config.ttl(Duration::ZERO).unwrap(), config.default_ttl);
        assert_eq!(config.ttl(max).unwrap(), max);
        assert!(matches!(
            config.ttl(max + Duration::from_secs(1)),
            Err(Error::LimitExceeded { what: "ttl_seconds", asked, max: m })
                if asked == defaults::MAX_TTL_SECS + 1 && m == defaults::MAX_TTL_SECS
        ));
    }
}

//! The flags of `serve` about what one command and one container may take:
//! command timeouts, output caps and the container limits, each as a
//! default for a request that gives none and a ceiling on one that does.

use std::time::Duration;

use clap::Args;
use sandboxd::sandbox::Limits;
use sandboxd::session::{SandboxConfig, defaults};

/// Command and container limits.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Command timeout when the request gives none, in milliseconds.
    #[arg(long, env = "SANDBOXD_DEFAULT_TIMEOUT_MS", default_value_t = defaults::TIMEOUT_MS)]
    default_timeout_ms: u64,
    /// Ceiling on a requested command timeout, in milliseconds.
    #[arg(long, env = "SANDBOXD_MAX_TIMEOUT_MS", default_value_t = defaults::MAX_TIMEOUT_MS)]
    max_timeout_ms: u64,
    /// Characters kept per output stream when the request gives none.
    #[arg(long, env = "SANDBOXD_DEFAULT_OUTPUT_CAP", default_value_t = defaults::OUTPUT_CAP)]
    default_output_cap: u64,
    /// Ceiling on a requested output cap.
    #[arg(long, env = "SANDBOXD_MAX_OUTPUT_CAP", default_value_t = defaults::MAX_OUTPUT_CAP)]
    max_output_cap: u64,
    /// Container memory limit when the session asks for none, in bytes.
    #[arg(long, env = "SANDBOXD_MEMORY_BYTES", default_value_t = defaults::MEMORY_BYTES)]
    memory_bytes: u64,
    /// Ceiling on a session's memory limit, in bytes.
    #[arg(long, env = "SANDBOXD_MAX_MEMORY_BYTES", default_value_t = defaults::MAX_MEMORY_BYTES)]
    max_memory_bytes: u64,
    /// Container CPU quota when the session asks for none (1e9 = one CPU).
    #[arg(long, env = "SANDBOXD_NANO_CPUS", default_value_t = defaults::NANO_CPUS)]
    nano_cpus: u64,
    /// Ceiling on a session's CPU quota.
    #[arg(long, env = "SANDBOXD_MAX_NANO_CPUS", default_value_t = defaults::MAX_NANO_CPUS)]
    max_nano_cpus: u64,
    /// Container process limit when the session asks for none.
    #[arg(long, env = "SANDBOXD_PIDS", default_value_t = defaults::PIDS)]
    pids: u64,
    /// Ceiling on a session's process limit.
    #[arg(long, env = "SANDBOXD_MAX_PIDS", default_value_t = defaults::MAX_PIDS)]
    max_pids: u64,
    /// Disk quota of a fresh workspace when the session asks for none, in
    /// bytes (each fresh workspace is its own filesystem of this size).
    #[arg(long, env = "SANDBOXD_DISK_BYTES", default_value_t = defaults::DISK_BYTES)]
    disk_bytes: u64,
    /// Ceiling on a session's disk quota, in bytes.
    #[arg(long, env = "SANDBOXD_MAX_DISK_BYTES", default_value_t = defaults::MAX_DISK_BYTES)]
    max_disk_bytes: u64,
    /// Files and directories a fresh workspace may hold when the session
    /// asks for no other number.
    #[arg(long, env = "SANDBOXD_INODES", default_value_t = defaults::INODES)]
    inodes: u64,
    /// Ceiling on a session's inode quota.
    #[arg(long, env = "SANDBOXD_MAX_INODES", default_value_t = defaults::MAX_INODES)]
    max_inodes: u64,
    /// Size of each container's /tmp tmpfs, in bytes.
    #[arg(long, env = "SANDBOXD_TMP_BYTES", default_value_t = defaults::TMP_BYTES)]
    tmp_bytes: u64,
    /// Long-running processes (StartProcess) a session may have running at
    /// once.
    #[arg(long, env = "SANDBOXD_MAX_PROCESSES", default_value_t = defaults::MAX_PROCESSES as u64,
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    max_processes: u64,
    /// Bytes of output kept per stream of each process: the first quarter
    /// and the most recent rest (at most 64 MiB).
    #[arg(long, env = "SANDBOXD_PROCESS_OUTPUT_BYTES", default_value_t = defaults::PROCESS_OUTPUT_BYTES,
          value_parser = clap::value_parser!(u64).range(4096..=defaults::MAX_PROCESS_OUTPUT_BYTES))]
    process_output_bytes: u64,
}

impl LimitArgs {
    /// Puts the defaults and ceilings in `sandbox`.
    pub fn apply(&self, sandbox: &mut SandboxConfig) {
        sandbox.default_limits = Limits {
            memory_bytes: self.memory_bytes,
            nano_cpus: self.nano_cpus,
            pids: self.pids,
            disk_bytes: self.disk_bytes,
            inodes: self.inodes,
        };
        sandbox.max_limits = Limits {
            memory_bytes: self.max_memory_bytes,
            nano_cpus: self.max_nano_cpus,
            pids: self.max_pids,
            disk_bytes: self.max_disk_bytes,
            inodes: self.max_inodes,
        };
        sandbox.tmp_bytes = self.tmp_bytes;
        sandbox.default_timeout = Duration::from_millis(self.default_timeout_ms);
        sandbox.max_timeout = Duration::from_millis(self.max_timeout_ms);
        sandbox.default_cap = self.default_output_cap;
        sandbox.max_cap = self.max_output_cap;
        sandbox.max_processes = self.max_processes as usize;
        sandbox.process_output_bytes = self.process_output_bytes;
    }
}

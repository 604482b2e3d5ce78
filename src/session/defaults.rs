//! The operator's defaults and ceilings, written once: [`super::Config::new`]
//! and [`super::SandboxConfig::new`] start from them, and `serve`'s flags
//! show them as their defaults.

/// The uid and gid commands run as where the workspace is root's (a fresh
/// workspace, root's checkout through an id-mapped pin). A host account
/// with the commands' uid would pass the kernel's same-user checks on
/// their processes (their view through `/proc/<pid>/root`, signals), so it
/// is an id no account has: above the ranges useradd delegates for user
/// namespaces (up to 600,100,000 by default) and those systemd hands to
/// containers (to 0x6FFFFFFF). `serve` warns when `/etc/passwd` or
/// `/etc/subuid` gives it to somebody (`--command-user` chooses another).
pub const COMMAND_USER: (u32, u32) = (1_900_000_000, 1_900_000_000);

/// Idle timeout of a session that asks for none, in seconds.
pub const TTL_SECS: u64 = 3600;
/// Ceiling on a requested idle timeout, in seconds.
pub const MAX_TTL_SECS: u64 = 24 * 3600;
/// Ceiling on open sessions.
pub const MAX_SESSIONS: usize = 256;
/// Largest file the file tools read, edit or create, in bytes.
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Name of the service (labels its containers, names its state directory).
pub const SERVICE_NAME: &str = "sandboxd";
/// Command timeout when the request gives none, in milliseconds.
pub const TIMEOUT_MS: u64 = 30_000;
/// Ceiling on a requested command timeout, in milliseconds.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// Characters kept per output stream when the request gives none.
pub const OUTPUT_CAP: u64 = 4000;
/// Ceiling on a requested output cap.
pub const MAX_OUTPUT_CAP: u64 = 1_000_000;
/// Long-running processes a session may have running at once.
pub const MAX_PROCESSES: usize = 16;
/// Readers of process output (ReadProcessOutput) over the whole service.
pub const OUTPUT_READERS: usize = 512;
/// Bytes of output kept per stream of each process: its head (a quarter)
/// and its most recent tail.
pub const PROCESS_OUTPUT_BYTES: u64 = 256 << 10;
/// Ceiling on the operator's setting of [`PROCESS_OUTPUT_BYTES`].
pub const MAX_PROCESS_OUTPUT_BYTES: u64 = 64 << 20;
/// How long StartProcess waits for readiness when the request gives no
/// time limit.
pub const READY_TIMEOUT_MS: u64 = 30_000;
/// Container memory limit when the session asks for none, in bytes.
pub const MEMORY_BYTES: u64 = 1 << 30;
/// Ceiling on a session's memory limit, in bytes.
pub const MAX_MEMORY_BYTES: u64 = 8 << 30;
/// Container CPU quota when the session asks for none (1e9 = one CPU).
pub const NANO_CPUS: u64 = 1_000_000_000;
/// Ceiling on a session's CPU quota.
pub const MAX_NANO_CPUS: u64 = 2_000_000_000;
/// Container process limit when the session asks for none.
pub const PIDS: u64 = 256;
/// Ceiling on a session's process limit.
pub const MAX_PIDS: u64 = 4096;
/// Disk quota of a fresh workspace when the session asks for none, in bytes.
pub const DISK_BYTES: u64 = 8 << 30;
/// Ceiling on a session's disk quota, in bytes.
pub const MAX_DISK_BYTES: u64 = 64 << 30;
/// Files and directories a fresh workspace may hold by default.
pub const INODES: u64 = 1 << 20;
/// Ceiling on a session's inode quota.
pub const MAX_INODES: u64 = 16 << 20;
/// Size of each container's /tmp tmpfs, in bytes.
pub const TMP_BYTES: u64 = 256 << 20;
/// Warm containers `serve` keeps ready. A [`super::Config`] built in
/// process keeps none unless asked.
pub const POOL_SIZE: usize = 4;
/// Warm containers `serve` keeps ready for sessions over an existing
/// directory.
pub const LENT_POOL_SIZE: usize = 1;
/// Time an environment build may take unless the caller asks otherwise,
/// in seconds.
pub const BUILD_TIMEOUT_SECS: u64 = 20 * 60;
/// Ceiling on a build's requested time limit, in seconds.
pub const MAX_BUILD_TIMEOUT_SECS: u64 = 2 * 3600;
/// Bytes of build context (with the Dockerfile) a build may be sent.
pub const BUILD_CONTEXT_BYTES: u64 = 8 << 20;
/// Ceiling on the operator's build context setting: the context travels in
/// one request message, which must stay under the transport's limit.
pub const MAX_BUILD_CONTEXT_BYTES: u64 = 15 << 20;
/// Bytes of build output streamed unless the caller asks otherwise.
pub const BUILD_OUTPUT_CAP: u64 = 64 << 10;
/// Ceiling on a build's requested output cap.
pub const MAX_BUILD_OUTPUT_CAP: u64 = 4 << 20;
/// Environment builds that run at once; more wait for a turn.
pub const MAX_RUNNING_BUILDS: u64 = 2;
/// Checkpoints a session keeps at once.
pub const MAX_CHECKPOINTS: usize = 100;
/// Bytes of service memory a session's checkpoint pictures may take.
pub const CHECKPOINT_MEMORY: usize = 256 << 20;
/// Most changed paths GetChanges lists.
pub const MAX_CHANGES: usize = 10_000;
/// Bytes of patch GetChanges returns unless the caller asks otherwise.
pub const PATCH_BYTES: u64 = 1 << 20;
/// Ceiling on a requested patch size: the reply must stay under the 4 MiB
/// message limit gRPC clients have by default.
pub const MAX_PATCH_BYTES: u64 = 3 << 20;
/// Bytes of file contents one upload may bring.
pub const UPLOAD_BYTES: u64 = 1 << 30;
/// Largest file one upload may bring.
pub const UPLOAD_FILE_BYTES: u64 = 512 << 20;
/// Most entries of one uploaded archive.
pub const UPLOAD_ENTRIES: u64 = 200_000;
/// Most bytes of tar per byte of gzip an upload may expand to.
pub const UPLOAD_RATIO: u64 = 200;
/// Bytes of file contents a download carries unless the caller asks
/// otherwise.
pub const DOWNLOAD_BYTES: u64 = 1 << 30;
/// Ceiling on a requested download size.
pub const MAX_DOWNLOAD_BYTES: u64 = 16 << 30;
/// Seconds a transfer waits for a caller that sends or reads nothing.
pub const TRANSFER_STALL_SECS: u64 = 60;
/// Bytes per second a transfer must keep up, counted over the time it
/// waits for its caller (64 KiB/s: 512 kbit/s, a slow link).
pub const TRANSFER_MIN_RATE: u64 = 64 << 10;
/// Seconds a transfer may fall behind [`TRANSFER_MIN_RATE`].
pub const TRANSFER_GRACE_SECS: u64 = 30;
/// Uploads that run at once over the whole service.
pub const UPLOADS: usize = 4;
/// Downloads that run at once over the whole service.
pub const DOWNLOADS: usize = 4;
/// Connections open at once on the service's listener.
pub const MAX_CONNECTIONS: u64 = 1024;
/// Seconds a connection has to make a call with a valid token (after its
/// TLS and HTTP/2 handshakes) before it is closed.
pub const HANDSHAKE_SECS: u64 = 10;
/// Connections one session's token keeps open at once (past them, its
/// further connections are closed at the handshake deadline).
pub const SESSION_CONNECTIONS: u64 = 16;
/// How long a plan or an `ask` call waits for a person before it is
/// rejected ("nobody answered").
pub const APPROVAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10 * 60);
/// With no approver seen for this long, nothing waits for one.
pub const APPROVER_ABSENT_AFTER: std::time::Duration = std::time::Duration::from_secs(10 * 60);
/// Plans and calls waiting for a person at once, over the whole service.
pub const MAX_PENDING_APPROVALS: usize = 256;
/// Plans and calls one session may have waiting at once.
pub const MAX_PENDING_APPROVALS_PER_SESSION: usize = 4;
/// Longest a ListPendingApprovals may wait for something to be pending.
pub const MAX_APPROVALS_WAIT: std::time::Duration = std::time::Duration::from_secs(60);
/// Address `serve` listens on, and clients call.
pub const LISTEN: &str = "127.0.0.1:50051";
/// Where clients call when told nothing else: [`LISTEN`] over plain HTTP/2.
pub const ADDR: &str = "http://127.0.0.1:50051";

#[cfg(test)]
mod tests {
    #[test]
    fn clients_call_where_the_service_listens() {
        assert_eq!(super::ADDR, format!("http://{}", super::LISTEN));
    }
}

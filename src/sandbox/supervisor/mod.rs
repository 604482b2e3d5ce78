//! The in-container supervisor, both sides of it.
//!
//! A container with a supervisor runs one long-lived process in it,
//! [`inside`] (`sandboxd supervise`), which spawns every command of the
//! session, caps its output at the source and runs the TERM / KILL ladder
//! on its process group. The service drives it from the host through a
//! [`host::Link`], the only way a result reaches a caller, and stays the
//! hard stop: it kills the container when the supervisor cannot stop a
//! command. The two talk in [`frames`], a private protocol: both ends are
//! this binary.
//!
//! The files are named for the side of the container they run on, because
//! that is what decides what each may trust: [`host`] runs in the service
//! and trusts nothing the container sends; [`inside`] runs in the container,
//! as root there, beside the commands it supervises.

pub mod frames;
pub mod host;
pub mod idle;
pub mod inside;

/// Where the supervisor binary is mounted in every container.
pub const MOUNT_PATH: &str = "/.sandboxd/sandboxd";
/// Where the container's socket directory is mounted (read-only).
pub const RUN_PATH: &str = "/.sandboxd/run";
/// Where the workspace is mounted in every container.
pub const WORKSPACE_PATH: &str = "/workspace";
/// The socket's name in that directory.
const SOCKET: &str = "sock";
/// The user the supervisor runs as in the container: not the commands'.
pub const SUPERVISOR_USER: &str = "0:0";
/// Capabilities the container keeps for its supervisor alone (commands run
/// as another user, so theirs are empty): switching to the commands' user
/// and signalling their process groups.
pub const SUPERVISOR_CAPS: [&str; 3] = ["SETUID", "SETGID", "KILL"];

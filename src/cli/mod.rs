//! Command line: `serve` starts the service; client verbs call a running
//! service and print readable results. A refusal prints its reason and
//! message and exits non-zero.
//!
//! Everything here is the binary's own, one job a file: `serve` (the
//! service's flags and start-up), `token` (the token `serve` makes for a
//! loopback port and a client of the same user finds), `image`, `client`
//! (the client verbs), `connect` (reaching the service), `print` (showing
//! replies), `terminal` (neutralising what reaches a terminal), `env`
//! (environments), `checkpoint` (changes and checkpoints), `transfer`
//! (archives in and out, patches), `process` (long-running processes),
//! `approvals` (a person deciding plans and `ask` calls), `mcp` (the tools
//! of a session for MCP clients), `demo` and `bench`. The library never
//! depends on any of it.

mod approvals;
pub mod bench;
mod checkpoint;
pub mod client;
mod connect;
pub mod demo;
mod env;
pub mod image;
mod logfmt;
pub mod mcp;
mod print;
mod process;
pub mod serve;
mod terminal;
mod token;
mod transfer;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Exit code of a refused call or a failure to reach the service.
pub const EXIT_FAILURE: u8 = 1;

/// Names the service whose state directory `serve` uses and in which a
/// client looks for the token (`--service-name` of `serve`).
const SERVICE_NAME_ENV: &str = "SANDBOXD_SERVICE_NAME";

/// Any failure the command line reports as `error: ...`.
pub type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// sandboxd: a sandbox service for coding agents.
#[derive(Debug, Parser)]
#[command(name = "sandboxd", version, about)]
pub struct Cli {
    /// Where the client verbs call.
    #[command(flatten)]
    pub target: client::Target,
    /// Bearer token: the one `serve` demands, or the one a client sends.
    #[arg(long, global = true, env = "SANDBOXD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The verbs. `--help` lists `serve`, `run` (a client verb, numbered 1
/// there), `image`, `demo` and `bench` first, then the other client verbs.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service.
    #[command(display_order = 0)]
    Serve(Box<serve::ServeArgs>),
    /// Build the default sandbox image if it is missing (also done by
    /// `serve` and on first use).
    #[command(subcommand, display_order = 2)]
    Image(image::ImageCommand),
    /// Show the whole loop on a small project: run the tests (red), read the
    /// code, fix it with an edit, run the tests again (green).
    #[command(display_order = 3)]
    Demo,
    /// Serve one session's tools to an MCP client (a coding agent) over
    /// stdio: `claude mcp add sandboxd -- sandboxd mcp`.
    #[command(display_order = 4)]
    Mcp(Box<mcp::McpArgs>),
    /// Measure sandboxd against Docker itself; writes BENCHMARKS.md.
    #[command(display_order = 5)]
    Bench(bench::BenchArgs),
    /// Waits forever: the main process of a container whose image may have
    /// nothing but a shell (started by the service, not by people).
    #[command(hide = true)]
    Idle,
    /// The in-container supervisor (started by the service, not by people).
    #[command(hide = true)]
    Supervise {
        /// Unix socket of the service to connect to (default: stdio).
        #[arg(long)]
        connect: Option<PathBuf>,
        /// "uid:gid" the commands run as (the supervisor itself runs as
        /// root, out of their reach).
        #[arg(long)]
        user: Option<String>,
        /// "dev:ino" `/workspace` must have: the supervisor refuses to
        /// serve a container whose workspace is another directory.
        #[arg(long)]
        workspace_identity: Option<String>,
    },
    /// The client verbs: `run`, `session`, `env`, `start`, `ps`, `logs`,
    /// `send`, `signal`, `stop`, `diff`, `checkpoint`,
    /// `upload`, `download`, `apply`, `read`, `create`, `edit`, `ls`,
    /// `find`, `report`, `approvals`, `approve`, `reject`, `grep`.
    #[command(flatten)]
    Client(client::Verb),
}

/// Warns when the token was given as `--token`: the command line of a
/// process is open to every local user.
pub fn warn_token_on_command_line() {
    if std::env::args().any(|a| a == "--token" || a.starts_with("--token=")) {
        eprintln!(
            "warning: a token on the command line is visible to every local user (ps, /proc); \
             pass it in SANDBOXD_TOKEN or a token file instead"
        );
    }
}

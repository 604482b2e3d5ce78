//! The client verbs: each calls a running service once and prints the
//! result through a `Console` (see `print`). A refusal prints its reason
//! and message and exits non-zero; `run` exits with the command's own code.
//! This file defines the verbs and their flags; `spec` holds the flags of
//! a new session, `discover` finds the service when no address is given
//! and `call` runs a verb.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use sandboxd::session::defaults;

use super::AnyError;

mod call;
mod discover;
mod export;
#[cfg(test)]
mod fake;
mod spec;

pub use call::run;
pub use spec::SessionSpec;

/// Which service the client verbs call, and which session they act on
/// (global flags: they may follow any verb).
#[derive(Debug, Args)]
pub struct Target {
    // The default is found by `Target::addr`, so that `mcp` can tell an
    // address given from none.
    #[arg(
        long,
        global = true,
        env = "SANDBOXD_ADDR",
        help = format!(
            "Address of the service, for client verbs: http://HOST:PORT, \
             https://HOST:PORT (with --ca-cert) or unix:/PATH [default: the \
             service on this machine: your own on $XDG_RUNTIME_DIR/{}, else \
             the system's on {} if you may use it, else {}]",
            discover::PRIVATE_SOCKET,
            discover::SYSTEM_SOCKET,
            defaults::ADDR
        )
    )]
    addr: Option<String>,
    /// CA certificate (PEM) that signed the service's TLS certificate, for
    /// https:// addresses.
    #[arg(long, global = true, env = "SANDBOXD_CA_CERT")]
    ca_cert: Option<PathBuf>,
    /// Session to act on, for file verbs.
    #[arg(short, long, global = true, env = "SANDBOXD_SESSION")]
    session: Option<String>,
    /// The session's own token (printed by `session create`), sent instead
    /// of the service's token on calls about a session.
    #[arg(
        long,
        global = true,
        env = "SANDBOXD_SESSION_TOKEN",
        hide_env_values = true
    )]
    session_token: Option<String>,
}

impl Target {
    /// The service the client verbs call: the one given, else the one
    /// found on this machine, trusted only as the user's own or root's
    /// (see `discover`).
    pub async fn service(&self) -> discover::Service {
        match &self.addr {
            Some(addr) => discover::Service::given(addr),
            None => discover::find().await,
        }
    }

    /// The address, if one was given (`--addr` or `SANDBOXD_ADDR`).
    pub fn given_addr(&self) -> Option<&str> {
        self.addr.as_deref()
    }

    /// The CA certificate for https:// addresses.
    pub fn ca_cert(&self) -> Option<&std::path::Path> {
        self.ca_cert.as_deref()
    }
}

/// The client verbs, flattened into the top-level command.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Run a shell command in the session's container, streaming its
    /// output; exits with the command's exit code (124 on timeout, 125 when its result is unknown).
    // Listed right after `serve` (see `super::Command`).
    #[command(display_order = 1)]
    Run {
        /// Working directory relative to the workspace.
        #[arg(long, default_value = "")]
        cwd: String,
        // The number is the service's built-in default, from where it is
        // written once.
        #[arg(long, default_value_t = 0, help = format!(
            "Timeout in milliseconds (0: server default, {} s)",
            defaults::TIMEOUT_MS / 1000
        ))]
        timeout_ms: u64,
        /// Extra environment, KEY=VALUE (repeatable).
        #[arg(long = "env", value_parser = parse_key_value)]
        env: Vec<(String, String)>,
        // As for --timeout-ms.
        #[arg(long, default_value_t = 0, help = format!(
            "Characters kept per stream (0: server default, {})",
            defaults::OUTPUT_CAP
        ))]
        cap: u64,
        /// Write the command's output exactly as it comes, also to a
        /// terminal (by default a terminal is shown its control characters,
        /// not sent them; a pipe or file always gets the exact bytes).
        #[arg(long)]
        raw: bool,
        /// The command (joined with spaces, run by /bin/sh -c).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Create, inspect, list and close sessions.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Build, list and delete environments: images with a project's
    /// toolchain, built with network, run without.
    #[command(subcommand)]
    Env(super::env::EnvCommand),
    /// Long-running processes: `start`, `ps`, `logs`, `send`, `signal`,
    /// `stop`.
    #[command(flatten)]
    Process(super::process::ProcessVerb),
    /// Print what changed in the workspace since the session began (or
    /// since a checkpoint) as a patch `git apply` takes: `sandboxd diff >
    /// fix.patch`. Exits 1 when changes are missing from it.
    Diff {
        /// Compare with this checkpoint instead of the session's start.
        #[arg(long, default_value = "")]
        since: String,
        /// Bytes of patch at most (0: server default, 1 MiB).
        #[arg(long, default_value_t = 0)]
        max_bytes: u64,
        /// List the changed paths (A/M/D) instead of the patch.
        #[arg(long)]
        stat: bool,
    },
    /// Take, list, restore and delete checkpoints of the workspace.
    #[command(subcommand)]
    Checkpoint(super::checkpoint::CheckpointCommand),
    /// Bring a directory (packed here) or a .tar / .tar.gz file into the
    /// workspace; nothing lands unless all of it is safe.
    Upload {
        /// A directory, or an archive file.
        path: PathBuf,
        /// Directory of the workspace to extract into (default: its root).
        #[arg(long, default_value = "")]
        to: String,
    },
    /// Write a tar archive of the workspace (or one of its directories or
    /// files) to -o FILE or to stdout.
    Download {
        /// Workspace-relative directory or file (default: everything).
        #[arg(default_value = "")]
        path: String,
        /// Where to write the archive.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Leave out what .gitignore ignores, and .git.
        #[arg(long)]
        gitignore: bool,
        /// Compress with gzip.
        #[arg(long)]
        gzip: bool,
    },
    /// Apply a unified diff (from FILE or stdin) to the workspace, all or
    /// nothing.
    Apply {
        /// The patch (default: stdin).
        file: Option<PathBuf>,
    },
    /// Print lines of a file, numbered.
    Read {
        /// Workspace-relative path.
        path: String,
        /// First line (1-based).
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Number of lines (0: server default).
        #[arg(long, default_value_t = 0)]
        limit: u64,
        /// Print the content only, without numbers or summary (on a
        /// terminal, control characters are still shown, not sent).
        #[arg(long)]
        raw: bool,
    },
    /// Create a new file from --content, --from or standard input.
    Create {
        /// Workspace-relative path.
        path: String,
        /// File content.
        #[arg(long, conflicts_with = "from")]
        content: Option<String>,
        /// Read the content from this local file.
        #[arg(long)]
        from: Option<PathBuf>,
    },
    /// Replace exact text in a file. Repeat --old/--new for several edits.
    Edit {
        /// Workspace-relative path.
        path: String,
        /// Exact text to replace.
        #[arg(long = "old", required = true)]
        old: Vec<String>,
        /// Replacement text (one per --old).
        #[arg(long = "new", required = true)]
        new: Vec<String>,
        /// Replace every occurrence.
        #[arg(long)]
        replace_all: bool,
        /// Refuse unless the file still has this sha256 (from `read`).
        #[arg(long)]
        expected_sha256: Option<String>,
    },
    /// List a directory.
    Ls {
        /// Workspace-relative directory.
        #[arg(default_value = "")]
        path: String,
    },
    /// Find files by glob.
    Find {
        /// Glob, e.g. "*.py" or "src/**/*.rs".
        pattern: String,
        /// Directory to search under.
        #[arg(long, default_value = "")]
        path: String,
        /// Maximum results (0: server default).
        #[arg(long, default_value_t = 0)]
        limit: u64,
    },
    /// Show the session's audit journal: files written, commands run,
    /// refused calls, and how they compare with a plan.
    Report {
        /// A file you planned to change (repeatable).
        #[arg(long = "planned")]
        planned: Vec<String>,
        /// A command whose run after the last write verifies the change,
        /// e.g. "pytest -q" (matched whole, whitespace collapsed: "pytest
        /// --co" does not count as "pytest").
        #[arg(long)]
        verify: Option<String>,
        /// Also print every journal entry.
        #[arg(long)]
        journal: bool,
    },
    /// Decide the plans and calls waiting for a person's approval: on a
    /// terminal one item at a time, one key each (y approve, n reject, s
    /// skip, q quit), waiting for more when none waits; piped or with
    /// --once, print them once. Needs the operator's or the approver token.
    Approvals(super::approvals::ApprovalsArgs),
    /// Approve a waiting plan or call by its id.
    Approve(super::approvals::DecideArgs),
    /// Reject a waiting plan or call by its id; the agent sees the note.
    Reject(super::approvals::DecideArgs),
    /// Search file contents with a regular expression.
    Grep {
        /// Regular expression.
        pattern: String,
        /// Directory or file to search.
        #[arg(default_value = "")]
        path: String,
        /// Only files matching this glob.
        #[arg(long, default_value = "")]
        glob: String,
        /// Case-insensitive.
        #[arg(short = 'i', long)]
        ignore_case: bool,
        /// Maximum matches (0: server default).
        #[arg(long, default_value_t = 0)]
        limit: u64,
    },
}

/// Parses `--env KEY=VALUE`.
pub(super) fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

/// The verbs of `sandboxd session`.
#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Open a session; prints its id.
    Create {
        /// Existing host directory to work in (must be under an allowed root).
        #[arg(long)]
        workspace: Option<String>,
        /// Idle timeout in seconds (0: server default).
        #[arg(long, default_value_t = 0)]
        ttl: u64,
        /// Print only the session id.
        #[arg(short, long)]
        quiet: bool,
        /// Print shell lines setting SANDBOXD_SESSION and
        /// SANDBOXD_SESSION_TOKEN (`eval "$(sandboxd session create --export)"`).
        #[arg(long, conflicts_with = "quiet")]
        export: bool,
        /// What the session runs and may do (boxed: the largest verb).
        #[command(flatten)]
        spec: Box<SessionSpec>,
    },
    /// Kill the session's sandbox and start a fresh one over the same
    /// workspace (default: --session): clears anything left running, such
    /// as a fork bomb or a forgotten server.
    Reset {
        /// Session id.
        id: Option<String>,
    },
    /// Show a session (default: --session).
    Get {
        /// Session id.
        id: Option<String>,
    },
    /// List open sessions.
    List,
    /// Close a session (default: --session).
    Close {
        /// Session id.
        id: Option<String>,
    },
}

impl Verb {
    /// Whether the verb's calls are about one session (and so may carry
    /// that session's own token instead of the service's).
    fn acts_on_session(&self) -> bool {
        !matches!(
            self,
            Verb::Session(SessionCommand::Create { .. } | SessionCommand::List)
                | Verb::Env(_)
                | Verb::Approvals(_)
                | Verb::Approve(_)
                | Verb::Reject(_)
        )
    }

    /// The token the verb was told to read from a file, if any.
    fn token_from_file(&self) -> Result<Option<String>, AnyError> {
        match self {
            Verb::Approvals(a) => a.token.read(),
            Verb::Approve(d) | Verb::Reject(d) => d.token.read(),
            _ => Ok(None),
        }
    }
}

//! The client verbs: each calls a running service once and prints the
//! result through a [`Console`] (see `print`). A refusal prints its reason
//! and message and exits non-zero; `run` exits with the command's own code.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use sandboxd::pb;
use sandboxd::session::defaults;

use super::connect::Client;
use super::print::Stdio;
use super::terminal::Console;
use super::{AnyError, EXIT_FAILURE, connect, print, token};

/// Exit code of `run` when the command timed out (as timeout(1) exits).
const EXIT_TIMED_OUT: u8 = 124;

/// Which service the client verbs call, and which session they act on
/// (global flags: they may follow any verb).
#[derive(Debug, Args)]
pub struct Target {
    // The default is applied by `Target::addr`, so that `mcp` can tell an
    // address given from none.
    #[arg(
        long,
        global = true,
        env = "SANDBOXD_ADDR",
        help = format!(
            "Address of the service, for client verbs: http://HOST:PORT, \
             https://HOST:PORT (with --ca-cert) or unix:/PATH [default: {}]",
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
    /// The address the client verbs call.
    pub fn addr(&self) -> &str {
        self.addr.as_deref().unwrap_or(defaults::ADDR)
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
    /// output; exits with the command's exit code (124 on timeout).
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
fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

/// What a new session runs and may do: the flags `session create` and
/// `mcp` share.
#[derive(Debug, Args)]
pub struct SessionSpec {
    /// Image (default: the service's default image).
    #[arg(long, default_value = "", conflicts_with = "environment")]
    pub image: String,
    /// Environment to run (see `sandboxd env build`).
    #[arg(long, default_value = "")]
    pub environment: String,
    /// Reading, listing and searching only: no writes, no commands.
    #[arg(long)]
    pub read_only: bool,
    /// Glob of paths the file tools must not write, e.g. "tests/**"
    /// (repeatable).
    #[arg(long = "deny-write")]
    pub deny_writes: Vec<String>,
    /// Allow writes only to paths matching these globs (repeatable); a
    /// deny always wins.
    #[arg(long = "allow-write")]
    pub allow_writes: Vec<String>,
    /// Extra regular expression the slip guard refuses (repeatable).
    #[arg(long = "guard-pattern")]
    pub guard_patterns: Vec<String>,
    /// Glob of paths whose writes wait for a person's approval (`sandboxd
    /// approvals`), e.g. "src/**" (repeatable); a deny always wins.
    #[arg(long = "ask-write")]
    pub ask_writes: Vec<String>,
    /// Regular expression of commands that wait for a person's approval
    /// (repeatable).
    #[arg(long = "ask-command")]
    pub ask_commands: Vec<String>,
    /// Tool every call of which waits for a person's approval: CreateFile,
    /// EditFile, ApplyPatch or RunCommand (repeatable).
    #[arg(long = "ask-tool")]
    pub ask_tools: Vec<String>,
    /// Nobody watches this session: what would wait for a person (a plan,
    /// an ask rule's call) is refused at once instead.
    #[arg(long)]
    pub unattended: bool,
    /// Environment variable of every command, KEY=VALUE (repeatable).
    #[arg(long = "env", value_parser = parse_key_value)]
    pub env: Vec<(String, String)>,
    /// Disk quota of a fresh workspace, in bytes (0: server default).
    #[arg(long, default_value_t = 0)]
    pub disk_bytes: u64,
    /// Most files and directories in a fresh workspace (0: server default).
    #[arg(long, default_value_t = 0)]
    pub inodes: u64,
    /// Timeout of the session's commands that give none, in
    /// milliseconds, e.g. for a long test suite (0: server default).
    #[arg(long, default_value_t = 0)]
    pub default_timeout_ms: u64,
}

impl SessionSpec {
    /// The request for a session so made (no workspace, the default TTL).
    pub fn request(&self) -> pb::CreateSessionRequest {
        pb::CreateSessionRequest {
            default_timeout_ms: self.default_timeout_ms,
            image: self.image.clone(),
            environment: self.environment.clone(),
            env: self.env.iter().cloned().collect(),
            limits: (self.disk_bytes != 0 || self.inodes != 0).then_some(pb::Limits {
                disk_bytes: self.disk_bytes,
                inodes: self.inodes,
                ..Default::default()
            }),
            policy: Some(pb::Policy {
                read_only: self.read_only,
                deny_writes: self.deny_writes.clone(),
                allow_writes: self.allow_writes.clone(),
                guard_patterns: self.guard_patterns.clone(),
                ask_writes: self.ask_writes.clone(),
                ask_commands: self.ask_commands.clone(),
                ask_tools: self.ask_tools.clone(),
                ..Default::default()
            }),
            unattended: self.unattended,
            ..Default::default()
        }
    }
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

/// Runs one client verb against `target`, printing through a [`Console`]
/// over stdout and stderr. Without a token, the one a service of this user
/// made for exactly that address is sent (see `token`).
pub async fn run(target: Target, token: Option<String>, verb: Verb) -> Result<ExitCode, AnyError> {
    let token = match verb.token_from_file()? {
        Some(from_file) => Some(from_file),
        None => token.or_else(|| token::local_token(target.addr())),
    };
    let mut con = Console::stdio();
    let code = match call(target, token, verb, &mut con).await {
        Ok(code) => code,
        // Printed here, not by the caller: the error may echo what the
        // service sent, and it must start on a line of its own.
        Err(e) => {
            con.status(format_args!("error: {e}"));
            ExitCode::from(EXIT_FAILURE)
        }
    };
    con.finish()
        .map_err(|e| format!("cannot write the output: {e}"))?;
    Ok(code)
}

/// Connects, makes the verb's call and prints its result; a refusal prints
/// its reason and message.
async fn call(
    target: Target,
    token: Option<String>,
    verb: Verb,
    con: &mut Stdio,
) -> Result<ExitCode, AnyError> {
    // Calls about one session carry its own token when one is given.
    let token = match (&target.session_token, verb.acts_on_session()) {
        (Some(own), true) => Some(own.clone()),
        _ => token,
    };
    let mut c = connect::client(target.addr(), target.ca_cert(), token).await?;
    let session = target.session;
    let need_session = || {
        session
            .clone()
            .ok_or("no session: pass --session ID or set SANDBOXD_SESSION")
    };
    let outcome = match verb {
        Verb::Run {
            cwd,
            timeout_ms,
            env,
            cap,
            command,
        } => {
            let req = pb::RunCommandRequest {
                session_id: need_session()?,
                command: command.join(" "),
                cwd,
                timeout_ms,
                env: env.into_iter().collect(),
                stdout_cap: cap,
                stderr_cap: cap,
            };
            match run_streaming(&mut c, req, con).await {
                Ok(code) => return Ok(code),
                Err(status) => Err(status),
            }
        }
        Verb::Session(SessionCommand::Create {
            workspace,
            ttl,
            quiet,
            export,
            spec,
        }) => c
            .create_session(pb::CreateSessionRequest {
                workspace_path: workspace.unwrap_or_default(),
                ttl_seconds: ttl,
                ..spec.request()
            })
            .await
            .map(|r| {
                let s = r.into_inner();
                if quiet {
                    con.out(format_args!("{}\n", s.session_id));
                } else if export {
                    con.out(format_args!(
                        "export SANDBOXD_SESSION={}\nexport SANDBOXD_SESSION_TOKEN={}\n",
                        s.session_id, s.session_token
                    ));
                } else {
                    print::session(con, &s);
                }
            }),
        Verb::Env(cmd) => super::env::call(&mut c, cmd, con).await,
        Verb::Diff {
            since,
            max_bytes,
            stat,
        } => {
            let diffed =
                super::checkpoint::diff(&mut c, need_session()?, since, max_bytes, stat, con).await;
            match diffed {
                Ok(super::checkpoint::Diffed::Cut) => return Ok(ExitCode::from(EXIT_FAILURE)),
                other => other.map(|_| ()),
            }
        }
        Verb::Checkpoint(cmd) => super::checkpoint::call(&mut c, need_session()?, cmd, con).await,
        Verb::Upload { path, to } => {
            super::transfer::upload(&mut c, need_session()?, &path, to, con).await?
        }
        Verb::Download {
            path,
            output,
            gitignore,
            gzip,
        } => {
            let req = pb::DownloadArchiveRequest {
                session_id: need_session()?,
                path,
                gitignore,
                gzip,
                max_bytes: 0,
            };
            super::transfer::download(&mut c, req, output, con).await?
        }
        Verb::Apply { file } => {
            let applied = super::transfer::apply(&mut c, need_session()?, file).await?;
            if let Ok(r) = &applied {
                match &r.rejected {
                    Some(rejected) => {
                        print::rejection(con, rejected);
                        return Ok(ExitCode::from(EXIT_FAILURE));
                    }
                    None => con.out(format_args!("{}\n", r.message)),
                }
            }
            applied.map(drop)
        }
        Verb::Session(SessionCommand::Get { id }) => {
            let session_id = id.map_or_else(need_session, Ok)?;
            c.get_session(pb::GetSessionRequest { session_id })
                .await
                .map(|r| print::session(con, &r.into_inner()))
        }
        Verb::Session(SessionCommand::List) => c
            .list_sessions(pb::ListSessionsRequest {})
            .await
            .map(|r| print::sessions(con, &r.into_inner())),
        Verb::Session(SessionCommand::Reset { id }) => {
            let session_id = id.map_or_else(need_session, Ok)?;
            c.reset_sandbox(pb::ResetSandboxRequest { session_id })
                .await
                .map(|r| con.out(format_args!("{}\n", r.into_inner().message)))
        }
        Verb::Session(SessionCommand::Close { id }) => {
            let session_id = id.map_or_else(need_session, Ok)?;
            c.close_session(pb::CloseSessionRequest { session_id })
                .await
                .map(|r| con.out(format_args!("{}\n", r.into_inner().message)))
        }
        Verb::Read {
            path,
            offset,
            limit,
            raw,
        } => c
            .read_file(pb::ReadFileRequest {
                session_id: need_session()?,
                path,
                offset,
                limit,
            })
            .await
            .map(|r| print::read(con, &r.into_inner(), raw)),
        Verb::Create {
            path,
            content,
            from,
        } => {
            let content = match (content, from) {
                (Some(text), _) => text,
                (None, Some(file)) => std::fs::read_to_string(file)?,
                (None, None) => {
                    let mut text = String::new();
                    std::io::stdin().read_to_string(&mut text)?;
                    text
                }
            };
            let created = c
                .create_file(pb::CreateFileRequest {
                    session_id: need_session()?,
                    path,
                    content,
                })
                .await
                .map(tonic::Response::into_inner);
            if let Ok(r) = &created {
                print::created(con, r);
                if r.rejected.is_some() {
                    return Ok(ExitCode::from(EXIT_FAILURE));
                }
            }
            created.map(drop)
        }
        Verb::Edit {
            path,
            old,
            new,
            replace_all,
            expected_sha256,
        } => {
            if old.len() != new.len() {
                return Err(format!(
                    "{} --old but {} --new: give one --new per --old",
                    old.len(),
                    new.len()
                )
                .into());
            }
            let edits = old
                .into_iter()
                .zip(new)
                .map(|(old_string, new_string)| pb::Edit {
                    old_string,
                    new_string,
                    replace_all,
                })
                .collect();
            let edited = c
                .edit_file(pb::EditFileRequest {
                    session_id: need_session()?,
                    path,
                    edits,
                    expected_sha256: expected_sha256.unwrap_or_default(),
                })
                .await
                .map(tonic::Response::into_inner);
            if let Ok(r) = &edited {
                print::edited(con, r);
                if r.rejected.is_some() {
                    return Ok(ExitCode::from(EXIT_FAILURE));
                }
            }
            edited.map(drop)
        }
        Verb::Ls { path } => c
            .list_dir(pb::ListDirRequest {
                session_id: need_session()?,
                path,
            })
            .await
            .map(|r| print::dir(con, &r.into_inner())),
        Verb::Find {
            pattern,
            path,
            limit,
        } => c
            .find_files(pb::FindFilesRequest {
                session_id: need_session()?,
                pattern,
                path,
                limit,
            })
            .await
            .map(|r| print::found(con, &r.into_inner())),
        Verb::Report {
            planned,
            verify,
            journal,
        } => c
            .get_session_report(pb::GetSessionReportRequest {
                session_id: need_session()?,
                planned_files: planned,
                verification_command: verify.unwrap_or_default(),
            })
            .await
            .map(|r| print::report(con, &r.into_inner(), journal)),
        Verb::Grep {
            pattern,
            path,
            glob,
            ignore_case,
            limit,
        } => c
            .search_files(pb::SearchFilesRequest {
                session_id: need_session()?,
                pattern,
                path,
                glob,
                case_insensitive: ignore_case,
                limit,
            })
            .await
            .map(|r| print::matches(con, &r.into_inner())),
        Verb::Approvals(args) => return super::approvals::approvals(&mut c, args, con).await,
        Verb::Approve(args) => {
            super::approvals::decide(&mut c, args, pb::Verdict::Approve, con).await?
        }
        Verb::Reject(args) => {
            super::approvals::decide(&mut c, args, pb::Verdict::Reject, con).await?
        }
    };
    match outcome {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(status) => {
            print::refusal(con, &status);
            Ok(ExitCode::from(EXIT_FAILURE))
        }
    }
}

/// Streams a command's output live and returns the exit code to exit with.
async fn run_streaming(
    c: &mut Client,
    req: pb::RunCommandRequest,
    con: &mut Stdio,
) -> Result<ExitCode, tonic::Status> {
    use pb::run_command_event::Event;
    let mut events = c.run_command(req).await?.into_inner();
    while let Some(ev) = events.message().await? {
        match ev.event {
            Some(Event::Stdout(chunk)) => {
                con.out(format_args!("{}", chunk.data));
                con.flush();
            }
            Some(Event::Stderr(chunk)) => con.err(format_args!("{}", chunk.data)),
            Some(Event::Exit(exit)) => {
                print::exit(con, &exit);
                let code = if exit.timed_out {
                    EXIT_TIMED_OUT
                } else {
                    exit.exit_code.clamp(0, 255) as u8
                };
                return Ok(ExitCode::from(code));
            }
            Some(Event::Rejected(rejected)) => {
                print::rejection(con, &rejected);
                return Ok(ExitCode::from(EXIT_FAILURE));
            }
            Some(Event::Started(_)) | None => {}
        }
    }
    Err(tonic::Status::unavailable(
        "the stream ended without an exit event",
    ))
}

//! The session spec: the flags `session create` and `mcp` share for what
//! a new session runs and may do, and the request they make.

use clap::Args;
use sandboxd::pb;

use super::parse_key_value;

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
    /// Reading, listing and searching only: no writes, no commands, and no
    /// plan can change that.
    #[arg(long)]
    pub read_only: bool,
    /// Plan mode: read-only until a person approves a plan, which grants
    /// exactly its files.
    #[arg(long)]
    pub plan_mode: bool,
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
                plan_mode: self.plan_mode,
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

//! The flags of `serve` about people in the loop: the operator's `ask`
//! rules, who may approve, and how long a request waits for them.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use sandboxd::session::{ApprovalConfig, Config, defaults};

use super::AnyError;

/// Plans and approvals.
#[derive(Debug, Args)]
pub struct ApprovalArgs {
    /// Glob of workspace paths whose writes wait for a person's approval
    /// in every session (repeatable, or comma-separated in the environment).
    #[arg(long = "ask-write", env = "SANDBOXD_ASK_WRITES", value_delimiter = ',')]
    ask_writes: Vec<String>,
    /// Regular expression of commands that wait for approval in every
    /// session (repeatable).
    #[arg(
        long = "ask-command",
        env = "SANDBOXD_ASK_COMMANDS",
        value_delimiter = '\n'
    )]
    ask_commands: Vec<String>,
    /// Tool every call of which waits for approval: CreateFile, EditFile,
    /// ApplyPatch or RunCommand (repeatable).
    #[arg(long = "ask-tool", env = "SANDBOXD_ASK_TOOLS", value_delimiter = ',')]
    ask_tools: Vec<String>,
    /// File holding the approver token: a call carrying it may list and
    /// decide plans and calls waiting for a person (ListPendingApprovals,
    /// Decide), and nothing else. The service's token may too.
    #[arg(long, env = "SANDBOXD_APPROVER_TOKEN_FILE")]
    approver_token_file: Option<PathBuf>,
    /// Seconds a plan or call waits for a person before it is rejected
    /// ("nobody answered"); never approved.
    #[arg(long, env = "SANDBOXD_APPROVAL_TIMEOUT", default_value_t = defaults::APPROVAL_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    approval_timeout: u64,
    /// Seconds without an approver seen (listing or deciding) after which
    /// nothing waits for one: a call that needs approval is refused at
    /// once with APPROVAL_UNAVAILABLE.
    #[arg(long, env = "SANDBOXD_APPROVER_ABSENT_AFTER", default_value_t = defaults::APPROVER_ABSENT_AFTER.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    approver_absent_after: u64,
}

impl ApprovalArgs {
    /// Puts the rules and settings in `config`; answers the approver token.
    pub fn apply(self, config: &mut Config) -> Result<Option<String>, AnyError> {
        config.rules.ask_writes = self.ask_writes;
        config.rules.ask_commands = self.ask_commands;
        config.rules.ask_tools = self.ask_tools;
        config.approvals = ApprovalConfig {
            timeout: Duration::from_secs(self.approval_timeout),
            absent_after: Duration::from_secs(self.approver_absent_after),
            ..config.approvals
        };
        let Some(file) = self.approver_token_file else {
            return Ok(None);
        };
        Ok(Some(super::secrets::read(&file, "approver token")?))
    }
}

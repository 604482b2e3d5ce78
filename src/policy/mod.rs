//! Session policy: what a session may write and run, decided here and
//! nowhere else.
//!
//! A policy is one table with three effects: allow, deny and ask. It is the
//! operator's rules plus the session's own, and the two only ever narrow
//! each other: a session can add deny globs, ask rules, guard patterns or
//! make itself read-only, never lift what the operator set. Within a policy
//! a deny always wins over a grant (`allow_writes`, an approved plan's
//! files) and over an ask, whatever the order.
//!
//! Two presets of this table, not flags checked elsewhere: `read_only`
//! denies every mutation, for good (no plan is taken, whatever a person
//! would approve); `plan_mode` denies every mutation until a plan is
//! approved, which ([`Policy::granting`]) replaces it with a grant of
//! exactly the planned files that no deny withholds ([`plan`] says what a
//! checkable plan holds).
//!
//! Write rules are matched against the path a write really lands on (symlinks
//! resolved, no `..`), case-insensitively, and against every ancestor
//! directory of it, so `tests` denies `tests/unit/test_x.py` and `TESTS/x.py`.
//! The file tools call [`Policy::check_write`] under the path's write lock
//! with the resolved path, so nothing can be swapped in between check and
//! write.
//!
//! Commands are decided by [`Policy::check_command`]: read-only sessions run
//! none, and the slip guard ([`guard`]) refuses obvious slips.
//!
//! An `ask` rule ([`ask`]) answers [`Denial::NeedsApproval`]: the caller
//! may get a person's approval and call again with a policy that carries
//! it ([`Policy::approving_path`], [`Policy::approving_command`]).

pub mod ask;
mod globs;
pub mod guard;
pub mod plan;

use std::collections::BTreeSet;

use ask::Ask;
use globs::Globs;
use guard::{Refusal, SlipGuard};

/// A session's rules: what it asks for at creation, and what is in force.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rules {
    /// Reading, listing, finding and searching only, for good: no plan
    /// lifts it.
    pub read_only: bool,
    /// Reading, listing, finding and searching only until a plan is
    /// approved (see [`Policy::granting`]).
    #[serde(default)]
    pub plan_mode: bool,
    /// Globs of workspace paths the file tools must not write.
    pub deny_writes: Vec<String>,
    /// When non-empty, the file tools may write only paths matching one.
    pub allow_writes: Vec<String>,
    /// Extra regular expressions the slip guard refuses.
    pub guard_patterns: Vec<String>,
    /// Globs of paths whose writes wait for a person's approval.
    #[serde(default)]
    pub ask_writes: Vec<String>,
    /// Regular expressions of commands that wait for approval.
    #[serde(default)]
    pub ask_commands: Vec<String>,
    /// Tools every call of which waits for approval.
    #[serde(default)]
    pub ask_tools: Vec<String>,
    /// Set by an approved plan only: the file tools may write these files
    /// and no others (workspace-relative, exact).
    #[serde(default)]
    pub plan_files: Option<Vec<String>>,
}

impl Rules {
    /// Refuses what only the service may set in rules a caller asks for:
    /// `plan_files` comes from an approved plan alone.
    pub fn check_asked(&self) -> Result<(), InvalidRules> {
        match self.plan_files {
            Some(_) => Err(InvalidRules::PlanFiles),
            None => Ok(()),
        }
    }
}

/// Why a call was refused by policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// The session is read-only (for good) and the call would change
    /// something, or submit a plan that would.
    ReadOnly {
        /// The refused tool.
        tool: &'static str,
    },
    /// The session is in plan mode (no plan approved yet) and the call
    /// would change something.
    PlanMode {
        /// The refused tool.
        tool: &'static str,
    },
    /// The path matches a deny glob.
    DeniedPath {
        /// Workspace-relative path the write would land on.
        path: String,
        /// The glob that matched.
        glob: String,
    },
    /// `allow_writes` is set and no glob of it matches the path.
    NotGranted {
        /// Workspace-relative path the write would land on.
        path: String,
    },
    /// A plan was approved and the path is not one of its granted files.
    NotInPlan {
        /// Workspace-relative path the write would land on.
        path: String,
    },
    /// An `ask` rule matches: the call needs a person's approval.
    NeedsApproval {
        /// The tool.
        tool: &'static str,
        /// Workspace-relative path a write would land on; empty for a
        /// command.
        path: String,
        /// The rule that asks, in words (e.g. `ask_writes "src/**"`).
        rule: String,
    },
}

/// A planned file that a grant withholds, and the rule that does.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Withheld {
    /// The planned file.
    pub path: String,
    /// The rule, in words: `deny_writes "tests/**"` or `allow_writes`.
    pub rule: String,
}

/// A rule set that does not compile.
#[derive(Debug, thiserror::Error)]
pub enum InvalidRules {
    /// A glob does not parse.
    #[error("{field}: glob {glob:?} does not parse: {why}")]
    Glob {
        /// The request field.
        field: &'static str,
        /// The glob.
        glob: String,
        /// Parser message.
        why: String,
    },
    /// A guard or ask pattern does not parse.
    #[error("{field}: {source}")]
    Pattern {
        /// The request field.
        field: &'static str,
        /// Parser message.
        source: regex::Error,
    },
    /// `ask_tools` names a tool that cannot wait for approval.
    #[error(
        "ask_tools: {0:?} cannot ask; only {tools} can",
        tools = ask::TOOLS.join(", ")
    )]
    AskTool(String),
    /// `plan_files` was given by a caller: only an approved plan sets it.
    #[error("plan_files is set by an approved plan (SubmitPlan), never by the caller")]
    PlanFiles,
}

/// Appends the items of `more` that `into` lacks.
fn union(into: &mut Vec<String>, more: &[String]) {
    for item in more {
        if !into.contains(item) {
            into.push(item.clone());
        }
    }
}

/// The rules in force for one session.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Rules,
    deny: Globs,
    allow: Option<Globs>,
    plan: Option<BTreeSet<String>>,
    ask: Ask,
    guard: SlipGuard,
    /// Call-scoped approvals a person gave (never kept in the session).
    approved_paths: BTreeSet<String>,
    approved_command: bool,
}

impl Policy {
    /// The `operator`'s deny globs and ask rules and its `guard`, narrowed
    /// by the session's `asked` rules. Only the operator's `deny_writes` and
    /// `ask_*` fields are read.
    pub fn new(operator: &Rules, guard: &SlipGuard, asked: Rules) -> Result<Policy, InvalidRules> {
        let mut rules = asked;
        let mut deny_writes = operator.deny_writes.clone();
        union(&mut deny_writes, &rules.deny_writes);
        rules.deny_writes = deny_writes;
        for (mine, theirs) in [
            (&mut rules.ask_writes, &operator.ask_writes),
            (&mut rules.ask_commands, &operator.ask_commands),
            (&mut rules.ask_tools, &operator.ask_tools),
        ] {
            let mut all = theirs.clone();
            union(&mut all, mine);
            *mine = all;
        }
        let deny = Globs::new("deny_writes", &rules.deny_writes)?;
        let allow = if rules.allow_writes.is_empty() {
            None
        } else {
            Some(Globs::new("allow_writes", &rules.allow_writes)?)
        };
        let ask = Ask::new(&rules)?;
        let guard = guard
            .with_patterns(&rules.guard_patterns, "session")
            .map_err(|source| InvalidRules::Pattern {
                field: "guard_patterns",
                source,
            })?;
        let plan = rules
            .plan_files
            .as_ref()
            .map(|files| files.iter().cloned().collect());
        Ok(Policy {
            rules,
            deny,
            allow,
            plan,
            ask,
            guard,
            approved_paths: BTreeSet::new(),
            approved_command: false,
        })
    }

    /// The rules in force (the operator's deny globs included).
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// Whether any `ask` rule is in force (a call may wait for a person).
    pub fn asks(&self) -> bool {
        self.ask.any()
    }

    /// Refuses `tool` outright when the session is read-only.
    pub fn check_mutation(&self, tool: &'static str) -> Result<(), Denial> {
        if self.rules.read_only {
            return Err(Denial::ReadOnly { tool });
        }
        if self.rules.plan_mode {
            return Err(Denial::PlanMode { tool });
        }
        Ok(())
    }

    /// Refuses a plan for a read-only session: no approval may make it
    /// write.
    pub fn check_plan(&self) -> Result<(), Denial> {
        if self.rules.read_only {
            return Err(Denial::ReadOnly { tool: "SubmitPlan" });
        }
        Ok(())
    }

    /// What forbids any write to `path` whatever is approved: a deny glob,
    /// or `allow_writes` not matching.
    fn forbidden(&self, path: &str) -> Option<Denial> {
        if let Some(glob) = self.deny.matching(path) {
            return Some(Denial::DeniedPath {
                path: path.to_string(),
                glob: glob.to_string(),
            });
        }
        match &self.allow {
            Some(allow) if allow.matching(path).is_none() => Some(Denial::NotGranted {
                path: path.to_string(),
            }),
            _ => None,
        }
    }

    /// Decides a write by `tool` to `path`, the workspace-relative path the
    /// write really lands on.
    pub fn check_write(&self, tool: &'static str, path: &str) -> Result<(), Denial> {
        self.check_mutation(tool)?;
        if let Some(denial) = self.forbidden(path) {
            return Err(denial);
        }
        let planned = match &self.plan {
            Some(plan) if !plan.contains(path) => {
                return Err(Denial::NotInPlan {
                    path: path.to_string(),
                });
            }
            Some(_) => true,
            None => false,
        };
        if self.approved_paths.contains(path) {
            return Ok(());
        }
        // A person approved the plan's files already; a tool that always
        // asks still does.
        match self.ask.write(tool, path, planned) {
            Some(rule) => Err(Denial::NeedsApproval {
                tool,
                path: path.to_string(),
                rule,
            }),
            None => Ok(()),
        }
    }

    /// Decides a command: read-only sessions run none; the slip guard (the
    /// operator's rules plus the session's patterns) refuses slips; an ask
    /// rule holds it for approval.
    pub fn check_command(&self, command: &str) -> Result<(), CommandDenied> {
        self.check_command_by("RunCommand", command)
    }

    /// Like [`Policy::check_command`], for a command `tool` (RunCommand,
    /// StartProcess) runs.
    pub fn check_command_by(&self, tool: &'static str, command: &str) -> Result<(), CommandDenied> {
        self.check_mutation(tool).map_err(CommandDenied::Policy)?;
        self.guard.check(command).map_err(CommandDenied::Guard)?;
        if self.approved_command {
            return Ok(());
        }
        match self.ask.command(command) {
            Some(rule) => Err(CommandDenied::Policy(Denial::NeedsApproval {
                tool,
                path: String::new(),
                rule,
            })),
            None => Ok(()),
        }
    }

    /// This policy with a person's approval of a write to `path`, for one
    /// call.
    pub fn approving_path(&self, path: &str) -> Policy {
        let mut p = self.clone();
        p.approved_paths.insert(path.to_string());
        p
    }

    /// This policy with a person's approval of the command, for one call.
    pub fn approving_command(&self) -> Policy {
        Policy {
            approved_command: true,
            ..self.clone()
        }
    }

    /// The planned `files` a grant would withhold, and the rules that do.
    pub fn withheld(&self, files: &[String]) -> Vec<Withheld> {
        files
            .iter()
            .filter_map(|f| {
                let rule = match self.forbidden(f)? {
                    Denial::DeniedPath { glob, .. } => format!("deny_writes {glob:?}"),
                    _ => "allow_writes".to_string(),
                };
                Some(Withheld {
                    path: f.clone(),
                    rule,
                })
            })
            .collect()
    }

    /// Which preset is in force, as a log line names it: `read-only` (for
    /// good), `plan mode` (until a plan is approved) or `writable`.
    pub fn preset(&self) -> &'static str {
        if self.rules.read_only {
            "read-only"
        } else if self.rules.plan_mode {
            "plan mode"
        } else {
            "writable"
        }
    }

    /// The rules once a plan of `files` is approved, and the files granted:
    /// plan mode lifted, and the file tools granted exactly the planned
    /// files no rule withholds. Everything else (deny globs, guard, ask
    /// rules) stays.
    pub fn granting(&self, files: &[String]) -> (Rules, Vec<String>) {
        let withheld: BTreeSet<String> = self.withheld(files).into_iter().map(|w| w.path).collect();
        let mut granted: Vec<String> = files
            .iter()
            .filter(|f| !withheld.contains(*f))
            .cloned()
            .collect();
        granted.sort();
        granted.dedup();
        let rules = Rules {
            plan_mode: false,
            plan_files: Some(granted.clone()),
            ..self.rules.clone()
        };
        (rules, granted)
    }
}

/// Why a command may not run.
#[derive(Debug, Clone)]
pub enum CommandDenied {
    /// Session policy (read-only, or an ask rule).
    Policy(Denial),
    /// The slip guard.
    Guard(Refusal),
}

#[cfg(test)]
mod tests;

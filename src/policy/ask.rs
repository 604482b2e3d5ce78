//! `ask` rules: the calls that wait for a person's approval. A write asks
//! when its tool asks or its path matches an `ask_writes` glob; a command
//! asks when `RunCommand` asks or it matches an `ask_commands` pattern.
//! Whether anyone can answer is the caller's business, not the policy's.

use regex::RegexSet;

use super::globs::Globs;
use super::{InvalidRules, Rules};

/// The tools an `ask_tools` rule may name: the calls that can wait for a
/// person and come back `rejected` as a result.
pub const TOOLS: &[&str] = &["CreateFile", "EditFile", "ApplyPatch", "RunCommand"];

/// The compiled ask rules.
#[derive(Debug, Clone)]
pub(super) struct Ask {
    writes: Option<Globs>,
    commands: Option<RegexSet>,
    command_text: Vec<String>,
    tools: Vec<&'static str>,
}

impl Ask {
    pub(super) fn new(rules: &Rules) -> Result<Ask, InvalidRules> {
        let writes = if rules.ask_writes.is_empty() {
            None
        } else {
            Some(Globs::new("ask_writes", &rules.ask_writes)?)
        };
        let commands = if rules.ask_commands.is_empty() {
            None
        } else {
            Some(
                RegexSet::new(&rules.ask_commands).map_err(|source| InvalidRules::Pattern {
                    field: "ask_commands",
                    source,
                })?,
            )
        };
        let tools = rules
            .ask_tools
            .iter()
            .map(|t| {
                TOOLS
                    .iter()
                    .find(|known| known.eq_ignore_ascii_case(t))
                    .copied()
                    .ok_or_else(|| InvalidRules::AskTool(t.clone()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Ask {
            writes,
            commands,
            command_text: rules.ask_commands.clone(),
            tools,
        })
    }

    /// Whether any rule asks at all.
    pub(super) fn any(&self) -> bool {
        self.writes.is_some() || self.commands.is_some() || !self.tools.is_empty()
    }

    /// The rule that makes a write by `tool` to `path` ask, if any. A file
    /// of an approved plan (`planned`) was approved already: only a tool
    /// that always asks asks again.
    pub(super) fn write(&self, tool: &'static str, path: &str, planned: bool) -> Option<String> {
        if self.tools.contains(&tool) {
            return Some(format!("ask_tools {tool:?}"));
        }
        if planned {
            return None;
        }
        let glob = self.writes.as_ref()?.matching(path)?;
        Some(format!("ask_writes {glob:?}"))
    }

    /// The rule that makes `command` ask, if any.
    pub(super) fn command(&self, command: &str) -> Option<String> {
        if self.tools.contains(&"RunCommand") {
            return Some("ask_tools \"RunCommand\"".to_string());
        }
        let i = self.commands.as_ref()?.matches(command).iter().next()?;
        Some(format!("ask_commands {:?}", self.command_text[i]))
    }
}

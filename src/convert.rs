//! Every conversion between generated wire types and domain types. Nothing
//! outside this module and `service` sees a `pb` type. One file an area:
//! sessions' replies and their limits in `sessions`; environments in
//! `environments`; the file tools in `files`; commands in `commands`;
//! session reports in `reports`; checkpoints and changes in `history`;
//! archive uploads and downloads in `archives`; plans and approvals in
//! `approvals`; long-running processes in `processes`. A new session's request and its policy's rules are
//! converted here, in `convert.rs` itself: the layering test lets only this file (with
//! `policy` and a few carriers) read the permission rules.

mod approvals;
mod archives;
mod commands;
mod environments;
mod files;
mod history;
mod processes;
mod reports;
mod sessions;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::pb;
use crate::policy::Rules;
use crate::session::NewSession;

fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl From<pb::CreateSessionRequest> for NewSession {
    fn from(r: pb::CreateSessionRequest) -> Self {
        NewSession {
            workspace_path: (!r.workspace_path.is_empty()).then_some(r.workspace_path),
            ttl: Duration::from_secs(r.ttl_seconds),
            default_timeout: Duration::from_millis(r.default_timeout_ms),
            image: (!r.image.is_empty()).then_some(r.image),
            environment: (!r.environment.is_empty()).then_some(r.environment),
            limits: r.limits.map(Into::into).unwrap_or_default(),
            env: r.env.into_iter().collect(),
            rules: rules(r.read_only, r.policy.unwrap_or_default()),
            unattended: r.unattended,
        }
    }
}

/// A session's rules from the request's `read_only` and its policy.
fn rules(read_only: bool, p: pb::Policy) -> Rules {
    Rules {
        read_only: read_only || p.read_only,
        plan_mode: p.plan_mode,
        deny_writes: p.deny_writes,
        allow_writes: p.allow_writes,
        guard_patterns: p.guard_patterns,
        ask_writes: p.ask_writes,
        ask_commands: p.ask_commands,
        ask_tools: p.ask_tools,
        // Only an approved plan sets it; a caller's is refused.
        plan_files: (!p.plan_files.is_empty()).then_some(p.plan_files),
    }
}

impl From<Rules> for pb::Policy {
    fn from(r: Rules) -> Self {
        pb::Policy {
            read_only: r.read_only,
            plan_mode: r.plan_mode,
            deny_writes: r.deny_writes,
            allow_writes: r.allow_writes,
            guard_patterns: r.guard_patterns,
            ask_writes: r.ask_writes,
            ask_commands: r.ask_commands,
            ask_tools: r.ask_tools,
            plan_files: r.plan_files.unwrap_or_default(),
        }
    }
}

//! Conversion of a session's report, built from its journal, to the wire.

use crate::journal::{Outcome, Report};
use crate::pb;
use crate::session::ProcessInfo;

impl From<(String, Report)> for pb::SessionReport {
    fn from((session_id, r): (String, Report)) -> Self {
        let plan = r.plan.unwrap_or_default();
        pb::SessionReport {
            session_id,
            processes: r
                .processes
                .iter()
                .map(|p| ProcessInfo::from_record(p).into())
                .collect(),
            files_written: r
                .files_written
                .into_iter()
                .map(|w| pb::FileWrite {
                    seq: w.seq,
                    tool: w.tool.to_string(),
                    path: w.path,
                    sha256_before: w.sha256_before.unwrap_or_default(),
                    sha256_after: w.sha256_after,
                })
                .collect(),
            commands: r
                .commands
                .into_iter()
                .map(|c| pb::CommandRecord {
                    seq: c.seq,
                    command: c.command,
                    cwd: c.cwd,
                    exit_code: c.exit_code,
                    timed_out: c.timed_out,
                    killed_by: pb::KilledBy::from(c.killed_by).into(),
                    oom_killed: c.oom_killed,
                    cancelled: c.cancelled,
                    duration_ms: c.duration_ms,
                    interrupted: c.interrupted,
                })
                .collect(),
            denied: r
                .refused
                .into_iter()
                .map(|d| pb::RefusedCall {
                    seq: d.seq,
                    tool: d.tool.to_string(),
                    summary: d.summary,
                    reason: d.reason.to_string(),
                    message: d.message,
                })
                .collect(),
            touched: r.touched,
            touched_dropped: r.touched_dropped,
            planned_touched: plan.planned_touched,
            unplanned: plan.unplanned,
            untouched: plan.untouched,
            verification: r.verification.map(|v| pb::Verification {
                command: v.command,
                ran: v.ran,
                ran_after_last_write: v.ran_after_last_write,
                exit_code: v.exit_code.unwrap_or(-1),
                passed: v.passed,
            }),
            journal: r
                .entries
                .into_iter()
                .map(|e| {
                    let (outcome, detail) = match e.outcome {
                        Outcome::Ok { detail } => ("ok".to_string(), detail),
                        Outcome::Refused { reason, message } => (reason.to_string(), message),
                    };
                    pb::JournalEntry {
                        seq: e.seq,
                        at_ms: e.at_ms,
                        tool: e.tool.to_string(),
                        summary: e.summary,
                        outcome,
                        detail,
                        duration_ms: e.duration_ms,
                    }
                })
                .collect(),
            journal_dropped: r.dropped,
            journal_file_lines_dropped: r.file_lines_dropped,
            checkpoints: r.checkpoints.into_iter().map(Into::into).collect(),
            plan: None,
            changed_unplanned: Vec::new(),
            changes_unchecked: String::new(),
        }
    }
}

//! The journal reconciled against a plan: which planned files were
//! touched, which touched files were not planned, which were left alone,
//! and whether a verification command ran after the last write.

use std::collections::BTreeSet;

use super::records::CommandRecord;
use super::{Journal, PlanCheck, Report, State, Verification, collapse};

impl Journal {
    /// The journal, reconciled against `planned` files (workspace-relative,
    /// normalised; `None`: no plan) and a `verify` command.
    pub fn report(&self, planned: Option<&[String]>, verify: Option<&str>) -> Report {
        let file_lines_dropped = self.file_lines_dropped();
        let st = self.state();
        let plan = planned.map(|planned| {
            let planned: BTreeSet<&String> = planned.iter().collect();
            PlanCheck {
                planned_touched: st
                    .touched
                    .iter()
                    .filter(|p| planned.contains(p))
                    .cloned()
                    .collect(),
                unplanned: st
                    .touched
                    .iter()
                    .filter(|p| !planned.contains(p))
                    .cloned()
                    .collect(),
                untouched: planned
                    .iter()
                    .filter(|p| !st.touched.contains(p.as_str()))
                    .map(|p| p.to_string())
                    .collect(),
            }
        });
        let verification = verify.map(|wanted| {
            // The very command, not one that merely mentions it (`pytest
            // --co`, `echo pytest`): compared whole, whitespace collapsed.
            let wanted = collapse(wanted);
            let matching = || {
                st.commands
                    .iter()
                    .filter(|c| !c.cancelled && !c.interrupted && collapse(&c.command) == wanted)
            };
            let after = st.last_write.unwrap_or(0);
            // A command or a process may change files as much as a file
            // tool, and the journal cannot tell one that did from one that
            // did not: any that ran after the verification (another
            // command, a process started or still running then) leaves it
            // standing for nothing. Run the verification last.
            let last_after = matching()
                .rfind(|c| c.seq > after)
                .filter(|v| !changed_after(&st, v, &wanted));
            Verification {
                command: wanted.clone(),
                ran: matching().next().is_some(),
                ran_after_last_write: last_after.is_some(),
                exit_code: last_after.map(|c| c.exit_code),
                passed: last_after.is_some_and(|c| c.exit_code == 0 && !c.timed_out),
            }
        });
        Report {
            entries: st.entries.iter().cloned().collect(),
            dropped: st.dropped,
            file_lines_dropped,
            files_written: st.writes.iter().cloned().collect(),
            commands: st.commands.iter().cloned().collect(),
            refused: st.refused.iter().cloned().collect(),
            touched: st.touched.iter().cloned().collect(),
            touched_dropped: st.touched_dropped,
            plan,
            verification,
            checkpoints: Vec::new(),
            processes: st.processes.iter().cloned().collect(),
        }
    }
}

/// Whether anything that may change files ran after the verification run
/// `v` (whose collapsed command is `wanted`): another command that started
/// after it or finished after it, or a process started after it, still
/// running, or ending after it.
fn changed_after(st: &State, v: &CommandRecord, wanted: &str) -> bool {
    // Records are kept in the order commands finished.
    let finished_after = st
        .commands
        .iter()
        .skip_while(|c| !std::ptr::eq(*c, v))
        .skip(1);
    let started_after = st.commands.iter().filter(|c| c.seq > v.seq);
    let other_command = finished_after
        .chain(started_after)
        .any(|c| collapse(&c.command) != wanted);
    let v_ended = st.entries.iter().rfind(|e| e.seq == v.seq).map(|e| e.at_ms);
    let process = st.processes.iter().any(|p| {
        p.id > v.seq
            || match (&p.end, v_ended) {
                (None, _) | (_, None) => true,
                (Some(end), Some(v_ended)) => end.at_ms >= v_ended,
            }
    });
    other_command || process
}

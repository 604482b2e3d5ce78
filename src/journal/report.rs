//! The journal reconciled against a plan: which planned files were
//! touched, which touched files were not planned, which were left alone,
//! and whether a verification command ran after the last write.

use std::collections::BTreeSet;

use super::{Journal, PlanCheck, Report, Verification, collapse};

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
            let last_after = matching().rfind(|c| c.seq > after);
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
            plan,
            verification,
            checkpoints: Vec::new(),
            processes: st.processes.iter().cloned().collect(),
        }
    }
}

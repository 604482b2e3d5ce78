//! A session's report: its journal reconciled against a plan (the
//! caller's, or the approved one), and, with a plan, every path changed in
//! the workspace that the plan does not name, whoever changed it (a
//! command as much as a file tool).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::approvals::ApprovedPlan;
use super::failure;
use super::tools::Session;
use crate::journal::Report;
use crate::workspace::tree::changes::Bounds;

/// A report, and what it was reconciled against.
#[derive(Debug)]
pub struct Reconciled {
    /// The journal, reconciled.
    pub report: Report,
    /// The approved plan it was reconciled against, when the caller named
    /// no plan of its own.
    pub plan: Option<ApprovedPlan>,
    /// With a plan: paths changed since the session began (by anything)
    /// that the plan does not name; `Err` says why they could not be read.
    pub changed_unplanned: Option<Result<Vec<String>, String>>,
    /// Every process of the session, as ListProcesses shows them.
    pub processes: Vec<super::process_table::ProcessInfo>,
}

impl Session {
    /// The journal reconciled against `planned` files and a `verify`
    /// command; with neither, against the approved plan, if any.
    pub async fn report(
        &self,
        planned: &[String],
        verify: Option<&str>,
    ) -> Result<Reconciled, failure::Error> {
        let started = Instant::now();
        // By name, never through links: a link a command planted cannot
        // make an unplanned file "planned" (or a planned one unplanned),
        // and one out of the workspace cannot fail the report. Writes are
        // journaled by where they landed, so a write through a link shows
        // as what it changed.
        let mut normalised = Vec::with_capacity(planned.len());
        for path in planned {
            match self.workspace.normalised(path) {
                Ok(p) => normalised.push(p),
                Err(e) => {
                    let e = e.into();
                    self.refused("GetSessionReport", "planned_files", started, &e);
                    return Err(e);
                }
            }
        }
        let approved = if planned.is_empty() && verify.is_none() {
            self.approved_plan()
        } else {
            None
        };
        let (mut report, plan_files) = match &approved {
            Some(a) => (
                self.journal
                    .report(Some(&a.granted), Some(&a.plan.verification)),
                Some(a.granted.as_slice()),
            ),
            None => {
                let plan = (!planned.is_empty()).then_some(normalised.as_slice());
                (self.journal.report(plan, verify), plan)
            }
        };
        report.checkpoints = self.history.list().await;
        let changed_unplanned = match plan_files {
            Some(files) => Some(self.changed_outside(files).await),
            None => None,
        };
        let summary = match &approved {
            Some(a) => format!("the approved plan {}", a.id),
            None => format!("{} planned files", planned.len()),
        };
        self.journal
            .ok("GetSessionReport", &summary, started, String::new());
        Ok(Reconciled {
            report,
            plan: approved,
            changed_unplanned,
            processes: self.process_list(),
        })
    }

    /// The report a viewer sees: against the approved plan, if any, else
    /// the journal alone. Not journaled: looking changes nothing.
    pub async fn observed_report(&self) -> Reconciled {
        let approved = self.approved_plan();
        let mut report = match &approved {
            Some(a) => self
                .journal
                .report(Some(&a.granted), Some(&a.plan.verification)),
            None => self.journal.report(None, None),
        };
        report.checkpoints = self.history.list().await;
        let changed_unplanned = match &approved {
            Some(a) => Some(self.changed_outside(&a.granted).await),
            None => None,
        };
        Reconciled {
            report,
            plan: approved,
            changed_unplanned,
            processes: self.process_list(),
        }
    }

    /// The changes since the session began, as a viewer sees them (at most
    /// `max_patch_bytes` of patch). Not journaled.
    pub async fn observed_changes(
        &self,
        max_patch_bytes: usize,
    ) -> Result<crate::workspace::history::ChangesOutput, failure::Error> {
        let bounds = Bounds {
            max_changes: self.config.history.max_changes,
            max_patch_bytes,
            max_file_bytes: self.config.limits.max_file_bytes,
            diff_time: Duration::from_secs(2),
        };
        self.history.changes("", bounds).await.map_err(Into::into)
    }

    /// Paths changed since the session began that `planned` does not name.
    async fn changed_outside(&self, planned: &[String]) -> Result<Vec<String>, String> {
        let planned: BTreeSet<&str> = planned.iter().map(String::as_str).collect();
        // Only the list is wanted: no patch, no diffing.
        let bounds = Bounds {
            max_changes: self.config.history.max_changes,
            max_patch_bytes: 0,
            max_file_bytes: self.config.limits.max_file_bytes,
            diff_time: Duration::ZERO,
        };
        let out = self
            .history
            .changes("", bounds)
            .await
            .map_err(|e| failure::describe(&e.into()).message)?;
        if out.changes.truncated {
            return Err(format!(
                "more than {} paths changed; GetChanges lists them",
                self.config.history.max_changes
            ));
        }
        Ok(out
            .changes
            .changes
            .iter()
            .map(|c| String::from_utf8_lossy(&c.path).into_owned())
            .filter(|p| !planned.contains(p.as_str()))
            .collect())
    }
}

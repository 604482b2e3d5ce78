//! Plans: a session proposes a checkable plan, a person approves or
//! rejects it, and approval puts in force a grant of exactly the planned
//! files that no rule withholds ([`crate::policy::Policy::granting`]). The
//! approved plan is the session's: the report reconciles against it, the
//! session's record keeps it across a restart, and the journal says who
//! approved it and when.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokio::sync::mpsc;

use super::approvals::Rejection;
use super::approvals::{ApprovedPlan, Asked, Decision};
use super::error::Error;
use super::failure;
use super::gate::Approval;
use super::records::{Record, Records};
use super::tools::Session;
use crate::policy::plan::Plan;
use crate::policy::{Policy, Withheld};

/// What SubmitPlan streams.
#[derive(Debug, Clone)]
pub enum PlanEvent {
    /// The plan waits for a person.
    Pending {
        /// The approval's id.
        id: String,
        /// The planned files approval would withhold.
        withheld: Vec<Withheld>,
        /// When the wait ends in a rejection.
        expires: SystemTime,
    },
    /// Approved and in force.
    Approved(ApprovedPlan),
    /// Not approved: the session is as it was.
    Rejected(Rejection),
}

impl Session {
    /// The plan approved last, if any.
    pub fn approved_plan(&self) -> Option<ApprovedPlan> {
        self.plan.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// SubmitPlan: refuses a plan that is not checkable, or that nobody can
    /// approve now; otherwise answers `Pending` and then the decision.
    /// Dropping the receiver while the plan waits withdraws it.
    pub async fn submit_plan(
        self: &Arc<Self>,
        plan: Plan,
    ) -> Result<mpsc::Receiver<PlanEvent>, failure::Error> {
        let started = Instant::now();
        let summary = format!("{:?}", plan.goal.chars().take(80).collect::<String>());
        let submitted = self.register_plan(plan);
        let (plan, ticket) = match submitted {
            Ok(ok) => ok,
            Err(e) => {
                self.refused("SubmitPlan", &summary, started, &e);
                return Err(e);
            }
        };
        let files = plan.files();
        let withheld = self.policy().withheld(&files);
        let (tx, rx) = mpsc::channel(2);
        // Room for two events: neither send can wait.
        let _ = tx.try_send(PlanEvent::Pending {
            id: ticket.id.clone(),
            withheld: withheld.clone(),
            expires: ticket.expires,
        });
        let session = Arc::clone(self);
        tokio::spawn(async move {
            let answer = tokio::select! {
                answer = session.answer(ticket) => answer,
                // The caller left: the ticket goes with this branch, and
                // with it the wait.
                () = tx.closed() => {
                    session.journal.refused(
                        "SubmitPlan",
                        &summary,
                        started,
                        super::gate::REJECTED,
                        "withdrawn: the caller left before a decision".to_string(),
                    );
                    return;
                }
            };
            let event = match answer {
                Approval::Approved { id, decision } => match session.grant(id, plan, decision) {
                    Ok(approved) => {
                        session.journal.ok(
                            "SubmitPlan",
                            &summary,
                            started,
                            format!(
                                "approved by {}: {} files granted, {} withheld",
                                approved.decision.by,
                                approved.granted.len(),
                                approved.withheld.len()
                            ),
                        );
                        PlanEvent::Approved(approved)
                    }
                    Err(e) => {
                        tracing::warn!(session = %session.id, error = %e, "cannot put an approved plan in force");
                        let r = Rejection {
                            id: String::new(),
                            reason: format!("the approved plan could not be put in force: {e}"),
                            timed_out: false,
                            decision: None,
                            message: format!(
                                "Not executed: the plan was approved but could not be put in \
                                     force ({e}). The session is as it was. Submit it again."
                            ),
                        };
                        session.journal_rejected("SubmitPlan", &summary, started, &r);
                        PlanEvent::Rejected(r)
                    }
                },
                Approval::Rejected(r) => {
                    session.journal_rejected("SubmitPlan", &summary, started, &r);
                    PlanEvent::Rejected(r)
                }
            };
            let _ = tx.send(event).await;
        });
        Ok(rx)
    }

    /// The plan checked and registered to wait for a person.
    fn register_plan(
        &self,
        plan: Plan,
    ) -> Result<(Plan, super::approvals::Ticket), failure::Error> {
        // A read-only session takes no plan: nothing approved may make it
        // write.
        self.policy().check_plan().map_err(Error::Denied)?;
        let plan = plan
            .checked()
            .map_err(|problems| Error::InvalidPlan { problems })?;
        let withheld = self.policy().withheld(&plan.files());
        let ticket = self.register(Asked::Plan {
            plan: plan.clone(),
            withheld,
        })?;
        Ok((plan, ticket))
    }

    /// Puts an approved `plan` in force: plan mode lifted, exactly its
    /// files granted (less what a rule withholds), kept in the record.
    fn grant(&self, id: String, plan: Plan, decision: Decision) -> Result<ApprovedPlan, Error> {
        let current = self.policy();
        let files = plan.files();
        let withheld = current.withheld(&files);
        let (rules, granted) = current.granting(&files);
        let policy = Policy::new(&self.config.rules, &self.config.sandbox.guard, rules)?;
        let approved = ApprovedPlan {
            id,
            plan,
            granted,
            withheld,
            decision,
        };
        self.set_policy(policy);
        *self.plan.lock().unwrap_or_else(|e| e.into_inner()) = Some(approved.clone());
        if let Some(records) = &self.records {
            // A restart brings the session back with its plan; should the
            // record not take it, the session comes back in the mode it was
            // created in, never looser.
            if let Err(e) = Records::from_dir(Arc::clone(records)).replace(&Record::of(self)) {
                tracing::warn!(session = %self.id, error = %e, "cannot record the approved plan");
            }
        }
        Ok(approved)
    }
}

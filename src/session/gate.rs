//! The approval gate of one session: a call an `ask` rule holds waits for
//! a person ([`super::approvals`]), and runs only once approved. Where
//! nobody can answer it is refused at once (APPROVAL_UNAVAILABLE); a
//! rejection, or a wait nobody answered, is a result that says the call
//! was not executed and why ([`Gated::Rejected`]), never a transport
//! error. Every decision is journaled: who, what, when.
//!
//! The policy decides what asks; the gate only carries the question to a
//! person and the approval back into the policy
//! ([`Policy::approving_path`]), for that one call.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use super::approvals::{Answer, Asked, Decision, Gated, Rejection, Ticket};
use super::error::Error;
use super::failure;
use super::tools::Session;
use crate::policy::{Denial, Policy};

/// How the journal records a call a person rejected (it is a result, not
/// a refusal the caller gets as an error).
pub const REJECTED: &str = "REJECTED";

/// Most approvals one call may ask for (a patch asks once per held file).
const MAX_ASKS: usize = 16;

/// A person's answer to one question.
#[derive(Debug)]
pub(super) enum Approval {
    /// Approved.
    Approved {
        /// The approval's id.
        id: String,
        /// Who approved.
        decision: Decision,
    },
    /// Not approved.
    Rejected(Rejection),
}

impl Session {
    /// The rules in force now.
    pub fn policy(&self) -> Arc<Policy> {
        Arc::clone(&self.policy.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Puts `rules`' policy in force (an approved plan).
    pub(super) fn set_policy(&self, policy: Policy) {
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
    }

    /// Asks a person about `asked` and waits for the answer, journaling
    /// the decision. Refused at once where nobody can answer.
    pub(super) async fn ask(&self, asked: Asked) -> Result<Approval, failure::Error> {
        let ticket = self.register(asked)?;
        Ok(self.answer(ticket).await)
    }

    /// Registers `asked` to wait for a person, or refuses it at once where
    /// nobody can answer.
    pub(super) fn register(&self, asked: Asked) -> Result<Ticket, failure::Error> {
        Ok(self
            .approvals
            .ask(
                &self.id,
                self.workspace.host_path().to_path_buf(),
                self.unattended,
                asked,
            )
            .map_err(Error::ApprovalUnavailable)?)
    }

    /// Waits for the answer to `ticket`, and journals the decision.
    pub(super) async fn answer(&self, ticket: Ticket) -> Approval {
        let brief = ticket.brief.clone();
        let id = ticket.id.clone();
        let started = Instant::now();
        let answer = ticket.answer().await;
        self.touch();
        let summary = format!("{id}: {brief}");
        let note = |d: &Decision| {
            if d.note.is_empty() {
                String::new()
            } else {
                format!(": {}", d.note)
            }
        };
        let rejection = |reason: String, timed_out: bool, decision: Option<Decision>| {
            let message = match (&decision, timed_out) {
                (_, true) => format!(
                    "Not executed: nobody answered the request for approval ({id}) in time, and an \
                     unanswered request is a rejection. Nothing was changed. Proceed on the safest \
                     option without this call, and state the assumption you made."
                ),
                (Some(d), _) => format!(
                    "Not executed: {} rejected it ({id}){}. Nothing was changed. Change course \
                     accordingly; do not retry the same call.",
                    d.by,
                    note(d)
                ),
                (None, _) => format!(
                    "Not executed: the request for approval ({id}) was withdrawn ({reason}). \
                     Nothing was changed."
                ),
            };
            Rejection {
                id: id.clone(),
                reason,
                timed_out,
                decision,
                message,
            }
        };
        let (approval, detail) = match answer {
            Answer::Approved(decision) => {
                let detail = format!("approved by {}{}", decision.by, note(&decision));
                (
                    Approval::Approved {
                        id: id.clone(),
                        decision,
                    },
                    detail,
                )
            }
            Answer::Rejected(decision) => {
                let detail = format!("rejected by {}{}", decision.by, note(&decision));
                let reason = if decision.note.is_empty() {
                    format!("rejected by {}", decision.by)
                } else {
                    decision.note.clone()
                };
                (
                    Approval::Rejected(rejection(reason, false, Some(decision))),
                    detail,
                )
            }
            Answer::TimedOut { after } => (
                Approval::Rejected(rejection("nobody answered".into(), true, None)),
                format!("rejected: nobody answered within {} s", after.as_secs()),
            ),
            Answer::Withdrawn(why) => (
                Approval::Rejected(rejection(why.to_string(), false, None)),
                format!("withdrawn: {why}"),
            ),
        };
        self.journal.ok("Decide", &summary, started, detail);
        approval
    }

    /// Runs a write `attempt` under the session's policy. When an ask rule
    /// holds it, asks a person and, once approved, attempts it again with
    /// that approval (the policy decides again, under the path's lock).
    /// `change` says what the write would change, for the person asked.
    pub(super) async fn gated_write<T, F, Fut>(
        &self,
        summary: &str,
        change: impl Fn() -> String,
        mut attempt: F,
    ) -> Result<Gated<T>, failure::Error>
    where
        F: FnMut(Arc<Policy>) -> Fut,
        Fut: Future<Output = Result<T, failure::Error>>,
    {
        let mut policy = self.policy();
        for _ in 0..MAX_ASKS {
            let (tool, path, rule) = match attempt(Arc::clone(&policy)).await {
                Err(e) => match held(&e) {
                    Some(held) => held,
                    None => return Err(e),
                },
                Ok(done) => return Ok(Gated::Done(done)),
            };
            let asked = Asked::Call {
                tool,
                summary: summary.to_string(),
                rule,
                path: path.clone(),
                command: String::new(),
                change: crate::text::capped(&change(), super::approvals::CHANGE_CHARS).into_owned(),
            };
            match self.ask(asked).await? {
                Approval::Approved { .. } => policy = Arc::new(policy.approving_path(&path)),
                Approval::Rejected(r) => return Ok(Gated::Rejected(r)),
            }
        }
        attempt(policy).await.map(Gated::Done)
    }

    /// Journals a call that was rejected, in the words the caller gets.
    pub(super) fn journal_rejected(
        &self,
        tool: &'static str,
        summary: &str,
        started: Instant,
        r: &Rejection,
    ) {
        self.journal
            .refused(tool, summary, started, REJECTED, r.message.clone());
    }
}

/// The write an ask rule held, if that is what `e` is.
fn held(e: &failure::Error) -> Option<(&'static str, String, String)> {
    let denial = match e {
        failure::Error::Workspace(crate::workspace::Error::Denied(d)) => d,
        failure::Error::Session(Error::Denied(d)) => d,
        _ => return None,
    };
    match denial {
        Denial::NeedsApproval { tool, path, rule } => Some((tool, path.clone(), rule.clone())),
        _ => None,
    }
}

//! Conversions of plans, approvals and rejections between the wire and
//! the domain.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::pb;
use crate::policy::Withheld;
use crate::policy::plan::{Plan, Step};
use crate::session::{
    ApprovedPlan, Asked, Decision, Gated, Pending, PlanEvent, Reconciled, Rejection,
};
use crate::workspace::{CreateOutput, EditOutput, PatchedFile};

fn unix_millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl From<pb::Plan> for Plan {
    fn from(p: pb::Plan) -> Self {
        Plan {
            goal: p.goal,
            steps: p
                .steps
                .into_iter()
                .map(|s| Step {
                    description: s.description,
                    files: s.files,
                })
                .collect(),
            verification: p.verification,
            risks: p.risks,
        }
    }
}

impl From<Plan> for pb::Plan {
    fn from(p: Plan) -> Self {
        pb::Plan {
            goal: p.goal,
            steps: p
                .steps
                .into_iter()
                .map(|s| pb::PlanStep {
                    description: s.description,
                    files: s.files,
                })
                .collect(),
            verification: p.verification,
            risks: p.risks,
        }
    }
}

impl From<Withheld> for pb::WithheldFile {
    fn from(w: Withheld) -> Self {
        let message = format!(
            "{} is withheld by {}: approval does not grant it",
            w.path, w.rule
        );
        pb::WithheldFile {
            path: w.path,
            rule: w.rule,
            message,
        }
    }
}

impl From<Decision> for pb::Decision {
    fn from(d: Decision) -> Self {
        pb::Decision {
            decided_by: d.by,
            note: d.note,
            decided_at_ms: d.at_ms,
        }
    }
}

impl From<ApprovedPlan> for pb::ApprovedPlan {
    fn from(a: ApprovedPlan) -> Self {
        pb::ApprovedPlan {
            approval_id: a.id,
            plan: Some(a.plan.into()),
            granted: a.granted,
            withheld: a.withheld.into_iter().map(Into::into).collect(),
            decision: Some(a.decision.into()),
        }
    }
}

impl From<Rejection> for pb::Rejection {
    fn from(r: Rejection) -> Self {
        pb::Rejection {
            approval_id: r.id,
            reason: r.reason,
            timed_out: r.timed_out,
            decision: r.decision.map(Into::into),
            message: r.message,
        }
    }
}

impl From<PlanEvent> for pb::PlanEvent {
    fn from(e: PlanEvent) -> Self {
        use pb::plan_event::Event;
        let (event, message) = match e {
            PlanEvent::Pending {
                id,
                withheld,
                expires,
            } => {
                let message = format!(
                    "The plan waits for a person's approval ({id}). Do not change anything \
                     meanwhile; the decision follows on this stream.{}",
                    withheld_note(&withheld)
                );
                (
                    Event::Pending(pb::PlanPending {
                        approval_id: id,
                        withheld: withheld.into_iter().map(Into::into).collect(),
                        expires_at_ms: unix_millis(expires),
                    }),
                    message,
                )
            }
            PlanEvent::Approved(a) => {
                let message = format!(
                    "Approved by {}{}. Plan mode is lifted: the file tools may write exactly \
                     these files: {}.{} Run the verification command ({:?}) after your last \
                     write.",
                    a.decision.by,
                    if a.decision.note.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", a.decision.note)
                    },
                    a.granted.join(", "),
                    withheld_note(&a.withheld),
                    a.plan.verification
                );
                (Event::Approved(a.into()), message)
            }
            PlanEvent::Rejected(r) => {
                let message = r.message.clone();
                (Event::Rejected(r.into()), message)
            }
        };
        pb::PlanEvent {
            event: Some(event),
            message,
        }
    }
}

/// What the model is told about withheld files.
fn withheld_note(withheld: &[Withheld]) -> String {
    if withheld.is_empty() {
        return String::new();
    }
    let each: Vec<String> = withheld
        .iter()
        .map(|w| format!("{} ({})", w.path, w.rule))
        .collect();
    format!(
        " Withheld, never granted whatever is approved: {}; leave them as they are.",
        each.join(", ")
    )
}

impl From<Pending> for pb::PendingApproval {
    fn from(p: Pending) -> Self {
        use pb::pending_approval::What;
        let (what, withheld) = match p.asked {
            Asked::Plan { plan, withheld } => (
                What::Plan(plan.into()),
                withheld.into_iter().map(Into::into).collect(),
            ),
            Asked::Call {
                tool,
                summary,
                rule,
                path,
                command,
                change,
            } => (
                What::Call(pb::PendingCall {
                    tool: tool.to_string(),
                    summary,
                    rule,
                    path,
                    command,
                    change,
                }),
                Vec::new(),
            ),
        };
        pb::PendingApproval {
            approval_id: p.id,
            session_id: p.session,
            workspace_path: p.workspace.display().to_string(),
            requested_at_ms: unix_millis(p.requested),
            expires_at_ms: unix_millis(p.expires),
            what: Some(what),
            withheld,
        }
    }
}

impl From<(String, Reconciled)> for pb::SessionReport {
    fn from((session_id, r): (String, Reconciled)) -> Self {
        let (changed_unplanned, changes_unchecked) = match r.changed_unplanned {
            Some(Ok(paths)) => (paths, String::new()),
            Some(Err(why)) => (Vec::new(), why),
            None => (Vec::new(), String::new()),
        };
        pb::SessionReport {
            plan: r.plan.map(Into::into),
            changed_unplanned,
            changes_unchecked,
            processes: r.processes.into_iter().map(Into::into).collect(),
            ..pb::SessionReport::from((session_id, r.report))
        }
    }
}

impl From<Gated<CreateOutput>> for pb::CreateFileResponse {
    fn from(g: Gated<CreateOutput>) -> Self {
        match g {
            Gated::Done(o) => o.into(),
            Gated::Rejected(r) => pb::CreateFileResponse {
                message: r.message.clone(),
                rejected: Some(r.into()),
                ..Default::default()
            },
        }
    }
}

impl From<Gated<EditOutput>> for pb::EditFileResponse {
    fn from(g: Gated<EditOutput>) -> Self {
        match g {
            Gated::Done(o) => o.into(),
            Gated::Rejected(r) => pb::EditFileResponse {
                message: r.message.clone(),
                rejected: Some(r.into()),
                ..Default::default()
            },
        }
    }
}

impl From<Gated<Vec<PatchedFile>>> for pb::ApplyPatchResponse {
    fn from(g: Gated<Vec<PatchedFile>>) -> Self {
        match g {
            Gated::Done(files) => files.into(),
            Gated::Rejected(r) => pb::ApplyPatchResponse {
                message: r.message.clone(),
                rejected: Some(r.into()),
                ..Default::default()
            },
        }
    }
}

impl From<Rejection> for pb::RunCommandEvent {
    fn from(r: Rejection) -> Self {
        pb::RunCommandEvent {
            event: Some(pb::run_command_event::Event::Rejected(r.into())),
        }
    }
}

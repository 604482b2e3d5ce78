//! The `submit_plan` tool: a plan proposed to the person watching the
//! session (SubmitPlan), and its outcome in words for the model: approved
//! (the files granted, those withheld and by which rule, the approver's
//! note), rejected (why; nothing of it was executed), or refused
//! (INVALID_PLAN naming what is missing, APPROVAL_UNAVAILABLE when nobody
//! can approve, which the service words as "proceed on the safest option").
//!
//! A session started with `--plan-mode` is in plan mode: it reads, and an
//! approved plan is how it starts writing.

use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;
use sandboxd::pb;
use sandboxd::pb::plan_event::Event;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::render;
use super::tools::{Refused, Reply, Session};

/// One step of a plan.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepArg {
    /// What the step does, e.g. "make add() return a + b".
    description: String,
    /// Workspace-relative files the step writes, exact paths (no globs),
    /// e.g. ["src/calc.py"].
    #[serde(default)]
    files: Vec<String>,
}

/// Arguments of `submit_plan`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanArgs {
    /// What the change is for, in a sentence.
    goal: String,
    /// The steps, in order, each with the files it writes.
    steps: Vec<StepArg>,
    /// The command whose passing run after the last write verifies the
    /// change, e.g. "python3 -m pytest -q".
    #[serde(default)]
    verification: String,
    /// What could go wrong, e.g. "callers relying on the old rounding".
    #[serde(default)]
    risks: Vec<String>,
}

/// The tool's description.
pub const DESCRIPTION: &str = "Propose a plan to the person watching this session and wait \
     for their answer. A plan names its goal, its steps with the exact workspace-relative \
     files each writes, the verification command that proves the change (run it after the \
     last write), and its risks; one without a goal, files or verification is refused with \
     INVALID_PLAN naming what is missing. A session started in plan mode (--plan-mode) can \
     read but not write or run until a plan is approved: submit_plan is how to leave plan \
     mode. Approval lets the file tools write exactly the planned files, except those a rule \
     withholds (named with the rule); any other write is refused. A rejection says why; \
     nothing of the plan was executed. When nobody can approve, it is refused with \
     APPROVAL_UNAVAILABLE at once: proceed on the safest option and state your assumption.";

/// How often a plan waiting for its answer reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Submits the plan and waits for its outcome. The client cancelling the
/// call drops the stream, which withdraws the plan.
pub async fn call(
    session: &Session,
    a: PlanArgs,
    ctx: &RequestContext<RoleServer>,
) -> Result<Reply, Refused> {
    let plan = pb::Plan {
        goal: a.goal,
        steps: a
            .steps
            .into_iter()
            .map(|s| pb::PlanStep {
                description: s.description,
                files: s.files,
            })
            .collect(),
        verification: a.verification,
        risks: a.risks,
    };
    let mut c = session.client.clone();
    let mut stream = c
        .submit_plan(pb::SubmitPlanRequest {
            session_id: session.id.clone(),
            plan: Some(plan),
        })
        .await?
        .into_inner();
    let progress = ctx.meta.get_progress_token().map(|t| (t, ctx.peer.clone()));
    let started = Instant::now();
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    let mut pending: Option<pb::PlanPending> = None;
    loop {
        tokio::select! {
            () = ctx.ct.cancelled() => {
                return Err(Refused::new(
                    "CANCELLED",
                    "the call was cancelled; the plan was withdrawn and nothing of it was executed",
                ));
            }
            event = stream.message() => {
                let Some(event) = event? else {
                    return Err(Refused::new(
                        "TRANSPORT",
                        "the plan's stream ended without an answer; nothing was granted. \
                         Submit the plan again",
                    ));
                };
                match event.event {
                    Some(Event::Pending(p)) => pending = Some(p),
                    Some(Event::Approved(a)) => return Ok(approved(&a, &event.message)),
                    Some(Event::Rejected(r)) => return Ok(rejected(&r, &event.message)),
                    None => {}
                }
            }
            _ = tick.tick(), if progress.is_some() => {
                if let Some((token, peer)) = &progress {
                    let secs = started.elapsed().as_secs_f64();
                    let id = pending.as_ref().map(|p| p.approval_id.as_str()).unwrap_or("");
                    let param = ProgressNotificationParam::new(token.clone(), secs)
                        .with_message(format!("waiting {secs:.0} s for the plan's approval {id}"));
                    if let Err(e) = peer.notify_progress(param).await {
                        tracing::debug!(error = %e, "progress notification not sent");
                    }
                }
            }
        }
    }
}

/// An approved plan: what may be written now, what may not and why, and
/// how to finish.
fn approved(a: &pb::ApprovedPlan, message: &str) -> Reply {
    let decision = a.decision.clone().unwrap_or_default();
    let mut text = format!("Plan approved{}", render::by(&decision.decided_by));
    text.push_str(&render::note(&decision.note));
    text.push_str(".\n");
    if a.granted.is_empty() {
        text.push_str("Granted: no file (every planned file is withheld).\n");
    } else {
        text.push_str("Granted (the file tools may write these and no others):\n");
        for f in &a.granted {
            text.push_str(&format!("  {}\n", render::path(f)));
        }
    }
    if !a.withheld.is_empty() {
        text.push_str("Withheld (writes to these stay refused):\n");
        text.push_str(&render::withheld(&a.withheld));
    }
    let verification = a
        .plan
        .as_ref()
        .map(|p| p.verification.as_str())
        .unwrap_or("");
    if !verification.is_empty() {
        text.push_str(&format!(
            "Verification: {} (run it after the last write; session_report checks it against the plan)\n",
            render::safe(verification)
        ));
    }
    if !message.is_empty() {
        text.push_str(&render::safe(message));
        text.push('\n');
    }
    Reply {
        text,
        structured: Some(json!({
            "outcome": "approved",
            "approval_id": a.approval_id,
            "granted": a.granted,
            "withheld": withheld_json(&a.withheld),
            "decided_by": decision.decided_by,
            "note": decision.note,
        })),
        is_error: false,
    }
}

/// A rejected plan: why, and that nothing of it was executed.
fn rejected(r: &pb::Rejection, message: &str) -> Reply {
    let mut text = format!(
        "Plan not executed: it was {}. Nothing was granted; the session's rules are as they were.\n",
        render::rejection_cause(r)
    );
    let said = if message.is_empty() {
        &r.message
    } else {
        message
    };
    if !said.is_empty() {
        text.push_str(&render::safe(said));
        text.push('\n');
    }
    Reply {
        text,
        structured: Some(json!({
            "outcome": "rejected",
            "rejected": render::rejection_json(r),
        })),
        is_error: false,
    }
}

fn withheld_json(list: &[pb::WithheldFile]) -> Value {
    Value::Array(
        list.iter()
            .map(|w| json!({ "path": w.path, "rule": w.rule, "message": w.message }))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(by: &str, note: &str) -> Option<pb::Decision> {
        Some(pb::Decision {
            decided_by: by.into(),
            note: note.into(),
            decided_at_ms: 1,
        })
    }

    #[test]
    fn an_approval_names_the_granted_and_the_withheld_files_with_their_rules() {
        let a = pb::ApprovedPlan {
            approval_id: "7f3a-4".into(),
            plan: Some(pb::Plan {
                verification: "pytest -q".into(),
                ..Default::default()
            }),
            granted: vec!["src/x.py".into()],
            withheld: vec![pb::WithheldFile {
                path: "tests/test_x.py".into(),
                rule: "deny_writes \"tests/**\"".into(),
                message: "a deny rule forbids it".into(),
            }],
            decision: decision("operator mcp client pytest", "go ahead"),
        };
        let r = approved(&a, "");
        assert!(
            r.text
                .starts_with("Plan approved by operator mcp client pytest: go ahead.\n"),
            "{}",
            r.text
        );
        assert!(r.text.contains("  src/x.py\n"), "{}", r.text);
        assert!(
            r.text
                .contains("tests/test_x.py (deny_writes \"tests/**\")"),
            "{}",
            r.text
        );
        assert!(r.text.contains("Verification: pytest -q"), "{}", r.text);
        assert!(!r.is_error);
        let s = r.structured.unwrap_or_default();
        assert_eq!(s["granted"], json!(["src/x.py"]));
        assert_eq!(s["withheld"][0]["path"], "tests/test_x.py");
    }

    #[test]
    fn a_rejection_says_nothing_was_executed_and_why() {
        let r = pb::Rejection {
            approval_id: "1".into(),
            reason: "too broad".into(),
            decision: decision("operator mcp client x", "too broad"),
            ..Default::default()
        };
        let reply = rejected(&r, "");
        assert!(reply.text.contains("not executed"), "{}", reply.text);
        assert!(
            reply
                .text
                .contains("rejected by operator mcp client x: too broad"),
            "{}",
            reply.text
        );
        let timed = pb::Rejection {
            reason: "nobody answered".into(),
            timed_out: true,
            ..Default::default()
        };
        assert!(rejected(&timed, "").text.contains("nobody answered"));
    }
}

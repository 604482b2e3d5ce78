//! The person at the MCP client as the approver of its own session.
//!
//! When the client can ask its user (it declared form elicitation) and this
//! process's token may decide (the private service's operator token, or a
//! `--addr` token the service accepts as an approver), `sandboxd mcp`
//! watches the service's pending approvals for its own session and asks
//! the person about each through MCP elicitation: the plan (goal, steps
//! with their files, verification, risks, and the files a rule withholds)
//! or the held call (tool, path or command, the rule). Only an accepted
//! form with `approve` set approves; a decline, a dismissal, `approve`
//! unset, an error or a client that does not answer in time rejects, with
//! the person's note or the reason, so nothing is approved by accident.
//!
//! Otherwise nobody is there to ask: the session is created `unattended`,
//! and whatever needs a person answers APPROVAL_UNAVAILABLE at once.

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::model::{
    BooleanSchema, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    StringSchema,
};
use rmcp::service::ElicitationMode;
use rmcp::{Peer, RoleServer};
use sandboxd::pb;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tonic_types::StatusExt;

use super::open::Ready;
use super::tools::Refused;

mod question;
use crate::cli::connect::Client;
pub use question::question;

/// Who is at the client, as its `initialize` said.
#[derive(Debug, Clone)]
pub struct Attendance {
    /// The client's name (clientInfo.name).
    pub client: String,
    /// Whether it can put a form to its user (elicitation, form mode).
    pub elicits: bool,
}

impl Attendance {
    /// What `peer`'s initialization declared.
    pub fn of(peer: &Peer<RoleServer>) -> Attendance {
        let client = peer
            .peer_info()
            .map(|info| info.client_info.name.clone())
            .unwrap_or_default();
        Attendance {
            client,
            elicits: peer
                .supported_elicitation_modes()
                .contains(&ElicitationMode::Form),
        }
    }

    /// The name Decide records.
    fn decided_by(&self) -> String {
        if self.client.is_empty() {
            "mcp client".to_string()
        } else {
            clip(&format!("mcp client {}", self.client), MAX_NAME_BYTES)
        }
    }
}

/// Whether `client`'s token may decide approvals. The call lists, without
/// waiting, what is pending for a session id no session has: it answers
/// only whether the token may list, and marks nobody present (an approver
/// counts as present only for the sessions it lists).
pub async fn can_decide(client: &Client) -> bool {
    let mut c = client.clone();
    let probe = pb::ListPendingApprovalsRequest {
        wait_ms: 0,
        session_id: "(none)".into(),
    };
    match c.list_pending_approvals(probe).await {
        Ok(_) => true,
        Err(status) => {
            let refused = Refused::from(status);
            tracing::info!(
                reason = %refused.reason,
                "this token cannot approve ({}); the session is unattended",
                refused.message
            );
            false
        }
    }
}

/// Longest name and note Decide takes, in bytes (longer is refused).
const MAX_NAME_BYTES: usize = 256;
const MAX_NOTE_BYTES: usize = 4096;

/// `text` without NUL bytes, cut to at most `max` bytes on a character
/// boundary: Decide refuses more, and a refused decision would leave the
/// person's answer unrecorded.
fn clip(text: &str, max: usize) -> String {
    let mut text = text.replace('\0', "");
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// How long one ListPendingApprovals waits when nothing is pending.
const POLL_WAIT_MS: u64 = 30_000;

/// Pause between listings while something is pending (the service answers
/// at once then), and after a failed one.
const POLL_BUSY: Duration = Duration::from_secs(1);
const POLL_RETRY: Duration = Duration::from_secs(3);

/// How long a person has for one question when the service gave no
/// expiry.
const ASK_DEFAULT: Duration = Duration::from_secs(10 * 60);

/// Decided this long before the service's own timeout would reject it.
const ASK_MARGIN: Duration = Duration::from_secs(3);

/// Acts as the approver of the session once it is open, for as long as
/// the task lives (the caller aborts it when the client goes away). Does
/// nothing when the client cannot ask its user or the token cannot decide.
pub async fn attend(mut ready: Ready, peer: Peer<RoleServer>, attendance: Attendance) {
    if !attendance.elicits {
        return;
    }
    let opened = match ready.wait_for(Option::is_some).await {
        Ok(opened) => match opened.clone() {
            Some(Ok(opened)) => opened,
            _ => return,
        },
        Err(_) => return,
    };
    if !can_decide(&opened.approver).await {
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (listed_tx, listed) = watch::channel(HashSet::new());
    let watching = tokio::spawn(watch_pending(
        opened.approver.clone(),
        opened.session.id.clone(),
        tx,
        listed_tx,
    ));
    while let Some(pending) = rx.recv().await {
        // Withdrawn meanwhile (the model cancelled its call, or it timed
        // out): the form is taken off the person's screen, and there is
        // nothing to decide.
        if let Some((verdict, note)) = ask(&peer, &pending, listed.clone()).await {
            decide(&opened.approver, &pending, verdict, note, &attendance).await;
        }
    }
    watching.abort();
}

/// Lists this session's pending approvals in a loop (which keeps the
/// approver marked present for this session alone) and passes on each new
/// one, once.
async fn watch_pending(
    client: Client,
    session: String,
    tx: mpsc::UnboundedSender<pb::PendingApproval>,
    shown: watch::Sender<HashSet<String>>,
) {
    let mut c = client;
    let mut queued: HashSet<String> = HashSet::new();
    loop {
        let listed = c
            .list_pending_approvals(pb::ListPendingApprovalsRequest {
                // While a form is out, its item's going (withdrawn, timed
                // out) must be seen within a poll, not after a long wait.
                wait_ms: if queued.is_empty() { POLL_WAIT_MS } else { 0 },
                session_id: session.clone(),
            })
            .await;
        let pending = match listed {
            Ok(r) => r.into_inner().pending,
            Err(status) => {
                if status.code() == tonic::Code::PermissionDenied
                    || status
                        .get_error_details()
                        .error_info()
                        .map(|i| i.reason.as_str())
                        == Some("NOT_PERMITTED")
                {
                    tracing::warn!("this token may no longer approve: {}", status.message());
                    return;
                }
                tracing::debug!(error = %status.message(), "listing pending approvals failed");
                tokio::time::sleep(POLL_RETRY).await;
                continue;
            }
        };
        // Forgotten once no longer pending (decided, timed out, withdrawn):
        // a listing taken while one was being decided still names it.
        queued.retain(|id| pending.iter().any(|p| &p.approval_id == id));
        shown.send_replace(pending.iter().map(|p| p.approval_id.clone()).collect());
        for p in pending.iter().filter(|p| p.session_id == session) {
            if queued.insert(p.approval_id.clone()) && tx.send(p.clone()).is_err() {
                return;
            }
        }
        if !pending.is_empty() || !queued.is_empty() {
            tokio::time::sleep(POLL_BUSY).await;
        }
    }
}

/// Puts the pending plan or call to the person; anything but an accepted
/// form with `approve` set is a rejection, with the note or the reason.
/// `None`: the item left the service's listing (`listed`) before the
/// person answered, and the form was cancelled at the client.
async fn ask(
    peer: &Peer<RoleServer>,
    pending: &pb::PendingApproval,
    mut listed: watch::Receiver<HashSet<String>>,
) -> Option<(pb::Verdict, String)> {
    use rmcp::model::{ClientResult, ElicitRequest, ServerRequest};
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: question(pending),
            requested_schema: form(),
        },
    ));
    let mut handle = match peer
        .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
        .await
    {
        Ok(handle) => handle,
        Err(e) => return Some(unanswered(pending, &e)),
    };
    let id = pending.approval_id.clone();
    let withdrawn = {
        let id = id.clone();
        async move {
            let gone = listed.wait_for(|ids| !ids.contains(&id)).await.is_ok();
            if !gone {
                // The listing stopped: only the answer or the time decides.
                std::future::pending::<()>().await;
            }
        }
    };
    let answered = tokio::select! {
        answer = tokio::time::timeout(time_left(pending.expires_at_ms), &mut handle.rx) => answer,
        () = withdrawn => {
            tracing::info!(approval = %id, "withdrawn before the person answered; the form is cancelled");
            let _ = handle.cancel(Some("the call was withdrawn".into())).await;
            return None;
        }
    };
    let answered = match answered {
        Ok(Ok(Ok(ClientResult::ElicitResult(result)))) => Ok(result),
        Ok(Ok(Ok(_))) => Err(rmcp::ServiceError::UnexpectedResponse),
        Ok(Ok(Err(e))) => Err(e),
        Ok(Err(_)) => Err(rmcp::ServiceError::TransportClosed),
        Err(_) => {
            let _ = handle
                .cancel(Some("the person did not answer in time".into()))
                .await;
            Err(rmcp::ServiceError::Timeout {
                timeout: time_left(pending.expires_at_ms),
            })
        }
    };
    Some(match answered {
        Ok(result) => verdict(&result),
        Err(e) => unanswered(pending, &e),
    })
}

/// A form the client did not answer: a rejection saying why.
fn unanswered(pending: &pb::PendingApproval, e: &rmcp::ServiceError) -> (pb::Verdict, String) {
    tracing::warn!(error = %e, approval = %pending.approval_id, "the MCP client did not answer");
    (
        pb::Verdict::Reject,
        format!("the person at the MCP client did not answer ({e})"),
    )
}

/// What the person's answer means.
fn verdict(result: &ElicitResult) -> (pb::Verdict, String) {
    let field = |name: &str| result.content.as_ref().and_then(|c| c.get(name));
    let note = field("note")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or("")
        .to_string();
    let or = |fallback: &str| {
        if note.is_empty() {
            fallback.to_string()
        } else {
            note.clone()
        }
    };
    match result.action {
        ElicitationAction::Accept if field("approve").and_then(Value::as_bool) == Some(true) => {
            (pb::Verdict::Approve, note)
        }
        ElicitationAction::Accept => (pb::Verdict::Reject, or("not approved at the MCP client")),
        ElicitationAction::Decline => (pb::Verdict::Reject, or("declined at the MCP client")),
        // Cancel, and any action a later protocol adds: not an approval.
        _ => (
            pb::Verdict::Reject,
            or("dismissed at the MCP client without an answer"),
        ),
    }
}

/// Records the verdict. A plan or call no longer pending (withdrawn, or
/// timed out meanwhile) is not an error: there is nothing left to decide.
async fn decide(
    client: &Client,
    pending: &pb::PendingApproval,
    verdict: pb::Verdict,
    note: String,
    attendance: &Attendance,
) {
    let mut c = client.clone();
    let decided = c
        .decide(pb::DecideRequest {
            approval_id: pending.approval_id.clone(),
            verdict: verdict as i32,
            note: clip(&note, MAX_NOTE_BYTES),
            decided_by: attendance.decided_by(),
        })
        .await;
    if let Err(status) = decided {
        let refused = Refused::from(status);
        tracing::warn!(
            approval = %pending.approval_id,
            reason = %refused.reason,
            "the decision was not recorded: {}",
            refused.message
        );
    }
}

/// How long the person has: until just before the service's own timeout.
fn time_left(expires_at_ms: u64) -> Duration {
    if expires_at_ms == 0 {
        return ASK_DEFAULT;
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Duration::from_millis(expires_at_ms)
        .saturating_sub(now)
        .saturating_sub(ASK_MARGIN)
        .max(Duration::from_secs(1))
}

/// The form: approve or not, and a note the agent sees.
fn form() -> ElicitationSchema {
    ElicitationSchema::builder()
        .required_bool_with("approve", |b: BooleanSchema| {
            b.title("Approve")
                .description("Approve: let it go ahead. Leave unset to reject.")
                .with_default(false)
        })
        .optional_string_with("note", |s: StringSchema| {
            s.title("Note").description(
                "Why, or what the agent should keep in mind; the agent reads it (a rejection's reason).",
            )
        })
        .build_unchecked()
}

fn minutes_left(expires_at_ms: u64) -> Option<u64> {
    (expires_at_ms != 0).then(|| time_left(expires_at_ms).as_secs().div_ceil(60))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(action: ElicitationAction, content: Option<Value>) -> ElicitResult {
        let mut r = ElicitResult::new(action);
        r.content = content;
        r
    }

    #[test]
    fn only_an_accepted_approve_approves() {
        let yes = answer(
            ElicitationAction::Accept,
            Some(json!({"approve": true, "note": " fine "})),
        );
        assert_eq!(verdict(&yes), (pb::Verdict::Approve, "fine".to_string()));
        let no = answer(
            ElicitationAction::Accept,
            Some(json!({"approve": false, "note": "too broad"})),
        );
        assert_eq!(verdict(&no), (pb::Verdict::Reject, "too broad".to_string()));
        let unset = answer(ElicitationAction::Accept, Some(json!({})));
        assert_eq!(verdict(&unset).0, pb::Verdict::Reject);
        let text = answer(ElicitationAction::Accept, Some(json!({"approve": "true"})));
        assert_eq!(verdict(&text).0, pb::Verdict::Reject);
        let declined = answer(ElicitationAction::Decline, None);
        assert_eq!(
            verdict(&declined),
            (
                pb::Verdict::Reject,
                "declined at the MCP client".to_string()
            )
        );
        assert_eq!(
            verdict(&answer(ElicitationAction::Cancel, None)).0,
            pb::Verdict::Reject
        );
    }

    #[test]
    fn names_and_notes_are_cut_to_what_decide_takes() {
        assert_eq!(clip("a\0b", 10), "ab");
        assert_eq!(clip("\u{e9}\u{e9}", 3), "\u{e9}");
        assert_eq!(
            clip(&"x".repeat(5000), MAX_NOTE_BYTES).len(),
            MAX_NOTE_BYTES
        );
    }

    #[test]
    fn the_form_asks_approve_and_a_note() {
        let schema = serde_json::to_value(form()).unwrap_or_default();
        assert_eq!(schema["properties"]["approve"]["type"], "boolean");
        assert_eq!(schema["properties"]["note"]["type"], "string");
        assert_eq!(schema["required"], json!(["approve"]));
    }
}

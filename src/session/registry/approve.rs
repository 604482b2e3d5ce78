//! Approvers' calls: what waits for a person, and deciding it. Only the
//! operator's token and the approver token may make them; each marks an
//! approver as present, so that what needs a person may wait for one.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::super::approvals::{Decision, Pending, Scope};
use super::super::defaults::MAX_APPROVALS_WAIT;
use super::super::error::Error;
use super::super::messages::Caller;
use super::Registry;

/// Longest note or name a decision carries, in bytes.
const MAX_NOTE_BYTES: usize = 4096;
const MAX_NAME_BYTES: usize = 256;

impl Registry {
    /// ListPendingApprovals: what waits now in `scope`, oldest first,
    /// waiting up to `wait` (capped) for something when nothing does.
    pub async fn pending_approvals(
        &self,
        caller: &Caller,
        scope: &Scope,
        wait: Duration,
    ) -> Result<Vec<Pending>, Error> {
        let approvals = self.approvals(caller)?;
        Ok(approvals.pending(scope, wait.min(MAX_APPROVALS_WAIT)).await)
    }

    /// Decide: approves or rejects the wait `id`, as `caller` (named
    /// `name` in the journal, if given), with `note`. Answers what was
    /// decided.
    pub fn decide(
        &self,
        caller: &Caller,
        id: &str,
        approve: bool,
        name: &str,
        note: &str,
    ) -> Result<Pending, Error> {
        let approvals = self.approvals(caller)?;
        for (field, value, max) in [
            ("note", note, MAX_NOTE_BYTES),
            ("decided_by", name, MAX_NAME_BYTES),
        ] {
            if value.len() > max || value.contains('\0') {
                return Err(Error::InvalidArgument {
                    field,
                    why: format!("it must be at most {max} bytes, without NUL"),
                });
            }
        }
        let role = match caller {
            Caller::Approver => "approver",
            _ => "operator",
        };
        let by = match name.trim() {
            "" => role.to_string(),
            name => format!("{role} ({name})"),
        };
        let decision = Decision {
            by,
            note: note.trim().to_string(),
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        };
        approvals
            .decide(id, approve, decision)
            .map_err(|e| Error::ApprovalNotFound { id: e.id })
    }
}

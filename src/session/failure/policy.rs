//! What a caller is told when the policy refuses a call, or when a call
//! that needs a person cannot have one: part of the one table in
//! [`super`].

use tonic::Code;

use super::{Described, reason, status};
use crate::policy::Denial;
use crate::session::Token;
use crate::session::approvals::Unavailable;

pub(super) fn denial_status(denial: &Denial) -> Described {
    match denial {
        Denial::ReadOnly { tool } => status(
            Code::PermissionDenied,
            reason::POLICY_DENIED,
            format!(
                "This session is read-only, so {tool} is refused. Nothing was changed or run. \
                 Reading, listing, finding and searching work; a read-only session never changes \
                 files or runs commands, and no plan or approval changes that. Report what you \
                 found; to make changes, the caller must open a session without read_only (with \
                 plan_mode, to have a person approve a plan first)."
            ),
            &[
                ("rule", "read_only".to_string()),
                ("tool", tool.to_string()),
            ],
        ),
        Denial::PlanMode { tool } => status(
            Code::PermissionDenied,
            reason::POLICY_DENIED,
            format!(
                "This session is in plan mode (read-only until a plan is approved), so {tool} is \
                 refused. Nothing was changed or run. Reading, listing, finding and searching work. \
                 To change files or run commands, submit a plan (SubmitPlan, or the submit_plan \
                 tool: goal, steps with the files each writes, the verification command, risks) for \
                 a person to approve."
            ),
            &[
                ("rule", "plan_mode".to_string()),
                ("tool", tool.to_string()),
            ],
        ),
        Denial::DeniedPath { path, glob } => status(
            Code::PermissionDenied,
            reason::POLICY_DENIED,
            format!(
                "Writing {path} is denied by the session policy (it matches the deny glob {glob:?}). Nothing \
                 was changed. Leave it as it is and change other files (for a failing test, fix the code under \
                 test, not the test)."
            ),
            &[
                ("rule", "deny_writes".to_string()),
                ("path", path.clone()),
                ("glob", glob.clone()),
            ],
        ),
        Denial::NotGranted { path } => status(
            Code::PermissionDenied,
            reason::POLICY_DENIED,
            format!(
                "Writing {path} is not granted: this session may write only paths matching its allow_writes \
                 globs. Nothing was changed. Keep your changes within those paths."
            ),
            &[("rule", "allow_writes".to_string()), ("path", path.clone())],
        ),
        Denial::NotInPlan { path } => status(
            Code::PermissionDenied,
            reason::POLICY_DENIED,
            format!(
                "Writing {path} is outside the approved plan: this session may write only the files the \
                 plan granted. Nothing was changed. Keep to the plan's files, or submit a new plan that \
                 names this file for a person to approve."
            ),
            &[("rule", "plan".to_string()), ("path", path.clone())],
        ),
        // Reached only where the call cannot wait for a person (an upload,
        // a restore): the file tools and commands ask instead.
        Denial::NeedsApproval { tool, path, rule } => status(
            Code::PermissionDenied,
            reason::POLICY_DENIED,
            format!(
                "{tool} would write {path}, which needs a person's approval ({rule}), and {tool} cannot \
                 wait for one. Nothing was changed. Write that file with CreateFile, EditFile or \
                 ApplyPatch, which ask for approval."
            ),
            &[
                ("rule", rule.clone()),
                ("path", path.clone()),
                ("tool", tool.to_string()),
            ],
        ),
    }
}

pub(super) fn not_permitted_status(token: Token, what: &str) -> Described {
    let message = match token {
        Token::Session => format!(
            "A session token cannot {what}: it admits calls on its own session only. Nothing was \
             run or changed. Make this call with the service's token."
        ),
        Token::Approver => format!(
            "The approver token cannot {what}: it admits ListPendingApprovals and Decide only. \
             Nothing was run or changed. Act on a session with its own token or the service's."
        ),
    };
    status(Code::PermissionDenied, reason::NOT_PERMITTED, message, &[])
}

pub(super) fn invalid_plan_status(problems: &[String]) -> Described {
    status(
        Code::InvalidArgument,
        reason::INVALID_PLAN,
        format!(
            "The plan is not checkable, so it was not submitted: {}. Nothing of it was kept. Send \
             the whole plan again with a goal, steps that each say what they do and list the files \
             they write, the verification command, and the risks.",
            problems.join("; ")
        ),
        &[("problems", problems.len().to_string())],
    )
}

pub(super) fn approval_not_found_status(id: &str) -> Described {
    status(
        Code::NotFound,
        reason::APPROVAL_NOT_FOUND,
        format!(
            "Nothing waits for approval under {id:?}: it was decided, timed out or withdrawn (its \
             caller left or its session closed). Nothing was changed. List what waits with \
             ListPendingApprovals."
        ),
        &[("approval_id", id.to_string())],
    )
}

pub(super) fn unavailable_status(why: &Unavailable) -> Described {
    let (because, meta) = match why {
        Unavailable::Full {
            ceiling,
            per_session,
        } => {
            let whose = if *per_session {
                "this session has"
            } else {
                "the service has"
            };
            return status(
                Code::ResourceExhausted,
                reason::LIMIT_EXCEEDED,
                format!(
                    "Not executed: {whose} {ceiling} requests waiting for a person already, the most \
                     it may. Nothing was changed. Wait for an answer to those before asking again."
                ),
                &[("limit", ceiling.to_string())],
            );
        }
        Unavailable::Unattended => ("this session is unattended".to_string(), "unattended"),
        Unavailable::NoApprover { absent_after } => (
            format!(
                "no approver has been seen in the last {} minutes",
                absent_after.as_secs().div_ceil(60)
            ),
            "no_approver",
        ),
    };
    status(
        Code::FailedPrecondition,
        reason::APPROVAL_UNAVAILABLE,
        format!(
            "Not executed: this needs a person's approval and nobody can approve it now \
             ({because}). Nothing was changed, and nothing is ever approved without a person. \
             Proceed on the safest option that needs no approval (in plan mode: keep to reading, \
             and give your plan as a proposal), and state the assumption you made."
        ),
        &[("why", meta.to_string())],
    )
}

//! What a caller is told when a session's volume fails: part of the one
//! table in [`super`].

use tonic::Code;

use super::{Described, reason, status};

pub(super) fn volume_status(err: &crate::volume::Error) -> Described {
    use crate::volume::Error as V;
    match err {
        V::NotPrivate { path } => status(
            Code::FailedPrecondition,
            reason::INVALID_WORKSPACE,
            format!(
                "{} is reachable by other users of this host, so a file a command marked set-user-id \
                 there could be run by them. No session was created. Make a directory above it \
                 private (owned by root or its owner, chmod 700), e.g. the allowed root, then retry.",
                path.display()
            ),
            &[("path", path.display().to_string())],
        ),
        V::Exposed { path, ancestor } => status(
            Code::FailedPrecondition,
            reason::INVALID_WORKSPACE,
            format!(
                "{} lies under {}, which a user of this host other than root and the directory's \
                 owner could change. This service runs without root, so the container engine finds \
                 the directory by its path, and such a user could put another directory in its \
                 place. No session was created. Lend a directory every directory above which \
                 belongs to root or to you and is writable by nobody else (a sticky one such as \
                 /tmp is fine), then retry.",
                path.display(),
                ancestor.display()
            ),
            &[
                ("path", path.display().to_string()),
                ("ancestor", ancestor.display().to_string()),
            ],
        ),
        V::LinkedOutside { path, links } => status(
            Code::FailedPrecondition,
            reason::INVALID_WORKSPACE,
            format!(
                "{} in the directory has {links} hard links, some outside it (a local `git \
                 clone` or `cp -al` makes them): a command writing it, or marking it set-id, would \
                 change that file elsewhere on the host too. No session was created. Lend a copy \
                 without shared files (`git clone --no-hardlinks`, `cp -a`), then retry.",
                path.display()
            ),
            &[("path", path.display().to_string())],
        ),
        V::HoldsState { path } => status(
            Code::FailedPrecondition,
            reason::INVALID_WORKSPACE,
            format!(
                "The directory is, holds or lies inside a sandboxd state directory ({}): a \
                 service's tokens, sockets and sessions are never lent. No session was created. \
                 Lend a project directory of its own, then retry.",
                path.display()
            ),
            &[("path", path.display().to_string())],
        ),
        V::Unchecked { path, why } => status(
            Code::FailedPrecondition,
            reason::INVALID_WORKSPACE,
            format!(
                "The directory could not be checked for files linked from outside it (at {}: \
                 {why}). No session was created. Lend a smaller or readable tree, then retry.",
                path.display()
            ),
            &[("path", path.display().to_string())],
        ),
        V::Gone(why) => status(
            Code::FailedPrecondition,
            reason::WORKSPACE_GONE,
            format!(
                "The session's workspace is gone ({why}). Nothing was run. Close the session and create \
                 a new one."
            ),
            &[],
        ),
        e @ (V::State(_) | V::Create(_) | V::Pin(_)) => status(
            Code::Internal,
            reason::IO_ERROR,
            format!(
                "The service could not prepare the workspace: {e}. No session was created. Retry later \
                 or tell the operator."
            ),
            &[],
        ),
    }
}

//! What a caller is told when the container engine fails: part of the
//! one table in [`super`].

use tonic::Code;

use super::{Described, reason, status};
use crate::sandbox;

pub(super) fn sandbox_status(err: &sandbox::Error) -> Described {
    use sandbox::Error as X;
    match err {
        X::ImageMissing { image, why } => status(
            Code::FailedPrecondition,
            reason::IMAGE_NOT_FOUND,
            format!(
                "Image {image} is not available: {why}. No session was created. Use the default image \
                 (leave image empty) or one the operator has loaded."
            ),
            &[("image", image.clone())],
        ),
        X::WorkspaceGone(why) => status(
            Code::FailedPrecondition,
            reason::WORKSPACE_GONE,
            format!(
                "The session's workspace is gone ({why}). Nothing was run in it. Close the session \
                 and create a new one."
            ),
            &[],
        ),
        X::ImageUnusable { image, why } => status(
            Code::FailedPrecondition,
            reason::IMAGE_NOT_ALLOWED,
            format!(
                "Image {image} cannot be used: {why}. No session was created. Build the \
                 environment again without it, or use another image."
            ),
            &[("image", image.clone())],
        ),
        X::ImageInUse { image, why } => status(
            Code::FailedPrecondition,
            reason::ENVIRONMENT_IN_USE,
            format!(
                "Image {image} is still used by a container ({why}), so it was kept. Close the \
                 sessions using it, then try again."
            ),
            &[("image", image.clone())],
        ),
        e @ (X::Connect(_)
        | X::EngineTimeout
        | X::LinkLost
        | X::BuildImage { .. }
        | X::Images(_)
        | X::StartContainer(_)
        | X::StartExec(_)
        | X::InspectExec(_)
        | X::KillContainer(_)
        | X::RemoveContainer(_)
        | X::ListContainers(_)) => status(
            Code::Unavailable,
            reason::SANDBOX_UNAVAILABLE,
            format!(
                "The sandbox is unavailable: {e}. The command was not run. File tools (read, edit, search) \
                 still work; retry the command later."
            ),
            &[],
        ),
    }
}

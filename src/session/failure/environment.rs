//! What a caller is told when an environment cannot be built, found or
//! deleted: part of the one table in [`super`].

use tonic::Code;

use super::{Described, reason, sandbox_status, status};
use crate::environment;

/// Lines of a failed step's output put in its error, and characters of each.
const TAIL_LINES_TOLD: usize = 12;
const TAIL_LINE_CHARS: usize = 160;

pub(super) fn environment_status(err: &environment::Error) -> Described {
    use environment::Error as E;
    const NOTHING_BUILT: &str = "No environment was created or changed.";
    match err {
        E::NotAllowed => status(
            Code::PermissionDenied,
            reason::POLICY_DENIED,
            format!(
                "Building and deleting environments runs code with network access, so it is an \
                 operator's permission, and this caller does not have it. {NOTHING_BUILT} Ask the \
                 operator to build it, to start the service with --allow-builds, or for the build token."
            ),
            &[],
        ),
        E::InvalidName { name } => status(
            Code::InvalidArgument,
            reason::INVALID_ARGUMENT,
            format!(
                "{name:?} is not a valid environment name. {NOTHING_BUILT} Use 1 to 64 lowercase \
                 letters and digits, with single '.', '_' or '-' between them (e.g. py-3.12)."
            ),
            &[("name", name.clone())],
        ),
        E::InvalidRecipe(why) => status(
            Code::InvalidArgument,
            reason::INVALID_RECIPE,
            format!(
                "The recipe cannot be built: {why}. {NOTHING_BUILT} Fix the recipe and build again."
            ),
            &[],
        ),
        E::InvalidContext(why) => status(
            Code::InvalidArgument,
            reason::INVALID_RECIPE,
            format!(
                "The build context is refused: {why}. {NOTHING_BUILT} Send a plain tar archive of \
                 relative paths holding only files, directories and symbolic links."
            ),
            &[],
        ),
        E::ContextTooLarge { size, max } => status(
            Code::ResourceExhausted,
            reason::BUILD_CONTEXT_TOO_LARGE,
            format!(
                "The build context is {size} bytes, over the ceiling of {max}. {NOTHING_BUILT} Send \
                 only what the Dockerfile copies (list the rest in .dockerignore, or leave it out), or \
                 fetch large inputs in a RUN step."
            ),
            &[("size", size.to_string()), ("max", max.to_string())],
        ),
        E::BaseMissing { image, local } => status(
            Code::FailedPrecondition,
            reason::IMAGE_NOT_FOUND,
            format!(
                "The base image {image} is not in the engine's image store, and images are never \
                 pulled. {NOTHING_BUILT} Build FROM a local image; these are present: {}.",
                if local.is_empty() {
                    "none".to_string()
                } else {
                    local.join(", ")
                }
            ),
            &[("image", image.clone())],
        ),
        E::BuildFailed {
            step,
            instruction,
            message,
            tail,
        } => {
            let at = if step.is_empty() {
                "The build failed before its first step".to_string()
            } else {
                format!("Step {step} ({instruction}) failed")
            };
            let tail: Vec<String> = tail
                .iter()
                .rev()
                .take(TAIL_LINES_TOLD)
                .rev()
                .map(|l| shorten_to(l, TAIL_LINE_CHARS))
                .collect();
            let output = if tail.is_empty() {
                " ".to_string()
            } else {
                format!(" Its last output lines:\n{}\n", tail.join("\n"))
            };
            status(
                Code::FailedPrecondition,
                reason::BUILD_FAILED,
                format!(
                    "{at}: {message}.{output}{NOTHING_BUILT} Its containers were removed. Fix \
                     that step and build again; the steps before it are cached."
                ),
                &[("step", step.clone())],
            )
        }
        E::Unusable { why } => status(
            Code::FailedPrecondition,
            reason::BUILD_FAILED,
            format!(
                "The build finished, but no session could start from its image: {why}. The \
                 image was removed. {NOTHING_BUILT} Change the recipe and build again."
            ),
            &[("step", String::new())],
        ),
        E::BuildTimedOut {
            limit,
            step,
            ceiling,
        } => status(
            Code::DeadlineExceeded,
            reason::BUILD_TIMED_OUT,
            format!(
                "The build passed its time limit of {} s at step {step} and was stopped; its \
                 containers were removed. {NOTHING_BUILT} Ask for a longer timeout_seconds (up \
                 to the operator's ceiling of {} s), or make the step faster.",
                limit.as_secs(),
                ceiling.as_secs()
            ),
            &[("limit_seconds", limit.as_secs().to_string())],
        ),
        E::NotFound { name, known } => status(
            Code::NotFound,
            reason::ENVIRONMENT_NOT_FOUND,
            format!(
                "No environment is named {name}. Nothing was created. Known environments: {}. \
                 Build it first (BuildEnvironment, or `sandboxd env build`).",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
            &[("name", name.clone())],
        ),
        E::InUse { name, sessions } => status(
            Code::FailedPrecondition,
            reason::ENVIRONMENT_IN_USE,
            format!(
                "Environment {name} is used by {} open session(s) ({}), so it was kept. Close \
                 those sessions, then delete it.",
                sessions.len(),
                sessions.join(", ")
            ),
            &[("name", name.clone())],
        ),
        E::Engine(e) => sandbox_status(e),
    }
}

/// `s` cut to `max` characters.
pub(super) fn shorten_to(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_string(),
    }
}

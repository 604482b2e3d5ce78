//! Why an environment call failed.

use std::sync::Arc;
use std::time::Duration;

use crate::sandbox;

/// Why building, finding or deleting an environment failed. Cloned to every
/// caller waiting on one shared build.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The caller may not build or delete environments.
    #[error("building environments is not allowed for this caller")]
    NotAllowed,
    /// The name is not one an environment can have.
    #[error("{name:?} is not a valid environment name")]
    InvalidName {
        /// What was asked.
        name: String,
    },
    /// The recipe cannot be built as given.
    #[error("the recipe is not valid: {0}")]
    InvalidRecipe(String),
    /// The build context is not an archive sandboxd accepts.
    #[error("the build context is not valid: {0}")]
    InvalidContext(String),
    /// The build context (with the Dockerfile) is over its ceiling.
    #[error("the build context is {size} bytes, over the ceiling of {max}")]
    ContextTooLarge {
        /// Bytes given.
        size: u64,
        /// The ceiling.
        max: u64,
    },
    /// A base image the recipe names is not in the engine's store.
    #[error("base image {image} is not present")]
    BaseMissing {
        /// The image.
        image: String,
        /// Local images that could serve instead.
        local: Vec<String>,
    },
    /// A step of the build failed.
    #[error("step {step} ({instruction}) failed: {message}")]
    BuildFailed {
        /// `n of m`, as the caller counts steps; empty before any step.
        step: String,
        /// The step's instruction.
        instruction: String,
        /// The engine's words.
        message: String,
        /// The last lines the step printed.
        tail: Vec<String>,
    },
    /// The build finished, but no session could start from its image (a
    /// VOLUME or a symlink where the sandbox mounts): it was removed.
    #[error("the image built cannot be used by sessions: {why}")]
    Unusable {
        /// What the image holds, and where.
        why: String,
    },
    /// The build passed its time limit and was stopped.
    #[error("the build passed its time limit of {} s", .limit.as_secs())]
    BuildTimedOut {
        /// The limit.
        limit: Duration,
        /// The step running then (`n of m: INSTRUCTION`).
        step: String,
        /// The operator's ceiling, up to which the limit may be raised.
        ceiling: Duration,
    },
    /// No environment has this name.
    #[error("no environment is named {name}")]
    NotFound {
        /// What was asked.
        name: String,
        /// The environments there are.
        known: Vec<String>,
    },
    /// Sessions use the environment.
    #[error("environment {name} is used by {} session(s)", .sessions.len())]
    InUse {
        /// The environment.
        name: String,
        /// Ids of the sessions using it.
        sessions: Vec<String>,
    },
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] Arc<sandbox::Error>),
}

impl From<sandbox::Error> for Error {
    fn from(e: sandbox::Error) -> Error {
        Error::Engine(Arc::new(e))
    }
}

//! Conversions of environments, their build requests and build progress,
//! between the wire and the domain.

use std::time::Duration;

use crate::environment::{self, Environment, Progress, Source};
use crate::pb;
use crate::session::{EnvironmentInfo, NewEnvironment};

impl TryFrom<pb::BuildEnvironmentRequest> for NewEnvironment {
    type Error = environment::Error;

    fn try_from(r: pb::BuildEnvironmentRequest) -> Result<Self, Self::Error> {
        let source = match (r.dockerfile.is_empty(), r.setup_script.is_empty()) {
            (false, true) => {
                if !r.base.is_empty() {
                    return Err(environment::Error::InvalidRecipe(
                        "base goes with a setup script; a Dockerfile names its base in FROM".into(),
                    ));
                }
                Source::Dockerfile {
                    text: r.dockerfile,
                    context: r.context,
                }
            }
            (true, false) => {
                if !r.context.is_empty() {
                    return Err(environment::Error::InvalidRecipe(
                        "a setup script takes no context; write a Dockerfile to COPY files".into(),
                    ));
                }
                Source::Setup {
                    script: r.setup_script,
                    base: (!r.base.is_empty()).then_some(r.base),
                }
            }
            (false, false) => {
                return Err(environment::Error::InvalidRecipe(
                    "give a dockerfile or a setup_script, not both".into(),
                ));
            }
            (true, true) => {
                return Err(environment::Error::InvalidRecipe(
                    "give a dockerfile (with its context) or a setup_script".into(),
                ));
            }
        };
        Ok(NewEnvironment {
            name: r.name,
            source,
            timeout: Duration::from_secs(r.timeout_seconds),
            output_cap: r.output_cap,
        })
    }
}

impl From<Environment> for pb::Environment {
    fn from(e: Environment) -> Self {
        pb::Environment {
            name: e.name,
            image: e.image,
            image_id: e.image_id,
            key: e.key,
            base: e.base,
            created_at: e.created,
            size_bytes: e.size,
            sessions: Vec::new(),
        }
    }
}

impl From<EnvironmentInfo> for pb::Environment {
    fn from(e: EnvironmentInfo) -> Self {
        pb::Environment {
            sessions: e.sessions,
            ..e.environment.into()
        }
    }
}

impl From<Progress> for pb::BuildEnvironmentEvent {
    fn from(p: Progress) -> Self {
        use pb::build_environment_event::Event as E;
        let event = match p {
            Progress::Joined => E::Joined(pb::BuildJoined {}),
            Progress::Step {
                number,
                total,
                instruction,
            } => E::Step(pb::BuildStep {
                number,
                total,
                instruction,
            }),
            Progress::Output(mut text) => {
                text.push('\n');
                E::Output(pb::BuildOutput { text })
            }
            Progress::Done(b) => E::Done(pb::BuildDone {
                environment: Some(b.environment.into()),
                cached: b.cached,
                duration_ms: b.duration.as_millis() as u64,
                output_bytes: b.output_bytes,
                output_truncated: b.output_truncated,
            }),
        };
        pb::BuildEnvironmentEvent { event: Some(event) }
    }
}

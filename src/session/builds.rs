//! Environments as callers reach them: who may build or delete one (an
//! operator's permission: building runs code with network access), the
//! time limit and output cap picked under the operator's ceilings, and
//! every build and deletion journaled, with the words the caller got.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use super::config::Config;
use super::failure::{self, describe};
use super::messages::NewEnvironment;
use crate::environment::{self, BuildRequest, Environment, Environments, Events, Progress};
use crate::journal::Journal;
use crate::sandbox::{Runtime, labels};

/// The service's environments and their journal.
#[derive(Debug)]
pub(super) struct Builds {
    environments: Arc<Environments>,
    journal: Arc<Journal>,
    config: Arc<Config>,
    /// The builds as viewers see them.
    pub(super) watch: Arc<super::build_watch::BuildWatch>,
}

/// What a build call sends: progress, then `Done` or the error.
pub type BuildEvents = mpsc::Receiver<Result<Progress, failure::Error>>;

impl Builds {
    /// Builds journaled as `builds-<instance>` (a JSON-lines file in the
    /// journal directory, when there is one).
    pub(super) fn new(
        config: Arc<Config>,
        runtime: Arc<dyn Runtime>,
        journal_dir: Option<&crate::journal::Files>,
    ) -> std::io::Result<Builds> {
        let journal = Arc::new(Journal::new(
            &format!("builds-{}", config.sandbox.instance),
            journal_dir,
        )?);
        let sandbox = &config.sandbox;
        let builds = crate::environment::BuildConfig {
            owner: std::collections::BTreeMap::from([
                (labels::INSTANCE.to_string(), sandbox.instance.clone()),
                (labels::SERVICE.to_string(), sandbox.service.clone()),
                (labels::STATE.to_string(), sandbox.state_id.clone()),
            ]),
            ..config.builds.clone()
        };
        Ok(Builds {
            environments: Arc::new(Environments::new(runtime, builds)),
            journal,
            config,
            watch: Arc::default(),
        })
    }

    fn check_allowed(&self, may_build: bool) -> Result<(), failure::Error> {
        if may_build || self.config.allow_builds {
            Ok(())
        } else {
            Err(environment::Error::NotAllowed.into())
        }
    }

    fn refused(&self, tool: &'static str, summary: &str, started: Instant, e: &failure::Error) {
        let d = describe(e);
        tracing::warn!(tool, summary, reason = d.reason, "environment call refused");
        self.journal
            .refused(tool, summary, started, d.reason, d.message);
    }

    /// Starts a build (or joins one, or answers from the cache).
    pub(super) async fn build(
        &self,
        req: NewEnvironment,
        may_build: bool,
    ) -> Result<BuildEvents, failure::Error> {
        let started = Instant::now();
        let summary = format!("environment {}", req.name);
        let req_name = req.name.clone();
        let begun = async {
            self.check_allowed(may_build)?;
            let request = BuildRequest {
                name: req.name.clone(),
                source: req.source,
                timeout: self.config.build_timeout(req.timeout)?,
                output_cap: self.config.build_output_cap(req.output_cap)?,
            };
            Ok::<_, failure::Error>(self.environments.build(request).await?)
        }
        .await;
        let events = match begun {
            Ok(events) => events,
            Err(e) => {
                self.refused("BuildEnvironment", &summary, started, &e);
                return Err(e);
            }
        };
        let (tx, rx) = mpsc::channel(64);
        let journal = Arc::clone(&self.journal);
        let metrics = self.config.metrics.clone();
        let watched = (Arc::clone(&self.watch), self.watch.begun(&req_name));
        tokio::spawn(relay(
            events, tx, journal, summary, started, metrics, watched,
        ));
        Ok(rx)
    }

    /// Every environment.
    pub(super) async fn list(&self) -> Result<Vec<Environment>, failure::Error> {
        Ok(self.environments.list().await?)
    }

    /// The environment `name`, for a session.
    pub(super) async fn resolve(&self, name: &str) -> Result<Environment, failure::Error> {
        Ok(self.environments.resolve(name).await?)
    }

    /// Deletes `name` unless `sessions` (those running it) is not empty.
    pub(super) async fn delete(
        &self,
        name: &str,
        may_build: bool,
        sessions: Vec<String>,
    ) -> Result<Environment, failure::Error> {
        let started = Instant::now();
        let summary = format!("environment {name}");
        let result = async {
            self.check_allowed(may_build)?;
            environment::check_name(name)?;
            if !sessions.is_empty() {
                return Err(environment::Error::InUse {
                    name: name.to_string(),
                    sessions,
                }
                .into());
            }
            Ok(self.environments.delete(name).await?)
        }
        .await;
        match &result {
            Ok(env) => self.journal.ok(
                "DeleteEnvironment",
                &summary,
                started,
                format!("removed {}", env.image),
            ),
            Err(e) => self.refused("DeleteEnvironment", &summary, started, e),
        }
        result
    }
}

/// Passes a build's events on, journaling how it ended (built, cached,
/// failed, or abandoned by its caller).
async fn relay(
    mut events: Events,
    tx: mpsc::Sender<Result<Progress, failure::Error>>,
    journal: Arc<Journal>,
    summary: String,
    started: Instant,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    (watch, id): (Arc<super::build_watch::BuildWatch>, u64),
) {
    const TOOL: &str = "BuildEnvironment";
    // However the relay ends, the build leaves the viewers' list of
    // running builds.
    struct Ended(Arc<super::build_watch::BuildWatch>, u64, Option<String>);
    impl Drop for Ended {
        fn drop(&mut self) {
            let how = self
                .2
                .take()
                .unwrap_or_else(|| "abandoned by its caller".into());
            self.0.ended(self.1, how);
        }
    }
    let mut ended = Ended(Arc::clone(&watch), id, None);
    loop {
        let event = tokio::select! {
            e = events.recv() => e,
            _ = tx.closed() => {
                journal.ok(TOOL, &summary, started, "abandoned by its caller".into());
                return;
            }
        };
        let Some(event) = event else {
            return;
        };
        match &event {
            Ok(Progress::Done(b)) => {
                ended.2 = Some(if b.cached {
                    "cached".into()
                } else {
                    format!("built {}", b.environment.image)
                });
            }
            Ok(progress) => watch.progress(id, progress),
            Err(e) => {
                ended.2 = Some(format!(
                    "failed: {}",
                    describe(&failure::Error::from(e.clone())).reason
                ))
            }
        }
        let event = event.map_err(failure::Error::from);
        if let Some(m) = &metrics {
            match &event {
                Ok(Progress::Done(b)) => m.build(if b.cached { "cached" } else { "built" }),
                Err(_) => m.build("failed"),
                Ok(_) => {}
            }
        }
        match &event {
            Ok(Progress::Done(b)) => {
                let how = if b.cached { "cached" } else { "built" };
                journal.ok(
                    TOOL,
                    &summary,
                    started,
                    format!("{how} {} ({})", b.environment.image, b.environment.image_id),
                );
            }
            Err(e) => {
                let d = describe(e);
                journal.refused(TOOL, &summary, started, d.reason, d.message);
            }
            Ok(_) => {}
        }
        if tx.send(event).await.is_err() {
            journal.ok(TOOL, &summary, started, "abandoned by its caller".into());
            return;
        }
    }
}

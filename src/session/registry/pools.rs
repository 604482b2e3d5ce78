//! The warm pools (of the default image and of each environment the
//! operator names) and the environments as the registry serves them: built,
//! listed with the sessions running each, deleted once none does.

use std::sync::Arc;
use std::time::Duration;

use super::Registry;
use crate::environment::Environment;
use crate::session::builds::BuildEvents;
use crate::session::failure;
use crate::session::lend::lends_to_warm;
use crate::session::messages::{EnvironmentInfo, NewEnvironment};
use crate::session::pool::Pool;
use crate::session::prepare::discard;

impl Registry {
    /// Tops the pools of warm containers up to their configured sizes, in
    /// the background. An environment's pool follows its latest build.
    pub fn fill_pool(&self) {
        let cfg = &self.config.sandbox;
        self.pool.fill(
            &self.config,
            &self.runtime,
            &self.locks,
            &self.volumes,
            &cfg.default_image,
            cfg.pool_size,
            self.keep.as_ref(),
            Duration::ZERO,
        );
        self.lent_pool.fill(
            &self.config,
            &self.runtime,
            &self.locks,
            &self.volumes,
            &cfg.default_image,
            self.lent_pool_size(),
            self.keep.as_ref(),
            Duration::ZERO,
        );
        for (name, pool) in &self.environment_pools {
            let want = cfg.environment_pools.get(name).copied().unwrap_or(0);
            let keep = self.keep.clone();
            let (name, pool, builds, config, runtime, locks, volumes) = (
                name.clone(),
                Arc::clone(pool),
                Arc::clone(&self.builds),
                Arc::clone(&self.config),
                Arc::clone(&self.runtime),
                Arc::clone(&self.locks),
                Arc::clone(&self.volumes),
            );
            tokio::spawn(async move {
                let env = match builds.resolve(&name).await {
                    Ok(env) => env,
                    Err(e) => {
                        tracing::debug!(environment = %name, error = %e, "cannot warm an environment");
                        return;
                    }
                };
                for stale in pool.stale(&env.image) {
                    discard(stale).await;
                }
                pool.fill(
                    &config,
                    &runtime,
                    &locks,
                    &volumes,
                    &env.image,
                    want,
                    keep.as_ref(),
                    Duration::ZERO,
                );
            });
        }
    }

    /// Makes again the entry a session took from `pool` (of `image`, kept
    /// at `want`), beginning `after` from now: only that pool, and nothing
    /// asked of the engine before then.
    pub(super) fn refill_after(&self, pool: &Arc<Pool>, image: &str, want: usize, after: Duration) {
        pool.fill(
            &self.config,
            &self.runtime,
            &self.locks,
            &self.volumes,
            image,
            want,
            self.keep.as_ref(),
            after,
        );
    }

    /// Warm containers kept for sessions over an existing directory: as
    /// the operator asked, where directories can be lent to running
    /// containers at all (see [`crate::session::lend::lends_to_warm`]).
    pub fn lent_pool_size(&self) -> usize {
        if lends_to_warm(&self.config, &self.volumes) && !self.lent_pool.is_paused() {
            self.config.sandbox.lent_pool_size
        } else {
            0
        }
    }

    /// Stops keeping warm containers for existing directories, for good:
    /// a container did not see the directory pinned for it, so mounts the
    /// service makes do not reach the engine's containers on this host.
    /// Sessions over existing directories start cold from now on.
    pub(super) fn stop_lending(&self) {
        self.lent_pool.pause(true);
        let entries = self.lent_pool.clear();
        tracing::warn!(
            "mounts made by the service do not reach the engine's containers here (is the engine in a mount namespace of its own?): sessions over an existing directory start cold from now on"
        );
        tokio::spawn(async move {
            for warm in entries {
                discard(warm).await;
            }
        });
    }

    /// Warm containers for existing directories ready now (for tests and
    /// the benchmark).
    pub fn lent_pool_ready(&self) -> usize {
        self.lent_pool.ready()
    }

    /// Warm containers of the default image ready now (for tests and the
    /// benchmark).
    pub fn pool_ready(&self) -> usize {
        self.pool.ready()
    }

    /// The environment builds as viewers see them: running, then ended.
    pub fn builds_shown(&self) -> Vec<super::super::build_watch::WatchedBuild> {
        self.builds.watch.shown()
    }

    /// Warm containers the default pool keeps, when full.
    pub fn pool_size(&self) -> usize {
        self.config.sandbox.pool_size
    }

    /// Whether the container engine answers now (within two seconds);
    /// `Err` says why not.
    pub async fn engine_reachable(&self) -> Result<(), String> {
        let probe = self.runtime.image_info(&self.config.sandbox.default_image);
        match tokio::time::timeout(std::time::Duration::from_secs(2), probe).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("it did not answer within 2 s".into()),
        }
    }

    /// Warm containers of environment `name` ready now.
    pub fn environment_pool_ready(&self, name: &str) -> usize {
        self.environment_pools.get(name).map_or(0, |p| p.ready())
    }

    /// Starts building an environment (or joins the same build, or answers
    /// from the cache). `may_build`: the server vouches for the caller.
    pub async fn build_environment(
        &self,
        req: NewEnvironment,
        may_build: bool,
    ) -> Result<BuildEvents, failure::Error> {
        self.builds.build(req, may_build).await
    }

    /// Every environment, with the sessions running it.
    pub async fn list_environments(&self) -> Result<Vec<EnvironmentInfo>, failure::Error> {
        let environments = self.builds.list().await?;
        Ok(environments
            .into_iter()
            .map(|environment| EnvironmentInfo {
                sessions: self.sessions_of(&environment.name),
                environment,
            })
            .collect())
    }

    /// Deletes an environment no session runs (its warm entries go first).
    pub async fn delete_environment(
        &self,
        name: &str,
        may_build: bool,
    ) -> Result<Environment, failure::Error> {
        let sessions = self.sessions_of(name);
        // Sessions closed just before are gone once their containers are.
        if sessions.is_empty() {
            self.closing.settled(name).await;
        }
        // Warm containers of its image go first, and none is made while
        // its images are removed.
        let pool = self
            .environment_pools
            .get(name)
            .filter(|_| (may_build || self.config.allow_builds) && sessions.is_empty());
        if let Some(pool) = pool {
            pool.pause(true);
            pool.settled().await;
            for warm in pool.clear() {
                discard(warm).await;
            }
        }
        let deleted = self.builds.delete(name, may_build, sessions).await;
        if let Some(pool) = pool {
            pool.pause(false);
        }
        deleted
    }

    fn sessions_of(&self, environment: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .table()
            .values()
            .filter(|s| s.environment.as_deref() == Some(environment))
            .map(|s| s.id.clone())
            .collect();
        ids.sort();
        ids
    }
}

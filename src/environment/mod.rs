//! Environments: named, cached images for sessions, built by the engine
//! from a recipe (a Dockerfile and its context, or a setup script on a
//! base image) with network access during the build only. Sessions then run
//! them with no network, hardened as any other.
//!
//! An environment `NAME` is the image `sandboxd-env/NAME:<key>`, where the
//! key hashes the recipe, its context, the build CA and the ids of its base
//! images, also tagged `sandboxd-env/NAME:latest`. The engine's image store
//! is the only record (labels carry the name and the key), so environments
//! outlive the service. An unchanged recipe is never built again, and
//! callers asking for a build already running share it.
//!
//! `recipe` checks and packs what the caller sent; `run` runs one build to
//! its end; this file holds the types, starts, shares and answers builds
//! from the cache, and lists, resolves and deletes environments.
//!
//! Who may build, the journal of builds and whether sessions still use an
//! environment are the session layer's business.

mod error;
mod recipe;
mod run;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, mpsc, watch};

pub use error::Error;
pub use recipe::{CA_PATH, Source};

use crate::sandbox::{ImageInfo, Runtime};
use recipe::Recipe;
use run::{Job, forward};

/// Repository prefix of every environment's image.
pub const REPOSITORY_PREFIX: &str = "sandboxd-env/";

/// What every label sandboxd puts on an image starts with.
const LABEL_PREFIX: &str = "sandboxd.";

/// Labels of an environment's image.
pub mod labels {
    /// The environment's name.
    pub const NAME: &str = "sandboxd.environment";
    /// The recipe key (the image's tag).
    pub const KEY: &str = "sandboxd.recipe";
    /// The base images the recipe names.
    pub const BASE: &str = "sandboxd.base";
}

/// Docker's predefined build arguments for proxies: given to build steps,
/// never recorded in the image.
pub const PROXY_VARIABLES: [&str; 10] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "NO_PROXY",
    "no_proxy",
    "FTP_PROXY",
    "ftp_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// Repository of the base images given the build CA.
const CA_LAYER_REPOSITORY: &str = "sandboxd-build-ca";
/// Label of such an image: the base it stands in for.
const CA_LAYER_LABEL: &str = "sandboxd.build-ca-for";

/// Lines kept of the step that failed, for the error.
const TAIL_LINES: usize = 20;

/// The operator's settings for builds.
#[derive(Debug, Clone)]
pub struct BuildConfig {
    /// Base image of a setup script that names none.
    pub default_base: String,
    /// A CA bundle handed to every build step.
    pub ca_cert: Option<Vec<u8>>,
    /// Proxy variables handed to every build step.
    pub proxy: BTreeMap<String, String>,
    /// Time a build may take unless the caller asks for another limit.
    pub timeout: Duration,
    /// The most a caller may ask for.
    pub max_timeout: Duration,
    /// Bytes of context (with the Dockerfile) a build may be sent.
    pub max_context_bytes: u64,
    /// Bytes of build output streamed to a caller unless it asks otherwise.
    pub output_cap: u64,
    /// Builds that run at once; more wait for a turn (within their time
    /// limit).
    pub max_running: usize,
    /// The most a caller may ask for.
    pub max_output_cap: u64,
    /// The labels of the service's containers, for any a build's checks
    /// make (so that one a crash leaves is removed with the rest).
    pub owner: BTreeMap<String, String>,
}

/// A build asked for.
#[derive(Debug, Clone)]
pub struct BuildRequest {
    /// The environment's name.
    pub name: String,
    /// Its recipe.
    pub source: Source,
    /// Time limit.
    pub timeout: Duration,
    /// Bytes of output to stream.
    pub output_cap: u64,
}

/// An environment, as the image store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    /// Its name.
    pub name: String,
    /// The image sessions run, `sandboxd-env/NAME:<key>`.
    pub image: String,
    /// The image's id.
    pub image_id: String,
    /// The recipe key.
    pub key: String,
    /// The base images its recipe names.
    pub base: String,
    /// When it was built, seconds since the Unix epoch.
    pub created: u64,
    /// Bytes on disk.
    pub size: u64,
}

/// What a build tells its callers as it runs.
#[derive(Debug, Clone)]
pub enum Progress {
    /// An identical build was already running: this caller shares it.
    Joined,
    /// A step began (counted as the caller wrote the recipe).
    Step {
        /// 1-based.
        number: u32,
        /// Steps in all.
        total: u32,
        /// The instruction.
        instruction: String,
    },
    /// A line of build output.
    Output(String),
    /// The build is done.
    Done(Built),
}

/// A finished build.
#[derive(Debug, Clone)]
pub struct Built {
    /// The environment.
    pub environment: Environment,
    /// Whether an earlier build of the same recipe was reused.
    pub cached: bool,
    /// Time the caller waited.
    pub duration: Duration,
    /// Bytes of output the build printed while this caller listened.
    pub output_bytes: u64,
    /// Whether some of it was not streamed (past the cap).
    pub output_truncated: bool,
}

/// The events of one build call; the last is `Done` or an error.
pub type Events = mpsc::Receiver<Result<Progress, Error>>;

/// Builds, lists and deletes environments.
#[derive(Debug)]
pub struct Environments {
    runtime: Arc<dyn Runtime>,
    config: BuildConfig,
    /// Builds running, by image reference.
    running: Mutex<HashMap<String, Arc<Running>>>,
    /// Turns to run a build.
    turns: tokio::sync::Semaphore,
}

/// One running build, shared by every caller that asked for it.
#[derive(Debug)]
struct Running {
    progress: broadcast::Sender<Progress>,
    done: watch::Receiver<Option<Result<Built, Error>>>,
}

/// Checks an environment's name: lowercase letters and digits, single
/// `.`, `_` or `-` between them, at most 64 characters.
pub fn check_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.split(['.', '_', '-']).all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidName {
            name: name.to_string(),
        })
    }
}

fn latest(name: &str) -> String {
    format!("{REPOSITORY_PREFIX}{name}:latest")
}

impl Environments {
    /// Environments built by `runtime` under `config`.
    pub fn new(runtime: Arc<dyn Runtime>, config: BuildConfig) -> Environments {
        Environments {
            runtime,
            turns: tokio::sync::Semaphore::new(config.max_running.max(1)),
            config,
            running: Mutex::new(HashMap::new()),
        }
    }

    /// The operator's settings.
    pub fn config(&self) -> &BuildConfig {
        &self.config
    }

    /// Starts (or joins, or answers from the cache) a build. Errors found
    /// before anything runs are returned here; later ones end the events.
    pub async fn build(self: &Arc<Self>, req: BuildRequest) -> Result<Events, Error> {
        let started = Instant::now();
        check_name(&req.name)?;
        let (timeout, cap) = (req.timeout, req.output_cap);
        let cfg = &self.config;
        let (source, base, ca, max) = (
            req.source,
            cfg.default_base.clone(),
            cfg.ca_cert.clone(),
            cfg.max_context_bytes,
        );
        let recipe =
            tokio::task::spawn_blocking(move || Recipe::new(source, &base, ca.as_deref(), max))
                .await
                .map_err(|e| Error::InvalidContext(e.to_string()))??;
        let mut base_ids = Vec::new();
        for base in &recipe.bases {
            match self.runtime.image_info(base).await? {
                Some(info) => {
                    recipe::check_triggers(base, &info.onbuild)?;
                    base_ids.push((base.clone(), info.id));
                }
                None => {
                    return Err(Error::BaseMissing {
                        image: base.clone(),
                        local: self.local_images().await,
                    });
                }
            }
        }
        // Images the recipe copies files from are found as bases are: local
        // ones only, and a rebuilt one gives a new key.
        let mut image_ids = Vec::new();
        for image in &recipe.images {
            match self.runtime.image_info(image).await? {
                Some(info) => image_ids.push(info.id),
                None => {
                    return Err(Error::BaseMissing {
                        image: image.clone(),
                        local: self.local_images().await,
                    });
                }
            }
        }
        let ids: Vec<String> = base_ids.iter().map(|(_, id)| id.clone()).collect();
        let key = recipe.key(&ids, &image_ids);
        let image = format!("{REPOSITORY_PREFIX}{}:{key}", req.name);
        let (tx, rx) = mpsc::channel(64);
        if let Some(info) = self.runtime.image_info(&image).await? {
            self.runtime.tag_image(&info.id, &latest(&req.name)).await?;
            let built = Built {
                environment: environment_of(&req.name, &info),
                cached: true,
                duration: started.elapsed(),
                output_bytes: 0,
                output_truncated: false,
            };
            let _ = tx.send(Ok(Progress::Done(built))).await;
            return Ok(rx);
        }
        let (progress, joined, done) = {
            let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            match running.get(&image) {
                Some(r) => (r.progress.subscribe(), true, r.done.clone()),
                None => {
                    let (progress, progress_rx) = broadcast::channel(1024);
                    let (done_tx, done) = watch::channel(None);
                    running.insert(
                        image.clone(),
                        Arc::new(Running {
                            progress: progress.clone(),
                            done: done.clone(),
                        }),
                    );
                    let job = Job {
                        name: req.name.clone(),
                        image: image.clone(),
                        key,
                        recipe,
                        base_ids,
                        timeout,
                        progress,
                    };
                    let this = Arc::clone(self);
                    tokio::spawn(async move {
                        let result = this.run(job).await;
                        this.running
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&image);
                        let _ = done_tx.send(Some(result));
                    });
                    (progress_rx, false, done)
                }
            }
        };
        tokio::spawn(forward(progress, done, tx, cap, joined, started));
        Ok(rx)
    }

    /// Every environment, by name.
    pub async fn list(&self) -> Result<Vec<Environment>, Error> {
        let images = self.runtime.list_images(Some(labels::NAME)).await?;
        let mut out: Vec<Environment> = images
            .iter()
            .filter_map(|info| {
                let name = info.labels.get(labels::NAME)?;
                info.tags
                    .contains(&latest(name))
                    .then(|| environment_of(name, info))
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The environment `name`, for a session to run.
    pub async fn resolve(&self, name: &str) -> Result<Environment, Error> {
        check_name(name)?;
        match self.runtime.image_info(&latest(name)).await? {
            Some(info) => {
                let mut env = environment_of(name, &info);
                // Its own name gone (a deletion under way, or cut short):
                // the image itself still serves.
                if !info.tags.contains(&env.image) {
                    env.image = info.id.clone();
                }
                Ok(env)
            }
            None => Err(Error::NotFound {
                name: name.to_string(),
                known: self.list().await?.into_iter().map(|e| e.name).collect(),
            }),
        }
    }

    /// Removes every build of `name` (also what a deletion cut short left).
    /// The caller has checked that no session uses it; it is refused while
    /// any container uses one of its images.
    pub async fn delete(&self, name: &str) -> Result<Environment, Error> {
        check_name(name)?;
        let prefix = format!("{REPOSITORY_PREFIX}{name}:");
        let images: Vec<ImageInfo> = self
            .runtime
            .list_images(Some(labels::NAME))
            .await?
            .into_iter()
            .filter(|i| i.labels.get(labels::NAME).map(String::as_str) == Some(name))
            .collect();
        let Some(current) = images
            .iter()
            .find(|i| i.tags.contains(&latest(name)))
            .or(images.first())
        else {
            return Err(Error::NotFound {
                name: name.to_string(),
                known: self.list().await?.into_iter().map(|e| e.name).collect(),
            });
        };
        let env = environment_of(name, current);
        // The engine would take the names of an image a container still
        // uses and keep the image, nameless: refuse while nothing changed.
        for image in &images {
            let users = self.runtime.containers_of_image(&image.id).await?;
            if !users.is_empty() {
                return Err(Error::Engine(Arc::new(crate::sandbox::Error::ImageInUse {
                    image: image
                        .tags
                        .first()
                        .cloned()
                        .unwrap_or_else(|| image.id.clone()),
                    why: format!(
                        "container {} was made from it",
                        users
                            .iter()
                            .map(|c| &c[..c.len().min(12)])
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                })));
            }
        }
        let mut tags: Vec<String> = images
            .iter()
            .flat_map(|i| i.tags.iter().filter(|t| t.starts_with(&prefix)).cloned())
            .collect();
        // The name goes first: no session starts over it from then on (a
        // deletion cut short is finished by the next one).
        tags.sort_by_key(|t| *t != latest(name));
        for tag in tags {
            self.runtime.remove_image(&tag).await?;
        }
        tracing::info!(environment = %name, "environment deleted");
        Ok(env)
    }

    /// Names of the images in the engine's store, for an error to suggest.
    async fn local_images(&self) -> Vec<String> {
        let mut names: BTreeSet<String> = BTreeSet::new();
        if let Ok(images) = self.runtime.list_images(None).await {
            for i in images {
                names.extend(i.tags);
            }
        }
        names.into_iter().take(50).collect()
    }
}

fn environment_of(name: &str, info: &ImageInfo) -> Environment {
    let key = info.labels.get(labels::KEY).cloned().unwrap_or_default();
    Environment {
        name: name.to_string(),
        image: format!("{REPOSITORY_PREFIX}{name}:{key}"),
        image_id: info.id.clone(),
        key,
        base: info.labels.get(labels::BASE).cloned().unwrap_or_default(),
        created: info.created,
        size: info.size,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_docker_repository_components() {
        for ok in ["py", "py-3.12", "a_b", "x1"] {
            check_name(ok).unwrap();
        }
        for bad in ["", "Py", "a..b", "-a", "a/b", "a:b", "a b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}

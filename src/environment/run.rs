//! One build run to its end: its turn, the base images' CA layers, the
//! engine's stream read into steps and output (as the caller wrote the
//! recipe), the time limit, cancellation when nobody waits, and each
//! caller's share of the progress.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::sync::{broadcast, mpsc, watch};

use super::recipe::{self, Recipe};
use super::{
    Built, CA_LAYER_LABEL, CA_LAYER_REPOSITORY, Environment, Environments, Error, LABEL_PREFIX,
    Progress, TAIL_LINES, environment_of, labels, latest,
};
use crate::sandbox::{BuildMessage, BuildSpec};

impl Environments {
    /// Runs one build to its end: tagged on success; on failure, timeout or
    /// when no caller listens any more, the engine's stream is dropped,
    /// which stops the build and removes its step container.
    pub(super) async fn run(&self, job: Job) -> Result<Built, Error> {
        let started = Instant::now();
        let Job {
            name,
            image,
            key,
            recipe,
            base_ids,
            timeout,
            progress,
        } = job;
        let deadline = tokio::time::Instant::now() + timeout;
        let Ok(Ok(_turn)) = tokio::time::timeout_at(deadline, self.turns.acquire()).await else {
            return Err(Error::BuildTimedOut {
                limit: timeout,
                step: "while waiting for other builds to finish".into(),
                ceiling: self.config.max_timeout,
            });
        };
        let rebased = match &self.config.ca_cert {
            Some(ca) => {
                let layers = self.ca_layers(&base_ids, ca, &progress);
                match tokio::time::timeout_at(deadline, layers).await {
                    Ok(layers) => layers?,
                    Err(_) => {
                        return Err(Error::BuildTimedOut {
                            limit: timeout,
                            step: "while giving the base images the build CA".into(),
                            ceiling: self.config.max_timeout,
                        });
                    }
                }
            }
            None => BTreeMap::new(),
        };
        let packed = recipe.pack(&rebased)?;
        let image_labels = BTreeMap::from([
            (labels::NAME.to_string(), name.clone()),
            (labels::KEY.to_string(), key),
            (labels::BASE.to_string(), recipe.bases.join(" ")),
        ]);
        // The engine adds a step per label, after the recipe's own.
        let hidden_steps = packed.hidden_steps + image_labels.len() as u32;
        let spec = BuildSpec {
            context: packed.context,
            dockerfile: recipe::DOCKERFILE.to_string(),
            tag: image.clone(),
            labels: image_labels,
            args: self.config.proxy.clone(),
        };
        tracing::info!(environment = %name, image = %image, "building an environment");
        let mut stream = self.runtime.build_image(spec).await.map_err(not_started)?;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut step = StepCount::new(&packed.injected, &packed.shown_as, hidden_steps);
        let mut tail: VecDeque<String> = VecDeque::new();
        let mut built = false;
        let mut froms_seen = 0;
        let result = loop {
            let message = tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {
                    break Err(Error::BuildTimedOut {
                        limit: timeout,
                        step: step.describe(),
                        ceiling: self.config.max_timeout,
                    });
                }
                _ = tick.tick() => {
                    if progress.receiver_count() == 0 {
                        tracing::info!(environment = %name, "build cancelled: nobody is waiting for it");
                        break Err(Error::BuildFailed {
                            step: step.position(),
                            instruction: step.instruction.clone(),
                            message: "cancelled: every caller went away".into(),
                            tail: Vec::new(),
                        });
                    }
                    continue;
                }
                m = stream.next() => m,
            };
            match message {
                // Done: the engine names an image at the end of every stage,
                // so only the tag it gave the last one says what was built.
                None if built => break self.finish(&name, &image).await,
                None => {
                    break Err(Error::BuildFailed {
                        step: step.position(),
                        instruction: step.instruction.clone(),
                        message: "the engine ended the build without a result".into(),
                        tail: tail.into(),
                    });
                }
                Some(Err(e)) => break Err(e.into()),
                Some(Ok(BuildMessage::Step {
                    number,
                    total,
                    instruction,
                })) => {
                    let is_from = instruction
                        .split_whitespace()
                        .next()
                        .is_some_and(|w| w.eq_ignore_ascii_case("FROM"));
                    if is_from {
                        if packed.froms.get(froms_seen) != Some(&instruction) {
                            break Err(Error::InvalidRecipe(format!(
                                "the engine read `{instruction}` where sandboxd read the \
                                 Dockerfile differently (a byte-order mark, a parser \
                                 directive or a continuation); write each FROM on a line \
                                 of its own, with no directive but `# escape=` at the top"
                            )));
                        }
                        froms_seen += 1;
                    }
                    if let Some(p) = step.next(number, total, instruction) {
                        tail.clear();
                        let _ = progress.send(p);
                    }
                }
                Some(Ok(BuildMessage::Line(line))) => {
                    if step.hidden || is_chatter(&line) {
                        continue;
                    }
                    if tail.len() == TAIL_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line.clone());
                    let _ = progress.send(Progress::Output(line));
                }
                Some(Ok(BuildMessage::Failed(message))) => {
                    break Err(Error::BuildFailed {
                        step: step.position(),
                        instruction: step.instruction.clone(),
                        message,
                        tail: tail.into(),
                    });
                }
                Some(Ok(BuildMessage::Built(_))) => built = true,
            }
        };
        drop(stream);
        match &result {
            Ok(b) => {
                tracing::info!(environment = %name, image = %b.image, secs = started.elapsed().as_secs(), "environment built")
            }
            Err(e) => tracing::warn!(environment = %name, error = %e, "environment build failed"),
        }
        result.map(|environment| Built {
            environment,
            cached: false,
            duration: started.elapsed(),
            output_bytes: 0,
            output_truncated: false,
        })
    }

    /// The image standing in for each base: the base with the build CA in
    /// a layer of its own, built once per base image and bundle.
    async fn ca_layers(
        &self,
        bases: &[(String, String)],
        ca: &[u8],
        progress: &broadcast::Sender<Progress>,
    ) -> Result<BTreeMap<String, String>, Error> {
        let mut rebased = BTreeMap::new();
        for (base, id) in bases {
            let layer = format!("{CA_LAYER_REPOSITORY}:{}", recipe::ca_layer_key(id, ca));
            if self.runtime.image_info(&layer).await?.is_none() {
                let spec = BuildSpec {
                    context: recipe::ca_layer(base, ca)?,
                    dockerfile: "Dockerfile".into(),
                    tag: layer.clone(),
                    labels: BTreeMap::from([(CA_LAYER_LABEL.to_string(), base.clone())]),
                    args: BTreeMap::new(),
                };
                let mut stream = self.runtime.build_image(spec).await.map_err(not_started)?;
                let mut lines = Vec::new();
                let mut tick = tokio::time::interval(Duration::from_millis(500));
                loop {
                    // A base's ONBUILD steps run here too: stop them as
                    // soon as nobody waits for the build.
                    let message = tokio::select! {
                        m = stream.next() => m,
                        _ = tick.tick() => {
                            if progress.receiver_count() == 0 {
                                return Err(Error::BuildFailed {
                                    step: String::new(),
                                    instruction: format!("giving {base} the build CA"),
                                    message: "cancelled: every caller went away".into(),
                                    tail: Vec::new(),
                                });
                            }
                            continue;
                        }
                    };
                    match message {
                        Some(Ok(BuildMessage::Built(_))) => break,
                        Some(Ok(BuildMessage::Line(l))) => {
                            if lines.len() == TAIL_LINES {
                                lines.remove(0);
                            }
                            lines.push(l);
                        }
                        Some(Ok(BuildMessage::Step { .. })) => {}
                        Some(Ok(BuildMessage::Failed(message))) => {
                            return Err(Error::BuildFailed {
                                step: String::new(),
                                instruction: format!("giving {base} the build CA"),
                                message,
                                tail: lines,
                            });
                        }
                        Some(Err(e)) => return Err(e.into()),
                        None => {
                            return Err(Error::BuildFailed {
                                step: String::new(),
                                instruction: format!("giving {base} the build CA"),
                                message: "the engine ended the build without a result".into(),
                                tail: lines,
                            });
                        }
                    }
                }
            }
            rebased.insert(base.clone(), layer);
        }
        Ok(rebased)
    }

    /// Reads a finished build back by the tag the engine gave it, and names
    /// it `NAME:latest`.
    async fn finish(&self, name: &str, image: &str) -> Result<Environment, Error> {
        let info = self.runtime.image_info(image).await?.ok_or_else(|| {
            Error::Engine(Arc::new(crate::sandbox::Error::Images(format!(
                "the engine reported the build done but {image} is not there"
            ))))
        })?;
        // An image no session could start from is not an environment: said
        // now, as the build's failure, not at every session's start.
        if let Err(e) = self.runtime.check_image(&info.id, &self.config.owner).await {
            if let Err(gone) = self.runtime.remove_image(image).await {
                tracing::warn!(image, error = %gone, "cannot remove a built image no session can use");
            }
            return Err(match e {
                crate::sandbox::Error::ImageUnusable { why, .. } => Error::Unusable { why },
                other => other.into(),
            });
        }
        self.runtime.tag_image(&info.id, &latest(name)).await?;
        Ok(environment_of(name, &info))
    }
}

/// A build waiting to run.
pub(super) struct Job {
    pub(super) name: String,
    pub(super) image: String,
    pub(super) key: String,
    pub(super) recipe: Recipe,
    /// The recipe's base images and their ids.
    pub(super) base_ids: Vec<(String, String)>,
    pub(super) timeout: Duration,
    pub(super) progress: broadcast::Sender<Progress>,
}

/// A build the runtime would not start (e.g. where its steps could reach
/// the host): a build failed before its first step, in the runtime's
/// words; the engine's other failures stay the engine's.
fn not_started(e: crate::sandbox::Error) -> Error {
    match e {
        crate::sandbox::Error::BuildImage { why, .. } => Error::BuildFailed {
            step: String::new(),
            instruction: String::new(),
            message: why,
            tail: Vec::new(),
        },
        other => other.into(),
    }
}

/// The engine's own lines about a step, not the step's output.
fn is_chatter(line: &str) -> bool {
    line.starts_with(" ---> ")
        || line.starts_with("Removing intermediate container ")
        || line.starts_with("Successfully built ")
        || line.starts_with("Successfully tagged ")
        || line.trim().is_empty()
}

/// Step numbers as the caller wrote the recipe: the steps sandboxd added
/// (the build CA) are not shown and not counted.
struct StepCount<'a> {
    injected: &'a BTreeSet<String>,
    shown_as: &'a BTreeMap<String, String>,
    hidden_total: u32,
    hidden_seen: u32,
    number: u32,
    total: u32,
    instruction: String,
    /// The current step is one sandboxd added.
    hidden: bool,
}

impl<'a> StepCount<'a> {
    fn new(
        injected: &'a BTreeSet<String>,
        shown_as: &'a BTreeMap<String, String>,
        hidden_total: u32,
    ) -> Self {
        StepCount {
            injected,
            shown_as,
            hidden_total,
            hidden_seen: 0,
            number: 0,
            total: 0,
            instruction: String::new(),
            hidden: false,
        }
    }

    fn next(&mut self, number: u32, total: u32, instruction: String) -> Option<Progress> {
        self.hidden = self.injected.contains(&instruction)
            || instruction.starts_with(&format!("LABEL {}", LABEL_PREFIX));
        if self.hidden {
            self.hidden_seen += 1;
            return None;
        }
        let instruction = self
            .shown_as
            .get(&instruction)
            .cloned()
            .unwrap_or(instruction);
        self.number = number.saturating_sub(self.hidden_seen);
        self.total = total.saturating_sub(self.hidden_total);
        self.instruction = instruction.clone();
        Some(Progress::Step {
            number: self.number,
            total: self.total,
            instruction,
        })
    }

    fn position(&self) -> String {
        if self.number == 0 {
            String::new()
        } else {
            format!("{} of {}", self.number, self.total)
        }
    }

    fn describe(&self) -> String {
        if self.number == 0 {
            "before its first step".into()
        } else {
            format!("{} ({})", self.position(), self.instruction)
        }
    }
}

/// Passes a shared build's progress to one caller, output capped at `cap`
/// bytes, then its result. Returns when the caller goes away, which the
/// build notices once no caller is left.
pub(super) async fn forward(
    mut progress: broadcast::Receiver<Progress>,
    mut done: watch::Receiver<Option<Result<Built, Error>>>,
    tx: mpsc::Sender<Result<Progress, Error>>,
    cap: u64,
    joined: bool,
    started: Instant,
) {
    let mut sent: u64 = 0;
    let mut total: u64 = 0;
    let mut pass = |p: Progress| -> Option<Progress> {
        if let Progress::Output(line) = &p {
            let n = line.len() as u64 + 1;
            total += n;
            if sent + n > cap {
                return None;
            }
            sent += n;
        }
        Some(p)
    };
    if joined && tx.send(Ok(Progress::Joined)).await.is_err() {
        return;
    }
    let result = loop {
        tokio::select! {
            biased;
            p = progress.recv() => match p {
                Ok(p) => {
                    if let Some(p) = pass(p)
                        && tx.send(Ok(p)).await.is_err()
                    {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => {
                    let _ = done.wait_for(Option::is_some).await;
                    break done.borrow().clone();
                }
            },
            _ = tx.closed() => return,
            changed = done.changed() => {
                if changed.is_ok() && done.borrow().is_none() {
                    continue;
                }
                let result = done.borrow().clone();
                // What the build sent before it ended is still queued.
                while let Ok(p) = progress.try_recv() {
                    if let Some(p) = pass(p)
                        && tx.send(Ok(p)).await.is_err()
                    {
                        return;
                    }
                }
                break result;
            }
        }
    };
    let message = match result {
        Some(Ok(built)) => Ok(Progress::Done(Built {
            duration: started.elapsed(),
            output_bytes: total,
            output_truncated: total > sent,
            ..built
        })),
        Some(Err(e)) => Err(e),
        None => Err(Error::BuildFailed {
            step: String::new(),
            instruction: String::new(),
            message: "the build ended without a result".into(),
            tail: Vec::new(),
        }),
    };
    let _ = tx.send(message).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_steps_are_neither_shown_nor_counted() {
        let injected: BTreeSet<String> = ["ARG A=x".to_string(), "ARG B=x".to_string()].into();
        let shown = BTreeMap::from([("FROM layer".to_string(), "FROM base".to_string())]);
        // FROM, two ARGs, RUN, then the engine's label step.
        let mut s = StepCount::new(&injected, &shown, 3);
        match s.next(1, 5, "FROM layer".into()) {
            Some(Progress::Step {
                number: 1,
                total: 2,
                instruction,
            }) => assert_eq!(instruction, "FROM base"),
            other => panic!("{other:?}"),
        }
        assert!(s.next(2, 5, "ARG A=x".into()).is_none());
        assert!(s.hidden);
        assert!(s.next(3, 5, "ARG B=x".into()).is_none());
        let last = s.next(4, 5, "RUN make".into());
        assert!(matches!(
            last,
            Some(Progress::Step {
                number: 2,
                total: 2,
                ..
            })
        ));
        assert!(!s.hidden);
        assert_eq!(s.describe(), "2 of 2 (RUN make)");
        assert!(s.next(5, 5, "LABEL sandboxd.recipe=abc".into()).is_none());
        assert_eq!(s.describe(), "2 of 2 (RUN make)");
    }
}

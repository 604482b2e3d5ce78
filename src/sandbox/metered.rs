//! A [`Runtime`] that times and counts every call of the one it wraps, by
//! operation, into the service's [`Metrics`]: how long the engine takes,
//! and how often it fails.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use super::build::{BuildSpec, BuildStream, ImageInfo};
use super::{ContainerSpec, Error, ExecSpec, ExecState, InputSink, OutputStream, Runtime};
use crate::metrics::Metrics;

/// `inner`, with its calls measured into `metrics`.
#[derive(Debug)]
pub struct Metered {
    inner: Arc<dyn Runtime>,
    metrics: Arc<Metrics>,
}

impl Metered {
    /// Measures `inner`'s calls into `metrics`.
    pub fn new(inner: Arc<dyn Runtime>, metrics: Arc<Metrics>) -> Metered {
        Metered { inner, metrics }
    }

    async fn timed<T>(
        &self,
        op: &str,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let started = Instant::now();
        let out = call.await;
        self.metrics
            .engine_call(op, started.elapsed().as_secs_f64(), out.is_err());
        out
    }
}

#[tonic::async_trait]
impl Runtime for Metered {
    async fn ensure_image(&self, image: &str) -> Result<(), Error> {
        self.timed("ensure_image", self.inner.ensure_image(image))
            .await
    }

    async fn start_container(&self, spec: &ContainerSpec) -> Result<String, Error> {
        self.timed("start_container", self.inner.start_container(spec))
            .await
    }

    async fn kill_container(&self, id: &str) -> Result<(), Error> {
        self.timed("kill_container", self.inner.kill_container(id))
            .await
    }

    async fn remove_container(&self, id: &str) -> Result<(), Error> {
        self.timed("remove_container", self.inner.remove_container(id))
            .await
    }

    fn pending_removals(&self) -> Vec<String> {
        self.inner.pending_removals()
    }

    async fn remove_all_labelled(&self, label: &str, value: &str) -> Result<usize, Error> {
        self.timed(
            "remove_all_labelled",
            self.inner.remove_all_labelled(label, value),
        )
        .await
    }

    async fn start_exec(
        &self,
        container: &str,
        spec: &ExecSpec,
    ) -> Result<(String, OutputStream), Error> {
        self.timed("start_exec", self.inner.start_exec(container, spec))
            .await
    }

    async fn start_exec_with_stdin(
        &self,
        container: &str,
        spec: &ExecSpec,
    ) -> Result<(String, OutputStream, InputSink), Error> {
        self.timed(
            "start_exec",
            self.inner.start_exec_with_stdin(container, spec),
        )
        .await
    }

    async fn exec_state(&self, exec: &str) -> Result<ExecState, Error> {
        self.timed("exec_state", self.inner.exec_state(exec)).await
    }

    async fn exec_pid(&self, exec: &str) -> Option<i64> {
        self.inner.exec_pid(exec).await
    }

    async fn oom_kills(&self, container: &str) -> Option<u64> {
        self.inner.oom_kills(container).await
    }

    async fn kill_now(&self, container: &str) -> bool {
        self.inner.kill_now(container).await
    }

    async fn pids_refusals(&self, container: &str) -> Option<u64> {
        self.inner.pids_refusals(container).await
    }

    async fn died_of_oom(&self, container: &str) -> bool {
        self.inner.died_of_oom(container).await
    }

    async fn check_image(
        &self,
        reference: &str,
        owner: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), Error> {
        self.timed("check_image", self.inner.check_image(reference, owner))
            .await
    }

    async fn image_info(&self, reference: &str) -> Result<Option<ImageInfo>, Error> {
        self.timed("image_info", self.inner.image_info(reference))
            .await
    }

    async fn list_images(&self, label: Option<&str>) -> Result<Vec<ImageInfo>, Error> {
        self.timed("list_images", self.inner.list_images(label))
            .await
    }

    async fn build_image(&self, spec: BuildSpec) -> Result<BuildStream, Error> {
        self.timed("build_image", self.inner.build_image(spec))
            .await
    }

    async fn tag_image(&self, image: &str, reference: &str) -> Result<(), Error> {
        self.timed("tag_image", self.inner.tag_image(image, reference))
            .await
    }

    async fn containers_of_image(&self, image: &str) -> Result<Vec<String>, Error> {
        self.timed("containers_of_image", self.inner.containers_of_image(image))
            .await
    }

    async fn remove_image(&self, reference: &str) -> Result<(), Error> {
        self.timed("remove_image", self.inner.remove_image(reference))
            .await
    }

    async fn remove_labelled(
        &self,
        label: &str,
        value: &str,
        keep_label: &str,
        keep_value: &str,
    ) -> Result<usize, Error> {
        self.timed(
            "remove_labelled",
            self.inner
                .remove_labelled(label, value, keep_label, keep_value),
        )
        .await
    }
}

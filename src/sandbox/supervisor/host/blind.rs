//! A container engine for the link's unit tests, which need none.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sandbox::{ContainerSpec, Error, ExecSpec, ExecState, InputSink, OutputStream, Runtime};

/// An engine that knows nothing: exec pids are unknown (so only a peer's
/// uid and secret decide who is the supervisor) and every exec still runs. It
/// counts the containers it was asked to kill.
#[derive(Debug, Default)]
pub struct Blind {
    /// Calls of `kill_container`.
    pub kills: AtomicUsize,
}

#[tonic::async_trait]
impl Runtime for Blind {
    async fn ensure_image(&self, _: &str) -> Result<(), Error> {
        Ok(())
    }
    async fn start_container(&self, _: &ContainerSpec) -> Result<String, Error> {
        Err(Error::StartContainer("blind".into()))
    }
    async fn kill_container(&self, _: &str) -> Result<(), Error> {
        self.kills.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    async fn remove_container(&self, _: &str) -> Result<(), Error> {
        Ok(())
    }
    async fn start_exec(&self, _: &str, _: &ExecSpec) -> Result<(String, OutputStream), Error> {
        Err(Error::StartExec("blind".into()))
    }
    async fn start_exec_with_stdin(
        &self,
        _: &str,
        _: &ExecSpec,
    ) -> Result<(String, OutputStream, InputSink), Error> {
        Err(Error::StartExec("blind".into()))
    }
    async fn exec_state(&self, _: &str) -> Result<ExecState, Error> {
        Ok(ExecState::Running)
    }
    async fn remove_labelled(&self, _: &str, _: &str, _: &str, _: &str) -> Result<usize, Error> {
        Ok(0)
    }
}

//! Which of the engine's container runtimes a container runs under: the
//! runtimes the engine knows, and gVisor's linked entry (see
//! [`runsc::LINKED`]) where a container may use it.

use std::collections::BTreeMap;

use super::DockerRuntime;
use crate::sandbox::runsc;
use crate::sandbox::{ContainerSpec, Error};

/// A container runtime as the engine has it configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineRuntime {
    /// Its program.
    pub path: String,
    /// The arguments the engine passes it.
    pub args: Vec<String>,
}

impl DockerRuntime {
    /// The container runtimes the engine knows (`runc`, `runsc`...), by
    /// name.
    pub async fn runtimes(&self) -> Result<BTreeMap<String, EngineRuntime>, Error> {
        let info = self
            .client()
            .await?
            .info()
            .await
            .map_err(|e| Error::Connect(e.to_string()))?;
        Ok(info
            .runtimes
            .unwrap_or_default()
            .into_iter()
            .map(|(name, rt)| {
                let runtime = EngineRuntime {
                    path: rt.path.unwrap_or_default(),
                    args: rt.runtime_args.unwrap_or_default(),
                };
                (name, runtime)
            })
            .collect())
    }

    /// Records whether the engine has [`runsc::LINKED`].
    pub(in crate::sandbox) fn set_linked_runsc(&self, present: bool) {
        *self.linked_runsc.lock().unwrap_or_else(|e| e.into_inner()) = Some(present);
    }

    /// The engine runtime a container of `spec` runs under: gVisor's
    /// with host Unix sockets open where its mounts hold none of the
    /// host's but its supervisor's (a workspace the service made), so the
    /// supervisor reaches its socket without the engine in between; the
    /// one asked for otherwise.
    pub(super) async fn runtime_for(&self, spec: &ContainerSpec) -> Option<String> {
        let asked = spec.runtime.as_deref()?;
        if asked != runsc::NAME
            || spec.workspace_lent
            || spec.workspace_slot
            || spec.socket_dir.is_none()
        {
            return Some(asked.to_string());
        }
        let known = *self.linked_runsc.lock().unwrap_or_else(|e| e.into_inner());
        let linked = match known {
            Some(linked) => linked,
            None => match self.runtimes().await {
                Ok(all) => {
                    let linked = all.get(runsc::LINKED).is_some_and(runsc::is_linked);
                    self.set_linked_runsc(linked);
                    linked
                }
                Err(_) => false,
            },
        };
        Some(if linked { runsc::LINKED } else { runsc::NAME }.to_string())
    }
}

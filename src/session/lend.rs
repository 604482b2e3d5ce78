//! Warm sessions-to-be for existing directories: a container started over
//! a slot (see `volume::slot`) before anyone asks, then lent the directory
//! a new session names. The directory is opened and checked exactly as for
//! a container started cold (allowed roots, privacy, no outside links, no
//! service state), pinned on the slot, and confirmed by the container's
//! own supervisor to be what its `/workspace` now shows, before the
//! session is handed out.

use std::io;
use std::sync::Arc;

use super::config::Config;
use super::error::Error;
use super::prepare::{Prepared, command_user, container_spec, new_id, open_lent};
use crate::sandbox::{self, ContainerSpec, Runtime, Sandbox};
use crate::volume::Lendable;
use crate::volume::Volumes;
use crate::workspace::Workspace;
use crate::workspace::lock::PathLocks;

/// Why a warm entry did not take a directory (it is discarded either way;
/// a cold start may still).
pub(super) enum NotLent {
    /// Pinning or confirming failed this once (logged).
    Failed,
    /// The container's supervisor saw another directory than the one
    /// pinned: mounts made on the host do not reach the engine's containers
    /// here (the engine in a mount namespace of its own), so no warm entry
    /// will ever take one.
    NotSeen,
}

/// A directory checked to be one that may be lent, opened for the file
/// tools, and who its commands run as.
pub(super) struct Checked {
    workspace: Workspace,
    lendable: Lendable,
    user: (u32, u32),
}

/// Whether sessions over existing directories can start from warm
/// containers here: the service mounts on a kernel that can lend to a
/// running container, every container has a supervisor to confirm the
/// lend, and the runtime shares the host's mounts (gVisor's file server
/// does not see a mount made after it started).
pub(super) fn lends_to_warm(config: &Config, volumes: &Volumes) -> bool {
    let cfg = &config.sandbox;
    volumes.lends_to_running()
        && cfg.supervisor.is_some()
        && cfg.runtime.as_deref() != Some(sandbox::runsc::NAME)
}

/// The limits of a session over an existing directory that asks for none:
/// those of every warm entry of the lent pool.
pub(super) fn lent_limits(config: &Config) -> Result<sandbox::Limits, Error> {
    config.sandbox.limits(sandbox::Limits::default(), true)
}

/// Makes a warm entry for a directory not yet named: a slot, and a
/// container of `image` with the lent pool's limits binding it, as the
/// default user until it is lent a directory. Not started.
pub(super) async fn prepare_slot(
    config: &Config,
    runtime: &Arc<dyn Runtime>,
    volumes: &Arc<Volumes>,
    image: String,
) -> Result<Prepared, Error> {
    let limits = lent_limits(config)?;
    let id = new_id();
    let (slot_volumes, slot_id) = (Arc::clone(volumes), id.clone());
    let volume = tokio::task::spawn_blocking(move || slot_volumes.slot(&slot_id))
        .await
        .map_err(|e| Error::CreateWorkspace(io::Error::other(e.to_string())))??;
    let spec = ContainerSpec {
        workspace_slot: true,
        workspace_lent: true,
        ..container_spec(
            config,
            volumes,
            &id,
            image,
            volume.path(),
            config.sandbox.default_user,
            limits,
        )
    };
    Ok(Prepared {
        id,
        workspace: None,
        volume,
        sandbox: Sandbox::new(Arc::clone(runtime), spec),
        reserved: None,
    })
}

/// Opens and checks the existing directory `path` exactly as a cold start
/// does (allowed roots, privacy, outside links, no service state), before
/// any warm container is spent on it.
pub(super) async fn check(
    config: &Arc<Config>,
    locks: &Arc<PathLocks>,
    volumes: &Arc<Volumes>,
    path: String,
) -> Result<Checked, Error> {
    let (cfg, locks, volumes) = (Arc::clone(config), Arc::clone(locks), Arc::clone(volumes));
    tokio::task::spawn_blocking(move || {
        let workspace = open_lent(&cfg, locks, &path)?;
        let lendable = volumes.check_lendable(workspace.root_fd(), workspace.host_path())?;
        let user = command_user(workspace.owner(), cfg.sandbox.default_user);
        Ok(Checked {
            workspace,
            lendable,
            user,
        })
    })
    .await
    .map_err(|e| Error::CreateWorkspace(io::Error::other(e.to_string())))?
}

/// Lends the warm entry `warm` (from [`prepare_slot`], started) the
/// directory `checked`: pinned on its slot, and confirmed by its
/// supervisor. What cannot take it is discarded in the background.
pub(super) async fn lend(
    volumes: &Arc<Volumes>,
    warm: Prepared,
    checked: Checked,
) -> Result<Prepared, NotLent> {
    let Prepared {
        id,
        volume: slot,
        mut sandbox,
        reserved,
        ..
    } = warm;
    let Checked {
        workspace,
        lendable,
        user: (uid, gid),
    } = checked;
    let volumes = Arc::clone(volumes);
    let pinned = tokio::task::spawn_blocking(move || {
        let pinned = volumes.lend(
            &slot,
            &lendable,
            workspace.root_fd(),
            workspace.host_path(),
            (uid, gid),
        );
        (workspace, slot, pinned)
    })
    .await;
    let (workspace, slot, pinned) = match pinned {
        Ok(done) => done,
        Err(e) => {
            // The task panicked with the slot: the container goes now, the
            // slot with the sweep at the next start.
            tracing::warn!(session = %id, error = %e, "lending a directory to a warm container failed");
            tokio::spawn(async move {
                let _ = sandbox.close().await;
                if let Some((keep, _)) = reserved {
                    let _ = tokio::task::spawn_blocking(move || keep.release(&id)).await;
                }
            });
            return Err(NotLent::Failed);
        }
    };
    let (volume, why, not_lent) = match pinned {
        Ok(pin) => {
            crate::profile::mark("host: directory pinned on the slot");
            let lent = match pin.engine_mount() {
                Some(mount) => {
                    sandbox
                        .lend(pin.identity(), format!("{uid}:{gid}"), mount)
                        .await
                }
                None => Err(sandbox::Error::StartExec("the pin has no source".into())),
            };
            match lent {
                Ok(()) => {
                    crate::profile::mark("host: the supervisor confirmed the lent directory");
                    // The container has the directory now: the host keeps no
                    // mount of it where a removal of the state directory
                    // would reach it.
                    let mut pin = pin;
                    let settled = tokio::task::spawn_blocking(move || {
                        let settled = pin.settle();
                        (pin, settled)
                    })
                    .await;
                    match settled {
                        Ok((pin, Ok(()))) => {
                            crate::profile::mark(
                                "host: the lent directory's pin taken off the host",
                            );
                            return Ok(Prepared {
                                id,
                                workspace: Some(workspace),
                                volume: pin,
                                sandbox,
                                reserved,
                            });
                        }
                        Ok((pin, Err(e))) => (
                            pin,
                            format!("cannot take the pin off the host: {e}"),
                            NotLent::Failed,
                        ),
                        Err(e) => {
                            // The task panicked with the pin: the container
                            // goes now, the pin with the sweep at the next
                            // start.
                            tracing::warn!(session = %id, error = %e, "taking a lent directory's pin off the host failed");
                            tokio::spawn(async move {
                                let _ = sandbox.close().await;
                                if let Some((keep, _)) = reserved {
                                    let _ = tokio::task::spawn_blocking(move || keep.release(&id))
                                        .await;
                                }
                            });
                            return Err(NotLent::Failed);
                        }
                    }
                }
                Err(e @ sandbox::Error::WorkspaceGone(_)) => (pin, e.to_string(), NotLent::NotSeen),
                Err(e) => (pin, e.to_string(), NotLent::Failed),
            }
        }
        Err(e) => (slot, e.to_string(), NotLent::Failed),
    };
    tracing::warn!(session = %id, error = %why, "a warm container could not take a lent directory; starting one cold");
    tokio::spawn(super::prepare::discard(Prepared {
        id,
        workspace: None,
        volume,
        sandbox,
        reserved,
    }));
    Err(not_lent)
}

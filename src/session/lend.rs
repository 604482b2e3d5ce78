//! Warm sessions-to-be for existing directories: a container started over
//! a slot (see `volume::slot`) before anyone asks, then lent the directory
//! a new session names. The directory is opened and checked exactly as for
//! a container started cold (allowed roots, privacy, no outside links, no
//! service state), pinned on the slot, and confirmed by the container's
//! own supervisor to be what its `/workspace` now shows, before the
//! session is handed out.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use super::config::Config;
use super::error::Error;
use super::prepare::{Prepared, command_user, new_id, open_lent};
use crate::sandbox::{self, ContainerSpec, Runtime, Sandbox, labels};
use crate::volume::Volumes;
use crate::workspace::lock::PathLocks;

/// What became of lending a warm entry a directory.
pub(super) enum Lent {
    /// The session-to-be, its container showing the directory.
    Ready(Box<Prepared>),
    /// The directory may not be lent (the same answer a cold start gives).
    Refused(Error),
    /// The warm entry could not take it (logged); a cold start may still.
    Unusable,
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
    let cfg = &config.sandbox;
    let (uid, gid) = cfg.default_user;
    let spec = ContainerSpec {
        image,
        workspace: volume.path().to_path_buf(),
        workspace_identity: None,
        workspace_bound: false,
        workspace_slot: true,
        user: format!("{uid}:{gid}"),
        env: cfg.default_env.clone(),
        limits,
        tmp_bytes: cfg.tmp_bytes,
        labels: BTreeMap::from([
            (labels::SESSION.to_string(), id.clone()),
            (labels::INSTANCE.to_string(), cfg.instance.clone()),
            (labels::SERVICE.to_string(), cfg.service.clone()),
            (labels::STATE.to_string(), cfg.state_id.clone()),
        ]),
        runtime: cfg.runtime.clone(),
        supervisor: cfg.supervisor.clone(),
        idle: cfg.idle.clone(),
        socket_dir: cfg.socket_link.then(|| volumes.socket_root().join(&id)),
    };
    Ok(Prepared {
        id,
        workspace: None,
        volume,
        sandbox: Sandbox::new(Arc::clone(runtime), spec),
        reserved: None,
    })
}

/// Lends the warm entry `warm` (from [`prepare_slot`], started) the
/// existing directory `path`. What cannot be used is discarded in the
/// background.
pub(super) async fn lend(
    config: &Arc<Config>,
    locks: &Arc<PathLocks>,
    volumes: &Arc<Volumes>,
    warm: Prepared,
    path: String,
) -> Lent {
    let Prepared {
        id,
        volume: slot,
        mut sandbox,
        reserved,
        ..
    } = warm;
    let (cfg, locks, ws_volumes) = (Arc::clone(config), Arc::clone(locks), Arc::clone(volumes));
    let opened = tokio::task::spawn_blocking(move || {
        let ws = match open_lent(&cfg, locks, &path) {
            Ok(ws) => ws,
            Err(e) => return (slot, Err(Lent::Refused(e))),
        };
        let user = command_user(ws.owner(), cfg.sandbox.default_user);
        match ws_volumes.lend(&slot, ws.root_fd(), ws.host_path(), user, None) {
            Ok(pin) => (slot, Ok((ws, pin, user))),
            // Pinning itself failed (the slot is gone with it): the
            // directory may still be lent to a container started cold.
            Err(e @ crate::volume::Error::Pin(_)) => {
                tracing::warn!(error = %e, "a warm container's slot could not take a lent directory; starting one cold");
                (slot, Err(Lent::Unusable))
            }
            Err(e) => (slot, Err(Lent::Refused(e.into()))),
        }
    })
    .await;
    let (slot, opened) = match opened {
        Ok(done) => done,
        Err(e) => {
            // The task panicked: whatever it made is swept with the entry's
            // id at the next start.
            tracing::warn!(error = %e, "lending a directory to a warm container failed");
            return Lent::Unusable;
        }
    };
    let (workspace, pin, (uid, gid)) = match opened {
        Ok(opened) => {
            crate::profile::mark("host: directory checked and pinned on the slot");
            opened
        }
        Err(lent) => {
            tokio::spawn(super::prepare::discard(Prepared {
                id,
                workspace: None,
                volume: slot,
                sandbox,
                reserved,
            }));
            return lent;
        }
    };
    match sandbox.lend(pin.identity(), format!("{uid}:{gid}")).await {
        Ok(()) => {
            crate::profile::mark("host: the supervisor confirmed the lent directory");
            Lent::Ready(Box::new(Prepared {
                id,
                workspace: Some(workspace),
                volume: pin,
                sandbox,
                reserved,
            }))
        }
        Err(e) => {
            tracing::warn!(session = %id, error = %e, "a warm container could not take a lent directory; starting one cold");
            tokio::spawn(super::prepare::discard(Prepared {
                id,
                workspace: None,
                volume: pin,
                sandbox,
                reserved,
            }));
            Lent::Unusable
        }
    }
}

//! Making a session-to-be: its workspace opened (a fresh quota'd volume,
//! or a lent directory under an allowed root, pinned) and its sandbox
//! specified (image, limits, user, labels), not yet started. New sessions
//! and the warm pool both start here; what is made and not used is
//! discarded whole.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::config::Config;
use super::error::Error;
use crate::sandbox::{self, ContainerSpec, Runtime, Sandbox, labels};
use crate::volume::{Quota, Volume, Volumes};
use crate::workspace::Workspace;
use crate::workspace::lock::PathLocks;

/// A session-to-be: workspace and (not yet started) sandbox.
pub(super) struct Prepared {
    pub(super) id: String,
    /// `None` for a warm entry not yet lent its directory (see `lend`).
    pub(super) workspace: Option<Workspace>,
    pub(super) volume: Volume,
    pub(super) sandbox: Sandbox,
    /// Its record file and journal, made ahead by a durable service.
    pub(super) reserved: Option<(super::records::Keep, super::records::Reserved)>,
}

/// Opens the workspace and builds the sandbox of a new session.
pub(super) async fn prepare(
    config: &Config,
    runtime: &Arc<dyn Runtime>,
    locks: &Arc<PathLocks>,
    volumes: &Arc<Volumes>,
    workspace_path: Option<String>,
    image: String,
    limits: sandbox::Limits,
) -> Result<Prepared, Error> {
    reopen(
        config,
        runtime,
        locks,
        volumes,
        new_id(),
        workspace_path,
        None,
        image,
        limits,
    )
    .await
}

/// What a session that comes back after a restart had: the device and
/// inode of its workspace, and (a lent directory) its file handle.
#[derive(Debug, Clone)]
pub(super) struct Again {
    pub(super) identity: (u64, u64),
    pub(super) handle: Option<String>,
}

/// [`prepare`] for session `id`, or (with `again`) for a session that comes
/// back after a restart: its fresh workspace as the earlier instance left
/// it, or its lent directory opened, checked and pinned anew, and refused
/// unless it is the very directory the session was lent.
#[allow(clippy::too_many_arguments)]
pub(super) async fn reopen(
    config: &Config,
    runtime: &Arc<dyn Runtime>,
    locks: &Arc<PathLocks>,
    volumes: &Arc<Volumes>,
    id: String,
    workspace_path: Option<String>,
    again: Option<Again>,
    image: String,
    limits: sandbox::Limits,
) -> Result<Prepared, Error> {
    let (cfg, locks, ws_volumes, ws_id) = (
        config.clone(),
        Arc::clone(locks),
        Arc::clone(volumes),
        id.clone(),
    );
    let quota = Quota {
        disk_bytes: limits.disk_bytes,
        inodes: limits.inodes,
    };
    let (workspace, volume) = tokio::task::spawn_blocking(move || {
        open_workspace(
            &cfg,
            locks,
            &ws_volumes,
            &ws_id,
            workspace_path,
            quota,
            again,
        )
    })
    .await
    .map_err(|e| Error::CreateWorkspace(io::Error::other(e.to_string())))??;
    let cfg = &config.sandbox;
    if volume.bound_by_path() && cfg.supervisor.is_none() {
        let _ = volume.remove();
        return Err(Error::Volume(crate::volume::Error::Pin(io::Error::other(
            "a service that does not run as root lends a directory only to containers with the \
             in-container supervisor, which checks it; start it with --exec-mode supervisor",
        ))));
    }
    let (uid, gid) = command_user(workspace.owner(), cfg.default_user);
    // What the session really has: no quota where none is enforced.
    let limits = match volume.quota() {
        Some(q) => sandbox::Limits {
            disk_bytes: q.disk_bytes,
            inodes: q.inodes,
            ..limits
        },
        None => sandbox::Limits {
            disk_bytes: 0,
            inodes: 0,
            ..limits
        },
    };
    let spec = ContainerSpec {
        workspace_identity: Some(volume.identity()),
        workspace_bound: volume.bound_by_path(),
        workspace_lent: !volume.owns_workspace(),
        workspace_mount: volume.engine_mount(),
        ..container_spec(
            config,
            volumes,
            &id,
            image,
            volume.path(),
            (uid, gid),
            limits,
        )
    };
    Ok(Prepared {
        id,
        workspace: Some(workspace),
        volume,
        sandbox: Sandbox::new(Arc::clone(runtime), spec),
        reserved: None,
    })
}

/// The container spec of session `id` over the host directory
/// `workspace`, its commands run as `user`: the service's own labels,
/// environment and hardening; no identity checks (the caller adds those
/// its workspace needs).
pub(super) fn container_spec(
    config: &Config,
    volumes: &Volumes,
    id: &str,
    image: String,
    workspace: &Path,
    (uid, gid): (u32, u32),
    limits: sandbox::Limits,
) -> ContainerSpec {
    let cfg = &config.sandbox;
    ContainerSpec {
        image,
        workspace: workspace.to_path_buf(),
        workspace_identity: None,
        workspace_bound: false,
        workspace_slot: false,
        workspace_lent: false,
        workspace_mount: None,
        user: format!("{uid}:{gid}"),
        env: cfg.default_env.clone(),
        limits,
        tmp_bytes: cfg.tmp_bytes,
        labels: BTreeMap::from([
            (labels::SESSION.to_string(), id.to_string()),
            (labels::INSTANCE.to_string(), cfg.instance.clone()),
            (labels::SERVICE.to_string(), cfg.service.clone()),
            (labels::STATE.to_string(), cfg.state_id.clone()),
        ]),
        runtime: cfg.runtime.clone(),
        supervisor: cfg.supervisor.clone(),
        idle: cfg.idle.clone(),
        socket_dir: cfg.socket_link.then(|| volumes.socket_root().join(id)),
    }
}

/// Removes a warm entry that will not be used: its container and workspace.
pub(super) async fn discard(warm: Prepared) {
    if let Err(e) = warm.sandbox.close().await {
        tracing::warn!(error = %e, "cannot remove a pooled container");
    }
    let (volume, reserved, id) = (warm.volume, warm.reserved, warm.id);
    let _ = tokio::task::spawn_blocking(move || {
        if let Some((keep, _)) = reserved {
            keep.release(&id);
        }
        volume.remove()
    })
    .await;
}

/// Who a session's commands run as: the workspace's owner, with the
/// owner's own primary group (never the directory's group, which may be
/// root's or another privileged one the owner does not have); the default
/// user for a root-owned workspace, which its pin then shows them as their
/// own (an id-mapped mount, see [`Volumes::pin`]): commands never run as
/// root.
pub(super) fn command_user(owner: (u32, u32), default: (u32, u32)) -> (u32, u32) {
    match owner {
        (0, _) => default,
        (uid, _) => (
            uid,
            primary_gid(uid)
                .filter(|&gid| gid != 0)
                .unwrap_or(default.1),
        ),
    }
}

/// The primary group of `uid` in the host's /etc/passwd.
fn primary_gid(uid: u32) -> Option<u32> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let (_, _, u, g) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        (u.parse::<u32>().ok()? == uid)
            .then(|| g.parse().ok())
            .flatten()
    })
}

/// Who on this host may hold `uid`: an account of /etc/passwd, or a user
/// whose /etc/subuid range (ids delegated for user namespaces) holds it.
pub fn holder_of(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let account = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.get(2)?.parse::<u32>().ok()? == uid).then(|| format!("the account {}", fields[0]))
    });
    account.or_else(|| {
        let subuid = std::fs::read_to_string("/etc/subuid").unwrap_or_default();
        subuid.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let start: u64 = fields.get(1)?.parse().ok()?;
            let count: u64 = fields.get(2)?.parse().ok()?;
            (start..start + count)
                .contains(&u64::from(uid))
                .then(|| format!("the ids /etc/subuid delegates to {}", fields[0]))
        })
    })
}

pub(super) fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_string()
}

/// Opens the workspace of session `id`: a fresh volume, or an existing
/// directory under an allowed root, pinned for its containers; `again`:
/// the ones an earlier instance made for it (see [`reopen`]).
fn open_workspace(
    config: &Config,
    locks: Arc<PathLocks>,
    volumes: &Volumes,
    id: &str,
    path: Option<String>,
    quota: Quota,
    again: Option<Again>,
) -> Result<(Workspace, Volume), Error> {
    let Some(path) = path else {
        let volume = match again {
            Some(_) => volumes.reopen_fresh(id, quota)?,
            None => volumes.fresh(id, quota, config.sandbox.default_user)?,
        };
        return match Workspace::open(volume.path(), locks, config.limits.clone()) {
            Ok(ws) => Ok((ws, volume)),
            Err(e) => {
                let _ = volume.remove();
                Err(Error::CreateWorkspace(e))
            }
        };
    };
    let ws = match again {
        None => open_lent(config, Arc::clone(&locks), &path)?,
        Some(Again {
            identity,
            ref handle,
        }) => {
            // The path may name another directory by now (renamed, swapped
            // for a link, an ancestor swapped by another session's command):
            // only the very one the session was lent is taken, where it lies
            // now (its file handle tells; a pin an earlier version left
            // mounted too).
            let same = |ws: &Workspace| {
                rustix::fs::fstat(ws.root_fd()).is_ok_and(|st| (st.st_dev, st.st_ino) == identity)
            };
            match open_lent(config, Arc::clone(&locks), &path) {
                Ok(ws) if same(&ws) => ws,
                first => {
                    let roots = &config.allowed_roots;
                    let moved = handle
                        .as_deref()
                        .and_then(|h| volumes.found_path(h, identity, roots))
                        .or_else(|| volumes.pinned_path(id, identity, roots))
                        .and_then(|now| open_lent(config, locks, &now.to_string_lossy()).ok())
                        .filter(same);
                    match (moved, first) {
                        (Some(ws), _) => {
                            tracing::info!(session = %id, was = ?path, now = ?ws.host_path(), "a lent directory found where it lies now");
                            ws
                        }
                        (None, Err(e)) => return Err(e),
                        (None, Ok(_)) => {
                            return Err(Error::Volume(crate::volume::Error::Gone(format!(
                                "{path} is no longer the directory the session was lent"
                            ))));
                        }
                    }
                }
            }
        }
    };
    // Containers mount a pin of this very directory, never its path;
    // root's directory is id-mapped to the user its commands run as. Not
    // under gVisor: its file server creates files as root and then hands
    // them over, and root has no id in the map, so every create through
    // such a pin fails (EOVERFLOW) while changes to existing files work; a
    // checkout that is plainly read-only to commands is the clearer one.
    let user = command_user(ws.owner(), config.sandbox.default_user);
    let no_idmap = (config.sandbox.runtime.as_deref() == Some(sandbox::runsc::NAME))
        .then_some("under gVisor, files cannot be created through an id-mapped mount");
    let volume = match again {
        None => volumes.pin(id, ws.root_fd(), ws.host_path(), user, no_idmap)?,
        Some(_) => volumes.repin(id, ws.root_fd(), ws.host_path(), user, no_idmap)?,
    };
    Ok((ws, volume))
}

/// Opens the existing directory `path` as a workspace, if it lies under an
/// allowed root (by its path as asked, and by the path of what was opened)
/// and holds nothing of the service's own.
pub(super) fn open_lent(
    config: &Config,
    locks: Arc<PathLocks>,
    path: &str,
) -> Result<Workspace, Error> {
    let not_allowed = || Error::WorkspaceNotAllowed {
        path: path.to_string(),
        allowed: config.allowed_roots.clone(),
    };
    // Refused before the path is touched, so that what lies outside the
    // allowed roots (whether a path exists, what it is) is never told.
    let asked = Path::new(path);
    let lexically_inside = asked.is_absolute()
        && !asked
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        && config
            .allowed_roots
            .iter()
            .any(|root| asked.starts_with(root));
    if !lexically_inside {
        return Err(not_allowed());
    }
    let ws = Workspace::open(asked, locks, config.limits.clone()).map_err(|source| {
        Error::OpenWorkspace {
            path: path.to_string(),
            source,
        }
    })?;
    // Checked on the path of the opened fd, so a symlink swapped in after
    // the check cannot redirect the session.
    if !config
        .allowed_roots
        .iter()
        .any(|root| ws.host_path().starts_with(root))
    {
        return Err(not_allowed());
    }
    // The service's own files (other sessions' volumes, the journals, the
    // supervisor binary) are never lent.
    let own = [
        Some(config.state_dir.as_path()),
        config.journal_dir.as_deref(),
        config.sandbox.supervisor.as_deref(),
    ];
    let host = ws.host_path();
    if own
        .into_iter()
        .flatten()
        .any(|p| host.starts_with(p) || p.starts_with(host))
    {
        return Err(Error::OverlapsState {
            path: path.to_string(),
        });
    }
    Ok(ws)
}

//! What an image holds at the paths the service mounts on: every mount
//! target (`/workspace`, the supervisor's `/.sandboxd/...`, `/tmp`, the
//! tmpfs over each declared VOLUME) and every directory above one must be
//! missing or a plain directory (a file, for a file mounted on), never a
//! symlink. The engine creates missing targets as root and follows a
//! symlink the image put there (confined to the container's root, but a
//! root that holds the workspace): `RUN ln -s /workspace /.sandboxd`
//! would make it write the supervisor's entries into the user's directory,
//! and move the supervisor's binary and socket under the command's reach.
//!
//! The image's own files are read from a container created from it and
//! never started, with nothing of the host mounted, through the engine's
//! archive API (which tells a symlink apart); the verdict is kept per
//! image id, which names its contents.

use std::collections::BTreeMap;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    ContainerArchiveInfoOptionsBuilder, CreateContainerOptionsBuilder,
};

use super::{DockerRuntime, classify, is_status};
use crate::sandbox::{Error, Runtime, build, labels, supervisor};

/// Go's `os.ModeDir`, as the engine reports a path's mode.
const MODE_DIR: u32 = 1 << 31;
/// Go's `os.ModeSymlink`.
const MODE_SYMLINK: u32 = 1 << 27;
/// Go's bits for everything that is not a regular file.
const MODE_NOT_REGULAR: u32 = MODE_DIR
    | MODE_SYMLINK
    | (1 << 26) // device
    | (1 << 25) // named pipe
    | (1 << 24) // socket
    | (1 << 21) // character device
    | (1 << 19); // irregular

/// What must be at a path the service mounts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Want {
    Directory,
    File,
}

/// Every path to check, with what it must be if present: each mount
/// target and each directory above it, shallowest first (so a refusal
/// names the top of the problem).
fn targets(declared: &[String]) -> Vec<(String, Want)> {
    use std::path::Path;
    let dirs = [supervisor::WORKSPACE_PATH, supervisor::RUN_PATH, "/tmp"]
        .map(String::from)
        .into_iter()
        .chain(declared.iter().map(|p| build::clean_volume_path(p)))
        .map(|d| (d, Want::Directory));
    let files =
        [supervisor::MOUNT_PATH, supervisor::idle::MOUNT_PATH].map(|f| (f.to_string(), Want::File));
    let mut all: BTreeMap<String, Want> = BTreeMap::new();
    for (path, want) in dirs.chain(files) {
        for dir in Path::new(&path).ancestors().skip(1) {
            if dir != Path::new("/") {
                all.insert(dir.display().to_string(), Want::Directory);
            }
        }
        all.entry(path).or_insert(want);
    }
    let mut out: Vec<_> = all.into_iter().collect();
    out.sort_by_key(|(p, _)| (p.matches('/').count(), p.clone()));
    out
}

/// Refuses an image that declares a VOLUME over the workspace or the
/// supervisor (each gets a tmpfs, which would hide them), or over `/`.
pub(super) fn volumes_usable(image: &str, declared: &[String]) -> Result<(), Error> {
    for path in declared {
        // Compared as the engine will mount it.
        let clean = build::clean_volume_path(path);
        let over = |ours: &str| clean == ours || clean.starts_with(&format!("{ours}/"));
        if clean == "/" || over(supervisor::WORKSPACE_PATH) || over("/.sandboxd") {
            return Err(Error::ImageUnusable {
                image: image.to_string(),
                why: format!(
                    "it declares VOLUME {path}, which would hide the workspace or the \
                     supervisor; remove that VOLUME from its recipe"
                ),
            });
        }
    }
    Ok(())
}

impl DockerRuntime {
    /// Whether sessions can start containers from `image` (see
    /// [`Runtime::check_image`]).
    pub(super) async fn image_usable(
        &self,
        image: &str,
        owner: &BTreeMap<String, String>,
    ) -> Result<(), Error> {
        let docker = self.client().await?;
        let inspected = docker
            .inspect_image(image)
            .await
            .map_err(|e| classify(Error::Images, e))?;
        let declared = inspected.config.and_then(|c| c.volumes).unwrap_or_default();
        volumes_usable(image, &declared)?;
        let id = inspected.id.unwrap_or_else(|| image.to_string());
        self.check_image_paths(docker, image, &id, &declared, owner)
            .await
    }

    /// Checks image `image` (its id `id`) as the module says; `declared`:
    /// the volumes it declares; `owner`: the labels that make a container
    /// the service's (so that one a crash leaves is removed with the
    /// rest). Remembered per image id once it passes.
    pub(super) async fn check_image_paths(
        &self,
        docker: &Docker,
        image: &str,
        id: &str,
        declared: &[String],
        owner: &BTreeMap<String, String>,
    ) -> Result<(), Error> {
        if self
            .paths_checked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(id)
        {
            return Ok(());
        }
        let name = format!(
            "sandboxd-check-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let body = ContainerCreateBody {
            image: Some(id.to_string()),
            // Never started; nothing of the host in it.
            entrypoint: Some(vec!["/nonexistent".into()]),
            cmd: Some(Vec::new()),
            network_disabled: Some(true),
            labels: Some(
                owner
                    .iter()
                    .filter(|(k, _)| k.as_str() != labels::SESSION)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        let created = match docker.create_container(Some(options), body).await {
            Ok(created) => created.id,
            Err(e) => {
                if !matches!(e, bollard::errors::Error::DockerResponseServerError { .. }) {
                    self.doom(&name);
                }
                return Err(classify(Error::StartContainer, e));
            }
        };
        let verdict = self.read_paths(docker, &created, image, declared).await;
        let _ = self.remove_container(&created).await;
        if verdict.is_ok() {
            self.paths_checked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id.to_string());
        }
        verdict
    }

    async fn read_paths(
        &self,
        docker: &Docker,
        container: &str,
        image: &str,
        declared: &[String],
    ) -> Result<(), Error> {
        for (path, want) in targets(declared) {
            let options = ContainerArchiveInfoOptionsBuilder::new()
                .path(&path)
                .build();
            let stat = match docker
                .get_container_archive_info(container, Some(options))
                .await
            {
                Ok(stat) => stat,
                Err(e) if is_status(&e, &[404]) => continue,
                Err(e) => return Err(classify(Error::StartContainer, e)),
            };
            let kind = if stat.file_mode & MODE_SYMLINK != 0 {
                Some(format!("a symlink to {:?}", stat.link_target))
            } else {
                match want {
                    Want::Directory if stat.file_mode & MODE_DIR == 0 => {
                        Some("not a directory".to_string())
                    }
                    Want::File if stat.file_mode & MODE_NOT_REGULAR != 0 => {
                        Some("not a regular file".to_string())
                    }
                    _ => None,
                }
            };
            if let Some(kind) = kind {
                return Err(Error::ImageUnusable {
                    image: image.to_string(),
                    why: format!(
                        "its {path} is {kind}, and the sandbox mounts there (the workspace, the \
                         supervisor or a tmpfs), which would move those mounts elsewhere; remove \
                         {path} from the image, or make it a plain directory"
                    ),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mount_target_and_every_directory_above_one_is_checked() {
        let t = targets(&["/data/cache/".into(), "/var/lib/x".into()]);
        let paths: Vec<&str> = t.iter().map(|(p, _)| p.as_str()).collect();
        for want in [
            "/workspace",
            "/.sandboxd",
            "/.sandboxd/run",
            "/.sandboxd/sandboxd",
            "/.sandboxd/idle",
            "/tmp",
            "/data",
            "/data/cache",
            "/var",
            "/var/lib",
            "/var/lib/x",
        ] {
            assert!(paths.contains(&want), "{want}: {paths:?}");
        }
        assert_eq!(paths[0].matches('/').count(), 1, "shallowest first");
        let kind = |p: &str| t.iter().find(|(q, _)| q == p).unwrap().1;
        assert_eq!(kind("/.sandboxd"), Want::Directory);
        assert_eq!(kind("/.sandboxd/sandboxd"), Want::File);
        assert!(!paths.contains(&"/"));
    }
}

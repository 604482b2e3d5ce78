//! The built-in sandbox image: built once from its recipe (a debootstrap
//! rootfs imported into the engine) and pointed at by its stable alias.

use bollard::query_parameters::{CreateImageOptionsBuilder, TagImageOptionsBuilder};
use futures_util::TryStreamExt;

use super::{DockerRuntime, IMPORT_TIMEOUT};
use crate::sandbox::{Error, image};

impl DockerRuntime {
    /// Builds the default image from its recipe unless it already exists.
    pub async fn build_default_image(&self) -> Result<bool, Error> {
        let docker = self.client().await?;
        let reference = image::default_image();
        // One build at a time in this process, and across processes (tests
        // run in parallel binaries) through a lock file.
        let _guard = self.build.lock().await;
        let lock = tokio::task::spawn_blocking(lock_file)
            .await
            .map_err(|e| build_error(e.to_string()))?
            .map_err(|e| build_error(format!("cannot take the build lock: {e}")))?;
        if docker.inspect_image(&reference).await.is_ok() {
            self.tag_alias(&reference).await?;
            drop(lock);
            return Ok(false);
        }
        let dir = tempfile::Builder::new()
            .prefix("sandboxd-rootfs-")
            .tempdir()
            .map_err(|e| build_error(format!("cannot make a build directory: {e}")))?;
        image::build_rootfs(dir.path()).await?;
        let mut tar = tokio::process::Command::new("tar")
            .arg("-C")
            .arg(dir.path())
            .args(["--numeric-owner", "-c", "."])
            .stdout(std::process::Stdio::piped())
            .stdin(std::process::Stdio::null())
            .spawn()
            .map_err(|e| build_error(format!("cannot run tar: {e}")))?;
        let stdout = tar
            .stdout
            .take()
            .ok_or_else(|| build_error("tar has no stdout".into()))?;
        let body = bollard::body_try_stream(tokio_util::io::ReaderStream::new(stdout));
        let options = CreateImageOptionsBuilder::new()
            .from_src("-")
            .repo(image::REPOSITORY)
            .tag(&image::default_tag())
            .build();
        docker
            .clone()
            .with_timeout(IMPORT_TIMEOUT)
            .create_image(Some(options), Some(body), None)
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| build_error(format!("docker import failed: {e}")))?;
        let status = tar.wait().await.map_err(|e| build_error(e.to_string()))?;
        if !status.success() {
            return Err(build_error(format!("tar failed: {status}")));
        }
        let dir_path = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || dir.close())
            .await
            .map_err(|e| build_error(e.to_string()))?
            .map_err(|e| build_error(format!("cannot remove {}: {e}", dir_path.display())))?;
        self.tag_alias(&reference).await?;
        drop(lock);
        tracing::info!(image = %reference, alias = %image::alias(), "default sandbox image built");
        Ok(true)
    }

    /// Points `sandboxd-default:latest` at `reference` (the current build).
    async fn tag_alias(&self, reference: &str) -> Result<(), Error> {
        let options = TagImageOptionsBuilder::new()
            .repo(image::REPOSITORY)
            .tag("latest")
            .build();
        self.client()
            .await?
            .tag_image(reference, Some(options))
            .await
            .map_err(|e| build_error(format!("cannot tag it {}: {e}", image::alias())))
    }
}

fn build_error(why: String) -> Error {
    Error::BuildImage {
        image: image::default_image(),
        why,
    }
}

/// An exclusive lock shared by every sandboxd process of this user: a file
/// in sandboxd's private state root (never in a shared directory such as
/// /tmp, where another user could plant a link in its place).
fn lock_file() -> std::io::Result<std::os::fd::OwnedFd> {
    let root = crate::state::StateDir::open(&crate::state::StateDir::default_root())
        .map_err(std::io::Error::other)?;
    root.lock("image-build.lock")
}

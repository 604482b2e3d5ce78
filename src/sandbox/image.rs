//! The default sandbox image: its recipe (`images/default/build.sh`, built
//! into the binary), the tag derived from the recipe's hash (a changed
//! recipe means a new tag, hence a rebuild; an unchanged one is never rebuilt),
//! and building its root filesystem on the host. Importing the result is the
//! engine's job ([`super::docker`]).

use std::path::Path;

use sha2::{Digest, Sha256};

use super::Error;

/// The recipe, as shipped in the repository.
pub const RECIPE: &str = include_str!("../../images/default/build.sh");

/// Repository name of the default image.
pub const REPOSITORY: &str = "sandboxd-default";

/// The default image's tag: the recipe hash, so it changes with the recipe.
pub fn default_tag() -> String {
    hex::encode(Sha256::digest(RECIPE.as_bytes()))[..12].to_string()
}

/// The default image reference, `sandboxd-default:<hash>`.
pub fn default_image() -> String {
    format!("{REPOSITORY}:{}", default_tag())
}

/// A stable name for the default image, `sandboxd-default:latest`, moved to
/// each new build: something to write in a Dockerfile's `FROM` or a
/// session's image without copying a hash. Sessions naming it get the
/// default image.
pub fn alias() -> String {
    format!("{REPOSITORY}:latest")
}

/// Runs the recipe to fill `rootfs` (needs root, and debootstrap, which it
/// installs when missing and allowed: see [`crate::provision`]).
pub async fn build_rootfs(rootfs: &Path) -> Result<(), Error> {
    let fail = |why: String| Error::BuildImage {
        image: default_image(),
        why,
    };
    // debootstrap makes a root filesystem, which takes root: a service run
    // by an ordinary user uses the image root built once.
    if !rustix::process::geteuid().is_root() {
        return Err(fail(
            "it is not built yet, and building it takes root (debootstrap makes a root \
             filesystem): run `sudo sandboxd image build` once, then start sandboxd as yourself"
                .into(),
        ));
    }
    // A fresh Debian machine has no debootstrap: install it (or say how).
    tokio::task::spawn_blocking(|| crate::provision::ensure(&[crate::provision::DEBOOTSTRAP]))
        .await
        .map_err(|e| fail(e.to_string()))?
        .map_err(|e| fail(e.to_string()))?;
    tracing::info!(image = %default_image(), "building the default sandbox image (about a minute)");
    let out = tokio::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(RECIPE)
        .arg("build.sh")
        .arg(rootfs)
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| fail(format!("cannot run the recipe: {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(fail(format!(
            "the recipe failed ({}):\n{}",
            out.status,
            tail.join("\n")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_follows_the_recipe() {
        assert_eq!(default_tag().len(), 12);
        assert_eq!(
            default_image(),
            format!("sandboxd-default:{}", default_tag())
        );
        assert!(RECIPE.contains("debootstrap"));
        assert_eq!(alias(), "sandboxd-default:latest");
        assert_ne!(alias(), default_image());
    }
}

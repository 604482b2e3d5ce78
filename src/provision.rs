//! Host programs sandboxd needs, and installing the ones a machine lacks.
//!
//! A fresh Debian machine with Docker and Rust has none of debootstrap
//! (which builds the default image without a registry) or runsc (gVisor),
//! and a minimal one may lack mkfs.ext4 or mount (fresh workspaces). Rather
//! than fail and tell the operator to install them, the service installs
//! them itself with apt-get, when it runs as root on a machine that has
//! apt-get and `SANDBOXD_NO_INSTALL` is not set; anywhere else the error
//! names the package to install. Everything here is blocking and runs once,
//! at start-up or before the first image build.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// A program the host must have, and the Debian package that brings it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// The program, looked up on `PATH` and in the sbin directories.
    pub program: &'static str,
    /// The Debian package that installs it.
    pub package: &'static str,
}

/// Builds the default image's root filesystem from Debian's packages.
pub const DEBOOTSTRAP: Need = Need {
    program: "debootstrap",
    package: "debootstrap",
};
/// Makes each fresh workspace's filesystem.
pub const MKFS_EXT4: Need = Need {
    program: "mkfs.ext4",
    package: "e2fsprogs",
};
/// Mounts each fresh workspace's filesystem.
pub const MOUNT: Need = Need {
    program: "mount",
    package: "mount",
};
/// gVisor's runtime, for `--container-runtime runsc`.
pub const RUNSC: Need = Need {
    program: "runsc",
    package: "runsc",
};

/// Set to any value, the service installs nothing and only reports what is
/// missing.
pub const NO_INSTALL_ENV: &str = "SANDBOXD_NO_INSTALL";

/// Why a needed program is not there.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// It is missing and this process may not install it.
    #[error(
        "{program} is not installed, and sandboxd does not install it here ({why}); \
         install the package {package} (Debian: apt-get install {package}) and retry"
    )]
    Missing {
        /// The program.
        program: &'static str,
        /// Its package.
        package: &'static str,
        /// Why it is not installed automatically.
        why: String,
    },
    /// apt-get ran and failed.
    #[error("installing {packages} with apt-get failed: {detail}")]
    Install {
        /// The packages asked for.
        packages: String,
        /// What apt-get said.
        detail: String,
    },
}

/// Where `program` is, looking on `PATH` and in the sbin directories (which
/// a non-login root shell may not have on its `PATH`).
pub fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Makes sure every program of `needs` is installed, installing the missing
/// ones with apt-get when this process may.
pub fn ensure(needs: &[Need]) -> Result<(), Error> {
    let apt = if std::env::var_os(NO_INSTALL_ENV).is_some() {
        Err(format!("{NO_INSTALL_ENV} is set"))
    } else if !rustix::process::geteuid().is_root() {
        Err("not running as root".to_string())
    } else {
        find("apt-get").ok_or_else(|| "this machine has no apt-get".to_string())
    };
    ensure_with(needs, apt)
}

/// [`ensure`] with apt-get at the given path, or the reason it may not run.
fn ensure_with(needs: &[Need], apt: Result<PathBuf, String>) -> Result<(), Error> {
    // One install at a time in this process (apt holds its own lock against
    // other processes, and we wait for it).
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _one = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    let missing: Vec<Need> = needs
        .iter()
        .copied()
        .filter(|n| find(n.program).is_none())
        .collect();
    let Some(first) = missing.first() else {
        return Ok(());
    };
    let apt = apt.map_err(|why| Error::Missing {
        program: first.program,
        package: first.package,
        why,
    })?;
    let packages: Vec<&str> = missing.iter().map(|n| n.package).collect();
    tracing::warn!(
        packages = %packages.join(" "),
        "installing what this host lacks with apt-get"
    );
    // A fresh machine may have no package lists yet: on failure, update
    // them once and try again.
    if apt_get(&apt, &install_args(&packages)).is_err() {
        apt_get(&apt, &["update", "-qq"])?;
        apt_get(&apt, &install_args(&packages))?;
    }
    match missing.iter().find(|n| find(n.program).is_none()) {
        None => Ok(()),
        Some(n) => Err(Error::Install {
            packages: packages.join(" "),
            detail: format!("{} installed no {}", n.package, n.program),
        }),
    }
}

fn install_args<'a>(packages: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["-o", "DPkg::Lock::Timeout=300", "install", "-y", "-qq"];
    args.extend_from_slice(packages);
    args
}

fn apt_get(apt: &std::path::Path, args: &[&str]) -> Result<(), Error> {
    let failed = |detail: String| Error::Install {
        packages: args.join(" "),
        detail,
    };
    let out = Command::new(apt)
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| failed(format!("cannot run apt-get: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
    Err(failed(format!(
        "{}: {}",
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_programs_outside_path_too() {
        assert!(find("sh").is_some());
        assert!(find("no-such-program-sandboxd").is_none());
    }

    const SH: Need = Need {
        program: "sh",
        package: "dash",
    };
    const ABSENT: Need = Need {
        program: "no-such-program-sandboxd",
        package: "no-such-package",
    };

    #[test]
    fn nothing_missing_installs_nothing() {
        // Not even a usable apt-get is needed when nothing is missing.
        ensure_with(&[SH], Err("no apt-get".into())).unwrap();
    }

    #[test]
    fn a_refused_install_names_the_package_and_why() {
        let err = ensure_with(&[SH, ABSENT], Err("not running as root".into())).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("no-such-program-sandboxd is not installed"),
            "{text}"
        );
        assert!(text.contains("apt-get install no-such-package"), "{text}");
        assert!(text.contains("not running as root"), "{text}");
    }

    #[test]
    fn a_failed_install_is_an_error() {
        // `false` stands in for an apt-get that fails every time.
        let err = ensure_with(&[ABSENT], Ok(find("false").unwrap())).unwrap_err();
        assert!(matches!(err, Error::Install { .. }), "{err}");
    }
}

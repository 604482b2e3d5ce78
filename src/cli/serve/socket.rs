//! The Unix socket `serve` listens on: mode 0600 (this user alone), or
//! 0660 owned by a group (`--socket-group`) whose members may then connect,
//! as members of Docker's group use its socket. It is bound in a private
//! directory, given its group and mode there and only then renamed into
//! place, so no one else can connect in between.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use crate::cli::AnyError;

/// A group from the system's group database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Its name as given.
    pub name: String,
    /// Its id.
    pub gid: u32,
}

/// Resolves `name` with the system's group database: /etc/group, then
/// `getent group` for the other sources nsswitch.conf names (this binary is
/// linked statically, so it cannot load them itself). A number that names
/// no group is taken as a gid. An unknown name is refused, naming it.
pub fn group(name: &str) -> Result<Group, AnyError> {
    let found = match std::fs::read_to_string(GROUP_FILE) {
        Ok(text) => gid_in(&text, name),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(format!("--socket-group {name:?}: cannot read {GROUP_FILE}: {e}").into());
        }
    };
    let gid = match (found.or_else(|| getent(name)), name.parse::<u32>()) {
        (Some(gid), _) | (None, Ok(gid)) => gid,
        (None, Err(_)) => {
            return Err(format!(
                "--socket-group {name:?}: no such group in the system's group database \
                 (create it with `groupadd --system {name}` and add its members with \
                 `usermod -aG {name} USER`)"
            )
            .into());
        }
    };
    Ok(Group {
        name: name.to_string(),
        gid,
    })
}

/// The local group database.
const GROUP_FILE: &str = "/etc/group";

/// The gid of group `name` in the text of a group file (NAME:PASSWD:GID:MEMBERS).
fn gid_in(text: &str, name: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next()? == name).then_some(())?;
        fields.nth(1)?.trim().parse().ok()
    })
}

/// The gid of group `name` from `getent group` (the sources nsswitch.conf
/// names), if the tool is there and knows the group.
fn getent(name: &str) -> Option<u32> {
    if name.is_empty() || name.starts_with('-') || name.contains(['\0', ':', '\n']) {
        return None;
    }
    let tool = ["/usr/bin/getent", "/bin/getent"]
        .into_iter()
        .find(|p| Path::new(p).exists())?;
    let out = std::process::Command::new(tool)
        .args(["group", name])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status.success().then_some(())?;
    gid_in(&String::from_utf8_lossy(&out.stdout), name)
}

/// Binds a Unix socket only this user can connect to, or, with `group`,
/// this user and that group's members (mode 0660). A stale socket left by
/// a dead instance is replaced; any other file at the path is not.
pub fn bind(path: &Path, group: Option<&Group>) -> Result<tokio::net::UnixListener, AnyError> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(format!("{} exists and is not a socket", path.display()).into());
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(format!("{} is in use by a running service", path.display()).into());
        }
        std::fs::remove_file(path)?;
    }
    let cannot = |e: &dyn std::fmt::Display| format!("cannot bind {}: {e}", path.display());
    // Bound inside a private directory beside the target, given its group
    // and mode there, then renamed into place: no other user can connect in
    // between, and the process umask (shared by every thread) is never
    // touched.
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let staging = tempfile::Builder::new()
        .prefix(".sandboxd-bind-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(parent)
        .map_err(|e| cannot(&e))?;
    std::fs::set_permissions(staging.path(), std::fs::Permissions::from_mode(0o700))?;
    let staged = staging.path().join("sock");
    let listener = tokio::net::UnixListener::bind(&staged).map_err(|e| cannot(&e))?;
    let mode = match group {
        Some(g) => {
            std::os::unix::fs::chown(&staged, None, Some(g.gid)).map_err(|e| {
                cannot(&format_args!(
                    "cannot give the socket to group {}: {e}",
                    g.name
                ))
            })?;
            0o660
        }
        None => 0o600,
    };
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&staged, path).map_err(|e| cannot(&e))?;
    staging.close()?;
    if let Some(g) = group
        && let Some(closed) = closed_to(path, g.gid)
    {
        tracing::warn!(
            socket = %path.display(),
            directory = %closed.display(),
            group = %g.name,
            "members of the socket's group cannot reach it: a directory above it is closed to them"
        );
    }
    Ok(listener)
}

/// The first directory above `path` that members of group `gid` (not its
/// owner) cannot pass through, if any.
fn closed_to(path: &Path, gid: u32) -> Option<std::path::PathBuf> {
    path.ancestors().skip(1).find_map(|dir| {
        let meta = std::fs::metadata(dir).ok()?;
        let mode = meta.mode();
        let passes = mode & 0o001 != 0 || (meta.gid() == gid && mode & 0o010 != 0);
        (!passes).then(|| dir.to_path_buf())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_resolved_from_the_database_and_unknown_ones_refused_by_name() {
        assert_eq!(group("root").unwrap().gid, 0);
        assert_eq!(group("4242").unwrap().gid, 4242);
        let err = group("sandboxd-no-such-group").unwrap_err().to_string();
        assert!(
            err.contains("\"sandboxd-no-such-group\"") && err.contains("no such group"),
            "{err}"
        );
        assert!(group("bad\0name").is_err());
    }

    #[test]
    fn group_lines_are_read_field_by_field() {
        let text = "root:x:0:\nsandboxd:x:998:alice,bob\nsandbox:x:997:\n";
        assert_eq!(gid_in(text, "sandboxd"), Some(998));
        assert_eq!(gid_in(text, "sandbox"), Some(997));
        assert_eq!(gid_in(text, "sand"), None);
        assert_eq!(gid_in("broken:x:\n", "broken"), None);
    }

    #[tokio::test]
    async fn a_group_socket_is_0660_and_the_groups_and_a_private_one_0600() {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private.sock");
        let _l = bind(&private, None).unwrap();
        let meta = std::fs::metadata(&private).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        let shared = dir.path().join("shared.sock");
        let g = Group {
            name: "some".into(),
            gid: 4242,
        };
        let _m = bind(&shared, Some(&g)).unwrap();
        let meta = std::fs::metadata(&shared).unwrap();
        assert_eq!((meta.mode() & 0o777, meta.gid()), (0o660, 4242));
        // Nothing is left behind but the sockets.
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["private.sock", "shared.sock"]);
        // A live socket is not taken over.
        let err = bind(&shared, Some(&g)).unwrap_err().to_string();
        assert!(err.contains("in use"), "{err}");
    }

    #[test]
    fn a_directory_closed_to_the_group_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("inner");
        std::fs::create_dir(&inner).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o700)).unwrap();
        let sock = inner.join("s.sock");
        assert_eq!(closed_to(&sock, 4242), Some(inner.clone()));
        std::os::unix::fs::chown(&inner, None, Some(4242)).unwrap();
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o710)).unwrap();
        assert_eq!(closed_to(&sock, 4242), None);
    }
}

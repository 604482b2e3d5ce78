//! gVisor (`runsc`) as a runtime of the local Docker engine.
//!
//! `--container-runtime runsc` needs runsc installed and registered in the
//! engine's `/etc/docker/daemon.json`. On a fresh machine neither is done,
//! so when the engine is on this host the service does both: it installs
//! the package (see [`crate::provision`]), adds the runtime to the file
//! (keeping everything else in it, written atomically), and has the daemon
//! reload its configuration with SIGHUP, which leaves running containers
//! alone. A remote engine is only checked, never changed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::docker::DockerRuntime;

/// The runtime's name, as sessions' containers ask for it.
pub const NAME: &str = "runsc";

/// The engine's configuration file.
const DAEMON_JSON: &str = "/etc/docker/daemon.json";

/// Why runsc cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The engine cannot be asked.
    #[error(transparent)]
    Engine(#[from] super::Error),
    /// runsc is missing and cannot be installed here.
    #[error(transparent)]
    Install(#[from] crate::provision::Error),
    /// The engine is not on this host, so its configuration is not ours.
    #[error(
        "the Docker engine at {0} has no runsc runtime; register runsc on that host \
         (\"runtimes\" in its /etc/docker/daemon.json) and retry"
    )]
    Remote(String),
    /// The engine's configuration could not be changed.
    #[error("cannot register runsc in {DAEMON_JSON}: {0}")]
    Configure(String),
    /// The engine did not pick the runtime up.
    #[error(
        "runsc is in {DAEMON_JSON} but the Docker engine did not load it \
         (restart dockerd and retry)"
    )]
    NotLoaded,
}

/// Makes sure the engine knows runsc, installing and registering it when the
/// engine runs on this host.
pub async fn ensure_registered(docker: &DockerRuntime) -> Result<(), Error> {
    if has_runsc(docker).await? {
        return Ok(());
    }
    let host = docker
        .host()
        .map(str::to_string)
        .or_else(|| std::env::var("DOCKER_HOST").ok());
    if let Some(host) = host.filter(|h| !is_local_socket(h)) {
        return Err(Error::Remote(host));
    }
    tracing::warn!("runsc is not a runtime of the Docker engine: registering it");
    tokio::task::spawn_blocking(register)
        .await
        .map_err(|e| Error::Configure(e.to_string()))??;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if has_runsc(docker).await? {
            tracing::info!("runsc registered with the Docker engine");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(Error::NotLoaded)
}

async fn has_runsc(docker: &DockerRuntime) -> Result<bool, Error> {
    Ok(docker.runtimes().await?.iter().any(|r| r == NAME))
}

fn is_local_socket(host: &str) -> bool {
    host.starts_with("unix://") || host.starts_with('/')
}

/// Installs runsc, writes it into the engine's configuration and signals
/// the daemon to reload. Blocking.
fn register() -> Result<(), Error> {
    crate::provision::ensure(&[crate::provision::RUNSC])?;
    let runsc = crate::provision::find(NAME).ok_or(Error::NotLoaded)?;
    let path = Path::new(DAEMON_JSON);
    let current = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(Error::Configure(e.to_string())),
    };
    let updated = with_runsc(&current, &runsc)?;
    write_atomically(path, &updated)?;
    let pid = dockerd_pid()
        .ok_or_else(|| Error::Configure("no running dockerd to reload was found".to_string()))?;
    rustix::process::kill_process(pid, rustix::process::Signal::HUP)
        .map_err(|e| Error::Configure(format!("cannot signal dockerd: {e}")))
}

/// The configuration `current` with runsc added as a runtime (networking
/// off inside gVisor: sandboxes have none anyway).
fn with_runsc(current: &str, runsc: &Path) -> Result<String, Error> {
    let mut conf: serde_json::Value = if current.trim().is_empty() {
        serde_json::json!({})
    } else {
        serde_json::from_str(current)
            .map_err(|e| Error::Configure(format!("it is not valid JSON: {e}")))?
    };
    let object = conf
        .as_object_mut()
        .ok_or_else(|| Error::Configure("it is not a JSON object".to_string()))?;
    let runtimes = object
        .entry("runtimes")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
        .ok_or_else(|| Error::Configure("its \"runtimes\" is not an object".to_string()))?;
    runtimes.insert(
        NAME.to_string(),
        serde_json::json!({
            "path": runsc,
            "runtimeArgs": ["--network=none"],
        }),
    );
    serde_json::to_string_pretty(&conf).map_err(|e| Error::Configure(e.to_string()))
}

fn write_atomically(path: &Path, text: &str) -> Result<(), Error> {
    let configure = |e: std::io::Error| Error::Configure(e.to_string());
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(configure)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".daemon.json.")
        .tempfile_in(dir)
        .map_err(configure)?;
    std::io::Write::write_all(&mut tmp, format!("{text}\n").as_bytes()).map_err(configure)?;
    tmp.as_file().sync_all().map_err(configure)?;
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .map_err(configure)?;
    tmp.persist(path).map_err(|e| configure(e.error))?;
    Ok(())
}

/// The daemon's pid: from its pid file, else the first `dockerd` process.
fn dockerd_pid() -> Option<rustix::process::Pid> {
    let from_file = std::fs::read_to_string("/var/run/docker.pid")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|pid| comm(*pid).as_deref() == Some("dockerd"));
    let pid = from_file.or_else(|| {
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .find(|pid| comm(*pid).as_deref() == Some("dockerd"))
    })?;
    rustix::process::Pid::from_raw(pid)
}

fn comm(pid: i32) -> Option<String> {
    let path = PathBuf::from(format!("/proc/{pid}/comm"));
    Some(std::fs::read_to_string(path).ok()?.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registering_keeps_the_rest_of_the_configuration() {
        let before = r#"{"storage-driver": "overlay2", "runtimes": {"kata": {"path": "/k"}}}"#;
        let after: serde_json::Value =
            serde_json::from_str(&with_runsc(before, Path::new("/usr/bin/runsc")).unwrap())
                .unwrap();
        assert_eq!(after["storage-driver"], "overlay2");
        assert_eq!(after["runtimes"]["kata"]["path"], "/k");
        assert_eq!(after["runtimes"]["runsc"]["path"], "/usr/bin/runsc");
        assert_eq!(
            after["runtimes"]["runsc"]["runtimeArgs"][0],
            "--network=none"
        );
    }

    #[test]
    fn a_missing_or_empty_configuration_is_started() {
        let after: serde_json::Value =
            serde_json::from_str(&with_runsc("  \n", Path::new("/r")).unwrap()).unwrap();
        assert_eq!(after["runtimes"]["runsc"]["path"], "/r");
    }

    #[test]
    fn a_configuration_that_is_not_an_object_is_left_alone() {
        for bad in ["[1]", "{not json", r#"{"runtimes": 3}"#] {
            let err = with_runsc(bad, Path::new("/r")).unwrap_err();
            assert!(matches!(err, Error::Configure(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn only_unix_sockets_are_this_host() {
        assert!(is_local_socket("unix:///var/run/docker.sock"));
        assert!(!is_local_socket("tcp://10.0.0.5:2375"));
    }
}

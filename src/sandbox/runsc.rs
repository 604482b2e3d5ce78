//! gVisor (`runsc`) as a runtime of the local Docker engine.
//!
//! `--container-runtime runsc` needs runsc installed and registered in the
//! engine's `/etc/docker/daemon.json`. On a fresh machine neither is done,
//! so when the engine is on this host the service does both: it installs
//! the package (see [`crate::provision`]), adds the runtime to the file
//! (keeping everything else in it, written atomically), and has the daemon
//! reload its configuration with SIGHUP, which leaves running containers
//! alone. A remote engine is only checked, never changed.
//!
//! Beside `runsc` the service registers [`LINKED`], the same runtime with
//! host Unix sockets open, for containers whose only host socket is their
//! supervisor's: see there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::docker::{DockerRuntime, EngineRuntime};

/// The runtime's name, as sessions' containers ask for it.
pub const NAME: &str = "runsc";

/// The service's own entry for gVisor: the engine's `runsc` (its program
/// and arguments) with `--host-uds=open`, so that a program in the sandbox
/// may connect to a Unix socket of the host that lies in one of its
/// mounts. Its supervisor then reaches the service's socket directly,
/// instead of framing through the engine's exec (a round trip through
/// dockerd, containerd's shim and `runsc exec` each way).
///
/// Only a container whose mounts hold no socket of the host but its
/// supervisor's runs under it: a workspace the service made (a fresh
/// volume, which only the service and the container write), the
/// read-only image, the supervisor's binary and its socket directory
/// (root's, 0700, its socket 0600: commands, which never run as root, are
/// refused by gVisor's own permission checks). A directory of the host
/// lent to a session may hold the host's sockets (a dev server's, an
/// agent's), so those containers run under plain `runsc`, where no host
/// socket is reachable at all, and frame over the exec.
pub const LINKED: &str = "sandboxd-runsc";

/// The argument that opens host Unix sockets to the sandbox (connect only:
/// it creates none on the host).
const HOST_UDS: &str = "--host-uds=open";

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

/// Whether `rt` is runsc with host Unix sockets open.
pub fn is_linked(rt: &EngineRuntime) -> bool {
    rt.args.iter().any(|a| a == HOST_UDS)
}

/// [`LINKED`] as it should be beside the engine's `runsc`.
fn linked_beside(runsc: &EngineRuntime) -> EngineRuntime {
    let mut args: Vec<String> = runsc
        .args
        .iter()
        .filter(|a| !a.starts_with("--host-uds"))
        .cloned()
        .collect();
    args.push(HOST_UDS.to_string());
    EngineRuntime {
        path: runsc.path.clone(),
        args,
    }
}

/// Makes sure the engine knows runsc, installing and registering it when the
/// engine runs on this host; and [`LINKED`] beside it where the engine is
/// this host's (without it, gVisor sessions frame over the exec).
pub async fn ensure_registered(docker: &DockerRuntime) -> Result<(), Error> {
    let host = docker
        .host()
        .map(str::to_string)
        .or_else(|| std::env::var("DOCKER_HOST").ok())
        .filter(|h| !is_local_socket(h));
    // A second round when the engine dropped a runsc that its
    // configuration no longer held: the first wrote only the linked entry.
    for _ in 0..2 {
        let runtimes = docker.runtimes().await?;
        if has_both(&runtimes) {
            docker.set_linked_runsc(true);
            return Ok(());
        }
        if let Some(host) = host {
            if !runtimes.contains_key(NAME) {
                return Err(Error::Remote(host));
            }
            docker.set_linked_runsc(runtimes.get(LINKED).is_some_and(is_linked));
            return Ok(());
        }
        let engine_runsc = runtimes.get(NAME).cloned();
        if engine_runsc.is_some() {
            tracing::info!(
                "registering {LINKED} (runsc with host Unix sockets open) with the Docker engine"
            );
        } else {
            tracing::warn!("runsc is not a runtime of the Docker engine: registering it");
        }
        let had_runsc = engine_runsc.is_some();
        let registered = tokio::task::spawn_blocking(move || register(engine_runsc.as_ref()))
            .await
            .map_err(|e| Error::Configure(e.to_string()))?;
        if let Err(e) = registered {
            if had_runsc {
                // runsc itself works: only the direct link is lost.
                tracing::warn!(error = %e, "cannot register {LINKED}; gVisor sessions frame over the engine's exec");
                docker.set_linked_runsc(false);
                return Ok(());
            }
            return Err(e);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let now = docker.runtimes().await?;
            if has_both(&now) {
                tracing::info!("runsc registered with the Docker engine");
                docker.set_linked_runsc(true);
                return Ok(());
            }
            if had_runsc && !now.contains_key(NAME) {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::NotLoaded);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Err(Error::NotLoaded)
}

/// Whether the engine has runsc, and [`LINKED`] as it should be beside it.
fn has_both(runtimes: &BTreeMap<String, EngineRuntime>) -> bool {
    runtimes
        .get(NAME)
        .is_some_and(|runsc| runtimes.get(LINKED) == Some(&linked_beside(runsc)))
}

fn is_local_socket(host: &str) -> bool {
    host.starts_with("unix://") || host.starts_with('/')
}

/// Installs runsc where the engine lacks it, writes it and [`LINKED`]
/// into the engine's configuration and signals the daemon to reload.
/// Blocking.
fn register(engine_runsc: Option<&EngineRuntime>) -> Result<(), Error> {
    let runsc = match engine_runsc {
        Some(rt) => rt.clone(),
        None => {
            crate::provision::ensure(&[crate::provision::RUNSC])?;
            let path = crate::provision::find(NAME).ok_or(Error::NotLoaded)?;
            EngineRuntime {
                path: path.display().to_string(),
                args: vec!["--network=none".to_string()],
            }
        }
    };
    let path = Path::new(DAEMON_JSON);
    let current = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(Error::Configure(e.to_string())),
    };
    let updated = with_runsc(&current, &runsc, engine_runsc.is_none())?;
    write_atomically(path, &updated)?;
    let pid = dockerd_pid()
        .ok_or_else(|| Error::Configure("no running dockerd to reload was found".to_string()))?;
    rustix::process::kill_process(pid, rustix::process::Signal::HUP)
        .map_err(|e| Error::Configure(format!("cannot signal dockerd: {e}")))
}

/// The configuration `current` with [`LINKED`] beside `runsc`, and
/// `runsc` itself added when `add_runsc` (networking off inside gVisor:
/// sandboxes have none anyway).
fn with_runsc(current: &str, runsc: &EngineRuntime, add_runsc: bool) -> Result<String, Error> {
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
    let entry = |rt: &EngineRuntime| serde_json::json!({"path": rt.path, "runtimeArgs": rt.args});
    if add_runsc {
        runtimes.insert(NAME.to_string(), entry(runsc));
    }
    runtimes.insert(LINKED.to_string(), entry(&linked_beside(runsc)));
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

    fn runsc(args: &[&str]) -> EngineRuntime {
        EngineRuntime {
            path: "/usr/bin/runsc".into(),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    #[test]
    fn registering_keeps_the_rest_of_the_configuration() {
        let before = r#"{"storage-driver": "overlay2", "runtimes": {"kata": {"path": "/k"}}}"#;
        let after: serde_json::Value =
            serde_json::from_str(&with_runsc(before, &runsc(&["--network=none"]), true).unwrap())
                .unwrap();
        assert_eq!(after["storage-driver"], "overlay2");
        assert_eq!(after["runtimes"]["kata"]["path"], "/k");
        assert_eq!(after["runtimes"]["runsc"]["path"], "/usr/bin/runsc");
        assert_eq!(
            after["runtimes"]["runsc"]["runtimeArgs"],
            serde_json::json!(["--network=none"])
        );
        assert_eq!(
            after["runtimes"][LINKED]["runtimeArgs"],
            serde_json::json!(["--network=none", "--host-uds=open"])
        );
    }

    #[test]
    fn the_linked_runtime_follows_the_operators_runsc_which_is_left_alone() {
        // An operator's runsc (its own platform, host sockets asked for
        // in some other way) is copied, never changed; only the copy has
        // host sockets open, for connecting only.
        let theirs = runsc(&["--platform=kvm", "--host-uds=all"]);
        let before = r#"{"runtimes": {"runsc": {"path": "/opt/runsc", "runtimeArgs": ["--platform=kvm", "--host-uds=all"]}}}"#;
        let after: serde_json::Value =
            serde_json::from_str(&with_runsc(before, &theirs, false).unwrap()).unwrap();
        assert_eq!(after["runtimes"]["runsc"]["path"], "/opt/runsc");
        assert_eq!(
            after["runtimes"]["runsc"]["runtimeArgs"],
            serde_json::json!(["--platform=kvm", "--host-uds=all"])
        );
        assert_eq!(
            after["runtimes"][LINKED]["runtimeArgs"],
            serde_json::json!(["--platform=kvm", "--host-uds=open"])
        );
        let engine = BTreeMap::from([
            (NAME.to_string(), theirs.clone()),
            (LINKED.to_string(), linked_beside(&theirs)),
        ]);
        assert!(has_both(&engine));
        let stale = BTreeMap::from([
            (NAME.to_string(), runsc(&["--platform=ptrace"])),
            (LINKED.to_string(), linked_beside(&theirs)),
        ]);
        assert!(
            !has_both(&stale),
            "a linked entry that no longer matches runsc is written again"
        );
        assert!(is_linked(&linked_beside(&theirs)));
        assert!(!is_linked(&theirs));
    }

    #[test]
    fn a_missing_or_empty_configuration_is_started() {
        let after: serde_json::Value =
            serde_json::from_str(&with_runsc("  \n", &runsc(&[]), true).unwrap()).unwrap();
        assert_eq!(after["runtimes"]["runsc"]["path"], "/usr/bin/runsc");
        assert_eq!(after["runtimes"][LINKED]["path"], "/usr/bin/runsc");
    }

    #[test]
    fn a_configuration_that_is_not_an_object_is_left_alone() {
        for bad in ["[1]", "{not json", r#"{"runtimes": 3}"#] {
            let err = with_runsc(bad, &runsc(&[]), true).unwrap_err();
            assert!(matches!(err, Error::Configure(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn only_unix_sockets_are_this_host() {
        assert!(is_local_socket("unix:///var/run/docker.sock"));
        assert!(!is_local_socket("tcp://10.0.0.5:2375"));
    }
}

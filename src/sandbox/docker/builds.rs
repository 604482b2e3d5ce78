//! Image builds on the engine: the network their steps run in, fenced off
//! from the host, and the engine's build messages cut into
//! [`BuildMessage`]s.
//!
//! The classic builder runs each `RUN` step in a container of the network
//! it is given. On the default bridge that container reaches the host
//! itself at the bridge's gateway (172.17.0.1) and at every other address
//! of the host: any service listening on them (another local user's, or
//! this service's own) would answer a build. So every build runs on a
//! bridge of sandboxd's own, [`NETWORK`] (interface [`BRIDGE`]), and the
//! host's firewall refuses everything that arrives from it for the host
//! (`INPUT -i BRIDGE -j REJECT`, IPv4 and IPv6; a step that tries fails at
//! once rather than waiting out a timeout): steps still reach the
//! network beyond the host (package mirrors, through the host's NAT as on
//! the default bridge), never the host. Containers on it cannot reach one
//! another either (inter-container traffic is off), so one caller's build
//! cannot talk to another's. The fence is checked before every build, and
//! a build that cannot have it is refused: a build is never run where it
//! could reach the host.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::BuildImageOptionsBuilder;
use futures_util::StreamExt;

use super::super::Error;
use super::super::build::{self, BuildMessage, BuildSpec, BuildStream};
use super::is_status;

/// The engine network every build step runs in.
pub const NETWORK: &str = "sandboxd-build";
/// Its bridge interface on the host, which the firewall rules name.
pub const BRIDGE: &str = "sbx-build0";

/// The option naming a bridge network's interface.
const BRIDGE_NAME_OPTION: &str = "com.docker.network.bridge.name";
/// The option letting containers of one bridge talk to one another.
const ICC_OPTION: &str = "com.docker.network.bridge.enable_icc";
/// How long one firewall command may take (it waits for the xtables lock).
const FIREWALL_TIMEOUT: Duration = Duration::from_secs(20);

/// Starts a build of `spec` on the fenced network; the engine at `host`
/// (`None`: the local default) must be this machine's.
pub(super) async fn start(
    docker: Docker,
    host: Option<&str>,
    spec: BuildSpec,
) -> Result<BuildStream, Error> {
    fence(&docker, host, &spec.tag).await?;
    let options = BuildImageOptionsBuilder::new()
        .dockerfile(&spec.dockerfile)
        .t(&spec.tag)
        // Step containers go, on failure and on cancel too.
        .rm(true)
        .forcerm(true)
        .networkmode(NETWORK)
        .labels(&spec.labels.into_iter().collect::<HashMap<_, _>>())
        .buildargs(&spec.args.into_iter().collect::<HashMap<_, _>>())
        .build();
    Ok(stream(docker, options, spec.context))
}

fn refused(tag: &str, why: String) -> Error {
    Error::BuildImage {
        image: tag.to_string(),
        why: format!(
            "builds run only where their steps cannot reach this host, and {why}; nothing was \
             built"
        ),
    }
}

/// Makes sure [`NETWORK`] exists as sandboxd makes it, and that the host
/// refuses what arrives from its bridge.
async fn fence(docker: &Docker, host: Option<&str>, tag: &str) -> Result<(), Error> {
    // One check at a time: two builds starting together add one rule.
    static CHECKING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one = CHECKING.lock().await;
    if let Some(h) = host
        && !h.starts_with("unix://")
        && !h.starts_with('/')
    {
        return Err(refused(
            tag,
            format!(
                "the engine at {h} is not reached through a local socket, so this host's \
                 firewall cannot fence its builds"
            ),
        ));
    }
    network(docker, tag).await?;
    // The rules below are this network namespace's: they fence the builds
    // only if the engine's bridge is here too (not an engine behind a
    // forwarded socket, nor a service in a namespace of its own).
    if !std::path::Path::new("/sys/class/net").join(BRIDGE).exists() {
        return Err(refused(
            tag,
            format!(
                "the engine's build bridge {BRIDGE} is not in this host's network namespace \
                 (the engine runs elsewhere), so this host's firewall cannot fence its builds"
            ),
        ));
    }
    for tool in ["iptables", "ip6tables"] {
        firewall(tool, tag).await?;
    }
    Ok(())
}

/// Creates [`NETWORK`] unless it exists; refuses one that is not ours as
/// made (another bridge would not be the one the firewall rules name).
async fn network(docker: &Docker, tag: &str) -> Result<(), Error> {
    let engine = |e: DockerError| match e {
        DockerError::RequestTimeoutError => Error::EngineTimeout,
        other => refused(tag, format!("the build network failed: {other}")),
    };
    match docker.inspect_network(NETWORK, None).await {
        Ok(n) => {
            let options = n.options.unwrap_or_default();
            let bridge = options.get(BRIDGE_NAME_OPTION).map(String::as_str);
            if n.driver.as_deref() != Some("bridge") || bridge != Some(BRIDGE) {
                return Err(refused(
                    tag,
                    format!(
                        "the engine's network {NETWORK} was not made by sandboxd (driver {:?}, \
                         bridge {bridge:?}): remove it (docker network rm {NETWORK}) and build \
                         again",
                        n.driver
                    ),
                ));
            }
            Ok(())
        }
        Err(e) if is_status(&e, &[404]) => {
            let request = NetworkCreateRequest {
                name: NETWORK.to_string(),
                driver: Some("bridge".into()),
                options: Some(HashMap::from([
                    (BRIDGE_NAME_OPTION.to_string(), BRIDGE.to_string()),
                    (ICC_OPTION.to_string(), "false".to_string()),
                ])),
                labels: Some(HashMap::from([(
                    "sandboxd.purpose".to_string(),
                    "builds".to_string(),
                )])),
                ..Default::default()
            };
            match docker.create_network(request).await {
                Ok(_) => Ok(()),
                // Made meanwhile by another instance: checked next build.
                Err(e) if is_status(&e, &[409]) => Ok(()),
                Err(e) => Err(engine(e)),
            }
        }
        Err(e) => Err(engine(e)),
    }
}

/// Makes sure `tool` (iptables or ip6tables) refuses what arrives from
/// [`BRIDGE`] for this host, inserting the rule first in INPUT if absent.
async fn firewall(tool: &str, tag: &str) -> Result<(), Error> {
    let rule = ["INPUT", "-i", BRIDGE, "-j", "REJECT"];
    match run(tool, "-C", &rule).await {
        Ok(true) => return Ok(()),
        Ok(false) => {}
        Err(why) if tool == "ip6tables" && !ipv6_on() => {
            tracing::debug!(why, "no IPv6 on this host: no IPv6 fence needed");
            return Ok(());
        }
        Err(why) => return Err(refused(tag, why)),
    }
    match run(tool, "-I", &rule).await {
        Ok(true) => {
            tracing::info!(tool, bridge = BRIDGE, "builds fenced off the host");
            Ok(())
        }
        Ok(false) => Err(refused(
            tag,
            format!("{tool} could not add the rule that keeps builds off the host"),
        )),
        Err(why) => Err(refused(tag, why)),
    }
}

fn ipv6_on() -> bool {
    std::path::Path::new("/proc/net/if_inet6").exists()
}

/// Runs `tool -w ACTION RULE...`: whether it succeeded, or why it could
/// not be run. `-C` fails (exit 1) when the rule is absent.
async fn run(tool: &str, action: &str, rule: &[&str]) -> Result<bool, String> {
    let mut last = String::new();
    for dir in ["", "/usr/sbin/", "/sbin/"] {
        let mut command = tokio::process::Command::new(format!("{dir}{tool}"));
        command
            .arg("-w")
            .arg(action)
            .args(rule)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let output = match tokio::time::timeout(FIREWALL_TIMEOUT, command.output()).await {
            Ok(Ok(o)) => o,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                last = format!("{tool} is not installed");
                continue;
            }
            Ok(Err(e)) => return Err(format!("{tool} could not be run: {e}")),
            Err(_) => return Err(format!("{tool} did not answer in time")),
        };
        return match output.status.code() {
            Some(0) => Ok(true),
            Some(1) if action == "-C" => Ok(false),
            _ => Err(format!(
                "{tool} {action} failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )),
        };
    }
    Err(last)
}

/// The engine's build messages for one build, cut into [`BuildMessage`]s.
fn stream(
    docker: Docker,
    options: bollard::query_parameters::BuildImageOptions,
    context: Vec<u8>,
) -> BuildStream {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<BuildMessage, Error>>(64);
    // The producer ends (and drops the engine's stream, cancelling the
    // build) as soon as the receiver is gone.
    tokio::spawn(async move {
        let body = bollard::body_full(context.into());
        let mut raw = docker.build_image(options, None, Some(body));
        let mut partial = String::new();
        loop {
            // A step may print nothing for minutes: watch the receiver too.
            let item = tokio::select! {
                _ = tx.closed() => return,
                item = raw.next() => item,
            };
            let Some(item) = item else { break };
            let mut out = Vec::new();
            let item = match item {
                Ok(info) => {
                    if let Some(text) = &info.stream {
                        build::split_stream(&mut partial, text, &mut out);
                    }
                    if let Some(detail) = info.error_detail {
                        let message = detail.message.unwrap_or_default();
                        out.push(BuildMessage::Failed(message));
                    }
                    if let Some(id) = info.aux.and_then(|aux| aux.id) {
                        out.push(BuildMessage::Built(id));
                    }
                    Ok(out)
                }
                Err(DockerError::DockerResponseServerError { message, .. }) => {
                    Ok(vec![BuildMessage::Failed(message)])
                }
                Err(DockerError::DockerStreamError { error }) => {
                    Ok(vec![BuildMessage::Failed(error)])
                }
                Err(e) => Err(Error::Connect(e.to_string())),
            };
            let messages = match item {
                Ok(messages) => messages,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            for m in messages {
                if tx.send(Ok(m)).await.is_err() {
                    return;
                }
            }
        }
        if !partial.is_empty() {
            let mut out = Vec::new();
            build::split_stream(&mut partial, "\n", &mut out);
            for m in out {
                let _ = tx.send(Ok(m)).await;
            }
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_engine_this_host_cannot_fence_gets_no_build() {
        // Made without connecting: the refusal comes before any call.
        let docker =
            Docker::connect_with_http("tcp://192.0.2.9:2375", 1, bollard::API_DEFAULT_VERSION)
                .unwrap();
        match fence(&docker, Some("tcp://192.0.2.9:2375"), "x:1").await {
            Err(Error::BuildImage { why, .. }) => {
                assert!(why.contains("cannot reach this host"), "{why}");
                assert!(why.contains("local socket"), "{why}");
                assert!(why.contains("nothing was built"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}

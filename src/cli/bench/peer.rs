//! The peer in the same run: SWE-ReX 1.4, the runtime behind SWE-agent,
//! alternated sample by sample with sandboxd. Its `DockerDeployment` runs
//! on an image made from sandboxd's default image with SWE-ReX installed,
//! and is driven by `peer_driver.py` in a virtual environment on the host,
//! which times SWE-ReX's own awaits (its client-side latency, as ours are
//! ours). Where SWE-ReX cannot be set up or fails, the group says why and
//! adds no rows: the bench never fails because of the peer.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use sandboxd::pb;

use super::round_trip::{get_session, paused_floor};
use super::{AnyError, Client, QUIET, Row, close, ms, new_session, run_cmd, stats, verdict};

/// The peer's image, built once from the default image.
const IMAGE: &str = "sandboxd-bench-swerex:1.4";
/// The label on every peer container, so leftovers can be found.
const LABEL: &str = "sandboxd.bench.peer";
/// The image label naming the wheel set (and recipe) it was built from.
const WHEELS_LABEL: &str = "sandboxd.bench.wheels";
/// The peer release: the newest 1.4.x on PyPI. The 1.4.0 client imports
/// aiohttp without declaring it, hence the second requirement.
const REQUIREMENTS: [&str; 2] = ["swe-rex==1.4.*", "aiohttp"];
/// The driver, written to the cache directory at run time.
const DRIVER: &str = include_str!("peer_driver.py");

/// The peer rows: a command in a started runtime, start until a first
/// command (fresh, and over an existing directory), and stop.
pub(super) async fn figures(
    client: &Client,
    project: &Path,
    samples: usize,
    rows: &mut Vec<Row>,
) -> Result<(), AnyError> {
    eprintln!("peer: setting up SWE-ReX 1.4 (wheels, host venv, image, driver)...");
    let ready = match tokio::task::spawn_blocking(setup).await? {
        Ok(cache) => Driver::spawn(&cache).await,
        Err(why) => Err(why),
    };
    let mut driver = match ready {
        Ok(driver) => driver,
        Err(why) => {
            eprintln!("peer: skipped, SWE-ReX could not be set up: {why}");
            return Ok(());
        }
    };
    let measured = measure(client, project, samples, &mut driver).await;
    driver.finish().await;
    // Whatever the driver could not stop.
    let _ = tokio::task::spawn_blocking(remove_leftovers).await;
    match measured? {
        Ok(new) => rows.extend(new),
        Err(why) => eprintln!("peer: skipped, SWE-ReX failed: {why} (log: {})", driver.log),
    }
    Ok(())
}

/// The peer's answer, or `measure` returns the peer's failure.
macro_rules! peer {
    ($call:expr) => {
        match $call {
            Ok(v) => v,
            Err(why) => return Ok(Err(why)),
        }
    };
}

/// Measures both sides, alternating (half the samples each side goes
/// first, so what one leaves behind lands on both). The outer error is
/// sandboxd's (it fails the bench), the inner one the peer's (it only
/// skips the rows).
async fn measure(
    client: &Client,
    project: &Path,
    samples: usize,
    driver: &mut Driver,
) -> Result<Result<Vec<Row>, String>, AnyError> {
    let (n, n_start) = (samples.clamp(5, 50), (samples / 10).clamp(5, 10));
    let v = driver.version.clone();
    let label = |what: &str| format!("SWE-ReX {v} {what}");
    eprintln!("peer: SWE-ReX {v}: command ({n} samples), start and stop ({n_start} each)...");
    let exec = json!({"op": "exec"});
    peer!(driver.time(json!({"op": "start", "dir": null})).await);
    let sid = new_session(client).await?.session_id;
    for _ in 0..5 {
        peer!(driver.time(exec.clone()).await);
        run_cmd(client, &sid, "true").await?;
    }
    let (mut ours, mut theirs, mut unary) = (vec![], vec![], vec![]);
    for i in 0..n {
        for side in [i % 2, 1 - i % 2] {
            tokio::time::sleep(QUIET).await;
            if side == 0 {
                let t = Instant::now();
                run_cmd(client, &sid, "true").await?;
                ours.push(t.elapsed());
                tokio::time::sleep(QUIET).await;
                let t = Instant::now();
                get_session(client, &sid).await?;
                unary.push(t.elapsed());
            } else {
                theirs.push(peer!(driver.time(exec.clone()).await));
            }
        }
    }
    let paused = paused_floor(client, &sid).await?;
    close(client, sid).await?;
    peer!(driver.time(json!({"op": "stop"})).await);
    let figure =
        "RunCommand `true`, warm session, against SWE-ReX 1.4 execute in a started runtime";
    let mut rows = vec![row(figure, &ours, &label("execute `true`"), &theirs, 0.33)];
    if let Some(paused) = paused {
        // What no service that starts a shell per command goes below here.
        let bare: Vec<Duration> = (0..unary.len().min(paused.len()))
            .map(|i| unary[i] + paused[i])
            .collect();
        let figure = "GetSession plus a bare `/bin/sh -c true` spawned after the same pause \
                      (in the session's container), against SWE-ReX 1.4 execute";
        rows.push(row(figure, &bare, &label("execute `true`"), &theirs, 0.0));
    }

    let (mut our_close, mut their_stop) = (vec![], vec![]);
    for (dir, figure, what) in [
        (None, "fresh workspace", "start() + first execute"),
        (
            Some(project),
            "existing directory",
            "start() mounting it + first execute",
        ),
    ] {
        let (mut ours, mut theirs) = (vec![], vec![]);
        let dir = dir.map(|d| d.display().to_string());
        for i in 0..n_start {
            for side in [i % 2, 1 - i % 2] {
                tokio::time::sleep(QUIET).await;
                if side == 0 {
                    let t = Instant::now();
                    let request = pb::CreateSessionRequest {
                        workspace_path: dir.clone().unwrap_or_default(),
                        ..Default::default()
                    };
                    let s = client.clone().create_session(request).await?.into_inner();
                    run_cmd(client, &s.session_id, "true").await?;
                    ours.push(t.elapsed());
                    tokio::time::sleep(QUIET).await;
                    let t = Instant::now();
                    close(client, s.session_id).await?;
                    our_close.push(t.elapsed());
                } else {
                    theirs.push(peer!(driver.time(json!({"op": "start", "dir": dir})).await));
                    tokio::time::sleep(QUIET).await;
                    their_stop.push(peer!(driver.time(json!({"op": "stop"})).await));
                }
            }
        }
        let figure =
            format!("CreateSession until a first command ran ({figure}), against SWE-ReX 1.4");
        rows.push(row(&figure, &ours, &label(what), &theirs, 0.0));
    }
    let figure = "CloseSession, against SWE-ReX 1.4 DockerDeployment.stop()";
    rows.push(row(figure, &our_close, &label("stop()"), &their_stop, 0.0));
    Ok(Ok(rows))
}

/// A row of ours against the peer's; `target` is the ratio of p50s to
/// meet (0: for reference).
fn row(figure: &str, ours: &[Duration], peer: &str, theirs: &[Duration], target: f64) -> Row {
    let (o, p) = (stats(ours), stats(theirs));
    let ratio = o.p50.as_secs_f64() / p.p50.as_secs_f64();
    let three = |s: super::Stats| format!("{} / {} / {}", ms(s.p50), ms(s.p90), ms(s.p99));
    Row {
        figure: figure.into(),
        ours: three(o),
        baseline: format!("{peer} {}", three(p)),
        ratio: format!("{ratio:.3}x"),
        target: if target > 0.0 {
            verdict(ratio <= target, &format!("p50 <= {target}x the peer's"))
        } else {
            "for reference".into()
        },
    }
}

/// The long-lived driver process, one JSON request and reply at a time.
struct Driver {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    version: String,
    /// Where its stderr goes (SWE-ReX's warnings and tracebacks).
    log: String,
}

impl Driver {
    /// Starts the driver with the cache's venv, and reads its greeting.
    async fn spawn(cache: &Path) -> Result<Self, String> {
        let log = cache.join("driver.log").display().to_string();
        let file = std::fs::File::create(&log).map_err(|e| format!("{log}: {e}"))?;
        let mut child = tokio::process::Command::new(cache.join("venv/bin/python"))
            .arg(cache.join("peer_driver.py"))
            .args([IMAGE, LABEL])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| e.to_string())?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let version = String::new();
        let mut d = Driver {
            child,
            stdin,
            lines,
            version,
            log,
        };
        let hello = d.reply(Duration::from_secs(60)).await;
        let hello = hello.map_err(|e| format!("{e} (log: {})", d.log))?;
        d.version = hello["version"].as_str().unwrap_or("1.4").to_string();
        Ok(d)
    }

    /// Sends one request and waits for its reply: the time it took, summed
    /// over the reply's `s`, `start_s` and `first_s`.
    async fn time(&mut self, request: Value) -> Result<Duration, String> {
        let line = format!("{request}\n");
        let sent = self.stdin.write_all(line.as_bytes()).await;
        sent.map_err(|e| format!("the driver is gone: {e}"))?;
        // A start waits for the container's server (SWE-ReX allows 120 s).
        let limit = if request["op"] == "start" { 180 } else { 60 };
        let reply = self.reply(Duration::from_secs(limit)).await?;
        let s = |key: &str| reply[key].as_f64().unwrap_or(0.0);
        Ok(Duration::from_secs_f64(
            s("s") + s("start_s") + s("first_s"),
        ))
    }

    /// The next reply, an error if it says so or does not come in time.
    async fn reply(&mut self, limit: Duration) -> Result<Value, String> {
        let line = match tokio::time::timeout(limit, self.lines.next_line()).await {
            Err(_) => return Err(format!("no reply within {limit:?}")),
            Ok(Err(e)) => return Err(e.to_string()),
            Ok(Ok(None)) => return Err("the driver exited".into()),
            Ok(Ok(Some(line))) => line,
        };
        let reply: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
        match reply["ok"].as_bool() {
            Some(true) => Ok(reply),
            _ => Err(reply["error"].as_str().unwrap_or(&line).to_string()),
        }
    }

    /// Asks the driver to stop what it started and exit; kills it if it
    /// has not within a minute.
    async fn finish(&mut self) {
        let _ = self.stdin.write_all(b"{\"op\": \"quit\"}\n").await;
        let exited = tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await;
        if !matches!(exited, Ok(Ok(_))) {
            let _ = self.child.kill().await;
        }
    }
}

/// Gets everything ready in `~/.cache/sandboxd-bench/swe-rex-1.4`, each
/// step skipped when an earlier run did it (remove the directory to fetch
/// a newer 1.4.x): SWE-ReX's wheels downloaded, a host venv with them, the
/// peer image, the driver. Returns that directory, or what failed.
fn setup() -> Result<PathBuf, String> {
    let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
    let cache = home.join(".cache/sandboxd-bench/swe-rex-1.4");
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    // Every command runs in the cache directory, and names paths in it.
    let run = |cmd: &str, what: &str| run(&cache, cmd, what);
    let wanted = REQUIREMENTS.join(" ");
    run("python3 --version", "python3 on the host")?;
    if !cache.join("wheels.complete").exists() {
        let _ = std::fs::remove_dir_all(cache.join("wheels"));
        let download = "python3 -m pip download --only-binary=:all: --timeout 10 --retries 1";
        let download = format!("{download} --dest wheels {wanted}");
        run(&download, "downloading SWE-ReX's wheels from PyPI")?;
        std::fs::write(cache.join("wheels.complete"), "").map_err(|e| e.to_string())?;
    }
    if run(
        "venv/bin/python -c __import__('swerex'),__import__('aiohttp')",
        "",
    )
    .is_err()
    {
        run("python3 -m venv --clear venv", "making the host venv")?;
        let install =
            format!("venv/bin/python -m pip install --no-index --find-links wheels {wanted}");
        run(&install, "installing SWE-ReX in the host venv")?;
    }
    build_image(&cache)?;
    std::fs::write(cache.join("peer_driver.py"), DRIVER).map_err(|e| e.to_string())?;
    Ok(cache)
}

/// Builds the peer image from the default image, SWE-ReX installed from the
/// wheels without PyPI (only Debian's mirror answers in a build: it gives
/// python3-venv where the image lacks it); skipped when the image's label
/// names this wheel set, recipe and base.
fn build_image(cache: &Path) -> Result<(), String> {
    let base = sandboxd::sandbox::image::default_image();
    let dockerfile = format!(
        "FROM {base}\n\
         RUN python3 -c 'import ensurepip' 2>/dev/null || (apt-get update \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
         python3-venv && rm -rf /var/lib/apt/lists/*)\n\
         COPY . /tmp/wheels\n\
         RUN python3 -m venv /opt/swerex \
         && /opt/swerex/bin/pip install --no-index --find-links /tmp/wheels '{}' \
         && ln -s /opt/swerex/bin/swerex-remote /usr/local/bin/swerex-remote \
         && rm -rf /tmp/wheels && swerex-remote --version\n",
        REQUIREMENTS[0]
    );
    let inspect = |image: &str, format: &str| {
        let cmd = format!("docker image inspect -f {format} {image}");
        run(cache, &cmd, "").map(|s| s.trim().to_string())
    };
    let base_id = inspect(&base, "{{.Id}}").map_err(|_| format!("no image {base}"))?;
    let mut names: Vec<String> = std::fs::read_dir(cache.join("wheels"))
        .map_err(|e| e.to_string())?
        .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    let key = format!("{}\n{dockerfile}\n{base_id}", names.join("\n"));
    let label = format!("{WHEELS_LABEL}={}", &hex::encode(Sha256::digest(key))[..16]);
    if inspect(IMAGE, "{{.Config.Labels}}").is_ok_and(|l| l.contains(&label.replace('=', ":"))) {
        return Ok(());
    }
    let old_id = inspect(IMAGE, "{{.Id}}").ok();
    eprintln!("peer: building {IMAGE} (once)...");
    std::fs::write(cache.join("Dockerfile"), dockerfile).map_err(|e| e.to_string())?;
    let build = format!("docker build -q -t {IMAGE} --label {label} -f Dockerfile wheels");
    run(cache, &build, "building the peer image")?;
    // The image it replaces, now untagged.
    if let Some(id) = old_id {
        let _ = run(cache, &format!("docker rmi {id}"), "");
    }
    Ok(())
}

/// Removes any container the driver left behind.
fn remove_leftovers() {
    let list = format!("docker ps -aq --filter label={LABEL}");
    if let Ok(ids) = run(Path::new("/"), &list, "")
        && !ids.trim().is_empty()
    {
        let _ = run(Path::new("/"), &format!("docker rm -f {ids}"), "");
    }
}

/// Runs `cmd` (words split at spaces, so no argument may hold one) in `dir`
/// to its end: its stdout, or `what` failed and why.
fn run(dir: &Path, cmd: &str, what: &str) -> Result<String, String> {
    let mut words = cmd.split_whitespace();
    let out = Command::new(words.next().unwrap_or_default())
        .args(words)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" / ");
    Err(format!("{what} failed ({}): {tail}", out.status))
}

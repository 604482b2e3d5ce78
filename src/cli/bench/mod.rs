//! `sandboxd bench`: measures sandboxd against Docker itself on this
//! machine and writes the table to BENCHMARKS.md. Every figure is paired
//! with a baseline measured in the same run, alternating sample by sample,
//! because these machines are noisy; only medians and percentiles and their
//! ratios are reported.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd::pb;
use sandboxd::sandbox::docker::DockerRuntime;
use sandboxd::session::defaults;

use super::AnyError;

mod environments;
mod workspaces;

type Client = sandboxd::local::Client;

/// Options of one run.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Samples per round-trip figure (session start and flood use fewer).
    #[arg(long, default_value_t = 100)]
    samples: usize,
    /// Bytes the output-flood figure writes.
    #[arg(long, default_value_t = 1 << 30)]
    flood_bytes: u64,
    /// Where to write the table (sections after it, `## ...`, are kept).
    #[arg(long, default_value = "BENCHMARKS.md")]
    out: PathBuf,
    /// Samples of the environment figures (a cold build is measured once).
    #[arg(long, default_value_t = 20)]
    environment_samples: usize,
    /// Samples of the workspace figures (upload, download, checkpoints).
    #[arg(long, default_value_t = 5)]
    workspace_samples: usize,
    /// Run only these groups (repeatable): round-trip, session-start,
    /// edits, flood, concurrency, environments, workspaces, durability
    /// (the cost of the state store and the metrics). Their rows
    /// replace the rows of the same figures in --out; the others stay.
    #[arg(long, value_parser = ["round-trip", "session-start", "edits", "flood", "concurrency", "environments", "workspaces", "durability"])]
    only: Vec<String>,
}

/// Pause before each round-trip sample (see `round_trip`).
const QUIET: Duration = Duration::from_millis(25);

/// Percentiles of a sample set.
#[derive(Debug, Clone, Copy)]
struct Stats {
    p50: Duration,
    p90: Duration,
    p99: Duration,
}

fn stats(samples: &[Duration]) -> Stats {
    let mut v = samples.to_vec();
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    Stats {
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// One row of the table.
struct Row {
    figure: String,
    ours: String,
    baseline: String,
    ratio: String,
    target: String,
}

fn verdict(met: bool, what: &str) -> String {
    format!("{} {what}", if met { "met:" } else { "MISSED:" })
}

/// Runs every figure and writes the report.
pub async fn run(args: BenchArgs) -> Result<ExitCode, AnyError> {
    // The warm pool `serve` keeps by default.
    let pool_size = defaults::POOL_SIZE;
    let projects = tempfile::tempdir()?;
    // Lent directories must lie under a directory closed to others.
    std::fs::set_permissions(
        projects.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )?;
    let project = projects.path().join("project");
    std::fs::create_dir(&project)?;
    std::os::unix::fs::chown(&project, Some(1000), Some(1000))?;
    // A lent directory must be private to its owner.
    std::fs::set_permissions(
        &project,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )?;
    let allowed = projects.path().to_path_buf();
    let local = sandboxd::local::Local::start("bench", pool_size, |c| {
        c.limits.max_file_bytes = 16 << 20;
        c.allowed_roots = vec![allowed];
        c.allow_builds = true;
        c.sandbox
            .environment_pools
            .insert(environments::NAME.to_string(), pool_size);
    })
    .await?;
    let (client, docker) = (local.client.clone(), Arc::clone(&local.docker));
    let image = sandboxd::sandbox::image::default_image();
    // Each figure starts from the steady state: the warm pool full, not
    // refilling (container starts would steal the CPU being measured).
    let registry = Arc::clone(&local.registry);
    let settle = || {
        let registry = Arc::clone(&registry);
        async move {
            let until = Instant::now() + Duration::from_secs(60);
            while registry.pool_ready() < pool_size && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };

    let mut rows = Vec::new();
    let wanted = |group: &str| args.only.is_empty() || args.only.iter().any(|g| g == group);
    let result = async {
        if wanted("round-trip") {
            settle().await;
            round_trip(&client, &docker, args.samples, &mut rows).await?;
        }
        if wanted("session-start") {
            settle().await;
            session_start(
                &client,
                &image,
                &project,
                (args.samples / 5).max(5),
                &mut rows,
            )
            .await?;
        }
        if wanted("edits") {
            settle().await;
            edits(&client, (args.samples / 2).max(10), &mut rows).await?;
        }
        if wanted("flood") {
            settle().await;
            flood(&client, args.flood_bytes, &mut rows, settle).await?;
        }
        if wanted("concurrency") {
            concurrency(&client, &mut rows, settle).await?;
        }
        if wanted("environments") {
            settle().await;
            environments::figures(
                &client,
                &registry,
                pool_size,
                args.environment_samples,
                &mut rows,
            )
            .await?;
        }
        if wanted("workspaces") {
            settle().await;
            workspaces::figures(&client, args.workspace_samples.max(1), &mut rows).await?;
        }
        if wanted("durability") {
            settle().await;
            durability(args.samples, &mut rows).await?;
        }
        Ok::<(), AnyError>(())
    }
    .await;
    local.stop().await?;
    result?;

    let mut report = render(&rows);
    println!("{report}");
    let old = std::fs::read_to_string(&args.out).unwrap_or_default();
    if !args.only.is_empty() && !old.is_empty() {
        report = merge(&old, &rows);
    } else if let Some(at) = old.find("\n## ") {
        // Hand-written sections after the table stay.
        report.push_str(&old[at..]);
    }
    std::fs::write(&args.out, &report)?;
    eprintln!("written to {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}

async fn new_session(client: &Client) -> Result<pb::Session, AnyError> {
    Ok(client
        .clone()
        .create_session(pb::CreateSessionRequest::default())
        .await?
        .into_inner())
}

/// Closes a session.
async fn close(client: &Client, session_id: String) -> Result<(), AnyError> {
    client
        .clone()
        .close_session(pb::CloseSessionRequest { session_id })
        .await?;
    Ok(())
}

/// Runs a command over gRPC to its exit event.
async fn run_cmd(client: &Client, sid: &str, command: &str) -> Result<pb::CommandExit, AnyError> {
    let mut events = client
        .clone()
        .run_command(pb::RunCommandRequest {
            session_id: sid.to_string(),
            command: command.to_string(),
            timeout_ms: 600_000,
            ..Default::default()
        })
        .await?
        .into_inner();
    while let Some(ev) = events.message().await? {
        if let Some(pb::run_command_event::Event::Exit(exit)) = ev.event {
            return Ok(exit);
        }
    }
    Err("no exit event".into())
}

fn docker_cli(args: &[&str]) -> Result<(), AnyError> {
    let status = Command::new("docker")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("docker {} failed: {status}", args.join(" ")).into())
    }
}

async fn round_trip(
    client: &Client,
    docker: &DockerRuntime,
    n: usize,
    rows: &mut Vec<Row>,
) -> Result<(), AnyError> {
    eprintln!("command round trip ({n} samples each)...");
    let session = new_session(client).await?;
    let container = session.container_id.clone();
    for _ in 0..5 {
        run_cmd(client, &session.session_id, "true").await?;
        docker.raw_exec(&container, &["true"]).await?;
    }
    let (mut ours, mut raw, mut cli) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        // Every sample, ours and the baselines' alike, starts on a quiet
        // machine: Docker finishes an exec's bookkeeping after it returns,
        // and that work would land on whichever sample comes next.
        tokio::time::sleep(QUIET).await;
        let t = Instant::now();
        run_cmd(client, &session.session_id, "true").await?;
        ours.push(t.elapsed());
        tokio::time::sleep(QUIET).await;
        let t = Instant::now();
        docker.raw_exec(&container, &["true"]).await?;
        raw.push(t.elapsed());
        tokio::time::sleep(QUIET).await;
        let t = Instant::now();
        let c = container.clone();
        tokio::task::spawn_blocking(move || docker_cli(&["exec", &c, "true"])).await??;
        cli.push(t.elapsed());
    }
    let (o, r, c) = (stats(&ours), stats(&raw), stats(&cli));
    let ratio = o.p50.as_secs_f64() / r.p50.as_secs_f64();
    rows.push(Row {
        figure: "RunCommand `true`, warm session (p50 / p90 / p99)".into(),
        ours: format!("{} / {} / {}", ms(o.p50), ms(o.p90), ms(o.p99)),
        baseline: format!(
            "raw Engine API exec {} / {} / {}",
            ms(r.p50),
            ms(r.p90),
            ms(r.p99)
        ),
        ratio: format!("{ratio:.3}x"),
        target: verdict(
            o.p50 <= Duration::from_millis(3) && ratio <= 0.06,
            "p50 <= 3 ms and <= 0.06x raw exec",
        ),
    });
    rows.push(Row {
        figure: "RunCommand `true` vs `docker exec` CLI".into(),
        ours: ms(o.p50),
        baseline: format!("docker exec {} / {} / {}", ms(c.p50), ms(c.p90), ms(c.p99)),
        ratio: format!("{:.3}x", o.p50.as_secs_f64() / c.p50.as_secs_f64()),
        target: String::new(),
    });
    close(client, session.session_id).await?;
    Ok(())
}

/// The cost of durable sessions (each recorded in the state directory, its
/// journal in a file) and of the metrics, A/B in the same run: two services
/// set up alike but for those, their samples alternating.
async fn durability(n: usize, rows: &mut Vec<Row>) -> Result<(), AnyError> {
    eprintln!("durable sessions and metrics vs neither ({n} samples each)...");
    let pool_size = defaults::POOL_SIZE;
    let plain = sandboxd::local::Local::start("bench-plain", pool_size, |_| {}).await?;
    let durable = match sandboxd::local::Local::start("bench-durable", pool_size, |c| {
        c.durable = true;
        c.metrics = Some(Arc::new(sandboxd::metrics::Metrics::new()));
    })
    .await
    {
        Ok(durable) => durable,
        Err(e) => {
            plain.stop().await?;
            return Err(e.into());
        }
    };
    let result = async {
        let services = [
            (&plain.client, &plain.registry),
            (&durable.client, &durable.registry),
        ];
        let settle = || async {
            let until = Instant::now() + Duration::from_secs(60);
            while services.iter().any(|(_, r)| r.pool_ready() < pool_size) && Instant::now() < until
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        settle().await;
        let sessions = [
            new_session(services[0].0).await?,
            new_session(services[1].0).await?,
        ];
        for (i, (client, _)) in services.iter().enumerate() {
            for _ in 0..5 {
                run_cmd(client, &sessions[i].session_id, "true").await?;
            }
        }
        let mut runs = [Vec::new(), Vec::new()];
        for k in 0..n {
            // Alternate which goes first, so neither always follows the other.
            for j in 0..2 {
                let i = (k + j) % 2;
                tokio::time::sleep(QUIET).await;
                let t = Instant::now();
                run_cmd(services[i].0, &sessions[i].session_id, "true").await?;
                runs[i].push(t.elapsed());
            }
        }
        let mut starts = [Vec::new(), Vec::new()];
        for k in 0..(n / 5).max(10) {
            settle().await;
            for j in 0..2 {
                let i = (k + j) % 2;
                tokio::time::sleep(QUIET).await;
                let t = Instant::now();
                let s = new_session(services[i].0).await?;
                starts[i].push(t.elapsed());
                close(services[i].0, s.session_id).await?;
            }
        }
        for (i, (client, _)) in services.iter().enumerate() {
            close(client, sessions[i].session_id.clone()).await?;
        }
        Ok::<_, AnyError>((runs, starts))
    }
    .await;
    durable.stop().await?;
    plain.stop().await?;
    let (runs, starts) = result?;
    for (figure, samples) in [
        (
            "RunCommand `true`, warm session, with durable sessions and metrics",
            &runs,
        ),
        (
            "CreateSession from the pool, with durable sessions and metrics",
            &starts,
        ),
    ] {
        let (base, on) = (stats(&samples[0]), stats(&samples[1]));
        let ratio = on.p50.as_secs_f64() / base.p50.as_secs_f64();
        rows.push(Row {
            figure: figure.into(),
            ours: format!("{} / {} / {}", ms(on.p50), ms(on.p90), ms(on.p99)),
            baseline: format!(
                "neither (same run) {} / {} / {}",
                ms(base.p50),
                ms(base.p90),
                ms(base.p99)
            ),
            ratio: format!("{ratio:.3}x"),
            target: verdict(ratio <= 1.05, "p50 within 5% of neither"),
        });
    }
    Ok(())
}

async fn session_start(
    client: &Client,
    image: &str,
    project: &std::path::Path,
    n: usize,
    rows: &mut Vec<Row>,
) -> Result<(), AnyError> {
    eprintln!("session start ({n} samples each)...");
    let (mut ours, mut cold, mut run) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let s = new_session(client).await?;
        run_cmd(client, &s.session_id, "true").await?;
        ours.push(t.elapsed());
        close(client, s.session_id).await?;
        // Over an existing directory: no warm container fits, so it starts cold.
        let t = Instant::now();
        let s = client
            .clone()
            .create_session(pb::CreateSessionRequest {
                workspace_path: project.display().to_string(),
                ..Default::default()
            })
            .await?
            .into_inner();
        run_cmd(client, &s.session_id, "true").await?;
        cold.push(t.elapsed());
        close(client, s.session_id).await?;
        let t = Instant::now();
        let image = image.to_string();
        tokio::task::spawn_blocking(move || {
            docker_cli(&["run", "--rm", "--network", "none", &image, "true"])
        })
        .await??;
        run.push(t.elapsed());
    }
    let (o, r) = (stats(&ours), stats(&run));
    rows.push(Row {
        figure: "CreateSession until a first command ran (fresh workspace)".into(),
        ours: format!("{} / {} / {}", ms(o.p50), ms(o.p90), ms(o.p99)),
        baseline: format!(
            "docker run --rm {} / {} / {}",
            ms(r.p50),
            ms(r.p90),
            ms(r.p99)
        ),
        ratio: format!("{:.3}x", o.p50.as_secs_f64() / r.p50.as_secs_f64()),
        target: verdict(o.p50 <= Duration::from_millis(50), "p50 <= 50 ms"),
    });
    let c = stats(&cold);
    rows.push(Row {
        figure: "CreateSession until a first command ran (existing directory, cold)".into(),
        ours: format!("{} / {} / {}", ms(c.p50), ms(c.p90), ms(c.p99)),
        baseline: format!("docker run --rm {}", ms(r.p50)),
        ratio: format!("{:.3}x", c.p50.as_secs_f64() / r.p50.as_secs_f64()),
        target: "may start cold".into(),
    });
    Ok(())
}

async fn edits(client: &Client, n: usize, rows: &mut Vec<Row>) -> Result<(), AnyError> {
    eprintln!("edits ({n} samples per size)...");
    let session = new_session(client).await?;
    let ws = PathBuf::from(&session.workspace_path);
    let mut per_mb = Vec::new();
    for (label, size) in [
        ("1 KB", 1usize << 10),
        ("100 KB", 100 << 10),
        ("1 MB", 1 << 20),
        ("10 MB", 10 << 20),
    ] {
        let line = "let value = compute(input, 42); // filler text for the benchmark\n";
        let mut text = String::with_capacity(size + 64);
        text.push_str("MARKER_A\n");
        while text.len() < size {
            text.push_str(line);
        }
        let name = format!("f{size}.txt");
        std::fs::write(ws.join(&name), &text)?;
        let (mut ours, mut floor) = (Vec::new(), Vec::new());
        for i in 0..n {
            let (old, new) = if i % 2 == 0 {
                ("MARKER_A", "MARKER_B")
            } else {
                ("MARKER_B", "MARKER_A")
            };
            let t = Instant::now();
            client
                .clone()
                .edit_file(pb::EditFileRequest {
                    session_id: session.session_id.clone(),
                    path: name.clone(),
                    edits: vec![pb::Edit {
                        old_string: old.into(),
                        new_string: new.into(),
                        replace_all: false,
                    }],
                    expected_sha256: String::new(),
                })
                .await?;
            ours.push(t.elapsed());
            // The floor of any atomic edit: read, write a copy, fsync, rename.
            let (src, tmp) = (ws.join(&name), ws.join(format!(".{name}.floor")));
            let t = Instant::now();
            tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                let bytes = std::fs::read(&src)?;
                let f = std::fs::File::create(&tmp)?;
                std::io::Write::write_all(&mut &f, &bytes)?;
                f.sync_all()?;
                std::fs::remove_file(&tmp)
            })
            .await??;
            floor.push(t.elapsed());
        }
        let (o, f) = (stats(&ours), stats(&floor));
        per_mb.push(o.p50.as_secs_f64() * 1000.0 / (size as f64 / (1 << 20) as f64));
        let target = if size == 1 << 20 {
            verdict(o.p50 <= Duration::from_millis(5), "p50 <= 5 ms")
        } else {
            String::new()
        };
        rows.push(Row {
            figure: format!("EditFile, one snippet, {label} file"),
            ours: format!("{} / {} / {}", ms(o.p50), ms(o.p90), ms(o.p99)),
            baseline: format!("read + write + fsync {}", ms(f.p50)),
            ratio: format!("{:.2}x", o.p50.as_secs_f64() / f.p50.as_secs_f64()),
            target,
        });
    }
    rows.push(Row {
        figure: "EditFile cost per MB (1 MB vs 10 MB file)".into(),
        ours: format!("{:.2} ms/MB vs {:.2} ms/MB", per_mb[2], per_mb[3]),
        baseline: String::new(),
        ratio: format!("{:.2}x", per_mb[3] / per_mb[2]),
        target: verdict(
            per_mb[3] <= per_mb[2] * 1.5,
            "linear in size (10 MB per-MB cost <= 1.5x 1 MB's)",
        ),
    });
    close(client, session.session_id).await?;
    Ok(())
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

async fn flood<F: std::future::Future<Output = ()>>(
    client: &Client,
    bytes: u64,
    rows: &mut Vec<Row>,
    settle: impl Fn() -> F,
) -> Result<(), AnyError> {
    eprintln!("output flood ({} MiB, 3 samples each)...", bytes >> 20);
    let session = new_session(client).await?;
    // The session came from the pool: let it refill before measuring.
    settle().await;
    let container = session.container_id.clone();
    let command = format!("head -c {bytes} /dev/zero");
    let before = peak_rss_kib();
    let (mut ours, mut cli) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        let exit = run_cmd(client, &session.session_id, &command).await?;
        ours.push(t.elapsed());
        let total = exit.stdout.map_or(0, |s| s.total_bytes);
        if total != bytes {
            return Err(format!("flood drained {total} of {bytes} bytes").into());
        }
        let (c, cmd) = (container.clone(), command.clone());
        let t = Instant::now();
        tokio::task::spawn_blocking(move || docker_cli(&["exec", &c, "sh", "-c", &cmd])).await??;
        cli.push(t.elapsed());
    }
    let growth = peak_rss_kib().saturating_sub(before) / 1024;
    let rate = |d: Duration| bytes as f64 / (1 << 20) as f64 / d.as_secs_f64();
    let (o, c) = (rate(stats(&ours).p50), rate(stats(&cli).p50));
    rows.push(Row {
        figure: format!("Output flood, {} MiB to stdout: drain rate", bytes >> 20),
        ours: format!("{o:.0} MB/s"),
        baseline: format!("docker exec > /dev/null {c:.0} MB/s"),
        ratio: format!("{:.2}x", o / c),
        target: verdict(o >= 0.8 * c, ">= 0.8x docker exec"),
    });
    rows.push(Row {
        figure: "Output flood: service peak RSS growth".into(),
        ours: format!("{growth} MiB"),
        baseline: String::new(),
        ratio: String::new(),
        target: verdict(growth <= 16, "<= 16 MiB"),
    });
    close(client, session.session_id).await?;
    Ok(())
}

async fn concurrency<F: std::future::Future<Output = ()>>(
    client: &Client,
    rows: &mut Vec<Row>,
    settle: impl Fn() -> F,
) -> Result<(), AnyError> {
    const SESSIONS: usize = 16;
    const COMMANDS: usize = 50;
    eprintln!("concurrency ({SESSIONS} sessions x {COMMANDS} commands)...");
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(new_session(client).await?.session_id);
    }
    settle().await;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for sid in &sessions {
        let (client, sid) = (client.clone(), sid.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0usize;
            for _ in 0..COMMANDS {
                let t = Instant::now();
                match run_cmd(&client, &sid, "true").await {
                    Ok(exit) if exit.exit_code == 0 => lat.push(t.elapsed()),
                    _ => errors += 1,
                }
            }
            (lat, errors)
        }));
    }
    let (mut all, mut errors) = (Vec::new(), 0);
    for task in tasks {
        let (lat, e) = task.await?;
        all.extend(lat);
        errors += e;
    }
    let wall = t.elapsed();
    for sid in sessions {
        close(client, sid).await?;
    }
    let s = stats(&all);
    rows.push(Row {
        figure: format!("{SESSIONS} sessions x {COMMANDS} `true` at once"),
        ours: format!(
            "{:.0} commands/s, p50 {} p99 {}, {errors} errors",
            (SESSIONS * COMMANDS) as f64 / wall.as_secs_f64(),
            ms(s.p50),
            ms(s.p99)
        ),
        baseline: String::new(),
        ratio: format!("p99/p50 {:.1}", s.p99.as_secs_f64() / s.p50.as_secs_f64()),
        target: verdict(
            errors == 0 && s.p99 <= s.p50 * 10,
            "0 errors, p99 <= 10x p50",
        ),
    });
    Ok(())
}

fn machine() -> String {
    let cmd = |prog: &str, args: &[&str]| {
        Command::new(prog)
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name\t: ").map(str::to_string))
        })
        .unwrap_or_default();
    format!(
        "{} cores ({cpu}), kernel {}, Docker Engine {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cmd("uname", &["-r"]),
        cmd(
            "docker",
            &[
                "version",
                "--format",
                "{{.Server.Version}} (API {{.Server.APIVersion}})"
            ]
        ),
    )
}

/// `old` with the table rows of `rows`' figures replaced (or added at the
/// table's end), everything else as it was.
fn merge(old: &str, rows: &[Row]) -> String {
    let line = |r: &Row| {
        format!(
            "| {} | {} | {} | {} | {} |",
            r.figure, r.ours, r.baseline, r.ratio, r.target
        )
    };
    let mut lines: Vec<String> = old.lines().map(str::to_string).collect();
    // The first table is the figures'.
    let start = lines.iter().position(|l| l.starts_with("| figure |"));
    let end = start.map(|s| s + lines[s..].iter().take_while(|l| l.starts_with('|')).count());
    let (Some(start), Some(mut end)) = (start, end) else {
        return render(rows);
    };
    for r in rows {
        let head = format!("| {} |", r.figure);
        match lines[start..end].iter().position(|l| l.starts_with(&head)) {
            Some(i) => lines[start + i] = line(r),
            None => {
                lines.insert(end, line(r));
                end += 1;
            }
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let _ = writeln!(out, "# sandboxd benchmarks\n");
    let _ = writeln!(out, "Measured {date} on {}.", machine());
    let _ = writeln!(
        out,
        "Reproduce with `cargo run --release -- bench`. Baselines run in the same process, alternating \
         sample by sample with sandboxd's (round-trip samples each start after the same 25 ms pause, so \
         Docker's leftover bookkeeping from one sample does not land on the next); each figure starts with \
         the warm pool full; figures are p50 / p90 / p99 unless stated.\n"
    );
    let _ = writeln!(
        out,
        "| figure | sandboxd | baseline (same run) | ratio | target |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            r.figure, r.ours, r.baseline, r.ratio, r.target
        );
    }
    out
}

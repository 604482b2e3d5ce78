//! `sandboxd bench`: measures sandboxd against Docker itself on this
//! machine and writes the table to BENCHMARKS.md. Every figure is paired
//! with a baseline measured in the same run, alternating sample by sample,
//! because these machines are noisy; only medians and percentiles and their
//! ratios are reported.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd::session::defaults;

use super::AnyError;

mod attacks;
mod calls;
mod concurrency;
mod durability;
mod edits;
mod environments;
mod flood;
mod gvisor;
mod page;
mod peer;
mod processes;
mod report;
mod round_trip;
mod scale;
mod session_start;
mod web_view;
mod workload;
mod workspace_calls;
mod workspaces;

use calls::{close, docker_cli, new_session, run_cmd};

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
    /// Samples of the web view figure, each side (RunCommand with no page
    /// watching, and with one).
    #[arg(long, default_value_t = 2000)]
    web_samples: usize,
    /// Run only these groups (repeatable): round-trip, session-start,
    /// edits, flood, concurrency, environments, workspaces, durability
    /// (the cost of the state store and the metrics), web-view (the cost
    /// of a page watching a session live), processes (long-running
    /// processes: start until ready, output throughput), and, only when
    /// named: scale (256 sessions open: memory per session, CreateSession
    /// and RunCommand as sessions accumulate; a few minutes), peer
    /// (SWE-ReX 1.4, the runtime behind SWE-agent, alternated with
    /// sandboxd; skipped with a notice where it cannot be set up) and
    /// workload (the more-itertools test suite in a session and on the
    /// host) and gvisor (RunCommand under runsc against the spawn floor in
    /// a runsc container; installs and registers runsc like `serve
    /// --container-runtime runsc`) and attacks (what tokenless Watch
    /// streams, unread replies and waiting uploads make a service of its
    /// own hold: its memory before, at peak, after). Their rows replace the rows of the same figures in --out;
    /// the others stay.
    #[arg(long, value_parser = ["round-trip", "session-start", "edits", "flood", "concurrency", "environments", "workspaces", "durability", "web-view", "processes", "scale", "peer", "workload", "gvisor", "attacks"])]
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

/// A generated section after the table, replaced whole on each run.
struct Section {
    heading: String,
    body: String,
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
        // The scale figures open 256 sessions and start more beside them.
        c.max_sessions = 300;
        c.allowed_roots = vec![allowed];
        c.allow_builds = true;
        c.sandbox.lent_pool_size = defaults::LENT_POOL_SIZE;
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
            while (registry.pool_ready() < pool_size
                || registry.lent_pool_ready() < registry.lent_pool_size())
                && Instant::now() < until
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };

    let mut rows = Vec::new();
    let mut sections = Vec::new();
    let named = |group: &str| args.only.iter().any(|g| g == group);
    let wanted = |group: &str| args.only.is_empty() || named(group);
    let result = async {
        if wanted("round-trip") {
            settle().await;
            round_trip::round_trip(&client, &docker, args.samples, &mut rows, &mut sections)
                .await?;
        }
        if wanted("session-start") {
            settle().await;
            session_start::session_start(
                &client,
                &image,
                &project,
                (args.samples / 5).max(5),
                &mut rows,
                &mut sections,
                settle,
            )
            .await?;
        }
        if wanted("edits") {
            settle().await;
            edits::edits(&client, (args.samples / 2).max(10), &mut rows).await?;
        }
        if wanted("flood") {
            settle().await;
            flood::flood(&client, args.flood_bytes, &mut rows, settle).await?;
        }
        if wanted("concurrency") {
            concurrency::concurrency(&client, &mut rows, settle).await?;
        }
        if named("scale") {
            scale::scale(&client, &mut rows, settle).await?;
        }
        if named("peer") {
            settle().await;
            peer::figures(&client, &project, args.samples, &mut rows).await?;
        }
        if named("gvisor") {
            gvisor::figure(&docker, args.samples, &mut rows, &mut sections).await?;
        }
        if named("attacks") {
            attacks::figures(&mut rows).await?;
        }
        if named("workload") {
            settle().await;
            workload::figure(&client, &mut rows).await?;
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
            durability::durability(args.samples, &mut rows).await?;
        }
        if wanted("processes") {
            settle().await;
            processes::figures(&client, (args.samples / 2).max(10), &mut rows).await?;
        }
        if wanted("web-view") {
            settle().await;
            web_view::figure(&client, &registry, args.web_samples.max(10), &mut rows).await?;
        }
        Ok::<(), AnyError>(())
    }
    .await;
    local.stop().await?;
    result?;

    let mut report = report::render(&rows);
    println!("{report}");
    let old = std::fs::read_to_string(&args.out).unwrap_or_default();
    if !args.only.is_empty() && !old.is_empty() {
        report = report::merge(&old, &rows);
    } else if let Some(at) = old.find("\n## ") {
        // Hand-written sections after the table stay.
        report.push_str(&old[at..]);
    }
    for s in &sections {
        report = report::put_section(&report, s);
    }
    std::fs::write(&args.out, &report)?;
    eprintln!("written to {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}

//! A real workload, for reference (`--only workload`): the test suite of
//! more-itertools (its sdist from PyPI, plain unittest) run in a session
//! and, alternately, on the host with an interpreter of the same version.
//! Skipped with a notice where the sdist or such an interpreter cannot be
//! had.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{AnyError, Client, Row, close, new_session, run_cmd};

/// The release measured: its suite has 929 tests.
const VERSION: &str = "11.2.1";
/// Runs of the suite on each side.
const RUNS: usize = 3;

/// The workload row, unless it cannot be set up here.
pub(super) async fn figure(client: &Client, rows: &mut Vec<Row>) -> Result<(), AnyError> {
    eprintln!("workload: the more-itertools {VERSION} test suite...");
    let sdist = match tokio::task::spawn_blocking(sdist).await? {
        Ok(path) => path,
        Err(why) => {
            eprintln!("workload skipped: {why}");
            return Ok(());
        }
    };
    let session = new_session(client).await?;
    let sid = session.session_id.clone();
    let result = measure(client, &sid, &sdist, rows).await;
    close(client, sid).await?;
    if let Err(why) = result {
        eprintln!("workload skipped: {why}");
    }
    Ok(())
}

async fn measure(
    client: &Client,
    sid: &str,
    sdist: &Path,
    rows: &mut Vec<Row>,
) -> Result<(), AnyError> {
    let probe = "python3 -c 'import sys; print(sys.version.split()[0])'";
    let exit = run_cmd(client, sid, probe).await?;
    let version = exit.stdout.map(|s| s.text).unwrap_or_default();
    let version = version.trim().to_string();
    let python = host_python(&version).ok_or_else(|| {
        format!("no interpreter on the host is Python {version}, the session's version")
    })?;
    // The sdist, gzip'd tar, lands in the workspace as it would on a disk.
    super::workspace_calls::upload(client, sid, &std::fs::read(sdist)?).await?;
    let src = format!("more_itertools-{VERSION}");
    let host_dir = tempfile::tempdir()?;
    untar(sdist, host_dir.path())?;
    let host_src = host_dir.path().join(&src);
    let (mut ours, mut host) = (Vec::new(), Vec::new());
    let mut tests = String::new();
    for _ in 0..RUNS {
        let (python, dir) = (python.clone(), host_src.clone());
        let (took, ran) = tokio::task::spawn_blocking(move || host_suite(&python, &dir)).await??;
        host.push(took);
        let t = Instant::now();
        let exit = run_cmd(client, sid, &format!("cd {src} && python3 -m unittest")).await?;
        ours.push(t.elapsed());
        let err = exit.stderr.unwrap_or_default();
        let said = tests_ran(&format!("{}{}", err.text, err.tail));
        if exit.exit_code != 0 || said != ran {
            return Err(format!(
                "the suite failed in the session (exit {}, {said:?} where the host ran {ran:?})",
                exit.exit_code
            )
            .into());
        }
        tests = ran;
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (o, h) = (median(&mut ours), median(&mut host));
    rows.push(Row {
        figure: format!(
            "more-itertools {VERSION} test suite ({tests} tests, unittest), median of {RUNS}"
        ),
        ours: format!("{:.2} s in a session", o.as_secs_f64()),
        baseline: format!(
            "on the host, Python {version} ({}) {:.2} s",
            python.display(),
            h.as_secs_f64()
        ),
        ratio: format!("{:.2}x", o.as_secs_f64() / h.as_secs_f64()),
        target: "for reference".into(),
    });
    Ok(())
}

/// The sdist, downloaded once into the bench's cache.
fn sdist() -> Result<PathBuf, String> {
    let home = std::env::var_os("HOME").ok_or("HOME is not set")?;
    let cache = Path::new(&home).join(".cache/sandboxd-bench/workload");
    let file = cache.join(format!("more_itertools-{VERSION}.tar.gz"));
    if file.is_file() {
        return Ok(file);
    }
    std::fs::create_dir_all(&cache).map_err(|e| e.to_string())?;
    let out = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--no-binary", ":all:"])
        .arg(format!("more-itertools=={VERSION}"))
        .arg("--dest")
        .arg(&cache)
        .output()
        .map_err(|e| format!("cannot run pip: {e}"))?;
    if !out.status.success() || !file.is_file() {
        return Err(format!(
            "pip could not download the more-itertools {VERSION} sdist: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(file)
}

/// A host interpreter of exactly `version`.
fn host_python(version: &str) -> Option<PathBuf> {
    let minor: String = version.split('.').take(2).collect::<Vec<_>>().join(".");
    ["/usr/bin/python3", "python3", &format!("python{minor}")]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .args(["-c", "import sys; print(sys.version.split()[0])"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == version)
        })
        .map(PathBuf::from)
}

fn untar(archive: &Path, into: &Path) -> Result<(), AnyError> {
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(archive)
        .arg("-C")
        .arg(into)
        .status()?;
    if !status.success() {
        return Err(format!("tar -xzf {} failed", archive.display()).into());
    }
    Ok(())
}

/// Runs the suite in `dir` on the host: its wall time, and how many tests
/// it ran.
fn host_suite(python: &Path, dir: &Path) -> Result<(Duration, String), AnyError> {
    let t = Instant::now();
    let out = Command::new(python)
        .args(["-m", "unittest"])
        .current_dir(dir)
        .output()?;
    let took = t.elapsed();
    let ran = tests_ran(&String::from_utf8_lossy(&out.stderr));
    if !out.status.success() || ran.is_empty() {
        return Err(format!("the suite failed on the host ({})", out.status).into());
    }
    Ok((took, ran))
}

/// The count in unittest's "Ran N tests" line.
fn tests_ran(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("Ran ")?.split(' ').next())
        .unwrap_or_default()
        .to_string()
}

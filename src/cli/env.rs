//! `sandboxd env`: build, list and delete environments. A build sends the
//! Dockerfile and its context directory (as a tar archive, honouring
//! `.dockerignore`) or a setup script, then shows the steps as they run:
//! live on a terminal (the current step and how long it has taken, with
//! the output scrolling above), plain lines otherwise.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Subcommand;
use globset::{Glob, GlobSet, GlobSetBuilder};
use sandboxd::pb;

use super::AnyError;
use super::connect::Client;
use super::print::{Stdio, prefix};

/// The verbs of `sandboxd env`.
#[derive(Debug, Subcommand)]
pub enum EnvCommand {
    /// Build an environment from a Dockerfile and its context directory
    /// (`-f Dockerfile [DIR]`), or from a setup script run on a base image
    /// (`--setup setup.sh`). Its network is on during the build only.
    Build {
        /// The environment's name (e.g. py-3.12).
        name: String,
        /// The Dockerfile (FROM a local image, e.g. sandboxd-default:latest).
        #[arg(short = 'f', long = "file", conflicts_with_all = ["setup", "base"])]
        dockerfile: Option<PathBuf>,
        /// The build context: files the Dockerfile COPYs (default: none).
        #[arg(requires = "dockerfile")]
        context: Option<PathBuf>,
        /// A shell script run (with `sh -e`, as root, with network) on the
        /// base image.
        #[arg(long, required_unless_present = "dockerfile")]
        setup: Option<PathBuf>,
        /// Base image of the setup script (default: the default image).
        #[arg(long, requires = "setup")]
        base: Option<String>,
        /// Time limit of the build in seconds (0: server default).
        #[arg(long, default_value_t = 0)]
        timeout: u64,
        /// Bytes of build output shown (0: server default).
        #[arg(long, default_value_t = 0)]
        output_cap: u64,
    },
    /// List environments.
    Ls,
    /// Delete an environment (refused while a session runs it).
    Rm {
        /// The environment's name.
        name: String,
    },
}

/// Makes the call of `cmd` and prints its result.
pub async fn call(c: &mut Client, cmd: EnvCommand, con: &mut Stdio) -> Result<(), tonic::Status> {
    match cmd {
        EnvCommand::Build {
            name,
            dockerfile,
            context,
            setup,
            base,
            timeout,
            output_cap,
        } => {
            let mut req = pb::BuildEnvironmentRequest {
                name,
                timeout_seconds: timeout,
                output_cap,
                base: base.unwrap_or_default(),
                ..Default::default()
            };
            let read = |path: &Path| {
                std::fs::read_to_string(path).map_err(|e| {
                    tonic::Status::invalid_argument(format!("cannot read {}: {e}", path.display()))
                })
            };
            match (dockerfile, setup) {
                (Some(file), _) => {
                    req.dockerfile = read(&file)?;
                    if let Some(dir) = context {
                        req.context = pack(&dir).map_err(|e| {
                            tonic::Status::invalid_argument(format!(
                                "cannot pack {}: {e}",
                                dir.display()
                            ))
                        })?;
                    }
                }
                (None, Some(script)) => req.setup_script = read(&script)?,
                (None, None) => {
                    return Err(tonic::Status::invalid_argument(
                        "give -f Dockerfile [DIR] or --setup SCRIPT",
                    ));
                }
            }
            build(c, req, con).await
        }
        EnvCommand::Ls => {
            let envs = c
                .list_environments(pb::ListEnvironmentsRequest {})
                .await?
                .into_inner();
            if envs.environments.is_empty() {
                con.out(format_args!("no environments\n"));
            }
            for e in &envs.environments {
                con.out(format_args!(
                    "{:<24} key {}  {:>6} MB  {} session(s)\n",
                    e.name,
                    prefix(&e.key, 12),
                    e.size_bytes / 1_000_000,
                    e.sessions.len()
                ));
            }
            Ok(())
        }
        EnvCommand::Rm { name } => {
            let r = c
                .delete_environment(pb::DeleteEnvironmentRequest { name })
                .await?
                .into_inner();
            con.out(format_args!("{}\n", r.message));
            Ok(())
        }
    }
}

/// Streams a build: steps and output as they come, then the result.
async fn build(
    c: &mut Client,
    req: pb::BuildEnvironmentRequest,
    con: &mut Stdio,
) -> Result<(), tonic::Status> {
    use pb::build_environment_event::Event;
    let name = req.name.clone();
    let started = Instant::now();
    let mut events = c.build_environment(req).await?.into_inner();
    let mut step = String::from("starting");
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        let event = tokio::select! {
            e = events.message() => e?,
            _ = tick.tick() => {
                live(con, &name, &step, started);
                continue;
            }
        };
        let Some(event) = event else {
            return Err(tonic::Status::unavailable(
                "the build's stream ended without a result",
            ));
        };
        match event.event {
            Some(Event::Joined(_)) => {
                con.out(format_args!(
                    "(the same build is already running: following it)\n"
                ));
            }
            Some(Event::Step(s)) => {
                step = format!("step {}/{}: {}", s.number, s.total, s.instruction);
                con.out(format_args!("{step}\n"));
            }
            Some(Event::Output(o)) => con.out(format_args!("{}", o.text)),
            Some(Event::Done(d)) => {
                let env = d.environment.unwrap_or_default();
                let how = if d.cached {
                    "cached, unchanged recipe"
                } else {
                    "built"
                };
                con.out(format_args!(
                    "environment {} {how} in {:.1} s: key {}, image {}\n",
                    env.name,
                    d.duration_ms as f64 / 1000.0,
                    prefix(&env.key, 12),
                    prefix(env.image_id.trim_start_matches("sha256:"), 12)
                ));
                if d.output_truncated {
                    con.status(format_args!(
                        "[build output truncated: {} bytes printed; raise --output-cap to see more]",
                        d.output_bytes
                    ));
                }
                con.out(format_args!(
                    "use it: sandboxd session create --environment {}\n",
                    env.name
                ));
                return Ok(());
            }
            None => {}
        }
        live(con, &name, &step, started);
    }
}

fn live(con: &mut Stdio, name: &str, step: &str, started: Instant) {
    con.live(
        format_args!(
            "building {name} · {step} · {}s",
            started.elapsed().as_secs()
        ),
        100,
    );
}

/// A tar archive of `dir` for a build context: symbolic links stored as
/// links (never followed), paths listed in its `.dockerignore` left out.
pub fn pack(dir: &Path) -> Result<Vec<u8>, AnyError> {
    let ignore = dockerignore(dir)?;
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(dir.join(&rel))?
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .map(|e| e.file_name())
            .collect();
        names.sort();
        for name in names {
            let path = rel.join(&name);
            if ignore.is_ignored(&path) {
                continue;
            }
            let full = dir.join(&path);
            let meta = std::fs::symlink_metadata(&full)?;
            if meta.is_dir() {
                builder.append_dir(&path, &full)?;
                stack.push(path);
            } else if meta.is_file() || meta.file_type().is_symlink() {
                builder.append_path_with_name(&full, &path)?;
            }
        }
    }
    Ok(builder.into_inner()?)
}

/// `.dockerignore` patterns: globs on the context-relative path (a match
/// on a directory leaves out what it holds), `!` patterns taking a path
/// back, the last match winning.
struct Ignore {
    rules: Vec<(GlobSet, bool)>,
}

impl Ignore {
    fn is_ignored(&self, path: &Path) -> bool {
        let mut ignored = false;
        for (set, negated) in &self.rules {
            let hit = path
                .ancestors()
                .any(|p| !p.as_os_str().is_empty() && set.is_match(p));
            if hit {
                ignored = !negated;
            }
        }
        ignored
    }
}

fn dockerignore(dir: &Path) -> Result<Ignore, AnyError> {
    let text = match std::fs::read_to_string(dir.join(".dockerignore")) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e.into()),
    };
    let mut rules = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (negated, pattern) = match line.strip_prefix('!') {
            Some(p) => (true, p.trim()),
            None => (false, line),
        };
        let pattern = pattern.trim_start_matches("./").trim_start_matches('/');
        let pattern = pattern.trim_end_matches('/');
        let set = GlobSetBuilder::new().add(Glob::new(pattern)?).build()?;
        rules.push((set, negated));
    }
    Ok(Ignore { rules })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_leaves_out_what_dockerignore_lists_and_keeps_links() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("src/deep")).unwrap();
        std::fs::create_dir_all(d.join("build")).unwrap();
        std::fs::write(d.join("src/deep/a.py"), "a").unwrap();
        std::fs::write(d.join("build/out.o"), "o").unwrap();
        std::fs::write(d.join("keep.log"), "k").unwrap();
        std::fs::write(d.join("drop.log"), "d").unwrap();
        std::fs::write(d.join(".dockerignore"), "build\n*.log\n!keep.log\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("link")).unwrap();
        let tar = pack(d).unwrap();
        let mut archive = tar::Archive::new(&tar[..]);
        let mut names: Vec<(String, bool)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.path().unwrap().display().to_string(),
                    e.header().entry_type().is_symlink(),
                )
            })
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![
                (".dockerignore".to_string(), false),
                ("keep.log".to_string(), false),
                ("link".to_string(), true),
                ("src".to_string(), false),
                ("src/deep".to_string(), false),
                ("src/deep/a.py".to_string(), false),
            ]
        );
    }
}

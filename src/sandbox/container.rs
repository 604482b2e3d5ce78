//! One session's container: [`Sandbox`] starts it on demand (after
//! checking that its workspace is still the session's, and, where the
//! engine binds that workspace by a path, having the supervisor check it
//! again from inside), links its supervisor, starts each command through
//! it or as a plain exec, and replaces or removes the container.

use std::sync::Arc;

use super::supervisor::host::{Link, Supervised};
use super::{
    CommandSpec, ContainerSpec, Error, Event, ExitReport, KilledBy, LimitHints, Runtime,
    WorkspaceMount, exec_fallback, supervisor,
};

/// The container of one session: started on demand, replaced after a hard
/// kill, removed with the session. Its owner is the session.
#[derive(Debug)]
pub struct Sandbox {
    runtime: Arc<dyn Runtime>,
    spec: ContainerSpec,
    container: tokio::sync::Mutex<Option<String>>,
    /// The supervisor link and the container it runs in.
    link: tokio::sync::Mutex<Option<(String, LinkState)>>,
}

/// The supervisor of one container.
#[derive(Debug, Clone)]
enum LinkState {
    Up(Arc<Link>),
    /// It could not be started in this container: its commands run as
    /// plain execs.
    Unavailable,
}

/// A workspace mounted on the host for one container start (see
/// [`WorkspaceMount`]): unmounted when dropped.
#[derive(Debug)]
struct Mounted(Arc<dyn WorkspaceMount>);

impl Mounted {
    async fn new(mount: Arc<dyn WorkspaceMount>) -> Result<Mounted, Error> {
        let m = Arc::clone(&mount);
        match tokio::task::spawn_blocking(move || m.mount()).await {
            Ok(Ok(())) => Ok(Mounted(mount)),
            Ok(Err(e)) => Err(Error::WorkspaceGone(format!(
                "the workspace cannot be mounted for its container: {e}"
            ))),
            Err(e) => Err(Error::WorkspaceGone(format!(
                "mounting the workspace for its container failed: {e}"
            ))),
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.0.unmount();
    }
}

/// How a started command reaches its container.
#[derive(Debug)]
enum Via {
    /// Through the container's supervisor.
    Supervised(Supervised),
    /// As its own Docker exec (the fallback path).
    Exec(exec_fallback::Running),
}

/// A started command, ready to be driven to its end.
#[derive(Debug)]
pub struct Started {
    via: Via,
    /// What the caller must know about how it ran (e.g. the sandbox was
    /// replaced first); reported on its exit.
    notes: Vec<String>,
    /// Said on the exit if a limit stopped or cut the command.
    hints: LimitHints,
}

/// Said on the exit of a command during which the process limit refused a
/// fork.
pub const NOTE_PIDS: &str = "the sandbox's process limit was reached while this command ran, so some forks failed (\"Cannot fork\", \"Resource temporarily unavailable\"); if processes left running by earlier commands hold the limit, call ResetSandbox";

/// Said on the exit of a command that found its container's supervisor
/// link dead and got a fresh container instead.
pub const NOTE_REPLACED: &str = "the sandbox was replaced before this command ran: the link to its supervisor had been lost, so the old container was killed (processes left by earlier commands are gone; the workspace is intact)";

impl Started {
    /// The container the command runs in.
    pub fn container(&self) -> &str {
        match &self.via {
            Via::Supervised(s) => &s.container,
            Via::Exec(r) => r.container(),
        }
    }

    fn runtime(&self) -> Arc<dyn Runtime> {
        match &self.via {
            Via::Supervised(s) => Arc::clone(&s.rt),
            Via::Exec(r) => r.runtime(),
        }
    }

    /// Drives the command to its end (see the two paths' `drive`) and sends
    /// the final `Exit` while the receiver listens.
    pub async fn drive(self, events: tokio::sync::mpsc::Sender<Event>) -> ExitReport {
        let rt = self.runtime();
        let container = self.container().to_string();
        let oom_before = rt.oom_kills(&container).await;
        let pids_before = rt.pids_refusals(&container).await;
        crate::profile::mark("host: cgroup counters read before");
        let (mut report, client_gone) = match self.via {
            Via::Supervised(s) => s.drive(&events).await,
            Via::Exec(r) => r.drive(&events).await,
        };
        report.oom_killed = match (oom_before, rt.oom_kills(&container).await) {
            (Some(before), Some(after)) => after > before,
            // The cgroup went with the container.
            _ if report.killed_by == KilledBy::Container => rt.died_of_oom(&container).await,
            _ if report.killed_by == KilledBy::ContainerFailed => false,
            _ => false,
        };
        report.pids_exhausted = matches!(
            (pids_before, rt.pids_refusals(&container).await),
            (Some(before), Some(after)) if after > before
        );
        crate::profile::mark("host: cgroup counters read after");
        let mut notes = self.notes;
        notes.append(&mut report.notes);
        if report.pids_exhausted {
            notes.push(NOTE_PIDS.to_string());
        }
        let hints = self.hints;
        if report.timed_out && !hints.timed_out.is_empty() {
            notes.push(hints.timed_out);
        }
        if (report.stdout.truncated || report.stderr.truncated) && !hints.truncated.is_empty() {
            notes.push(hints.truncated);
        }
        report.notes = notes;
        if !client_gone {
            let _ = events.send(Event::Exit(report.clone())).await;
        }
        report
    }
}

impl Sandbox {
    /// A sandbox that will start containers from `spec`.
    pub fn new(runtime: Arc<dyn Runtime>, spec: ContainerSpec) -> Sandbox {
        Sandbox {
            runtime,
            spec,
            container: tokio::sync::Mutex::new(None),
            link: tokio::sync::Mutex::new(None),
        }
    }

    /// Lends this warm sandbox's container (its workspace a slot, see
    /// `volume::slot`) the directory of `identity` (device and inode),
    /// whose pin now lies on that slot: its supervisor checks that the
    /// container sees that very directory and runs commands as `user` from
    /// now on, and any later container over the pin starts so too.
    pub async fn lend(
        &mut self,
        identity: (u64, u64),
        user: String,
        mount: Arc<dyn WorkspaceMount>,
    ) -> Result<(), Error> {
        let container = self.container.get_mut().clone();
        let link = match (container, self.link.get_mut()) {
            (Some(container), Some((c, LinkState::Up(link)))) if *c == container => {
                Arc::clone(link)
            }
            _ => {
                return Err(Error::StartExec(
                    "the warm container has no supervisor to lend a directory to".into(),
                ));
            }
        };
        link.lend(identity, &user).await?;
        // A container started later over the pin (after a hard kill) is
        // started as a cold one would be: private, no slot, the pin
        // mounted only for its start.
        self.spec.user = user;
        self.spec.workspace_identity = Some(identity);
        self.spec.workspace_slot = false;
        self.spec.workspace_mount = Some(mount);
        Ok(())
    }

    /// Runs a warm-up command through the container's supervisor, if it
    /// has one up (see [`Link::warm_up`]): for a container that has been
    /// idle since it was started ahead of need.
    pub async fn warm_up(&self) {
        let link = match self.link.lock().await.as_ref() {
            Some((_, LinkState::Up(link))) => Arc::clone(link),
            _ => return,
        };
        link.warm_up().await;
        crate::profile::mark("host: warm container's spawn warmed again");
    }

    /// The container spec.
    pub fn spec(&self) -> &ContainerSpec {
        &self.spec
    }

    /// The running container's id, if one is up. Never waits: while a
    /// container is being started or replaced (which may wait on the
    /// engine), there is none up yet.
    pub async fn container_id(&self) -> Option<String> {
        self.container.try_lock().ok().and_then(|slot| slot.clone())
    }

    /// The container, started if there is none.
    pub async fn ensure(&self) -> Result<String, Error> {
        let mut slot = self.container.lock().await;
        if let Some(id) = slot.as_ref() {
            return Ok(id.clone());
        }
        self.runtime.ensure_image(&self.spec.image).await?;
        if let Some(dir) = &self.spec.socket_dir {
            supervisor::host::make_socket_dir(dir)?;
        }
        // A workspace mounted only for the start is taken away again
        // however the start ends (the guard's drop), a cancelled one too.
        let mounted = match &self.spec.workspace_mount {
            Some(mount) => Some(Mounted::new(Arc::clone(mount)).await?),
            None => None,
        };
        self.verify_workspace()?;
        crate::profile::mark("host: workspace verified");
        let id = self.runtime.start_container(&self.spec).await?;
        drop(mounted);
        *slot = Some(id.clone());
        drop(slot);
        // Start the supervisor now, so the first command does not wait for
        // it, and have it run one command: the first spawn of a shell in a
        // new container looks up the shell, its loader and its libraries
        // through the container's filesystem (several milliseconds on an
        // overlay served from user space), and that is not a caller's time.
        let linked = match self.spec.supervisor {
            Some(_) => self.link(&id).await.map(Some),
            None => Ok(None),
        };
        crate::profile::mark("host: supervisor linked");
        if let Ok(Some(link)) = &linked {
            link.warm_up().await;
            crate::profile::mark("host: first spawn warmed");
        }
        if let Err(e) = linked {
            if self.spec.workspace_bound {
                // Whether the engine mounted another directory or the
                // supervisor could not say: nothing runs in this one.
                self.replace(&id).await;
                return Err(Error::WorkspaceGone(format!(
                    "{}: the container's workspace could not be confirmed to be the session's \
                     directory ({e}); the container was removed",
                    self.spec.workspace.display()
                )));
            }
            tracing::warn!(container = %id, error = %e, "supervisor unavailable; commands will run as plain execs");
        }
        Ok(id)
    }

    /// Checks that the workspace path still holds the session's directory,
    /// so the engine never mounts anything else.
    fn verify_workspace(&self) -> Result<(), Error> {
        let Some(identity) = self.spec.workspace_identity else {
            return Ok(());
        };
        let path = &self.spec.workspace;
        let gone = |why: String| Error::WorkspaceGone(format!("{}: {why}", path.display()));
        let st = if self.spec.workspace_bound {
            // The engine resolves this path itself: no symlink may lie
            // anywhere on it (a swapped ancestor is refused, not followed).
            use rustix::fs::{Mode, OFlags, ResolveFlags};
            rustix::fs::openat2(
                rustix::fs::CWD,
                path,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            )
            .and_then(|fd| rustix::fs::fstat(&fd))
        } else {
            rustix::fs::statat(rustix::fs::CWD, path, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        }
        .map_err(|e| gone(e.to_string()))?;
        if (st.st_dev, st.st_ino) != identity {
            return Err(gone(
                "it no longer holds the session's directory; close the session".into(),
            ));
        }
        if st.st_nlink == 0 {
            return Err(gone(
                "the directory was removed from the host; close the session".into(),
            ));
        }
        Ok(())
    }

    /// The live supervisor link of `container`, started if it has none.
    /// A link that was up and died means the container ran untrusted code
    /// with no trusted supervisor: [`Error::LinkLost`], and the caller must
    /// replace the container rather than start another link in it.
    async fn link(&self, container: &str) -> Result<Arc<Link>, Error> {
        let mut slot = self.link.lock().await;
        match slot.as_ref() {
            Some((c, LinkState::Up(link))) if c == container => {
                return if link.confirm_alive().await {
                    Ok(Arc::clone(link))
                } else {
                    Err(Error::LinkLost)
                };
            }
            Some((c, LinkState::Unavailable)) if c == container => {
                return Err(Error::StartExec(
                    "the supervisor could not start in this container".into(),
                ));
            }
            _ => {}
        }
        let rt = &self.runtime;
        let user = &self.spec.user;
        let identity = self
            .spec
            .workspace_bound
            .then_some(self.spec.workspace_identity)
            .flatten();
        let started = match self.spec.socket_dir.as_deref() {
            Some(dir) => match Link::start(rt, container, user, Some(dir), identity).await {
                Ok(link) => Ok(link),
                Err(e) => {
                    // The engine's own stdio reaches containers a host
                    // socket cannot (gVisor).
                    if identity.is_some() {
                        tracing::warn!(container, error = %e, "the supervisor did not connect over its socket (it serves nothing when /workspace is not the session's directory); trying over stdio");
                    } else {
                        tracing::info!(container, error = %e, "supervisor socket unreachable; framing over stdio");
                    }
                    Link::start(rt, container, user, None, identity).await
                }
            },
            None => Link::start(rt, container, user, None, identity).await,
        };
        match started {
            Ok(link) => {
                let link = Arc::new(link);
                *slot = Some((container.to_string(), LinkState::Up(Arc::clone(&link))));
                Ok(link)
            }
            Err(e) => {
                *slot = Some((container.to_string(), LinkState::Unavailable));
                Err(e)
            }
        }
    }

    /// Forgets and removes container `id` after it was killed as a hard
    /// stop; the next command starts a fresh one over the same workspace.
    pub async fn discard(&self, id: &str) {
        {
            let mut slot = self.container.lock().await;
            if slot.as_deref() == Some(id) {
                *slot = None;
            }
        }
        if let Err(e) = self.runtime.remove_container(id).await {
            tracing::warn!(container = %id, error = %e, "cannot remove killed container");
        }
    }

    /// Ends everything running in the container now: from the host where
    /// the runtime can (a millisecond), else through the engine. The
    /// container itself stays until [`Sandbox::close`].
    pub async fn halt(&self) -> Result<(), Error> {
        let id = self.container.lock().await.clone();
        let Some(id) = id else { return Ok(()) };
        if self.runtime.kill_now(&id).await {
            return Ok(());
        }
        self.runtime.kill_container(&id).await
    }

    /// Removes the container (session close) and its socket directory.
    pub async fn close(&self) -> Result<(), Error> {
        if let Some(dir) = &self.spec.socket_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        let id = self.container.lock().await.take();
        match id {
            Some(id) => self.runtime.remove_container(&id).await,
            None => Ok(()),
        }
    }

    /// Starts one command in the container (starting the container first
    /// if there is none): through the supervisor when one is configured and
    /// answers, else as its own exec. A container whose supervisor link died
    /// is replaced first, and the command's exit says so. Drive the result
    /// with [`Started::drive`], then call [`Sandbox::finished`].
    pub async fn start(&self, spec: CommandSpec) -> Result<Started, Error> {
        let mut notes = Vec::new();
        let hints = spec.hints.clone();
        let mut container = self.ensure().await?;
        crate::profile::mark("host: container ensured");
        if self.spec.supervisor.is_some() {
            match self.supervised(&container, &spec).await {
                Ok(via) => {
                    return Ok(Started { via, notes, hints });
                }
                Err(Error::LinkLost) => {
                    tracing::warn!(container = %container, "supervisor link lost; replacing the container");
                    self.replace(&container).await;
                    notes.push(NOTE_REPLACED.to_string());
                    container = self.ensure().await?;
                    match self.supervised(&container, &spec).await {
                        Ok(via) => return Ok(Started { via, notes, hints }),
                        Err(e) if self.spec.workspace_bound => return Err(e),
                        Err(e) => {
                            tracing::warn!(container = %container, error = %e, "supervisor unavailable; running as a plain exec")
                        }
                    }
                }
                // A workspace only the supervisor can vouch for is never
                // worked on without it.
                Err(e) if self.spec.workspace_bound => return Err(e),
                Err(e) => {
                    tracing::warn!(container = %container, error = %e, "supervisor unavailable; running as a plain exec")
                }
            }
        }
        match exec_fallback::start(
            Arc::clone(&self.runtime),
            &container,
            &self.spec.user,
            self.host_signals(),
            spec.clone(),
        )
        .await
        {
            Ok(running) => Ok(Started {
                via: Via::Exec(running),
                notes,
                hints,
            }),
            // The container may have died under us (killed from outside):
            // start a fresh one once and retry.
            Err(e) if !matches!(e, Error::Connect(_) | Error::EngineTimeout) => {
                tracing::warn!(container = %container, error = %e, "exec failed; replacing the container");
                self.discard(&container).await;
                let container = self.ensure().await?;
                if self.spec.supervisor.is_some()
                    && let Ok(via) = self.supervised(&container, &spec).await
                {
                    return Ok(Started { via, notes, hints });
                }
                exec_fallback::start(
                    Arc::clone(&self.runtime),
                    &container,
                    &self.spec.user,
                    self.host_signals(),
                    spec,
                )
                .await
                .map(|running| Started {
                    via: Via::Exec(running),
                    notes,
                    hints,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the kill ladder of plain execs can signal from the host:
    /// not under gVisor, whose processes live in its own kernel.
    fn host_signals(&self) -> bool {
        self.spec.runtime.as_deref() != Some("runsc")
    }

    /// The live supervisor link of `container` (see [`Sandbox::link`]).
    pub(super) async fn live_link(&self, container: &str) -> Result<Arc<Link>, Error> {
        self.link(container).await
    }

    /// See [`Sandbox::replace`].
    pub(super) async fn replace_container(&self, container: &str) {
        self.replace(container).await
    }

    /// Kills and removes `container` (its processes were not supervised by
    /// a trusted link), so the next [`Sandbox::ensure`] starts a fresh one.
    async fn replace(&self, container: &str) {
        if let Err(e) = self.runtime.kill_container(container).await {
            tracing::warn!(container, error = %e, "cannot kill container");
        }
        self.discard(container).await;
    }

    /// Kills the session's container and forgets it, keeping the workspace:
    /// background processes, a fork bomb, anything left running is gone.
    /// The next command (or this call, with `restart`) starts a fresh one.
    pub async fn reset(&self, restart: bool) -> Result<Option<String>, Error> {
        let current = self.container.lock().await.clone();
        if let Some(id) = current {
            self.replace(&id).await;
        }
        if restart {
            self.ensure().await.map(Some)
        } else {
            Ok(None)
        }
    }

    async fn supervised(&self, container: &str, spec: &CommandSpec) -> Result<Via, Error> {
        let link = self.link(container).await?;
        crate::profile::mark("host: link confirmed");
        let started = std::time::Instant::now();
        // The link was up: failing to hand it a command means it died (the
        // reader may not have noticed yet), and the container with it is no
        // longer trusted. Never fall back to a plain exec there.
        let (id, frames) = link.spawn(spec).await.map_err(|e| {
            tracing::warn!(container, error = %e, "the supervisor link died");
            Error::LinkLost
        })?;
        Ok(Via::Supervised(Supervised {
            rt: Arc::clone(&self.runtime),
            link,
            container: container.to_string(),
            id,
            frames,
            spec: spec.clone(),
            started,
        }))
    }

    /// Bookkeeping after a command ended: a container killed as the hard
    /// stop is replaced before the next command.
    pub async fn finished(&self, container: &str, report: &ExitReport) {
        self.ended(container, report.killed_by).await;
    }

    /// Bookkeeping after a command or process ended by `killed_by`: a
    /// container killed as the hard stop is replaced before the next
    /// command.
    pub async fn ended(&self, container: &str, killed_by: KilledBy) {
        if matches!(killed_by, KilledBy::Container | KilledBy::ContainerFailed) {
            self.discard(container).await;
        }
    }

    /// The runtime (for the registry's startup sweep).
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.runtime
    }
}

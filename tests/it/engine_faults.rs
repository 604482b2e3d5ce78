//! Engine faults, through a proxy between the service and the engine's
//! socket that the tests start themselves and switch between passing,
//! down (connections dropped at once), hung (calls taken, never answered)
//! and slow (every answer held back). Every answer is bounded, a caller
//! that gives up leaves nothing behind, and a hard stop the engine fails is
//! reported as failed and retried until the container is gone.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use crate::common::{self, Mode, TestServer, containers_labelled, reason, run_req};
use sandboxd::pb;
use sandboxd::sandbox::docker::DockerRuntime;

/// What the proxy does with the engine's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Pass,
    Down,
    Hang,
    Slow(Duration),
    /// The engine makes containers, and the answers saying so are lost.
    LoseCreateReplies,
}

/// A proxy to the real engine socket at a path of its own.
struct Proxy {
    path: PathBuf,
    fault: Arc<Mutex<Fault>>,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

const ENGINE: &str = "/var/run/docker.sock";

impl Proxy {
    fn start() -> Proxy {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engine.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let fault = Arc::new(Mutex::new(Fault::Pass));
        let shared = Arc::clone(&fault);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let fault = Arc::clone(&shared);
                tokio::spawn(relay(client, fault));
            }
        });
        Proxy {
            path,
            fault,
            _dir: dir,
            task,
        }
    }

    fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    fn host(&self) -> String {
        format!("unix://{}", self.path.display())
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Relays one connection, looking at the fault before every chunk, so a
/// connection the client keeps alive turns faulty too.
async fn relay(mut client: UnixStream, fault: Arc<Mutex<Fault>>) {
    let now = || *fault.lock().unwrap();
    if now() == Fault::Down {
        return;
    }
    let Ok(upstream) = UnixStream::connect(ENGINE).await else {
        return;
    };
    let (mut up_read, mut up_write) = upstream.into_split();
    let (mut client_read, mut client_write) = client.split();
    let lost = std::sync::atomic::AtomicBool::new(false);
    let to_engine = async {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            match now() {
                Fault::Down => return,
                // Taken, and never passed on: the engine never answers.
                Fault::Hang => continue,
                Fault::Pass | Fault::Slow(_) | Fault::LoseCreateReplies => {
                    if now() == Fault::LoseCreateReplies
                        && buf[..n].starts_with(b"POST ")
                        && buf[..n.min(200)]
                            .windows(18)
                            .any(|w| w == b"/containers/create")
                    {
                        lost.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    if up_write.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let to_client = async {
        let mut buf = vec![0u8; 64 << 10];
        let mut last = Instant::now();
        loop {
            let n = match up_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            match now() {
                Fault::Down => return,
                Fault::Hang => std::future::pending::<()>().await,
                // Each answer is held back once, at its start (the rest of
                // a burst follows it at once).
                Fault::Slow(d) if last.elapsed() > Duration::from_millis(50) => {
                    tokio::time::sleep(d).await
                }
                Fault::Slow(_) | Fault::Pass | Fault::LoseCreateReplies => {}
            }
            if lost.load(std::sync::atomic::Ordering::SeqCst) {
                continue;
            }
            last = Instant::now();
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = to_engine => {}
        () = to_client => {}
    }
}

const ENGINE_TIMEOUT: Duration = Duration::from_secs(2);

async fn server(proxy: &Proxy, mode: Mode) -> TestServer {
    server_with(proxy, mode, ENGINE_TIMEOUT).await
}

async fn server_with(proxy: &Proxy, mode: Mode, timeout: Duration) -> TestServer {
    let docker = Arc::new(DockerRuntime::with_timeout(Some(proxy.host()), timeout));
    TestServer::over_engine(docker, mode, |c| c.sandbox.pool_size = 0).await
}

/// Waits until `done` holds, for at most `limit`.
async fn eventually(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn workspaces(srv: &TestServer) -> usize {
    std::fs::read_dir(srv.state_dir().join("workspaces"))
        .map(|d| d.count())
        .unwrap_or(0)
}

async fn ids(srv: &TestServer) -> Vec<String> {
    srv.registry
        .list(&sandboxd::session::Caller::Admin)
        .await
        .into_iter()
        .map(|i| i.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_engine_refuses_new_sessions_in_bounded_time_and_leaves_nothing() {
    common::prepare_host();
    let proxy = Proxy::start();
    let srv = server(&proxy, Mode::Supervisor).await;
    let label = format!("sandboxd.service={}", srv.service);
    let (kept, _) = srv.session().await;
    let ran = common::run(&srv.client, &kept, "echo up", 60_000).await;
    assert_eq!(ran.stdout(), "up\n");

    proxy.set(Fault::Hang);
    let t0 = Instant::now();
    let refused = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap_err();
    let took = t0.elapsed();
    assert_eq!(reason(&refused), "SANDBOX_UNAVAILABLE", "{refused:?}");
    assert!(
        refused.message().contains("No session was created"),
        "{}",
        refused.message()
    );
    // One engine deadline (several calls would each have waited theirs),
    // with room for a loaded machine.
    assert!(
        took < ENGINE_TIMEOUT * 3 + Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!(
        ids(&srv).await,
        std::slice::from_ref(&kept),
        "the refused session is not counted"
    );
    // File tools need no engine.
    srv.client
        .clone()
        .create_file(pb::CreateFileRequest {
            session_id: kept.clone(),
            path: "f.txt".into(),
            content: "x".into(),
        })
        .await
        .unwrap();
    // Closing answers in bounded time too; its container is not forgotten.
    let t0 = Instant::now();
    srv.client
        .clone()
        .close_session(pb::CloseSessionRequest {
            session_id: kept.clone(),
        })
        .await
        .unwrap();
    assert!(t0.elapsed() < ENGINE_TIMEOUT * 2 + Duration::from_secs(5));
    assert!(
        !containers_labelled(&label).is_empty(),
        "nothing could be removed yet"
    );

    // The engine answers again: everything of both sessions goes.
    proxy.set(Fault::Pass);
    eventually(Duration::from_secs(60), "removing the containers", || {
        containers_labelled(&label).is_empty()
    })
    .await;
    eventually(Duration::from_secs(10), "removing the workspaces", || {
        workspaces(&srv) == 0
    })
    .await;
    assert!(ids(&srv).await.is_empty());
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_leaves_nothing_behind() {
    common::prepare_host();
    let proxy = Proxy::start();
    let srv = server(&proxy, Mode::Supervisor).await;
    let label = format!("sandboxd.service={}", srv.service);
    // Slow enough that the caller's deadline passes mid-way, not so slow
    // that any engine call passes its own: the engine does make and start
    // the container, for a caller that is gone.
    proxy.set(Fault::Slow(Duration::from_millis(150)));
    let mut req = tonic::Request::new(pb::CreateSessionRequest::default());
    req.set_timeout(Duration::from_millis(300));
    let gave_up = srv.client.clone().create_session(req).await.unwrap_err();
    assert_eq!(gave_up.code(), tonic::Code::Cancelled, "{gave_up:?}");
    eventually(
        Duration::from_secs(30),
        "the engine making the container",
        || !containers_labelled(&label).is_empty(),
    )
    .await;
    // And once more against a hung engine.
    proxy.set(Fault::Hang);
    let mut req = tonic::Request::new(pb::CreateSessionRequest::default());
    req.set_timeout(Duration::from_millis(600));
    srv.client.clone().create_session(req).await.unwrap_err();
    proxy.set(Fault::Pass);
    eventually(Duration::from_secs(60), "the openings to be undone", || {
        containers_labelled(&label).is_empty() && workspaces(&srv) == 0
    })
    .await;
    // Give an engine that made a container late the time to show it.
    tokio::time::sleep(ENGINE_TIMEOUT * 2).await;
    assert!(containers_labelled(&label).is_empty());
    assert!(
        ids(&srv).await.is_empty(),
        "a session nobody asked for any more was kept"
    );
    // And the service works on.
    let (s, _) = srv.session().await;
    assert_eq!(
        common::run(&srv.client, &s, "echo ok", 60_000)
            .await
            .stdout(),
        "ok\n"
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_engine_answers_at_once_and_a_slow_one_is_waited_for() {
    common::prepare_host();
    let proxy = Proxy::start();
    let srv = server(&proxy, Mode::Supervisor).await;
    proxy.set(Fault::Down);
    let t0 = Instant::now();
    let s = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(
        !s.sandbox_status.is_empty(),
        "the session says commands cannot run"
    );
    let t0 = Instant::now();
    let refused = common::try_run(&srv.client, run_req(&s.session_id, "true", 60_000))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "SANDBOX_UNAVAILABLE");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // Slow: every answer held back, and still everything works.
    proxy.set(Fault::Slow(Duration::from_millis(150)));
    let ran = common::run(&srv.client, &s.session_id, "echo slow", 120_000).await;
    assert_eq!(ran.stdout(), "slow\n");
    proxy.set(Fault::Pass);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_hard_stop_is_reported_as_failed_and_retried_until_the_container_is_gone() {
    common::prepare_host();
    let proxy = Proxy::start();
    // Plain execs: their kill ladder needs the engine, so the engine
    // failing mid-command makes the hard stop fail.
    let srv = server(&proxy, Mode::Exec).await;
    let (s, _) = srv.session().await;
    let first = common::run(&srv.client, &s, "echo $HOSTNAME", 60_000).await;
    let container = srv
        .client
        .clone()
        .get_session(pb::GetSessionRequest {
            session_id: s.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .container_id;
    assert!(!container.is_empty(), "{}", first.stderr());
    let mut stream = srv
        .client
        .clone()
        .run_command(run_req(&s, "sleep 600", 1_500))
        .await
        .unwrap()
        .into_inner();
    proxy.set(Fault::Hang);
    let exit = loop {
        let ev = stream.message().await.unwrap().expect("an exit event");
        if let Some(pb::run_command_event::Event::Exit(exit)) = ev.event {
            break exit;
        }
    };
    assert_eq!(
        exit.killed_by(),
        pb::KilledBy::ContainerFailed,
        "a hard stop the engine did not do is not reported as done: {exit:?}"
    );
    assert!(common::containers_labelled(&format!("sandboxd.session={s}")).contains(&container));
    // The engine answers again: the container is removed without being
    // asked again, and the next command gets a fresh one.
    proxy.set(Fault::Pass);
    eventually(Duration::from_secs(60), "removing the container", || {
        !common::containers_labelled(&format!("sandboxd.session={s}")).contains(&container)
    })
    .await;
    let ran = common::run(&srv.client, &s, "echo fresh", 60_000).await;
    assert_eq!(ran.stdout(), "fresh\n");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_made_for_a_lost_answer_is_removed() {
    common::prepare_host();
    let proxy = Proxy::start();
    // Long enough to look at the session while the reset waits.
    let srv = server_with(&proxy, Mode::Supervisor, Duration::from_secs(8)).await;
    let (s, _) = srv.session().await;
    let mine = format!("sandboxd.session={s}");
    assert_eq!(containers_labelled(&mine).len(), 1);
    // The reset's new container is made, and the engine's answer lost.
    proxy.set(Fault::LoseCreateReplies);
    let mut client = srv.client.clone();
    let id = s.clone();
    let reset = tokio::spawn(async move {
        client
            .reset_sandbox(pb::ResetSandboxRequest { session_id: id })
            .await
    });
    eventually(
        Duration::from_secs(30),
        "the engine making the container",
        || {
            containers_labelled(&mine)
                .iter()
                .any(|c| common::container_state(c) == "created")
        },
    )
    .await;
    // Reading the session and listing do not wait on the engine meanwhile.
    let t0 = Instant::now();
    srv.client
        .clone()
        .get_session(pb::GetSessionRequest {
            session_id: s.clone(),
        })
        .await
        .unwrap();
    srv.client
        .clone()
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    let refused = reset.await.unwrap().unwrap_err();
    assert_eq!(reason(&refused), "SANDBOX_UNAVAILABLE", "{refused:?}");
    proxy.set(Fault::Pass);
    eventually(
        Duration::from_secs(60),
        "removing the container nobody knew of",
        || containers_labelled(&mine).is_empty(),
    )
    .await;
    let ran = common::run(&srv.client, &s, "echo again", 60_000).await;
    assert_eq!(ran.stdout(), "again\n");
    assert_eq!(containers_labelled(&mine).len(), 1);
    srv.stop().await;
}

//! Environments against the real engine: a project's toolchain built into
//! an image with network (apt from Debian's mirror, pip from the index
//! through the build CA), run by sessions without it; the cache, shared
//! builds, warm pools, and every refusal leaving nothing behind.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{TestServer, reason, run};
use sandboxd::pb;
use sandboxd::pb::build_environment_event::Event;

/// A name no other test or run uses.
fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// Removes the images of the environments named, when the test ends (a
/// failed test included): the engine's image store outlives the test.
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for name in &self.0 {
            let ids = Command::new("docker")
                .args(["images", "-q", "--filter"])
                .arg(format!("label=sandboxd.environment={name}"))
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
                .unwrap_or_default();
            let ids: std::collections::BTreeSet<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                let _ = Command::new("docker")
                    .args(["rmi", "-f"])
                    .args(&ids)
                    .output();
            }
        }
    }
}

/// Everything one build call sent.
#[derive(Debug, Default)]
struct Build {
    joined: bool,
    steps: Vec<pb::BuildStep>,
    output: String,
    done: Option<pb::BuildDone>,
}

impl Build {
    fn done(&self) -> &pb::BuildDone {
        self.done.as_ref().expect("the build ended without done")
    }

    fn environment(&self) -> &pb::Environment {
        self.done().environment.as_ref().unwrap()
    }
}

/// Runs a build to its end; the refusal if it failed.
async fn build(
    srv: &TestServer,
    req: pb::BuildEnvironmentRequest,
) -> Result<Build, (tonic::Status, Build)> {
    let mut got = Build::default();
    let mut events = match srv.client.clone().build_environment(req).await {
        Ok(r) => r.into_inner(),
        Err(e) => return Err((e, got)),
    };
    loop {
        match events.message().await {
            Ok(Some(ev)) => match ev.event {
                Some(Event::Joined(_)) => got.joined = true,
                Some(Event::Step(s)) => got.steps.push(s),
                Some(Event::Output(o)) => got.output.push_str(&o.text),
                Some(Event::Done(d)) => got.done = Some(d),
                None => {}
            },
            Ok(None) => return Ok(got),
            Err(e) => return Err((e, got)),
        }
    }
}

fn dockerfile(name: &str, text: &str) -> pb::BuildEnvironmentRequest {
    pb::BuildEnvironmentRequest {
        name: name.into(),
        dockerfile: text.into(),
        ..Default::default()
    }
}

/// A server that lets every caller build.
async fn builder_server(tweak: impl FnOnce(&mut sandboxd::session::Config)) -> TestServer {
    TestServer::with_docker_mode_and(crate::common::Mode::Supervisor, |c| {
        c.allow_builds = true;
        tweak(c);
    })
    .await
}

/// Whether the engine has an image by this reference (docker CLI).
fn image_exists(reference: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", reference])
        .output()
        .unwrap()
        .status
        .success()
}

/// Containers (any state) whose command holds `marker` (docker CLI).
fn containers_running(marker: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Command}}"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(marker))
        .map(str::to_string)
        .collect()
}

/// Waits (up to a minute) until no container's command holds `marker`.
async fn assert_no_container_left(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = containers_running(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "build containers were left: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Opens a session over environment `name` (and a lent `workspace`).
async fn env_session(
    srv: &TestServer,
    name: &str,
    workspace: Option<&std::path::Path>,
) -> pb::Session {
    srv.client
        .clone()
        .create_session(pb::CreateSessionRequest {
            environment: name.into(),
            workspace_path: workspace
                .map(|w| w.display().to_string())
                .unwrap_or_default(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

/// Closes a session.
async fn close(srv: &TestServer, session_id: String) {
    srv.client
        .clone()
        .close_session(pb::CloseSessionRequest { session_id })
        .await
        .unwrap();
}

async fn delete(
    srv: &TestServer,
    name: &str,
) -> Result<pb::DeleteEnvironmentResponse, tonic::Status> {
    srv.client
        .clone()
        .delete_environment(pb::DeleteEnvironmentRequest { name: name.into() })
        .await
        .map(|r| r.into_inner())
}

async fn listed(srv: &TestServer, name: &str) -> Option<pb::Environment> {
    srv.client
        .clone()
        .list_environments(pb::ListEnvironmentsRequest {})
        .await
        .unwrap()
        .into_inner()
        .environments
        .into_iter()
        .find(|e| e.name == name)
}

/// The baseline task over a real toolchain: pytest installed by apt at
/// build time (with network), a real suite run red then green in a session
/// over it (without network), in a checkout owned by root whose pytest
/// cache works; a second build of the same recipe is a cache hit.
#[tokio::test]
async fn a_pytest_environment_is_built_with_apt_and_runs_offline() {
    let srv = builder_server(|_| {}).await;
    let name = unique("pytest");
    let _cleanup_name = Cleanup(vec![name.clone()]);
    // A step of its own makes the apt step run for real, not from the
    // engine's layer cache of an earlier run.
    let recipe = format!(
        "FROM sandboxd-default:latest\n\
         RUN echo {name}\n\
         RUN apt-get update -q && apt-get install -y -q --no-install-recommends python3-pytest \\\n\
         \x20   && rm -rf /var/lib/apt/lists/*\n"
    );
    let first = build(&srv, dockerfile(&name, &recipe)).await.unwrap();
    assert!(!first.done().cached, "{first:?}");
    let numbers: Vec<(u32, u32)> = first.steps.iter().map(|s| (s.number, s.total)).collect();
    assert_eq!(numbers, vec![(1, 3), (2, 3), (3, 3)], "{:?}", first.steps);
    assert!(first.steps[2].instruction.starts_with("RUN apt-get update"));
    assert!(
        first.output.contains("Setting up python3-pytest"),
        "apt ran in the build: {}",
        first.output
    );
    let env = first.environment().clone();
    assert_eq!(env.name, name);
    assert_eq!(env.image, format!("sandboxd-env/{name}:{}", env.key));
    assert!(image_exists(&format!("sandboxd-env/{name}:latest")));

    // Unchanged: answered from the cache at once, the same image.
    let second = build(&srv, dockerfile(&name, &recipe)).await.unwrap();
    assert!(second.done().cached);
    assert!(second.steps.is_empty() && second.output.is_empty());
    assert_eq!(second.environment().image_id, env.image_id);

    // A checkout as CI has it: root's, with a failing test.
    let repo = srv.allowed_root.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    std::fs::write(repo.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(
        repo.join("test_calc.py"),
        "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    )
    .unwrap();
    let s = env_session(&srv, &name, Some(&repo)).await;
    assert_eq!(s.environment, name);
    assert_eq!(s.image, env.image);
    let red = run(&srv.client, &s.session_id, "python3 -m pytest -q", 60_000).await;
    assert_eq!(red.exit.exit_code, 1, "{}{}", red.stdout(), red.stderr());
    assert!(red.stdout().contains("1 failed"), "{}", red.stdout());
    srv.client
        .clone()
        .edit_file(crate::common::edit_req(
            &s.session_id,
            "calc.py",
            vec![crate::common::edit("a - b", "a + b")],
        ))
        .await
        .unwrap();
    let green = run(&srv.client, &s.session_id, "python3 -m pytest -q", 60_000).await;
    assert_eq!(
        green.exit.exit_code,
        0,
        "{}{}",
        green.stdout(),
        green.stderr()
    );
    assert!(green.stdout().contains("1 passed"), "{}", green.stdout());
    assert!(
        !green.stdout().contains("PytestCacheWarning"),
        "the cache is writable: {}",
        green.stdout()
    );
    let cache = repo.join(".pytest_cache");
    assert!(cache.is_dir(), "pytest wrote its cache in the checkout");
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&cache).unwrap());
    assert_eq!(
        owner, 0,
        "what commands make in root's checkout stays root's"
    );

    // No network at run time: not even a name resolves, no address answers.
    let net = run(
        &srv.client,
        &s.session_id,
        "python3 -c 'import socket; socket.create_connection((\"151.101.0.223\", 80), timeout=3)' 2>&1; \
         python3 -c 'import socket; socket.getaddrinfo(\"deb.debian.org\", 80)' 2>&1; \
         cat /proc/net/dev | grep -c ':'",
        30_000,
    )
    .await;
    let out = net.stdout();
    assert!(out.contains("Network is unreachable"), "{out}");
    assert!(
        out.contains("Temporary failure in name resolution"),
        "{out}"
    );
    assert!(out.trim_end().ends_with('1'), "only lo: {out}");

    // In use: kept; listed with its session.
    let in_use = delete(&srv, &name).await.unwrap_err();
    assert_eq!(reason(&in_use), "ENVIRONMENT_IN_USE", "{in_use:?}");
    assert!(in_use.message().contains(&s.session_id));
    let shown = listed(&srv, &name).await.unwrap();
    assert_eq!(shown.sessions, vec![s.session_id.clone()]);
    close(&srv, s.session_id.clone()).await;
    delete(&srv, &name).await.unwrap();
    assert!(!image_exists(&env.image));
    assert!(!image_exists(&format!("sandboxd-env/{name}:latest")));
    assert!(listed(&srv, &name).await.is_none());
    let gone = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest {
            environment: name.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&gone), "ENVIRONMENT_NOT_FOUND", "{gone:?}");
    srv.stop().await;
}

/// A setup script is the shorthand: pip installs a package from the index
/// this machine reaches through a TLS-intercepting proxy, trusting the CA
/// bundle the operator handed the build; the bundle and its variables are
/// build-time only.
#[tokio::test]
async fn a_setup_script_pip_installs_through_the_build_ca() {
    let bundle = std::fs::read("/etc/ssl/certs/ca-certificates.crt")
        .expect("the host's CA bundle (ca-certificates)");
    let srv = builder_server(|c| c.builds.ca_cert = Some(bundle)).await;
    let name = unique("pip");
    let _cleanup_name = Cleanup(vec![name.clone()]);
    let script = format!(
        "echo {name}\n\
         apt-get update -q\n\
         apt-get install -y -q --no-install-recommends python3-pip\n\
         pip install --break-system-packages --no-cache-dir six==1.16.0\n\
         rm -rf /var/lib/apt/lists/*\n"
    );
    let built = build(
        &srv,
        pb::BuildEnvironmentRequest {
            name: name.clone(),
            setup_script: script,
            ..Default::default()
        },
    )
    .await
    .unwrap_or_else(|(e, b)| panic!("{e:?}\n{}", b.output));
    assert!(
        built.output.contains("Successfully installed six-1.16.0"),
        "{}",
        built.output
    );
    // The three steps of the shorthand, as written: the base's CA layer
    // and the steps naming the CA are not shown.
    let steps: Vec<&str> = built.steps.iter().map(|s| s.instruction.as_str()).collect();
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert_eq!(steps[0], "FROM sandboxd-default:latest");
    assert!(steps.iter().all(|s| !s.contains("ARG ")), "{steps:?}");
    assert_eq!(built.steps[2].total, 3);
    let s = env_session(&srv, &name, None).await;
    let ran = run(
        &srv.client,
        &s.session_id,
        "python3 -c 'import six; print(six.__version__)'; \
         env | grep -c -E 'PIP_CERT|SSL_CERT_FILE|REQUESTS_CA_BUNDLE' || true; \
         ls /usr/local/share/sandboxd/build-ca.pem",
        30_000,
    )
    .await;
    // The bundle file is in the image (as documented); its variables not.
    assert_eq!(
        ran.stdout(),
        "1.16.0\n0\n/usr/local/share/sandboxd/build-ca.pem\n",
        "{}",
        ran.stderr()
    );
    close(&srv, s.session_id).await;
    delete(&srv, &name).await.unwrap();
    srv.stop().await;
}

/// Every refusal says what to do, and leaves no tagged image and no
/// container: a base that is not present, a failing step, a build past its
/// time limit, a context over the ceiling, a bad name or recipe.
#[tokio::test]
async fn failed_builds_are_refused_clearly_and_leave_nothing() {
    let srv = builder_server(|c| c.builds.max_context_bytes = 64 * 1024).await;
    let name = unique("bad");
    let _cleanup_name = Cleanup(vec![name.clone()]);
    let latest = format!("sandboxd-env/{name}:latest");

    let (missing, _) = build(&srv, dockerfile(&name, "FROM no-such-image:1\nRUN true\n"))
        .await
        .unwrap_err();
    assert_eq!(reason(&missing), "IMAGE_NOT_FOUND", "{missing:?}");
    assert!(missing.message().contains("no-such-image:1"));
    assert!(
        missing.message().contains("sandboxd-default:latest"),
        "local images are listed: {}",
        missing.message()
    );

    let marker = unique("fails");
    let (failed, got) = build(
        &srv,
        dockerfile(
            &name,
            &format!("FROM sandboxd-default:latest\nRUN echo {marker}-out && echo {marker}-err >&2 && exit 3\n"),
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(reason(&failed), "BUILD_FAILED", "{failed:?}");
    let m = failed.message();
    assert!(m.contains("Step 2 of 2 (RUN echo"), "{m}");
    assert!(m.contains("non-zero code: 3"), "{m}");
    assert!(
        m.contains(&format!("{marker}-out")) && m.contains(&format!("{marker}-err")),
        "{m}"
    );
    assert!(got.output.contains(&format!("{marker}-out")));
    assert_no_container_left(&marker).await;
    assert!(!image_exists(&latest));

    let marker = unique("slow");
    let started = Instant::now();
    let (slow, got) = build(
        &srv,
        pb::BuildEnvironmentRequest {
            timeout_seconds: 3,
            ..dockerfile(
                &name,
                &format!("FROM sandboxd-default:latest\nRUN echo {marker} && sleep 600\n"),
            )
        },
    )
    .await
    .unwrap_err();
    assert_eq!(reason(&slow), "BUILD_TIMED_OUT", "{slow:?}");
    assert!(slow.message().contains("3 s"), "{}", slow.message());
    assert!(slow.message().contains("ceiling"), "{}", slow.message());
    assert!(got.output.contains(&marker));
    assert!(started.elapsed() < Duration::from_secs(120));
    assert_no_container_left(&marker).await;
    assert!(!image_exists(&latest));

    let (over, _) = build(
        &srv,
        pb::BuildEnvironmentRequest {
            timeout_seconds: 99_999,
            ..dockerfile(&name, "FROM sandboxd-default:latest\n")
        },
    )
    .await
    .unwrap_err();
    assert_eq!(reason(&over), "LIMIT_EXCEEDED", "{over:?}");

    let mut tar = tar::Builder::new(Vec::new());
    let big = vec![b'x'; 128 * 1024];
    let mut header = tar::Header::new_gnu();
    header.set_size(big.len() as u64);
    header.set_mode(0o644);
    tar.append_data(&mut header, "big.bin", &big[..]).unwrap();
    let (too_big, _) = build(
        &srv,
        pb::BuildEnvironmentRequest {
            context: tar.into_inner().unwrap(),
            ..dockerfile(&name, "FROM sandboxd-default:latest\nCOPY big.bin /\n")
        },
    )
    .await
    .unwrap_err();
    assert_eq!(too_big.code(), tonic::Code::ResourceExhausted);
    assert_eq!(reason(&too_big), "BUILD_CONTEXT_TOO_LARGE", "{too_big:?}");

    for (bad, why) in [
        (
            dockerfile("Not A Name", "FROM sandboxd-default:latest\n"),
            "INVALID_ARGUMENT",
        ),
        (dockerfile(&name, "RUN true\n"), "INVALID_RECIPE"),
        (dockerfile(&name, "FROM $BASE\n"), "INVALID_RECIPE"),
        (
            pb::BuildEnvironmentRequest {
                setup_script: "true".into(),
                ..dockerfile(&name, "FROM sandboxd-default:latest\n")
            },
            "INVALID_RECIPE",
        ),
        (
            pb::BuildEnvironmentRequest {
                context: b"not a tar archive, long enough to be read as one block".repeat(20),
                ..dockerfile(&name, "FROM sandboxd-default:latest\n")
            },
            "INVALID_RECIPE",
        ),
    ] {
        let (e, _) = build(&srv, bad).await.unwrap_err();
        assert_eq!(reason(&e), why, "{e:?}");
    }
    assert!(!image_exists(&latest));
    let unknown = delete(&srv, &name).await.unwrap_err();
    assert_eq!(reason(&unknown), "ENVIRONMENT_NOT_FOUND");
    srv.stop().await;
}

/// `r` carrying `authorization: Bearer <token>`.
fn with<T>(token: &str, r: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(r);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

/// Building runs code with network access: refused unless the operator
/// allows every caller, or the call carries the build token; deleting is
/// the same permission. Listing is open.
#[tokio::test]
async fn only_callers_the_operator_allows_may_build() {
    let access = sandboxd::server::Access {
        token: Some("caller-token".into()),
        build_token: Some("builder-token".into()),
        ..Default::default()
    };
    let journal = tempfile::tempdir().unwrap();
    let journal_dir = journal.path().join("journal");
    let dir = journal_dir.clone();
    let srv = TestServer::with_docker_access(access, move |c| c.journal_dir = Some(dir)).await;
    let name = unique("perm");
    let _cleanup_name = Cleanup(vec![name.clone()]);
    let req = dockerfile(&name, "FROM sandboxd-default:latest\nRUN true\n");
    let denied = srv
        .client
        .clone()
        .build_environment(with("caller-token", req.clone()))
        .await
        .unwrap_err();
    assert_eq!(reason(&denied), "POLICY_DENIED", "{denied:?}");
    assert!(denied.message().contains("--allow-builds"));
    let wrong = srv
        .client
        .clone()
        .build_environment(with("nobody", req.clone()))
        .await
        .unwrap_err();
    assert_eq!(reason(&wrong), "UNAUTHENTICATED");

    let mut events = srv
        .client
        .clone()
        .build_environment(with("builder-token", req.clone()))
        .await
        .unwrap()
        .into_inner();
    let mut done = None;
    while let Some(ev) = events.message().await.unwrap() {
        if let Some(Event::Done(d)) = ev.event {
            done = Some(d);
        }
    }
    let env = done.unwrap().environment.unwrap();
    // Every caller may list and use it.
    let list = srv
        .client
        .clone()
        .list_environments(with("caller-token", pb::ListEnvironmentsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert!(list.environments.iter().any(|e| e.name == name));
    let rm = srv
        .client
        .clone()
        .delete_environment(with(
            "caller-token",
            pb::DeleteEnvironmentRequest { name: name.clone() },
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&rm), "POLICY_DENIED");
    assert!(image_exists(&env.image));
    srv.client
        .clone()
        .delete_environment(with(
            "builder-token",
            pb::DeleteEnvironmentRequest { name: name.clone() },
        ))
        .await
        .unwrap();
    assert!(!image_exists(&env.image));

    // Every build and deletion is in the journal, refused ones too.
    let file = std::fs::read_dir(&journal_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("builds-")
        })
        .expect("a journal of builds");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(String, String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["tool"].as_str().unwrap().to_string(),
                l["outcome"]["status"].as_str().unwrap().to_string(),
                l["outcome"]["reason"]
                    .as_str()
                    .or(l["outcome"]["detail"].as_str())
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(seen[0].0, "BuildEnvironment");
    assert_eq!(
        (seen[0].1.as_str(), seen[0].2.as_str()),
        ("refused", "POLICY_DENIED")
    );
    assert_eq!(seen[1].0, "BuildEnvironment");
    assert!(
        seen[1].2.starts_with(&format!("built {}", env.image)),
        "{seen:?}"
    );
    assert_eq!(seen[2].0, "DeleteEnvironment");
    assert_eq!(seen[2].2, "POLICY_DENIED");
    assert_eq!(seen[3].0, "DeleteEnvironment");
    assert!(seen[3].2.starts_with("removed"), "{seen:?}");
    assert!(
        lines
            .iter()
            .all(|l| l["summary"] == format!("environment {name}"))
    );
    srv.stop().await;
}

/// Two callers asking for one recipe at once share one build; a build
/// whose every caller went away is stopped and leaves nothing.
#[tokio::test]
async fn concurrent_builds_share_one_run_and_an_abandoned_one_is_stopped() {
    let srv = builder_server(|_| {}).await;
    let name = unique("shared");
    let _cleanup_name = Cleanup(vec![name.clone()]);
    let marker = unique("once");
    let recipe = format!("FROM sandboxd-default:latest\nRUN echo {marker} && sleep 2\n");
    let (a, b) = tokio::join!(
        build(&srv, dockerfile(&name, &recipe)),
        build(&srv, dockerfile(&name, &recipe))
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(
        a.joined != b.joined,
        "one of them joined the other: {a:?} {b:?}"
    );
    assert_eq!(a.environment().image_id, b.environment().image_id);
    assert!(!a.done().cached && !b.done().cached);
    delete(&srv, &name).await.unwrap();

    let abandoned = unique("gone");
    let _cleanup_abandoned = Cleanup(vec![abandoned.clone()]);
    let marker = unique("abandoned");
    let mut events = srv
        .client
        .clone()
        .build_environment(dockerfile(
            &abandoned,
            &format!("FROM sandboxd-default:latest\nRUN echo {marker} && sleep 600\n"),
        ))
        .await
        .unwrap()
        .into_inner();
    // Wait until the step runs, then leave.
    loop {
        let ev = events.message().await.unwrap().unwrap();
        if matches!(&ev.event, Some(Event::Output(o)) if o.text.contains(&marker)) {
            break;
        }
    }
    assert!(!containers_running(&marker).is_empty());
    drop(events);
    assert_no_container_left(&marker).await;
    assert!(!image_exists(&format!("sandboxd-env/{abandoned}:latest")));
    srv.stop().await;
}

/// `--pool ENV=N`: sessions over an environment come from its warm pool,
/// which follows a rebuild.
#[tokio::test]
async fn an_environment_pool_keeps_sessions_warm_and_follows_rebuilds() {
    let name = unique("warm");
    let _cleanup_name = Cleanup(vec![name.clone()]);
    let srv = builder_server(|c| {
        c.sandbox.environment_pools.insert(name.clone(), 1);
    })
    .await;
    let first = build(
        &srv,
        dockerfile(&name, "FROM sandboxd-default:latest\nRUN true\n"),
    )
    .await
    .unwrap();
    let wait_ready = || async {
        let deadline = Instant::now() + Duration::from_secs(60);
        while srv.registry.environment_pool_ready(&name) == 0 {
            assert!(
                Instant::now() < deadline,
                "the environment's pool did not fill"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    wait_ready().await;
    let s = env_session(&srv, &name, None).await;
    assert!(
        !s.container_id.is_empty(),
        "a warm session has its container"
    );
    assert_eq!(s.image, first.environment().image);
    assert_eq!(
        srv.registry.environment_pool_ready(&name),
        0,
        "taken from the pool"
    );
    let ran = run(&srv.client, &s.session_id, "echo warm", 30_000).await;
    assert_eq!(ran.stdout(), "warm\n");
    close(&srv, s.session_id).await;

    // Rebuilt: the pool is refilled with the new build.
    wait_ready().await;
    let second = build(
        &srv,
        dockerfile(&name, "FROM sandboxd-default:latest\nRUN echo v2\n"),
    )
    .await
    .unwrap();
    assert_ne!(second.environment().image, first.environment().image);
    let deadline = Instant::now() + Duration::from_secs(60);
    let s = loop {
        let s = env_session(&srv, &name, None).await;
        assert_eq!(s.image, second.environment().image, "never the old build");
        if !s.container_id.is_empty() || Instant::now() > deadline {
            break s;
        }
        close(&srv, s.session_id).await;
    };
    close(&srv, s.session_id).await;
    // Both builds go with the environment, its warm containers first.
    delete(&srv, &name).await.unwrap();
    assert!(!image_exists(&first.environment().image));
    assert!(!image_exists(&second.environment().image));
    assert_eq!(srv.registry.environment_pool_ready(&name), 0);
    srv.stop().await;
}

/// Runs the CLI against `srv` off the test's thread (the server runs on
/// it); stdout is a pipe, so plain lines come out.
async fn cli(srv: &TestServer, dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let addr = format!("http://{}", srv.addr);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        Command::new(crate::common::SANDBOXD)
            .arg("--addr")
            .arg(&addr)
            .args(&args)
            .current_dir(dir)
            .env_remove("SANDBOXD_TOKEN")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// `sandboxd env build NAME -f Dockerfile DIR` sends the context (without
/// what .dockerignore lists) and prints plain step lines when piped;
/// `--setup` builds the shorthand; `env ls`, `session create
/// --environment` and `env rm` (refused while in use) do what they say.
#[tokio::test]
async fn the_cli_builds_lists_uses_and_removes_environments() {
    let srv = builder_server(|_| {}).await;
    let name = unique("cli");
    let _cleanup_name = Cleanup(vec![name.clone()]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("Dockerfile"),
        "FROM sandboxd-default:latest\nCOPY . /opt/ctx/\n",
    )
    .unwrap();
    std::fs::write(d.join("kept.txt"), "kept\n").unwrap();
    std::fs::write(d.join("secret.env"), "TOKEN=1\n").unwrap();
    std::fs::write(d.join(".dockerignore"), "*.env\n").unwrap();
    let out = cli(&srv, d, &["env", "build", &name, "-f", "Dockerfile", "."]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("step 1/2: FROM sandboxd-default:latest\n"),
        "{stdout}"
    );
    assert!(stdout.contains("step 2/2: COPY . /opt/ctx/\n"), "{stdout}");
    assert!(
        stdout.contains(&format!("environment {name} built in")),
        "{stdout}"
    );
    assert!(
        !stdout.contains('\u{1b}'),
        "no terminal control when piped: {stdout:?}"
    );

    let script = d.join("setup.sh");
    std::fs::write(&script, "echo from-setup > /opt/setup.txt\n").unwrap();
    let shorthand = format!("{name}-setup");
    let _cleanup_shorthand = Cleanup(vec![shorthand.clone()]);
    let out = cli(
        &srv,
        d,
        &["env", "build", &shorthand, "--setup", "setup.sh"],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = cli(&srv, d, &["env", "ls"]).await;
    let listing = String::from_utf8_lossy(&out.stdout);
    let line = |env: &str| {
        listing
            .lines()
            .find(|l| l.split_whitespace().next() == Some(env))
            .map(str::to_string)
    };
    assert!(line(&name).is_some_and(|l| l.contains("key ")), "{listing}");
    assert!(line(&shorthand).is_some(), "{listing}");

    let out = cli(
        &srv,
        d,
        &["session", "create", "-q", "--environment", &name],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let ran = run(&srv.client, &sid, "ls -A /opt/ctx", 30_000).await;
    assert_eq!(ran.stdout(), ".dockerignore\nDockerfile\nkept.txt\n");
    let out = cli(&srv, d, &["env", "rm", &name]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused [ENVIRONMENT_IN_USE]"), "{err}");
    cli(&srv, d, &["session", "close", &sid]).await;

    let s = cli(
        &srv,
        d,
        &["session", "create", "-q", "--environment", &shorthand],
    )
    .await;
    let sid = String::from_utf8_lossy(&s.stdout).trim().to_string();
    let ran = run(&srv.client, &sid, "cat /opt/setup.txt", 30_000).await;
    assert_eq!(ran.stdout(), "from-setup\n");
    cli(&srv, d, &["session", "close", &sid]).await;

    for env in [&name, &shorthand] {
        let out = cli(&srv, d, &["env", "rm", env]).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("deleted environment"));
    }
    srv.stop().await;
}

/// A recipe cannot loosen its sessions' sandbox through the image's own
/// settings: its ENTRYPOINT and CMD never run, its HEALTHCHECK never runs,
/// its USER and WORKDIR do not apply, and a VOLUME it declares is a
/// size-limited tmpfs, never an anonymous volume outside the quota.
#[tokio::test]
async fn an_environments_image_settings_do_not_loosen_its_sessions() {
    let srv = builder_server(|c| c.sandbox.tmp_bytes = 8 << 20).await;
    let name = unique("settings");
    let _cleanup_name = Cleanup(vec![name.clone()]);
    let recipe = "FROM sandboxd-default:latest\n\
                  ENTRYPOINT [\"/bin/sh\", \"-c\", \"touch /workspace/entrypoint-ran; exec sleep infinity\"]\n\
                  CMD [\"ignored\"]\n\
                  HEALTHCHECK --interval=1s CMD touch /workspace/healthcheck-ran\n\
                  VOLUME /data\n\
                  USER root\n\
                  WORKDIR /opt\n";
    build(&srv, dockerfile(&name, recipe)).await.unwrap();
    let s = env_session(&srv, &name, None).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ran = run(
        &srv.client,
        &s.session_id,
        "id -u; pwd; ls -A /workspace; grep ' /data ' /proc/mounts | cut -d' ' -f3,4; \
         (head -c 20000000 /dev/zero > /data/big) 2>&1 | tail -1; echo end",
        30_000,
    )
    .await;
    let out = ran.stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], crate::common::UID.to_string(), "{out}");
    assert_eq!(lines[1], "/workspace", "{out}");
    assert!(lines[2].starts_with("tmpfs rw,nosuid,nodev"), "{out}");
    assert!(lines[2].contains("size=8192k"), "{out}");
    assert!(out.contains("No space left on device"), "{out}");
    assert_eq!(lines.last(), Some(&"end"));
    let inspect = Command::new("docker")
        .args(["inspect", "-f", "{{json .Mounts}}", &s.container_id])
        .output()
        .unwrap();
    let mounts = String::from_utf8_lossy(&inspect.stdout);
    assert!(!mounts.contains("\"Type\":\"volume\""), "{mounts}");
    close(&srv, s.session_id).await;
    delete(&srv, &name).await.unwrap();

    // A volume over or under the workspace (or the supervisor's paths)
    // would hide it: such an image opens no session, and leaves nothing.
    for path in ["/workspace/sub", "/workspace", "/.sandboxd/run"] {
        let hiding = unique("hiding");
        let _cleanup_hiding = Cleanup(vec![hiding.clone()]);
        build(
            &srv,
            dockerfile(
                &hiding,
                &format!("FROM sandboxd-default:latest\nVOLUME {path}\n"),
            ),
        )
        .await
        .unwrap();
        let refused = srv
            .client
            .clone()
            .create_session(pb::CreateSessionRequest {
                environment: hiding.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(reason(&refused), "IMAGE_NOT_ALLOWED", "{refused:?}");
        assert!(
            refused.message().contains(&format!("VOLUME {path}")),
            "{}",
            refused.message()
        );
        assert!(srv.containers().is_empty(), "{:?}", srv.containers());
        delete(&srv, &hiding).await.unwrap();
    }
    let listed = srv
        .client
        .clone()
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(listed.sessions.is_empty());
    srv.stop().await;
}

/// Builds past the operator's number wait their turn, within their own time
/// limit; a deletion is refused while any container (not only a session's)
/// still uses the environment's image, and changes nothing.
#[tokio::test]
async fn builds_wait_their_turn_and_a_used_image_is_never_orphaned() {
    let srv = builder_server(|c| c.builds.max_running = 1).await;
    let (first, second, third) = (unique("turn"), unique("turn"), unique("turn"));
    let _cleanup = Cleanup(vec![first.clone(), second.clone(), third.clone()]);
    let marker = unique("long");
    let mut long = srv
        .client
        .clone()
        .build_environment(dockerfile(
            &first,
            &format!("FROM sandboxd-default:latest\nRUN echo {marker} && sleep 4\n"),
        ))
        .await
        .unwrap()
        .into_inner();
    loop {
        let ev = long.message().await.unwrap().unwrap();
        if matches!(&ev.event, Some(Event::Output(o)) if o.text.contains(&marker)) {
            break;
        }
    }
    let impatient = build(
        &srv,
        pb::BuildEnvironmentRequest {
            timeout_seconds: 1,
            ..dockerfile(&second, "FROM sandboxd-default:latest\nRUN true\n")
        },
    )
    .await
    .unwrap_err()
    .0;
    assert_eq!(reason(&impatient), "BUILD_TIMED_OUT", "{impatient:?}");
    assert!(
        impatient.message().contains("waiting for other builds"),
        "{}",
        impatient.message()
    );
    let waited = build(
        &srv,
        dockerfile(&third, "FROM sandboxd-default:latest\nRUN true\n"),
    );
    let (waited, first_done) = tokio::join!(waited, async {
        while let Some(ev) = long.message().await.unwrap() {
            if let Some(Event::Done(d)) = ev.event {
                return (d, Instant::now());
            }
        }
        panic!("the long build ended without done")
    });
    let waited = waited.unwrap();
    assert!(!waited.done().cached);
    let env = first_done.0.environment.unwrap();

    // A container the service does not know uses the image.
    let stray = Command::new("docker")
        .args(["run", "-d", "--network", "none", "--label"])
        .arg(format!("sandboxd.service={}", srv.service))
        .args([&env.image, "sleep", "60"])
        .output()
        .unwrap();
    assert!(stray.status.success(), "{stray:?}");
    let stray = String::from_utf8_lossy(&stray.stdout).trim().to_string();
    let refused = delete(&srv, &first).await.unwrap_err();
    assert_eq!(reason(&refused), "ENVIRONMENT_IN_USE", "{refused:?}");
    assert!(
        refused.message().contains(&stray[..12]),
        "{}",
        refused.message()
    );
    assert!(image_exists(&env.image) && image_exists(&format!("sandboxd-env/{first}:latest")));
    Command::new("docker")
        .args(["rm", "-f", &stray])
        .output()
        .unwrap();
    delete(&srv, &first).await.unwrap();
    assert!(!image_exists(&env.image_id));
    delete(&srv, &third).await.unwrap();
    srv.stop().await;
}

/// A multi-stage recipe: the environment is its last stage (the engine
/// names an image at the end of every stage), and steps count across
/// stages as written.
#[tokio::test]
async fn a_multi_stage_recipe_builds_its_last_stage() {
    let srv = builder_server(|_| {}).await;
    let name = unique("stages");
    let _cleanup_name = Cleanup(vec![name.clone()]);
    let first = build(
        &srv,
        dockerfile(
            &name,
            "FROM sandboxd-default:latest\nRUN echo good > /good\n",
        ),
    )
    .await
    .unwrap();
    let recipe = "FROM sandboxd-default:latest AS build\n\
                  RUN echo half > /half\n\
                  FROM sandboxd-default:latest\n\
                  COPY --from=build /half /final\n";
    let built = build(&srv, dockerfile(&name, recipe))
        .await
        .unwrap_or_else(|(e, b)| panic!("{e:?} {b:?}"));
    let steps: Vec<(u32, u32, &str)> = built
        .steps
        .iter()
        .map(|s| (s.number, s.total, s.instruction.as_str()))
        .collect();
    assert_eq!(
        steps,
        vec![
            (1, 4, "FROM sandboxd-default:latest AS build"),
            (2, 4, "RUN echo half > /half"),
            (3, 4, "FROM sandboxd-default:latest"),
            (4, 4, "COPY --from=build /half /final"),
        ]
    );
    assert_ne!(built.environment().image_id, first.environment().image_id);
    let shown = listed(&srv, &name).await.expect("listed under its name");
    assert_eq!(shown.image_id, built.environment().image_id);
    let s = env_session(&srv, &name, None).await;
    let ran = run(
        &srv.client,
        &s.session_id,
        "cat /final; ls /half /good 2>&1 | wc -l",
        30_000,
    )
    .await;
    assert_eq!(
        ran.stdout(),
        "half\n2\n",
        "the last stage only: {}",
        ran.stderr()
    );
    close(&srv, s.session_id).await;
    delete(&srv, &name).await.unwrap();
    srv.stop().await;
}

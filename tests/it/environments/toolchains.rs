//! Real toolchains built into environments: apt from Debian's mirror, pip
//! through the build CA; sessions run them offline.

use super::*;

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

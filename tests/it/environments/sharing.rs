//! Builds shared, abandoned, waiting their turn, and the environment pools
//! that keep sessions warm over them.

use super::*;

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

//! Builds refused before or while they run (missing bases, failed and
//! slow steps, bad recipes and contexts, callers without the permission),
//! each leaving nothing behind.

use super::*;

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

//! What an environment's image may and may not change about its sessions,
//! and multi-stage recipes.

use super::*;

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
    // would hide it, and a link at a path the sandbox mounts on would move
    // the mount: such a recipe builds no environment (refused as the
    // build's failure), and leaves nothing. Spelled as the engine cleans
    // it, too.
    let volumes = [
        "/workspace/sub",
        "/workspace",
        "/.sandboxd/run",
        "//workspace",
        "/./.sandboxd",
        "/data/../workspace/",
    ]
    .map(|path| (format!("VOLUME {path}"), format!("VOLUME {path}")));
    let links = [
        (
            "RUN ln -s /workspace /.sandboxd",
            "its /.sandboxd is a symlink",
        ),
        (
            "RUN mkdir -p /srv/data && ln -s /srv/data /data\nVOLUME /data",
            "its /data is a symlink",
        ),
    ]
    .map(|(r, m)| (r.to_string(), m.to_string()));
    for (instruction, said) in volumes.into_iter().chain(links) {
        let hiding = unique("hiding");
        let _cleanup_hiding = Cleanup(vec![hiding.clone()]);
        let refused = build(
            &srv,
            dockerfile(
                &hiding,
                &format!("FROM sandboxd-default:latest\n{instruction}\n"),
            ),
        )
        .await
        .map(|b| b.environment().image_id.clone())
        .expect_err(&instruction);
        let (status, _) = refused;
        assert_eq!(reason(&status), "BUILD_FAILED", "{instruction}: {status:?}");
        let message = status.message();
        assert!(message.contains(&said), "{instruction}: {message}");
        assert!(
            listed(&srv, &hiding).await.is_none(),
            "{instruction}: an environment was made"
        );
        assert!(srv.containers().is_empty(), "{:?}", srv.containers());
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

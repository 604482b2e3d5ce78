//! The `sandboxd env` verbs against a running service.

use super::*;

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

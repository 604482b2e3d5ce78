//! A lent checkout is never left mounted in the state directory once the
//! service is gone: a CI job that stops the service and removes its
//! throwaway state directory with `rm -rf` must find its checkout intact,
//! however the stop came (right after CloseSession, with sessions open, by
//! a kill while a container runs), and with or without the warm lent pool.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use sandboxd::pb;

use crate::common;
use crate::served::{RemoveOnDrop, Served, Unmount, service_name};

/// The mounts under the state directory that show the checkout `repo` (a
/// pin; the empty slots of warm containers are the service's own).
fn checkout_mounted(state: &Path, repo: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let of = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let repo = of(repo);
    common::mounts_under(state)
        .into_iter()
        .filter(|m| of(Path::new(m)) == repo)
        .collect()
}

/// A checkout of a few files and a nested directory under `roots/repo`.
fn checkout(roots: &Path) -> std::path::PathBuf {
    let repo = roots.join("repo");
    std::fs::create_dir_all(repo.join("src/deep")).unwrap();
    std::fs::write(repo.join("README"), "keep me\n").unwrap();
    std::fs::write(repo.join("src/deep/lib.py"), "x = 1\n").unwrap();
    repo
}

fn intact(repo: &Path) {
    assert_eq!(
        std::fs::read_to_string(repo.join("README")).unwrap(),
        "keep me\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("src/deep/lib.py")).unwrap(),
        "x = 1\n"
    );
}

async fn open(c: &mut common::Client, repo: &Path) -> String {
    c.create_session(pb::CreateSessionRequest {
        workspace_path: repo.display().to_string(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .session_id
}

/// Twenty cycles of: a session over the checkout, one command, CloseSession,
/// SIGTERM at once (half of them from the warm lent pool). After each, no
/// mount is left under the state directory; then the state directory is
/// removed as a CI job removes it, and the checkout is whole.
#[tokio::test]
async fn close_then_stop_leaves_no_mount_and_removing_the_state_keeps_the_checkout() {
    common::prepare_host();
    let service = service_name();
    let _cleanup = RemoveOnDrop(format!("sandboxd.service={service}"));
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let state = base.path().join("state");
    let _unmount = Unmount(state.clone());
    let roots = base.path().join("roots");
    let repo = checkout(&roots);
    let allow = roots.display().to_string();
    for cycle in 0..20 {
        let lent_pool = if cycle % 2 == 0 { "0" } else { "1" };
        let served = Served::start_with(
            &service,
            base.path(),
            0,
            &["--allow-root", &allow, "--lent-pool-size", lent_pool],
        )
        .await;
        let mut c = served.client().await;
        let id = open(&mut c, &repo).await;
        let ran = common::run(&c, &id, "cat README && touch ran", 30_000).await;
        assert_eq!(ran.stdout(), "keep me\n", "cycle {cycle}");
        c.close_session(pb::CloseSessionRequest { session_id: id })
            .await
            .unwrap();
        served.sigterm_and_wait().await;
        let left = common::mounts_under(&state);
        assert!(
            left.is_empty(),
            "cycle {cycle} (lent pool {lent_pool}): still mounted after a clean stop: {left:?}"
        );
    }
    std::fs::remove_dir_all(&state).unwrap();
    intact(&repo);
    assert!(repo.join("ran").exists());
}

/// A stop with a session open keeps the session for the next start but
/// nothing of the checkout mounted; the session comes back and works; a
/// kill -9 while its container runs leaves no pin either (the pin is
/// mounted only while a container starts), and removing the state
/// directory afterwards keeps the checkout.
#[tokio::test]
async fn a_stop_or_a_kill_with_a_session_open_leaves_the_checkout_unmounted() {
    common::prepare_host();
    let service = service_name();
    let _cleanup = RemoveOnDrop(format!("sandboxd.service={service}"));
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let state = base.path().join("state");
    let _unmount = Unmount(state.clone());
    let roots = base.path().join("roots");
    let repo = checkout(&roots);
    let allow = roots.display().to_string();
    let args = ["--allow-root", allow.as_str(), "--lent-pool-size", "1"];

    let served = Served::start_with(&service, base.path(), 0, &args).await;
    let mut c = served.client().await;
    let id = open(&mut c, &repo).await;
    let ran = common::run(&c, &id, "cat README", 30_000).await;
    assert_eq!(ran.stdout(), "keep me\n");
    assert_eq!(
        checkout_mounted(&state, &repo),
        Vec::<String>::new(),
        "the checkout stays mounted on the host while its container runs"
    );
    served.sigterm_and_wait().await;
    assert_eq!(common::mounts_under(&state), Vec::<String>::new());

    let served = Served::start_with(&service, base.path(), 0, &args).await;
    let c = served.client().await;
    let ran = common::run(&c, &id, "cat src/deep/lib.py && echo y > new.txt", 30_000).await;
    assert_eq!(
        ran.stdout(),
        "x = 1\n",
        "the session came back over its checkout"
    );
    assert_eq!(checkout_mounted(&state, &repo), Vec::<String>::new());
    // Killed while the session's container runs.
    drop(served);
    assert_eq!(checkout_mounted(&state, &repo), Vec::<String>::new());
    common::remove_containers_labelled(&format!("sandboxd.service={service}"));
    // What a kill leaves mounted is the service's own (the warm slot, an
    // empty directory): removing the state directory goes through it and
    // stops at its mount point, as at any mount point.
    let _ = std::fs::remove_dir_all(&state);
    common::unmount_under(&state);
    std::fs::remove_dir_all(&state).unwrap();
    intact(&repo);
    assert_eq!(
        std::fs::read_to_string(repo.join("new.txt")).unwrap(),
        "y\n"
    );
}

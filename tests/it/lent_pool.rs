//! Sessions over an existing directory from warm containers: a container
//! started over an empty slot is lent the directory a session names (a
//! pin on the slot, propagated into the running container) and its
//! supervisor confirms it before the session is handed out. Whatever the
//! directory's owner, commands run as they would in a container started
//! cold; a directory that may not be lent is refused as before, and
//! before a warm container is spent on it; closing lets go of every mount.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{TestServer, containers_labelled, mounts_under, run};
use sandboxd::pb;

/// A server keeping `n` warm containers for lent directories (and none
/// for fresh workspaces), once they are ready.
async fn server(n: usize) -> TestServer {
    let srv = TestServer::with_docker_mode_and(crate::common::Mode::Supervisor, |c| {
        c.sandbox.pool_size = 0;
        c.sandbox.lent_pool_size = n;
    })
    .await;
    assert!(ready_soon(&srv, n).await, "the lent pool never filled");
    srv
}

/// Whether `n` warm containers for lent directories are ready within 60 s.
async fn ready_soon(srv: &TestServer, n: usize) -> bool {
    let until = Instant::now() + Duration::from_secs(60);
    while srv.registry.lent_pool_ready() < n {
        if Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

/// The session ids the server's containers carry now.
fn container_sessions(srv: &TestServer) -> Vec<String> {
    let mut ids: Vec<String> = containers_labelled(&format!("sandboxd.service={}", srv.service))
        .iter()
        .map(|c| {
            let out = std::process::Command::new("docker")
                .args([
                    "inspect",
                    "-f",
                    "{{index .Config.Labels \"sandboxd.session\"}}",
                    c,
                ])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        })
        .collect();
    ids.sort();
    ids
}

async fn lend(srv: &TestServer, dir: &Path) -> Result<pb::Session, tonic::Status> {
    srv.try_lend(dir).await
}

/// The mount options of `/workspace` as the session's commands see it.
async fn workspace_options(srv: &TestServer, session: &str) -> String {
    let ran = run(
        &srv.client,
        session,
        "awk '$5 == \"/workspace\" {print $6}' /proc/self/mountinfo | tail -n 1",
        10_000,
    )
    .await;
    assert_eq!(ran.exit.exit_code, 0, "{}", ran.stderr());
    ran.stdout().trim().to_string()
}

/// Two directories, one root's (a CI checkout) and one another user's, each
/// lent to a warm container: the sessions are the warm entries (their ids
/// are the containers' that were running before), each sees its own
/// directory only, through a `nosuid,nodev` pin, and its commands run as
/// a cold start's would: root's checkout id-mapped to the command user,
/// who writes it while the host keeps root as the owner; the other
/// user's as that user. Closing lets go of both mounts of each slot and
/// leaves the directories intact; the pool fills again.
#[tokio::test]
async fn a_session_over_an_existing_directory_is_a_warm_container_lent_it() {
    let srv = server(2).await;
    let warm = container_sessions(&srv);
    assert_eq!(warm.len(), 2, "{warm:?}");

    let root_repo = srv.allowed_root.path().join("root-repo");
    std::fs::create_dir(&root_repo).unwrap();
    std::fs::write(root_repo.join("calc.py"), "root's\n").unwrap();
    let user_repo = srv.allowed_root.path().join("user-repo");
    std::fs::create_dir(&user_repo).unwrap();
    std::fs::write(user_repo.join("notes.txt"), "the user's\n").unwrap();
    for p in [&user_repo, &user_repo.join("notes.txt")] {
        std::os::unix::fs::chown(p, Some(4321), Some(4321)).unwrap();
    }

    let a = lend(&srv, &root_repo).await.unwrap();
    let b = lend(&srv, &user_repo).await.unwrap();
    assert!(
        warm.contains(&a.session_id) && warm.contains(&b.session_id),
        "both sessions came from the warm containers {warm:?}: {} {}",
        a.session_id,
        b.session_id
    );
    assert!(a.notes.is_empty(), "{:?}", a.notes);
    // The containers have the directories; the host keeps no mount of them
    // where a removal of the state directory would reach.
    let host_mounts =
        |s: &pb::Session| mounts_under(&srv.state_dir().join("pins").join(&s.session_id));
    for s in [&a, &b] {
        assert_eq!(host_mounts(s), Vec::<String>::new(), "{}", s.session_id);
    }

    let ran = run(
        &srv.client,
        &a.session_id,
        "id -u; ls -A /workspace; cat calc.py; echo made > new.txt; mkdir -p cache/v",
        20_000,
    )
    .await;
    assert_eq!(ran.exit.exit_code, 0, "{}{}", ran.stdout(), ran.stderr());
    let out = ran.stdout();
    let uid: u32 = out.lines().next().unwrap().parse().unwrap();
    assert_ne!(uid, 0, "commands never run as root: {out}");
    assert_eq!(
        out.lines().nth(1),
        Some("calc.py"),
        "only its own files: {out}"
    );
    assert!(out.contains("root's"), "{out}");
    let made = std::fs::metadata(root_repo.join("new.txt")).unwrap();
    assert_eq!(
        (made.uid(), made.gid()),
        (0, 0),
        "through the id-mapped pin, what commands make in root's checkout is root's"
    );
    assert!(root_repo.join("cache/v").is_dir());
    let options = workspace_options(&srv, &a.session_id).await;
    for want in ["nosuid", "nodev", "idmapped"] {
        assert!(options.split(',').any(|o| o == want), "{want}: {options}");
    }

    let ran = run(
        &srv.client,
        &b.session_id,
        "id -u; ls -A /workspace; echo more >> notes.txt",
        20_000,
    )
    .await;
    assert_eq!(ran.exit.exit_code, 0, "{}{}", ran.stdout(), ran.stderr());
    assert_eq!(ran.stdout(), "4321\nnotes.txt\n");
    assert_eq!(
        std::fs::read_to_string(user_repo.join("notes.txt")).unwrap(),
        "the user's\nmore\n"
    );
    let options = workspace_options(&srv, &b.session_id).await;
    for want in ["nosuid", "nodev"] {
        assert!(options.split(',').any(|o| o == want), "{want}: {options}");
    }

    // A container killed from outside is replaced over the same
    // directory, its commands as the same user.
    let killed = std::process::Command::new("docker")
        .args(["kill", b.container_id.as_str()])
        .output()
        .unwrap();
    assert!(killed.status.success(), "{killed:?}");
    let ran = run(&srv.client, &b.session_id, "id -u; cat notes.txt", 60_000).await;
    assert_eq!(ran.exit.exit_code, 0, "{}{}", ran.stdout(), ran.stderr());
    assert_eq!(ran.stdout(), "4321\nthe user's\nmore\n");
    assert_eq!(
        host_mounts(&b),
        Vec::<String>::new(),
        "after the replacement"
    );

    // The file tools see what the commands made.
    let read = srv
        .client
        .clone()
        .read_file(pb::ReadFileRequest {
            session_id: a.session_id.clone(),
            path: "new.txt".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.content, "made\n");

    for s in [&a, &b] {
        srv.client
            .clone()
            .close_session(pb::CloseSessionRequest {
                session_id: s.session_id.clone(),
            })
            .await
            .unwrap();
    }
    let pins = srv.state_dir().join("pins");
    let until = Instant::now() + Duration::from_secs(30);
    let mounted = |id: &str| mounts_under(&pins.join(id));
    while !(mounted(&a.session_id).is_empty() && mounted(&b.session_id).is_empty()) {
        assert!(
            Instant::now() < until,
            "a closed session's slot is still mounted: {:?} {:?}",
            mounted(&a.session_id),
            mounted(&b.session_id)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for s in [&a, &b] {
        assert!(
            crate::common::gone_soon(&pins.join(&s.session_id)).await,
            "a closed session's slot is still there"
        );
    }
    assert_eq!(
        std::fs::read_to_string(root_repo.join("calc.py")).unwrap(),
        "root's\n"
    );
    assert!(ready_soon(&srv, 2).await, "the pool filled again");
    srv.stop().await;
}

/// Directories that may not be lent (a file in one is hard-linked from
/// outside, another lies outside the allowed roots, a third does not
/// exist) are refused with the reasons a cold start gives, before any
/// warm container is spent on them: the one warm container stays, the
/// same one, its slot empty; the next directory is lent to it.
#[tokio::test]
async fn a_directory_that_may_not_be_lent_is_refused_before_a_warm_container_is_spent() {
    let srv = server(1).await;
    let warm = container_sessions(&srv);
    assert_eq!(warm.len(), 1, "{warm:?}");
    let root = srv.allowed_root.path();
    let repo = root.join("linked");
    std::fs::create_dir(&repo).unwrap();
    std::fs::create_dir(root.join("outside")).unwrap();
    std::fs::write(root.join("outside/secret"), "not the session's\n").unwrap();
    std::fs::hard_link(root.join("outside/secret"), repo.join("secret")).unwrap();

    for _ in 0..3 {
        let refused = lend(&srv, &repo).await.unwrap_err();
        assert!(
            refused.message().contains("hard links, some outside it"),
            "{refused:?}"
        );
        assert_eq!(
            refused.code(),
            tonic::Code::FailedPrecondition,
            "{refused:?}"
        );
    }
    let refused = lend(&srv, Path::new("/etc")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    let refused = lend(&srv, &root.join("missing")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert_eq!(
        container_sessions(&srv),
        warm,
        "no warm container was spent"
    );
    assert_eq!(srv.registry.lent_pool_ready(), 1);
    let slot = srv.state_dir().join("pins").join(&warm[0]);
    assert_eq!(
        mounts_under(&slot).len(),
        1,
        "only the slot: {:?}",
        mounts_under(&slot)
    );

    let fine = root.join("fine");
    std::fs::create_dir(&fine).unwrap();
    std::fs::write(fine.join("a"), "a\n").unwrap();
    let s = lend(&srv, &fine).await.unwrap();
    assert_eq!(vec![s.session_id.clone()], warm);
    let ran = run(&srv.client, &s.session_id, "cat a", 10_000).await;
    assert_eq!(ran.stdout(), "a\n");
    srv.stop().await;
}

/// Where the service's mounts do not reach the engine's containers (here:
/// the warm container's slot made private on the host, as when the engine
/// runs in a mount namespace of its own), the container's supervisor sees
/// no directory where one was pinned: the session starts cold, over the
/// right directory, and the service stops keeping warm containers for
/// existing directories rather than spending one on every session.
#[tokio::test]
async fn where_mounts_do_not_reach_containers_sessions_start_cold_and_the_pool_stops() {
    let srv = server(1).await;
    let warm = container_sessions(&srv);
    assert_eq!(warm.len(), 1, "{warm:?}");
    let slot = srv.state_dir().join("pins").join(&warm[0]);
    let private = std::process::Command::new("mount")
        .arg("--make-private")
        .arg(&slot)
        .output()
        .unwrap();
    assert!(private.status.success(), "{private:?}");
    let repo = srv.allowed_root.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    std::fs::write(repo.join("f"), "the directory's\n").unwrap();

    let s = lend(&srv, &repo).await.unwrap();
    assert_ne!(s.session_id, warm[0], "not the warm container");
    let ran = run(&srv.client, &s.session_id, "cat f", 30_000).await;
    assert_eq!(ran.stdout(), "the directory's\n");
    let until = Instant::now() + Duration::from_secs(30);
    while container_sessions(&srv).contains(&warm[0]) {
        assert!(Instant::now() < until, "the unusable warm container stayed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(srv.registry.lent_pool_ready(), 0);
    assert_eq!(
        srv.registry.lent_pool_size(),
        0,
        "no more warm containers are made"
    );
    assert_eq!(container_sessions(&srv), vec![s.session_id.clone()]);
    srv.stop().await;
}

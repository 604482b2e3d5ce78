//! Another user of the host (`nobody` here): a set-id file a command
//! planted is useless to them, the service's state and workspaces are
//! closed to them, and a state directory they prepared is refused.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common;
use crate::common::{TestServer, run};
use sandboxd::pb;

/// Runs `script` as `nobody` (uid 65534), the unprivileged local user.
fn as_nobody(script: &str) -> std::process::Output {
    Command::new("su")
        .args(["nobody", "-s", "/bin/sh", "-c", script])
        .output()
        .unwrap()
}

/// A set-user-id shell planted by a command is of no use to another user of
/// the host: the workspace is not reachable by them, and its filesystem
/// ignores set-id bits anyway.
#[tokio::test]
async fn planted_setuid_files_are_useless_on_the_host() {
    let srv = TestServer::with_docker().await;
    let (sid, ws) = srv.session().await;
    let plant = "cp /bin/sh suidsh && chmod 4755 suidsh && mkdir sgid && chmod 2777 sgid && cp /bin/sh sgid/sh && chmod 6755 sgid/sh && ls -l suidsh sgid/sh";
    let ran = run(&srv.client, &sid, plant, 20_000).await;
    assert_eq!(ran.exit.exit_code, 0, "{}", ran.stderr());
    assert!(ran.stdout().contains("rws"), "{}", ran.stdout());
    for file in ["suidsh", "sgid/sh"] {
        let path = ws.join(file);
        // Another user cannot even reach it...
        let out = Command::new("su")
            .args(["nobody", "-s", "/bin/sh", "-c"])
            .arg(format!("{} -p -c id", path.display()))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "nobody ran {file}: {said}");
        assert!(!said.contains("euid="), "{said}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("Permission denied"), "{err}");
    }
    // ...and the filesystem holding it is mounted nosuid, on the host and in
    // the container.
    let st = rustix::fs::statvfs(&ws).unwrap();
    assert!(st.f_flag.contains(rustix::fs::StatVfsMountFlags::NOSUID));
    let mounts = run(
        &srv.client,
        &sid,
        "grep ' /workspace ' /proc/mounts",
        20_000,
    )
    .await;
    assert!(mounts.stdout().contains("nosuid"), "{}", mounts.stdout());
    // Even root's copy of the path to the workspace passes only through
    // directories closed to others.
    let mut dir = ws.parent();
    let mut closed = false;
    while let Some(d) = dir {
        if std::fs::metadata(d).unwrap().mode() & 0o011 == 0 {
            closed = true;
            break;
        }
        dir = d.parent();
    }
    assert!(
        closed,
        "some directory above the workspace is closed to others"
    );
    srv.stop().await;
}

/// The same in root's checkout, where a command works through an
/// id-mapped pin: a set-id shell it plants is stored on the host as root's
/// (a set-uid-root program on disk), so it must be, and is, reachable by
/// root alone: such a checkout is refused unless a directory above it is
/// closed to others, and the pin ignores set-id bits in the container.
#[tokio::test]
async fn planted_setuid_files_in_a_root_checkout_are_useless_on_the_host() {
    let srv = TestServer::with_docker().await;
    let allowed = srv.allowed_root.path();
    let repo = allowed.join("repo");
    std::fs::create_dir(&repo).unwrap();
    std::fs::set_permissions(&repo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let lend = || {
        let mut client = srv.client.clone();
        let req = pb::CreateSessionRequest {
            workspace_path: repo.display().to_string(),
            ..Default::default()
        };
        async move { client.create_session(req).await }
    };
    // Nothing above root's checkout closed to others: refused.
    std::fs::set_permissions(allowed, std::fs::Permissions::from_mode(0o755)).unwrap();
    common::assert_refused_unchanged(lend(), "INVALID_WORKSPACE", &repo).await;
    std::fs::set_permissions(allowed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let sid = lend().await.unwrap().into_inner().session_id;
    let plant = "cp /bin/sh suidsh && chmod 4755 suidsh && mkdir sgid && chmod 2777 sgid && cp /bin/sh sgid/sh && chmod 6755 sgid/sh && chmod 777 . && ls -ln suidsh sgid/sh && ./suidsh -p -c 'id -u' && sgid/sh -p -c 'id -g'";
    let ran = run(&srv.client, &sid, plant, 20_000).await;
    assert_eq!(ran.exit.exit_code, 0, "{}", ran.stderr());
    let out = ran.stdout();
    let (uid, gid) = (crate::common::UID, crate::common::GID);
    assert!(out.contains(&format!("-rwsr-xr-x 1 {uid} {gid}")), "{out}");
    // In the container the bits do nothing: the pin is nosuid.
    assert!(out.ends_with(&format!("{uid}\n{gid}\n")), "{out}");
    let mounts = run(
        &srv.client,
        &sid,
        "grep ' /workspace ' /proc/mounts",
        20_000,
    )
    .await;
    assert!(mounts.stdout().contains("nosuid"), "{}", mounts.stdout());
    for file in ["suidsh", "sgid/sh"] {
        let path = repo.join(file);
        // On disk it is a set-id program of root's...
        let md = std::fs::metadata(&path).unwrap();
        assert_eq!((md.uid(), md.gid()), (0, 0), "{file}");
        assert_ne!(md.mode() & 0o4000, 0, "{file}");
        // ...that another user of the host cannot reach, even though the
        // command opened the checkout itself to everyone.
        let out = as_nobody(&format!("{} -p -c id", path.display()));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "nobody ran {file}: {said}");
        assert!(!said.contains("euid="), "{said}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("Permission denied"), "{err}");
    }
    assert_eq!(std::fs::metadata(&repo).unwrap().mode() & 0o777, 0o777);
    assert_eq!(std::fs::metadata(allowed).unwrap().mode() & 0o777, 0o700);
    srv.stop().await;
}

/// A file of a lent checkout that is hard-linked from outside it (a public
/// file linked in by hand, or the objects a local `git clone` shares with
/// its source) is the same file there: a command could rewrite it or make
/// it set-uid, root's in a root checkout. Such a checkout is refused before
/// any command runs; the same tree without shared files is lent.
/// Host processes running as `uid`.
fn processes_of(uid: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let real = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().next()?.parse::<u32>().ok());
        if real == Some(uid) {
            pids.push(pid);
        }
    }
    pids
}

/// Commands run as a uid no host account has, so no other user of the
/// host can reach them: not through `/proc/<pid>/root` (the container's
/// view, the workspace, root's checkout through its id-mapped pin), not by
/// signals. Tried as `nobody` and as uid 1000, the first account of a
/// typical host (and the uid commands once ran as), over a fresh
/// workspace and over root's checkout.
#[tokio::test]
async fn no_host_user_can_reach_a_running_command() {
    let srv = TestServer::with_docker().await;
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    assert!(
        !passwd
            .lines()
            .any(|l| l.split(':').nth(2) == Some(&common::UID.to_string())),
        "an account has the commands' uid"
    );
    let repo = srv.allowed_root.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    std::fs::write(repo.join("secret.txt"), "root's\n").unwrap();
    std::fs::set_permissions(
        repo.join("secret.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let (fresh, _) = srv.session().await;
    let lent = srv.lend(&repo).await.session_id;
    for sid in [&fresh, &lent] {
        let before = processes_of(common::UID);
        run(
            &srv.client,
            sid,
            "nohup sleep 300 >/dev/null 2>&1 &",
            20_000,
        )
        .await;
        let sleepers: Vec<u32> = processes_of(common::UID)
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        assert!(
            !sleepers.is_empty(),
            "the command's processes run as uid {}",
            common::UID
        );
        for pid in sleepers {
            let probe = format!(
                "ls /proc/{pid}/root/workspace 2>/dev/null && echo listed; \
                 cat /proc/{pid}/root/workspace/secret.txt 2>/dev/null && echo read; \
                 touch /proc/{pid}/root/workspace/planted 2>/dev/null && echo wrote; \
                 kill -STOP {pid} 2>/dev/null && echo stopped; \
                 kill -0 {pid} 2>/dev/null && echo signalled; echo probed"
            );
            let as_nobody = as_nobody(&probe);
            let as_1000 = Command::new("setpriv")
                .args([
                    "--reuid=1000",
                    "--regid=1000",
                    "--clear-groups",
                    "sh",
                    "-c",
                    &probe,
                ])
                .output()
                .unwrap();
            for out in [as_nobody, as_1000] {
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    "probed\n",
                    "pid {pid}"
                );
            }
        }
        assert!(!repo.join("planted").exists());
    }
    srv.stop().await;
}

#[tokio::test]
async fn a_checkout_sharing_files_with_the_outside_is_refused() {
    let srv = TestServer::with_docker().await;
    let allowed = srv.allowed_root.path();
    let public = tempfile::tempdir().unwrap();
    std::fs::set_permissions(public.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let tool = public.path().join("tool");
    std::fs::write(&tool, "#!/bin/sh\necho v1\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let lend = |dir: std::path::PathBuf| {
        let mut client = srv.client.clone();
        let req = pb::CreateSessionRequest {
            workspace_path: dir.display().to_string(),
            ..Default::default()
        };
        async move { client.create_session(req).await }
    };

    // A public file linked into root's checkout.
    let linked = allowed.join("linked");
    std::fs::create_dir(&linked).unwrap();
    std::fs::hard_link(&tool, linked.join("tool")).unwrap();
    let refused =
        common::assert_refused_unchanged(lend(linked.clone()), "INVALID_WORKSPACE", &linked).await;
    assert!(
        refused.message().contains("tool") && refused.message().contains("hard links"),
        "{}",
        refused.message()
    );
    assert_eq!(
        std::fs::read_to_string(&tool).unwrap(),
        "#!/bin/sh\necho v1\n"
    );
    assert_eq!(std::fs::metadata(&tool).unwrap().mode() & 0o7777, 0o755);

    // A local clone shares its objects with the source repository.
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.email=ci@example.com", "-c", "user.name=ci"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    let source = public.path().join("source");
    git(&["init", "-q", &source.display().to_string()]);
    std::fs::write(source.join("calc.py"), "x = 1\n").unwrap();
    git(&["-C", &source.display().to_string(), "add", "calc.py"]);
    git(&[
        "-C",
        &source.display().to_string(),
        "commit",
        "-q",
        "-m",
        "calc",
    ]);
    let clone = allowed.join("clone");
    git(&[
        "clone",
        "-q",
        &source.display().to_string(),
        &clone.display().to_string(),
    ]);
    common::assert_refused_unchanged(lend(clone.clone()), "INVALID_WORKSPACE", &clone).await;
    let own = allowed.join("own");
    git(&[
        "clone",
        "-q",
        "--no-hardlinks",
        &source.display().to_string(),
        &own.display().to_string(),
    ]);
    let s = lend(own).await.unwrap().into_inner();
    let ran = run(
        &srv.client,
        &s.session_id,
        "git status --short && echo ok",
        20_000,
    )
    .await;
    assert_eq!(ran.stdout(), "ok\n", "{}", ran.stderr());
    srv.stop().await;
}

/// Another user of the host can neither list the sessions, nor reach a
/// supervisor's socket, nor a workspace, while commands run.
#[tokio::test]
async fn another_local_user_cannot_reach_the_service_state() {
    let srv = TestServer::with_docker().await;
    let (sid, ws) = srv.session().await;
    run(&srv.client, &sid, "echo secret > notes.txt", 20_000).await;
    let state = srv.state_dir();
    assert_eq!(std::fs::metadata(&state).unwrap().mode() & 0o777, 0o700);
    // While a command runs (and whenever a socket might exist).
    let client = srv.client.clone();
    let id = sid.clone();
    let running =
        tokio::spawn(async move { run(&client, &id, "sleep 3; echo done", 20_000).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    for script in [
        format!("ls {}", state.display()),
        format!("ls {}/run", state.display()),
        format!("ls {}/run/{sid}", state.display()),
        format!("cat {}/notes.txt", ws.display()),
        format!(
            "python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"{}/run/{sid}/sock\")'",
            state.display()
        ),
    ] {
        let out = as_nobody(&script);
        assert!(!out.status.success(), "nobody could: {script}: {out:?}");
    }
    assert_eq!(running.await.unwrap().stdout(), "done\n");
    srv.stop().await;
}

/// A state directory another user prepared (say in /tmp, before the
/// service starts) is refused, and so is one with an open mode: the service
/// will not start on it.
#[tokio::test]
async fn the_service_refuses_a_state_directory_another_user_controls() {
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let planted = base.path().join("state");
    let made = as_nobody(&format!(
        "mkdir -m 700 {0} && mkdir -m 777 {0}/run {0}/workspaces",
        planted.display()
    ));
    assert!(made.status.success(), "{made:?}");
    let serve = |dir: &Path| {
        Command::new(common::SANDBOXD)
            .args(["serve", "--listen", "127.0.0.1:0", "--pool-size", "0"])
            .args(["--docker-host", common::NO_DOCKER])
            .arg("--state-dir")
            .arg(dir)
            .output()
            .unwrap()
    };
    let out = serve(&planted);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unsafe") && err.contains("owned by uid 65534"),
        "{err}"
    );
    // Nothing of the service's went in there.
    assert!(!planted.join("volumes").exists());
    // An open mode is refused too, with the fix named.
    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = serve(&open);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 700"));
}

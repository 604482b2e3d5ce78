//! Real checkouts as CI has them: a repository owned by root (or any uid
//! other than the one commands run as) still works with git inside the
//! sandbox, and commands can write a root-owned checkout through an
//! id-mapped pin without its owner ever changing on the host.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use crate::common::{TestServer, run, unmount_under};
use sandboxd::pb;

/// Runs git on the host in `repo`, as the test (root).
fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["-c", "user.email=ci@example.com", "-c", "user.name=ci"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository at `repo` made on the host by root, as a CI job's checkout
/// is: `calc.py` committed once.
fn root_checkout(repo: &Path) {
    std::fs::create_dir(repo).unwrap();
    std::fs::write(repo.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    git(repo, &["init", "-q"]);
    git(repo, &["add", "calc.py"]);
    git(repo, &["commit", "-q", "-m", "calc"]);
    let md = std::fs::metadata(repo.join("calc.py")).unwrap();
    assert_eq!(
        (md.uid(), md.gid()),
        (0, 0),
        "the test makes root's checkout"
    );
}

/// Every (uid, path) under `dir` whose owner is not root, `.git` included.
fn not_roots(dir: &Path) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let md = std::fs::symlink_metadata(&path).unwrap();
            if md.uid() != 0 || md.gid() != 0 {
                found.push((md.uid(), path.display().to_string()));
            }
            if md.is_dir() {
                stack.push(path);
            }
        }
    }
    found
}

/// git refuses a repository whose owner differs from the caller ("dubious
/// ownership"); in the sandbox every repository is the one being worked on,
/// so git must just work there.
#[tokio::test]
async fn git_works_in_a_checkout_owned_by_another_user() {
    let srv = TestServer::with_docker().await;
    let repo = srv.allowed_root.path().join("repo");
    root_checkout(&repo);
    std::fs::write(repo.join("calc.py"), "def add(a, b):\n    return a + b\n").unwrap();
    let s = srv.lend(&repo).await;
    let ran = run(
        &srv.client,
        &s.session_id,
        "id -u; git status --short && git diff --stat && git log --oneline | wc -l",
        20_000,
    )
    .await;
    assert_eq!(ran.exit.exit_code, 0, "{}{}", ran.stdout(), ran.stderr());
    assert!(!ran.stderr().contains("dubious"), "{}", ran.stderr());
    let out = ran.stdout();
    assert!(
        !out.starts_with("0\n"),
        "the checkout is root's, commands are not: {out}"
    );
    assert!(out.contains(" M calc.py"), "{out}");
    assert!(out.contains("calc.py | 2 +-"), "{out}");
    assert!(out.ends_with("1\n"), "{out}");
    srv.stop().await;
}

/// In root's checkout, commands (uid 1000, no capabilities) change a file
/// root owns, create files and caches (what pytest's cache warning was
/// about), and commit with git; on the host everything they made is root's,
/// so the tree keeps its one owner and nothing was chowned.
#[tokio::test]
async fn commands_write_a_root_owned_checkout_and_what_they_make_stays_roots() {
    let srv = TestServer::with_docker().await;
    let repo = srv.allowed_root.path().join("repo");
    root_checkout(&repo);
    let s = srv.lend(&repo).await;
    assert!(s.notes.is_empty(), "{:?}", s.notes);
    // What pytest does with its cache, without pytest (not in the image).
    let pytest_cache = "import json, os\n\
        os.makedirs('.pytest_cache/v/cache', exist_ok=True)\n\
        open('.pytest_cache/CACHEDIR.TAG', 'w').write('Signature: 8a477f597d28d172789f06886806bc55\\n')\n\
        json.dump({'test_calc.py::test_add': True}, open('.pytest_cache/v/cache/lastfailed', 'w'))\n\
        print('cache', json.load(open('.pytest_cache/v/cache/lastfailed')))";
    let script = format!(
        "set -e; id -u; id -G\n\
         sed -i 's/a - b/a + b/' calc.py\n\
         echo 'import calc' > test_calc.py\n\
         mkdir -p .cache/x && echo > .cache/x/f\n\
         python3 -c \"{pytest_cache}\"\n\
         stat -c '%u:%g %n' . calc.py test_calc.py .cache/x/f .git/index\n\
         git status --short --untracked-files=all\n\
         git diff --stat\n\
         git add -A && git -c user.email=agent@example.com -c user.name=agent commit -qm fix\n\
         git log --oneline | wc -l"
    );
    let ran = run(&srv.client, &s.session_id, &script, 30_000).await;
    assert_eq!(ran.exit.exit_code, 0, "{}{}", ran.stdout(), ran.stderr());
    let out = ran.stdout();
    let (uid, gid) = (crate::common::UID, crate::common::GID);
    assert!(
        out.starts_with(&format!("{uid}\n{gid}\n")),
        "commands are not root: {out}"
    );
    // Inside, root's checkout is the command's own.
    for name in [".", "calc.py", "test_calc.py", ".cache/x/f", ".git/index"] {
        assert!(
            out.contains(&format!("{uid}:{gid} {name}\n")),
            "{name}: {out}"
        );
    }
    assert!(
        out.contains("cache {'test_calc.py::test_add': True}"),
        "{out}"
    );
    assert!(out.contains(" M calc.py\n"), "{out}");
    assert!(out.contains("?? test_calc.py\n"), "{out}");
    assert!(out.contains("?? .cache/x/f\n"), "{out}");
    assert!(out.contains("calc.py | 2 +-"), "{out}");
    assert!(out.ends_with("2\n"), "{out}");
    // On the host: the change landed, and everything is still root's.
    assert_eq!(
        std::fs::read_to_string(repo.join("calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
    for made in [
        "test_calc.py",
        ".cache/x/f",
        ".pytest_cache/v/cache/lastfailed",
    ] {
        let md = std::fs::metadata(repo.join(made)).unwrap();
        assert_eq!((md.uid(), md.gid()), (0, 0), "{made}");
    }
    assert_eq!(not_roots(&repo), Vec::<(u32, String)>::new());
    let log = git(&repo, &["log", "--format=%an %s"]);
    assert_eq!(log, "agent fix\nci calc\n");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    srv.stop().await;
}

/// Where the host cannot id-map a root-owned checkout (here: it lies on a
/// ramfs, which has no id-mapped mounts), the session still opens, says
/// why its commands cannot write root's files, and nothing is chowned.
#[tokio::test]
async fn a_root_checkout_that_cannot_be_idmapped_still_opens_and_says_why() {
    let srv = TestServer::with_docker().await;
    let dir = srv.allowed_root.path().join("ram");
    std::fs::create_dir(&dir).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "ramfs", "ramfs"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(mounted.success());
    // Unmounted before the allowed root is removed, also on a panic.
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            unmount_under(self.0);
        }
    }
    let _unmount = Unmount(&dir);
    std::fs::write(dir.join("calc.py"), "x = 1\n").unwrap();
    let s = srv.lend(&dir).await;
    assert_eq!(s.notes.len(), 1, "{:?}", s.notes);
    let note = &s.notes[0];
    assert!(
        note.contains("could not be id-mapped")
            && note.contains(&format!("uid {}", crate::common::UID)),
        "{note}"
    );
    let ran = run(
        &srv.client,
        &s.session_id,
        "id -u; cat calc.py; echo y >> calc.py || echo refused",
        20_000,
    )
    .await;
    assert_eq!(
        ran.stdout(),
        format!("{}\nx = 1\nrefused\n", crate::common::UID),
        "{}",
        ran.stderr()
    );
    let got = srv
        .client
        .clone()
        .get_session(pb::GetSessionRequest {
            session_id: s.session_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.notes, s.notes);
    assert_eq!(not_roots(&dir), Vec::<(u32, String)>::new());
    let md = std::fs::metadata(&dir).unwrap();
    assert_eq!((md.uid(), md.gid()), (0, 0));
    srv.stop().await;
}

/// Unmounts a test's own bind mount, also when an assertion fails.
struct Bound(std::path::PathBuf);

impl Drop for Bound {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A directory the host lends read-only and `noexec` (a bind mount) stays
/// so through the pin, id-mapped or not: a command in the sandbox can
/// neither change a file, nor create one, nor run one there.
#[tokio::test]
async fn a_read_only_noexec_checkout_stays_so_for_its_commands() {
    let srv = TestServer::with_docker().await;
    let source = srv.allowed_root.path().join("source");
    std::fs::create_dir(&source).unwrap();
    std::fs::write(source.join("calc.py"), "x = 1\n").unwrap();
    std::fs::write(source.join("run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(
        source.join("run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let repo = srv.allowed_root.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let mount = |args: &[&str]| {
        let out = Command::new("mount").args(args).output().unwrap();
        assert!(out.status.success(), "mount {args:?}: {out:?}");
    };
    mount(&["--bind", source.to_str().unwrap(), repo.to_str().unwrap()]);
    let bound = Bound(repo.clone());
    mount(&["-o", "remount,bind,ro,noexec", repo.to_str().unwrap()]);
    let s = srv.lend(&repo).await;
    let ran = run(
        &srv.client,
        &s.session_id,
        "cat calc.py; echo y >> calc.py && echo wrote || echo refused; \
         touch new && echo made || echo not-made; \
         ./run.sh && echo executed || echo not-executed",
        20_000,
    )
    .await;
    assert_eq!(
        ran.stdout(),
        "x = 1\nrefused\nnot-made\nnot-executed\n",
        "{}",
        ran.stderr()
    );
    assert_eq!(std::fs::read(source.join("calc.py")).unwrap(), b"x = 1\n");
    assert!(!source.join("new").exists());
    drop(bound);
    srv.stop().await;
}

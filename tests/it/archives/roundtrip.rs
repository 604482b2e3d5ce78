//! A repository uploaded, changed by the file tools and by a command,
//! downloaded again, and its changes applied with `git apply` to a pristine
//! copy; uploads that merge into the workspace.

use crate::common::{TestServer, edit, edit_req, git, run};
use sandboxd::pb;

use super::*;

#[tokio::test]
async fn a_repository_goes_in_is_changed_and_comes_out_as_archive_and_patch() {
    let server = TestServer::with_docker().await;
    let (id, ws) = server.session().await;
    // A repository on "another machine".
    let repo = tempfile::tempdir().unwrap();
    let r = repo.path();
    std::fs::create_dir_all(r.join("src")).unwrap();
    std::fs::write(r.join("src/calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(
        r.join("test_calc.py"),
        "from src.calc import add\nassert add(2, 3) == 5\n",
    )
    .unwrap();
    std::fs::write(r.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(r.join("build.sh"), "#!/bin/sh\necho build\n").unwrap();
    std::fs::set_permissions(r.join("build.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/calc.py", r.join("calc.py")).unwrap();
    git(r, &["init", "-q"]);
    git(r, &["add", "-A"]);
    git(r, &["commit", "-qm", "init"]);

    let up = upload(&server, &id, "", tar_of(r, true)).await.unwrap();
    assert_eq!((up.symlinks, up.replaced), (1, 0), "{up:?}");
    assert!(up.files >= 5, "{up:?}");
    assert_eq!(files(&ws), files(r));

    // Red, then a fix through the file tools and changes by a command.
    let red = run(&server.client, &id, "python3 test_calc.py", 30_000).await;
    assert_ne!(red.exit.exit_code, 0);
    server
        .client
        .clone()
        .edit_file(edit_req(&id, "src/calc.py", vec![edit("a - b", "a + b")]))
        .await
        .unwrap();
    let cmd = "set -e; python3 test_calc.py; echo '# notes' > NOTES.md; rm build.sh; echo x > run.log; git status --short > /dev/null";
    let green = run(&server.client, &id, cmd, 30_000).await;
    assert_eq!(green.exit.exit_code, 0, "{}", green.stderr());

    // The archive out holds the workspace as it is.
    let (tarball, done) = download(&server, &id, "", false, true).await.unwrap();
    let out = untar(&tarball, true);
    assert_eq!(files(out.path()), files(&ws));
    assert_eq!(done.symlinks, 1);
    assert!(done.skipped.is_empty(), "{done:?}");
    // gitignore mode leaves out run.log and .git.
    let (plain, _) = download(&server, &id, "", true, false).await.unwrap();
    let out2 = untar(&plain, false);
    assert!(!out2.path().join("run.log").exists() && !out2.path().join(".git").exists());
    assert!(out2.path().join("NOTES.md").exists());

    // The patch turns a pristine copy into the workspace.
    let changes = server
        .client
        .clone()
        .get_changes(pb::GetChangesRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let listed: Vec<&str> = changes.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(
        listed,
        ["NOTES.md", "build.sh", "run.log", "src/calc.py"],
        "{}",
        changes.message
    );
    let patch = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(patch.path(), &changes.patch).unwrap();
    let applied = Command::new("git")
        .arg("apply")
        .arg(patch.path())
        .current_dir(r)
        .output()
        .unwrap();
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let without_git = |m: BTreeMap<String, (bool, Vec<u8>)>| -> BTreeMap<String, (bool, Vec<u8>)> {
        m.into_iter()
            .filter(|(k, _)| !k.starts_with(".git/"))
            .collect()
    };
    assert_eq!(without_git(files(r)), without_git(files(&ws)));
    server.stop().await;
}

#[tokio::test]
async fn an_upload_merges_into_a_directory_replaces_files_and_drops_set_id_bits() {
    let server = TestServer::start().await;
    let (id, ws) = server.session().await;
    std::fs::create_dir_all(ws.join("app/keep")).unwrap();
    std::fs::write(ws.join("app/keep/old.txt"), "old\n").unwrap();
    std::fs::write(ws.join("app/main.py"), "print(1)\n").unwrap();

    let mut b = tar::Builder::new(Vec::new());
    let file = |b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8], mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, path, data).unwrap();
    };
    file(&mut b, "main.py", b"print(2)\n", 0o644);
    file(&mut b, "bin/tool", b"#!/bin/sh\n", 0o4755);
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Link);
    h.set_size(0);
    b.append_link(&mut h, "bin/tool-again", "bin/tool").unwrap();
    let up = upload(&server, &id, "/workspace/app", b.into_inner().unwrap())
        .await
        .unwrap();
    assert_eq!((up.files, up.replaced, up.stripped), (3, 1, 1), "{up:?}");
    assert_eq!(up.destination, "/workspace/app");
    assert_eq!(
        std::fs::read_to_string(ws.join("app/main.py")).unwrap(),
        "print(2)\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("app/keep/old.txt")).unwrap(),
        "old\n"
    );
    let mode = std::fs::metadata(ws.join("app/bin/tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    assert_eq!(
        std::fs::read(ws.join("app/bin/tool-again")).unwrap(),
        b"#!/bin/sh\n"
    );
    server.stop().await;
}

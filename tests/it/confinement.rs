//! Every file tool stays inside the workspace: `..`, absolute paths, NUL
//! bytes and symlinks planted inside the workspace (to files or directories,
//! with relative or absolute targets) are refused, and nothing outside is
//! read or written.

use std::os::unix::fs::symlink;
use std::path::Path;

use crate::common::{
    TestServer, assert_refused, assert_refused_unchanged, edit, edit_req, read_req, snapshot,
};
use sandboxd::pb;

/// A workspace with planted escape routes, next to a secret outside it.
struct Planted {
    outside: tempfile::TempDir,
}

fn plant(ws: &Path) -> Planted {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "TOP SECRET\n").unwrap();
    std::fs::write(ws.join("inside.txt"), "inside\n").unwrap();
    // File symlinks: absolute target, relative target climbing out.
    symlink(outside.path().join("secret.txt"), ws.join("abs_file_link")).unwrap();
    symlink("/etc/passwd", ws.join("passwd_link")).unwrap();
    let rel = pathdiff(outside.path().join("secret.txt"), ws);
    symlink(&rel, ws.join("rel_file_link")).unwrap();
    // Directory symlinks: to the outside dir, to the parent, to /.
    symlink(outside.path(), ws.join("abs_dir_link")).unwrap();
    symlink("..", ws.join("parent_link")).unwrap();
    symlink("/", ws.join("root_link")).unwrap();
    std::fs::create_dir(ws.join("sub")).unwrap();
    symlink("../..", ws.join("sub/up2")).unwrap();
    Planted { outside }
}

/// `target` expressed relative to `from` (both absolute).
fn pathdiff(target: std::path::PathBuf, from: &Path) -> std::path::PathBuf {
    let depth = from.components().count() - 1;
    let mut p = std::path::PathBuf::new();
    for _ in 0..depth {
        p.push("..");
    }
    p.join(target.strip_prefix("/").unwrap())
}

const ESCAPES: &[&str] = &[
    "abs_file_link",
    "passwd_link",
    "rel_file_link",
    "abs_dir_link/secret.txt",
    "parent_link/x.txt",
    "root_link/etc/passwd",
    "sub/up2/etc/passwd",
    "../outside.txt",
    "sub/../../outside.txt",
    "/etc/passwd",
];

#[tokio::test]
async fn reads_through_escaping_paths_are_refused() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    let _planted = plant(&ws);
    let mut c = srv.client.clone();
    for path in ESCAPES {
        let read = c.read_file(read_req(&sid, path));
        let err = assert_refused(read, "PATH_OUTSIDE_WORKSPACE").await;
        assert!(!err.message().contains("TOP SECRET") && !err.message().contains("root:"));
    }
    srv.stop().await;
}

#[tokio::test]
async fn writes_through_escaping_paths_are_refused_and_nothing_changes() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    let planted = plant(&ws);
    let inside_before = snapshot(&ws);
    let outside_before = snapshot(planted.outside.path());
    let passwd_before = std::fs::read("/etc/passwd").unwrap();
    let mut c = srv.client.clone();
    for path in ESCAPES {
        let req = edit_req(&sid, path, vec![edit("TOP SECRET", "LEAKED")]);
        assert_refused_unchanged(c.edit_file(req), "PATH_OUTSIDE_WORKSPACE", &ws).await;
    }
    for path in [
        "abs_dir_link/new.txt",
        "parent_link/new.txt",
        "root_link/tmp/sandboxd-escape.txt",
        "sub/up2/new.txt",
        "../new.txt",
        "/tmp/sandboxd-escape.txt",
        "abs_dir_link/deeper/new.txt",
    ] {
        let req = pb::CreateFileRequest {
            session_id: sid.clone(),
            path: path.into(),
            content: "x".into(),
        };
        assert_refused_unchanged(c.create_file(req), "PATH_OUTSIDE_WORKSPACE", &ws).await;
    }
    // Creating over a planted (even dangling) link is refused as existing.
    let req = pb::CreateFileRequest {
        session_id: sid.clone(),
        path: "abs_file_link".into(),
        content: "x".into(),
    };
    assert_refused_unchanged(c.create_file(req), "FILE_EXISTS", &ws).await;
    assert_eq!(snapshot(&ws), inside_before);
    assert_eq!(snapshot(planted.outside.path()), outside_before);
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd_before);
    assert!(!Path::new("/tmp/sandboxd-escape.txt").exists());
    srv.stop().await;
}

#[tokio::test]
async fn listing_and_searching_do_not_follow_escaping_links() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    let _planted = plant(&ws);
    let mut c = srv.client.clone();
    for path in [
        "abs_dir_link",
        "parent_link",
        "root_link",
        "sub/up2",
        "..",
        "/",
    ] {
        let req = pb::ListDirRequest {
            session_id: sid.clone(),
            path: path.into(),
        };
        assert_refused(c.list_dir(req), "PATH_OUTSIDE_WORKSPACE").await;
    }
    // A recursive search from the root lists links but never walks them.
    let found = srv
        .client
        .clone()
        .search_files(pb::SearchFilesRequest {
            session_id: sid.clone(),
            pattern: "TOP SECRET|root:".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(found.matches.is_empty(), "{:?}", found.matches);
    let found = srv
        .client
        .clone()
        .find_files(pb::FindFilesRequest {
            session_id: sid.clone(),
            pattern: "*".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(found.paths, ["inside.txt"]);
    srv.stop().await;
}

#[tokio::test]
async fn symlinks_that_stay_inside_are_followed_and_kept() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/real.txt"), "hello\n").unwrap();
    symlink("src/real.txt", ws.join("alias.txt")).unwrap();
    symlink("src", ws.join("srcdir")).unwrap();
    let read = srv
        .client
        .clone()
        .read_file(read_req(&sid, "alias.txt"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.content, "hello\n");
    srv.client
        .clone()
        .edit_file(edit_req(&sid, "alias.txt", vec![edit("hello", "bye")]))
        .await
        .unwrap();
    // The target changed; the link is still a link.
    assert_eq!(
        std::fs::read_to_string(ws.join("src/real.txt")).unwrap(),
        "bye\n"
    );
    assert!(
        std::fs::symlink_metadata(ws.join("alias.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    srv.client
        .clone()
        .edit_file(edit_req(&sid, "srcdir/real.txt", vec![edit("bye", "ciao")]))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("src/real.txt")).unwrap(),
        "ciao\n"
    );
    srv.stop().await;
}

#[tokio::test]
async fn malformed_and_absolute_paths() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let mut c = srv.client.clone();
    assert_refused(c.read_file(read_req(&sid, "a\0.txt")), "INVALID_PATH").await;
    // Absolute paths inside the workspace (host or container spelling) work.
    let host = ws.join("a.txt").display().to_string();
    srv.client
        .clone()
        .read_file(read_req(&sid, &host))
        .await
        .unwrap();
    srv.client
        .clone()
        .read_file(read_req(&sid, "/workspace/a.txt"))
        .await
        .unwrap();
    // `..` that stays inside is fine.
    srv.client
        .clone()
        .read_file(read_req(&sid, "sub/../a.txt"))
        .await
        .unwrap();
    let read = c.read_file(read_req(&sid, "/workspace/../etc/passwd"));
    assert_refused(read, "PATH_OUTSIDE_WORKSPACE").await;
    let req = pb::CreateFileRequest {
        session_id: sid.clone(),
        path: ".".into(),
        content: "x".into(),
    };
    assert_refused_unchanged(c.create_file(req), "INVALID_PATH", &ws).await;
    srv.stop().await;
}

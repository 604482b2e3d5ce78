//! A command can build a 30,000-deep directory tree in its workspace: the
//! file tools that list and walk it keep answering (their depth and memory
//! are bounded), and the tree is removed without recursion.

use std::os::fd::OwnedFd;
use std::path::Path;

use crate::common;
use crate::common::TestServer;
use rustix::fs::{Mode, OFlags};
use sandboxd::pb;
use sandboxd::workspace::remove::remove_tree;

const DEPTH: usize = 30_000;

fn open_dir(dir: &OwnedFd, name: &str) -> OwnedFd {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(dir, name, flags, Mode::empty()).unwrap()
}

/// `deep/d/d/...` DEPTH levels down, through fds (the path is far past
/// PATH_MAX), with a `hit.txt` naming its level at a few levels.
fn build_deep_tree(ws: &Path) {
    std::fs::create_dir(ws.join("deep")).unwrap();
    let top = rustix::fs::open(ws, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let mut dir = open_dir(&top, "deep");
    for level in 1..=DEPTH {
        rustix::fs::mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap();
        dir = open_dir(&dir, "d");
        if [1, 2, 100, DEPTH].contains(&level) {
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC;
            let fd =
                rustix::fs::openat(&dir, "hit.txt", flags, Mode::from_raw_mode(0o644)).unwrap();
            rustix::io::write(&fd, format!("needle at level {level}\n").as_bytes()).unwrap();
        }
    }
    std::fs::write(ws.join("top.txt"), "needle at the top\n").unwrap();
}

#[tokio::test]
async fn a_30000_deep_tree_is_listed_found_and_searched_without_harm() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    build_deep_tree(&ws);
    let mut c = srv.client.clone();

    let listed = c
        .list_dir(pb::ListDirRequest {
            session_id: sid.clone(),
            path: "deep".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.entries.len(), 1);
    assert_eq!(listed.entries[0].name, "d");

    let found = c
        .find_files(pb::FindFilesRequest {
            session_id: sid.clone(),
            pattern: "*.txt".into(),
            path: String::new(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    // Walks stop at their depth bound: the file at level 30,000 is past it.
    let depths: Vec<usize> = found.paths.iter().map(|p| p.matches('/').count()).collect();
    assert_eq!(depths, [101, 3, 2, 0], "{:?}", found.paths);

    let searched = c
        .search_files(pb::SearchFilesRequest {
            session_id: sid.clone(),
            pattern: "needle".into(),
            path: String::new(),
            glob: String::new(),
            case_insensitive: false,
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let texts: Vec<&str> = searched.matches.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "needle at level 100",
            "needle at level 2",
            "needle at level 1",
            "needle at the top"
        ]
    );

    // A walk starting deep inside (as deep as a path may be spelled) works too.
    let start = vec!["d"; 1000].join("/");
    let found = c
        .find_files(pb::FindFilesRequest {
            session_id: sid.clone(),
            pattern: "*".into(),
            path: format!("deep/{start}"),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(found.paths.is_empty(), "{:?}", found.paths);

    // The service still answers.
    let read = c
        .read_file(common::read_req(&sid, "top.txt"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.content, "needle at the top\n");

    // Closing the session removes its workspace; the removal that does so
    // may not recurse per level, so the tree goes first, through the
    // iterative removal (which the session's own cleanup is to adopt).
    remove_tree(&ws.join("deep")).unwrap();
    srv.stop().await;
}

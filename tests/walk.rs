//! ListDir, FindFiles and SearchFiles: sorted, capped, .gitignore respected.

mod common;

use common::{TestServer, reason};
use sandboxd::pb;

fn project(ws: &std::path::Path) {
    for (path, text) in [
        (".gitignore", "target/\n*.log\n!keep.log\n"),
        ("src/main.rs", "fn main() {\n    println!(\"hello\");\n}\n"),
        (
            "src/lib.rs",
            "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n// TODO: sub\n",
        ),
        ("src/nested/deep.rs", "// todo: deeper\n"),
        ("src/nested/.gitignore", "generated.rs\n"),
        ("src/nested/generated.rs", "// TODO: generated\n"),
        ("target/debug/out.rs", "// TODO: build output\n"),
        ("debug.log", "TODO in a log\n"),
        ("keep.log", "TODO kept log\n"),
        ("README.md", "# Project\n"),
        (".git/config", "TODO in git\n"),
    ] {
        let p = ws.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::fs::write(ws.join("binary.bin"), b"TODO\0\x01\x02").unwrap();
}

#[tokio::test]
async fn list_dir_shows_sorted_entries_with_kinds() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    project(&ws);
    std::os::unix::fs::symlink("src/main.rs", ws.join("link.rs")).unwrap();
    let out = srv
        .client
        .clone()
        .list_dir(pb::ListDirRequest {
            session_id: sid.clone(),
            path: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<_> = out
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e.kind()))
        .collect();
    use pb::dir_entry::Kind;
    assert_eq!(
        names,
        [
            (".git", Kind::Dir),
            (".gitignore", Kind::File),
            ("README.md", Kind::File),
            ("binary.bin", Kind::File),
            ("debug.log", Kind::File),
            ("keep.log", Kind::File),
            ("link.rs", Kind::Symlink),
            ("src", Kind::Dir),
            ("target", Kind::Dir),
        ]
    );
    assert_eq!(out.entries[2].size_bytes, 10);
    let err = srv
        .client
        .clone()
        .list_dir(pb::ListDirRequest {
            session_id: sid,
            path: "README.md".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "NOT_A_DIRECTORY");
    srv.stop().await;
}

#[tokio::test]
async fn find_files_matches_globs_and_respects_gitignore() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    project(&ws);
    let find = |pattern: &str, path: &str, limit: u64| pb::FindFilesRequest {
        session_id: sid.clone(),
        pattern: pattern.into(),
        path: path.into(),
        limit,
    };
    let mut c = srv.client.clone();
    let out = c
        .find_files(find("*.rs", "", 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        out.paths,
        ["src/lib.rs", "src/main.rs", "src/nested/deep.rs"]
    );
    assert!(!out.truncated);
    let out = c
        .find_files(find("src/*.rs", "", 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.paths, ["src/lib.rs", "src/main.rs"]);
    let out = c
        .find_files(find("*.log", "", 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.paths, ["keep.log"]);
    let out = c
        .find_files(find("*.rs", "src/nested", 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.paths, ["src/nested/deep.rs"]);
    let out = c.find_files(find("*", "", 2)).await.unwrap().into_inner();
    assert_eq!(out.paths.len(), 2);
    assert!(out.truncated);
    let err = c.find_files(find("[", "", 0)).await.unwrap_err();
    assert_eq!(reason(&err), "INVALID_PATTERN");
    srv.stop().await;
}

#[tokio::test]
async fn search_files_finds_lines_skips_ignored_and_binary() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    project(&ws);
    let mut c = srv.client.clone();
    let search =
        |pattern: &str, path: &str, glob: &str, ci: bool, limit: u64| pb::SearchFilesRequest {
            session_id: sid.clone(),
            pattern: pattern.into(),
            path: path.into(),
            glob: glob.into(),
            case_insensitive: ci,
            limit,
        };
    let out = c
        .search_files(search("TODO", "", "", false, 0))
        .await
        .unwrap()
        .into_inner();
    let hits: Vec<_> = out
        .matches
        .iter()
        .map(|m| (m.path.as_str(), m.line))
        .collect();
    assert_eq!(hits, [("keep.log", 1), ("src/lib.rs", 4)]);
    assert_eq!(out.matches[1].text, "// TODO: sub");
    let out = c
        .search_files(search("todo", "", "*.rs", true, 0))
        .await
        .unwrap()
        .into_inner();
    let hits: Vec<_> = out.matches.iter().map(|m| m.path.as_str()).collect();
    assert_eq!(hits, ["src/lib.rs", "src/nested/deep.rs"]);
    // A single file can be searched directly.
    let out = c
        .search_files(search(r"a \+ b", "src/lib.rs", "", false, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.matches.len(), 1);
    assert_eq!(out.matches[0].line, 2);
    let out = c
        .search_files(search("o", "", "", false, 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.matches.len(), 1);
    assert!(out.truncated);
    let err = c
        .search_files(search("(unclosed", "", "", false, 0))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "INVALID_PATTERN");
    srv.stop().await;
}

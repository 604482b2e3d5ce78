//! ListDir, FindFiles and SearchFiles: sorted, capped, .gitignore respected.

use crate::common::{TestServer, assert_refused, assert_refused_unchanged};
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
    let mut c = srv.client.clone();
    let req = pb::ListDirRequest {
        session_id: sid,
        path: "README.md".into(),
    };
    assert_refused(c.list_dir(req), "NOT_A_DIRECTORY").await;
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
    assert_refused(c.find_files(find("[", "", 0)), "INVALID_PATTERN").await;
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
    let req = search("(unclosed", "", "", false, 0);
    assert_refused(c.search_files(req), "INVALID_PATTERN").await;
    srv.stop().await;
}

/// A command can plant a 1 MB `.gitignore` (30,000 globs): compiling it
/// cost 1.5-10 s of CPU and 390-670 MB per call. Walks refuse it, naming
/// the file and the bound, and change nothing.
#[tokio::test]
async fn a_gitignore_bomb_is_refused_naming_the_file() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    project(&ws);
    let bomb: String = (0..30_000)
        .map(|i| format!("*.generated-{i:05}-artifact.tmp\n"))
        .collect();
    std::fs::write(ws.join("src/nested/.gitignore"), &bomb).unwrap();
    let mut c = srv.client.clone();
    let find = pb::FindFilesRequest {
        session_id: sid.clone(),
        pattern: "*.rs".into(),
        path: String::new(),
        limit: 0,
    };
    let find = assert_refused_unchanged(c.find_files(find), "LIMIT_EXCEEDED", &ws).await;
    let search = pb::SearchFilesRequest {
        session_id: sid.clone(),
        pattern: "TODO".into(),
        path: "src".into(),
        glob: String::new(),
        case_insensitive: false,
        limit: 0,
    };
    let search = assert_refused_unchanged(c.search_files(search), "LIMIT_EXCEEDED", &ws).await;
    for (err, tool) in [(&find, "FindFiles"), (&search, "SearchFiles")] {
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        let msg = err.message();
        assert!(msg.starts_with(&format!("{tool} was refused")), "{msg}");
        assert!(msg.contains("src/nested/.gitignore"), "{msg}");
        assert!(msg.contains("131072 bytes"), "{msg}");
        assert!(msg.contains("Nothing was changed"), "{msg}");
        let info = tonic_types::StatusExt::get_details_error_info(err).unwrap();
        assert_eq!(info.metadata["path"], "src/nested/.gitignore");
        assert_eq!(info.metadata["field"], "ignore_file_bytes");
    }
    // Walks that do not reach it still work, and so does the rest.
    let out = c
        .find_files(pb::FindFilesRequest {
            session_id: sid.clone(),
            pattern: "*.md".into(),
            path: "target".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(out.paths.is_empty());
    // Many short rules under the byte bound are refused by their count.
    let many: String = (0..5000).map(|i| format!("*.g{i}\n")).collect();
    std::fs::write(ws.join("src/nested/.gitignore"), &many).unwrap();
    let find = pb::FindFilesRequest {
        session_id: sid.clone(),
        pattern: "*.rs".into(),
        path: "src".into(),
        limit: 0,
    };
    let err = assert_refused_unchanged(c.find_files(find), "LIMIT_EXCEEDED", &ws).await;
    assert!(
        err.message().contains("more than 1000 rules"),
        "{}",
        err.message()
    );
    srv.stop().await;
}

/// The caller's limit is clamped to the server's ceiling, whatever it says
/// (u64::MAX over many matching lines drove the service to 4 GB).
#[tokio::test]
async fn a_huge_limit_is_clamped_to_the_server_ceiling() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    let lines: String = (0..5_000).map(|i| format!("match line {i}\n")).collect();
    for i in 0..4 {
        std::fs::write(ws.join(format!("m{i}.txt")), &lines).unwrap();
    }
    let mut c = srv.client.clone();
    let out = c
        .search_files(pb::SearchFilesRequest {
            session_id: sid.clone(),
            pattern: "match".into(),
            path: String::new(),
            glob: String::new(),
            case_insensitive: false,
            limit: u64::MAX,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.matches.len(), 2_000);
    assert!(out.truncated);
    let out = c
        .find_files(pb::FindFilesRequest {
            session_id: sid.clone(),
            pattern: "*.txt".into(),
            path: String::new(),
            limit: u64::MAX,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.paths.len(), 4);
    assert!(!out.truncated);
    srv.stop().await;
}

/// Results are bounded in bytes while they are built: long paths and long
/// lines are cut off at the reply budget and marked truncated.
#[tokio::test]
async fn replies_stop_at_their_byte_budget() {
    let srv = TestServer::start_with(|config| {
        config.limits.reply_max_bytes = 20_000;
        config.limits.find_max_limit = 1_000;
    })
    .await;
    let (sid, ws) = srv.session().await;
    let dir = ws.join("a".repeat(200));
    std::fs::create_dir(&dir).unwrap();
    let line = format!("{}\n", "x".repeat(400));
    for i in 0..300 {
        std::fs::write(dir.join(format!("{}{i:03}", "f".repeat(200))), &line).unwrap();
    }
    let mut c = srv.client.clone();
    let found = c
        .find_files(pb::FindFilesRequest {
            session_id: sid.clone(),
            pattern: "*".into(),
            path: String::new(),
            limit: u64::MAX,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(found.truncated);
    let bytes: usize = found.paths.iter().map(String::len).sum();
    assert!(bytes <= 20_000, "{bytes}");
    assert!(found.paths.len() > 10 && found.paths.len() < 300);
    let searched = c
        .search_files(pb::SearchFilesRequest {
            session_id: sid.clone(),
            pattern: "x".into(),
            path: String::new(),
            glob: String::new(),
            case_insensitive: false,
            limit: u64::MAX,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(searched.truncated);
    let bytes: usize = searched
        .matches
        .iter()
        .map(|m| m.path.len() + m.text.len())
        .sum();
    assert!(bytes <= 20_000, "{bytes}");
    assert!(!searched.matches.is_empty());
    srv.stop().await;
}

/// One SearchFiles reads at most its scan budget of file contents, however
/// many files a command left; large binary or sparse files cost one small
/// read each and are never searched.
#[tokio::test]
async fn a_search_reads_at_most_its_scan_budget() {
    let srv = TestServer::start_with(|c| c.limits.search_scan_bytes = 1 << 20).await;
    let (sid, ws) = srv.session().await;
    let line = "no match here, just text\n".repeat(20_000); // 500 KB
    for i in 0..8 {
        std::fs::write(ws.join(format!("t{i}.txt")), &line).unwrap();
    }
    // Sparse files: zeros from the first byte.
    for i in 0..50 {
        let f = std::fs::File::create(ws.join(format!("sparse{i}.bin"))).unwrap();
        f.set_len(8 << 20).unwrap();
    }
    let out = srv
        .client
        .clone()
        .search_files(pb::SearchFilesRequest {
            session_id: sid.clone(),
            pattern: "needle".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(out.truncated, "the budget cut the search short");
    assert!(out.files_searched <= 2, "{}", out.files_searched);
    // Within the budget, the same search completes.
    for i in 2..8 {
        std::fs::remove_file(ws.join(format!("t{i}.txt"))).unwrap();
    }
    std::fs::write(ws.join("t0.txt"), format!("{line}needle\n")).unwrap();
    let out = srv
        .client
        .clone()
        .search_files(pb::SearchFilesRequest {
            session_id: sid,
            pattern: "needle".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!out.truncated);
    assert_eq!(out.files_searched, 2, "sparse files are not searched");
    assert_eq!(out.matches.len(), 1);
    srv.stop().await;
}

/// No FindFiles or SearchFiles runs past its time: the reply comes back
/// marked truncated (here with no time at all, the walk stops at once).
#[tokio::test]
async fn walks_stop_at_their_time_limit() {
    let srv = TestServer::start_with(|c| c.limits.walk_time = std::time::Duration::ZERO).await;
    let (sid, ws) = srv.session().await;
    project(&ws);
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
    assert!(found.truncated);
    assert!(found.paths.is_empty(), "{:?}", found.paths);
    let searched = srv
        .client
        .clone()
        .search_files(pb::SearchFilesRequest {
            session_id: sid,
            pattern: "TODO".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(searched.truncated);
    assert_eq!(searched.files_searched, 0);
    srv.stop().await;
}

/// Patterns match per line: `^`, `$` and `\b` anchor to each line, not to
/// the whole file, in LF and CRLF files alike, case-insensitively too.
#[tokio::test]
async fn anchors_match_at_every_line() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(
        ws.join("more.py"),
        "\"\"\"Doc.\"\"\"\n\nimport math\n\n\ndef windowed(seq, n):\n    return seq  # end\n\nx = 1 # the end\n",
    )
    .unwrap();
    std::fs::write(ws.join("crlf.py"), "a = 1\r\nimport os\r\nb = 2 # end\r\n").unwrap();
    let search = |pattern: &str, case_insensitive: bool| {
        let mut c = srv.client.clone();
        let req = pb::SearchFilesRequest {
            session_id: sid.clone(),
            pattern: pattern.into(),
            case_insensitive,
            ..Default::default()
        };
        async move {
            let out = c.search_files(req).await.unwrap().into_inner();
            let mut hits: Vec<(String, u64)> =
                out.matches.into_iter().map(|m| (m.path, m.line)).collect();
            hits.sort();
            hits
        }
    };
    let at = |f: &str, l: u64| (f.to_string(), l);
    assert_eq!(
        search(r"^def windowed\(", false).await,
        vec![at("more.py", 6)]
    );
    assert_eq!(
        search("^import ", false).await,
        vec![at("crlf.py", 2), at("more.py", 3)]
    );
    assert_eq!(
        search("end$", false).await,
        vec![at("crlf.py", 3), at("more.py", 7), at("more.py", 9)]
    );
    assert_eq!(search(r"\bmath\b", false).await, vec![at("more.py", 3)]);
    assert_eq!(search("^IMPORT MATH$", true).await, vec![at("more.py", 3)]);
    // Absolute anchors mean the line's too (the file is not skipped).
    assert_eq!(search(r"\Adef", false).await, vec![at("more.py", 6)]);
    srv.stop().await;
}

//! EditFile, CreateFile and ReadFile over real gRPC: refusals leave the file
//! byte-for-byte unchanged, accepted edits change exactly what was asked.

use crate::common::{
    TestServer, assert_refused, assert_refused_unchanged, edit, edit_req, read_req,
};
use sandboxd::pb;

const CALC: &str =
    "function add(a, b) {\n  return a - b;\n}\n\nfunction sub(a, b) {\n  return a - b;\n}\n";

#[tokio::test]
async fn not_found_edit_is_refused_and_file_untouched() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("calc.js"), CALC).unwrap();
    let mut c = srv.client.clone();
    let req = edit_req(
        &sid,
        "calc.js",
        vec![edit("return a * b;", "return a + b;")],
    );
    let err = assert_refused_unchanged(c.edit_file(req), "OLD_STRING_NOT_FOUND", &ws).await;
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(
        err.message().contains("cannot be found"),
        "{}",
        err.message()
    );
    assert!(
        err.message().contains("Nothing was changed"),
        "{}",
        err.message()
    );
    assert!(
        err.message().contains("Read the file again"),
        "{}",
        err.message()
    );
    srv.stop().await;
}

#[tokio::test]
async fn ambiguous_edit_reports_count_and_lines_and_file_untouched() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("calc.js"), CALC).unwrap();
    let mut c = srv.client.clone();
    let req = edit_req(
        &sid,
        "calc.js",
        vec![edit("return a - b;", "return a + b;")],
    );
    let err = assert_refused_unchanged(c.edit_file(req), "OLD_STRING_AMBIGUOUS", &ws).await;
    assert!(
        err.message().contains("occurs 2 times"),
        "{}",
        err.message()
    );
    assert!(err.message().contains("lines 2, 6"), "{}", err.message());
    assert!(
        err.message().contains("more surrounding lines"),
        "{}",
        err.message()
    );
    let info = tonic_types::StatusExt::get_details_error_info(&err).unwrap();
    assert_eq!(info.metadata["count"], "2");
    assert_eq!(info.metadata["lines"], "2, 6");

    // With more context the same change is unique and lands.
    let ok = srv
        .client
        .clone()
        .edit_file(edit_req(
            &sid,
            "calc.js",
            vec![edit(
                "add(a, b) {\n  return a - b;",
                "add(a, b) {\n  return a + b;",
            )],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.replacements, 1);
    assert_eq!(ok.first_changed_line, 1);
    assert_eq!(ok.line_delta, 0);
    assert_eq!(
        ok.message,
        "changed calc.js: 1 replacement from line 1, line delta +0"
    );
    assert!(
        ok.diff.contains("-  return a - b;\n+  return a + b;\n"),
        "{}",
        ok.diff
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("calc.js")).unwrap(),
        CALC.replacen("a - b", "a + b", 1)
    );
    srv.stop().await;
}

#[tokio::test]
async fn replace_all_reports_the_number_of_sites() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("calc.js"), CALC).unwrap();
    let mut all = edit("a - b", "b - a");
    all.replace_all = true;
    let out = srv
        .client
        .clone()
        .edit_file(edit_req(&sid, "calc.js", vec![all]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.replacements, 2);
    assert_eq!(
        out.message,
        "changed calc.js: 2 replacements from line 2, line delta +0"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("calc.js")).unwrap(),
        CALC.replace("a - b", "b - a")
    );
    srv.stop().await;
}

#[tokio::test]
async fn one_bad_edit_of_three_changes_nothing() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("calc.js"), CALC).unwrap();
    let mut c = srv.client.clone();
    let edits = vec![
        edit("add", "plus"),
        edit("no such text", "x"),
        edit("sub", "minus"),
    ];
    let req = edit_req(&sid, "calc.js", edits);
    let err = assert_refused_unchanged(c.edit_file(req), "OLD_STRING_NOT_FOUND", &ws).await;
    assert!(err.message().contains("(edit 2 of 3)"), "{}", err.message());

    // Overlapping edits are refused as a whole too.
    let edits = vec![
        edit("function add", "fn add"),
        edit("add(a, b)", "add(x, y)"),
    ];
    let req = edit_req(&sid, "calc.js", edits);
    assert_refused_unchanged(c.edit_file(req), "EDITS_OVERLAP", &ws).await;

    // Three good edits land together.
    let edits = vec![
        edit("add", "plus"),
        edit("function sub", "function minus"),
        edit("}\n\n", "}\n// gap\n\n"),
    ];
    let out = srv
        .client
        .clone()
        .edit_file(edit_req(&sid, "calc.js", edits))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.replacements, 3);
    assert_eq!(out.line_delta, 1);
    let text = std::fs::read_to_string(ws.join("calc.js")).unwrap();
    assert!(
        text.starts_with("function plus(a, b)") && text.contains("// gap\n\nfunction minus("),
        "{text}"
    );
    srv.stop().await;
}

#[tokio::test]
async fn empty_old_string_and_identical_strings_are_refused() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("a.txt"), "abc\n").unwrap();
    let mut c = srv.client.clone();
    let req = edit_req(&sid, "a.txt", vec![edit("", "x")]);
    let err = assert_refused_unchanged(c.edit_file(req), "EMPTY_OLD_STRING", &ws).await;
    assert!(err.message().contains("CreateFile"));
    let req = edit_req(&sid, "a.txt", vec![edit("b", "b")]);
    assert_refused_unchanged(c.edit_file(req), "NO_CHANGE", &ws).await;
    let req = edit_req(&sid, "a.txt", vec![]);
    assert_refused_unchanged(c.edit_file(req), "NO_EDITS", &ws).await;
    // Deleting a snippet (empty new_string) is fine.
    srv.client
        .clone()
        .edit_file(edit_req(&sid, "a.txt", vec![edit("b", "")]))
        .await
        .unwrap();
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"ac\n");
    srv.stop().await;
}

#[tokio::test]
async fn crlf_file_edited_with_lf_old_string_keeps_crlf() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("win.txt"), "one\r\ntwo\r\nthree\r\n").unwrap();
    let out = srv
        .client
        .clone()
        .edit_file(edit_req(
            &sid,
            "win.txt",
            vec![edit("one\ntwo\n", "one\n2a\n2b\n")],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.line_delta, 1);
    assert_eq!(
        std::fs::read(ws.join("win.txt")).unwrap(),
        b"one\r\n2a\r\n2b\r\nthree\r\n"
    );
    srv.stop().await;
}

#[tokio::test]
async fn bom_is_kept_and_hidden_from_reads() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("bom.cs"), "\u{feff}class A {}\n").unwrap();
    let read = srv
        .client
        .clone()
        .read_file(read_req(&sid, "bom.cs"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.content, "class A {}\n");
    srv.client
        .clone()
        .edit_file(edit_req(&sid, "bom.cs", vec![edit("class A", "class B")]))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(ws.join("bom.cs")).unwrap(),
        "\u{feff}class B {}\n".as_bytes()
    );
    srv.stop().await;
}

#[tokio::test]
async fn mixed_line_endings_are_matched_byte_exactly() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("mixed.txt"), "a\r\nb\nc\r\n").unwrap();
    let mut c = srv.client.clone();
    let req = edit_req(&sid, "mixed.txt", vec![edit("a\nb", "x")]);
    let err = assert_refused_unchanged(c.edit_file(req), "OLD_STRING_NOT_FOUND", &ws).await;
    assert!(
        err.message().contains("mixes CRLF and LF"),
        "{}",
        err.message()
    );
    srv.client
        .clone()
        .edit_file(edit_req(&sid, "mixed.txt", vec![edit("a\r\nb\n", "ab\n")]))
        .await
        .unwrap();
    assert_eq!(std::fs::read(ws.join("mixed.txt")).unwrap(), b"ab\nc\r\n");
    srv.stop().await;
}

#[tokio::test]
async fn binary_and_non_utf8_files_are_refused_as_not_text() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("bin.dat"), b"ab\0cd").unwrap();
    std::fs::write(ws.join("latin1.txt"), b"caf\xe9\n").unwrap();
    let mut c = srv.client.clone();
    for path in ["bin.dat", "latin1.txt"] {
        let req = edit_req(&sid, path, vec![edit("a", "b")]);
        assert_refused_unchanged(c.edit_file(req), "NOT_TEXT", &ws).await;
        assert_refused_unchanged(c.read_file(read_req(&sid, path)), "NOT_TEXT", &ws).await;
    }
    srv.stop().await;
}

#[tokio::test]
async fn stale_expected_sha256_is_refused() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("a.txt"), "v1\n").unwrap();
    let read = srv
        .client
        .clone()
        .read_file(read_req(&sid, "a.txt"))
        .await
        .unwrap()
        .into_inner();
    // Someone else changes the file after our read.
    std::fs::write(ws.join("a.txt"), "v1\nmore\n").unwrap();
    let mut req = edit_req(&sid, "a.txt", vec![edit("v1", "v2")]);
    req.expected_sha256 = read.sha256.clone();
    let mut c = srv.client.clone();
    let err = assert_refused_unchanged(c.edit_file(req.clone()), "STALE_FILE", &ws).await;
    assert_eq!(err.code(), tonic::Code::Aborted);
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"v1\nmore\n");
    // With the current hash the edit lands, and the reply's hash is the file's.
    let read = srv
        .client
        .clone()
        .read_file(read_req(&sid, "a.txt"))
        .await
        .unwrap()
        .into_inner();
    req.expected_sha256 = read.sha256;
    let out = srv
        .client
        .clone()
        .edit_file(req)
        .await
        .unwrap()
        .into_inner();
    let again = srv
        .client
        .clone()
        .read_file(read_req(&sid, "a.txt"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.sha256, again.sha256);
    srv.stop().await;
}

#[tokio::test]
async fn create_file_refuses_an_existing_file_and_makes_parents() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    let create = |path: &str, content: &str| pb::CreateFileRequest {
        session_id: sid.clone(),
        path: path.into(),
        content: content.into(),
    };
    let out = srv
        .client
        .clone()
        .create_file(create("src/deep/new.py", "print('hi')\n"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.path, "src/deep/new.py");
    assert_eq!(out.total_lines, 1);
    assert_eq!(
        std::fs::read(ws.join("src/deep/new.py")).unwrap(),
        b"print('hi')\n"
    );
    let mut c = srv.client.clone();
    let req = create("src/deep/new.py", "other");
    let err = assert_refused_unchanged(c.create_file(req), "FILE_EXISTS", &ws).await;
    assert_eq!(err.code(), tonic::Code::AlreadyExists);
    assert!(err.message().contains("EditFile"));
    // A directory is not overwritten either.
    let req = create("src/deep", "x");
    assert_refused_unchanged(c.create_file(req), "FILE_EXISTS", &ws).await;
    // A parent that is a file cannot hold a new file.
    let req = create("src/deep/new.py/x", "x");
    assert_refused_unchanged(c.create_file(req), "NOT_A_DIRECTORY", &ws).await;
    srv.stop().await;
}

#[tokio::test]
async fn edits_keep_the_file_mode() {
    use std::os::unix::fs::PermissionsExt;
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("run.sh"), "#!/bin/sh\necho old\n").unwrap();
    std::fs::set_permissions(ws.join("run.sh"), std::fs::Permissions::from_mode(0o750)).unwrap();
    srv.client
        .clone()
        .edit_file(edit_req(&sid, "run.sh", vec![edit("old", "new")]))
        .await
        .unwrap();
    let meta = std::fs::metadata(ws.join("run.sh")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o750);
    // No temp file is left behind.
    assert_eq!(std::fs::read_dir(&ws).unwrap().count(), 1);
    srv.stop().await;
}

/// 50 concurrent edits, each of a distinct snippet of the same file: every
/// one must land (a lost update would leave an old snippet behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_edits_of_one_file_all_land() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    let original: String = (0..50).map(|i| format!("value_{i:02} = old\n")).collect();
    std::fs::write(ws.join("many.txt"), &original).unwrap();
    let mut tasks = Vec::new();
    for i in 0..50 {
        let mut client = srv.client.clone();
        let sid = sid.clone();
        tasks.push(tokio::spawn(async move {
            let e = edit(
                &format!("value_{i:02} = old"),
                &format!("value_{i:02} = new"),
            );
            client
                .edit_file(edit_req(&sid, "many.txt", vec![e]))
                .await
                .map(|r| r.into_inner().replacements)
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), 1);
    }
    let expected: String = (0..50).map(|i| format!("value_{i:02} = new\n")).collect();
    assert_eq!(
        std::fs::read_to_string(ws.join("many.txt")).unwrap(),
        expected
    );
    srv.stop().await;
}

#[tokio::test]
async fn read_file_returns_a_numbered_window_with_totals() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    std::fs::write(ws.join("ten.txt"), &text).unwrap();
    let mut req = read_req(&sid, "ten.txt");
    req.offset = 3;
    req.limit = 4;
    let out = srv
        .client
        .clone()
        .read_file(req.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.content, "line 3\nline 4\nline 5\nline 6\n");
    assert_eq!((out.first_line, out.last_line, out.total_lines), (3, 6, 10));
    assert!(out.truncated);
    assert_eq!(
        out.message,
        "lines 3-6 of 10 in ten.txt; continue with offset 7"
    );
    assert_eq!(out.sha256, sandboxd_sha(&text));
    req.offset = 11;
    let mut c = srv.client.clone();
    assert_refused(c.read_file(req), "LINE_OUT_OF_RANGE").await;
    let whole = srv
        .client
        .clone()
        .read_file(read_req(&sid, "ten.txt"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(whole.content, text);
    assert!(!whole.truncated);
    assert_refused(c.read_file(read_req(&sid, "missing.txt")), "FILE_NOT_FOUND").await;
    assert_refused(c.read_file(read_req(&sid, ".")), "NOT_A_FILE").await;
    srv.stop().await;
}

fn sandboxd_sha(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

#[tokio::test]
async fn files_over_the_size_ceiling_are_refused() {
    let srv = TestServer::start_with(|c| c.limits.max_file_bytes = 1024).await;
    let (sid, ws) = srv.session().await;
    std::fs::write(ws.join("big.txt"), "x".repeat(2048)).unwrap();
    let mut c = srv.client.clone();
    let read = c.read_file(read_req(&sid, "big.txt"));
    assert_refused_unchanged(read, "FILE_TOO_LARGE", &ws).await;
    let req = edit_req(&sid, "big.txt", vec![edit("x", "y")]);
    assert_refused_unchanged(c.edit_file(req), "FILE_TOO_LARGE", &ws).await;
    let req = pb::CreateFileRequest {
        session_id: sid.clone(),
        path: "new.txt".into(),
        content: "y".repeat(2048),
    };
    assert_refused_unchanged(c.create_file(req), "FILE_TOO_LARGE", &ws).await;
    srv.stop().await;
}

#[tokio::test]
async fn a_fifo_is_refused_without_hanging() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    let status = std::process::Command::new("mkfifo")
        .arg(ws.join("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let mut c = srv.client.clone();
    let read = c.read_file(read_req(&sid, "pipe"));
    let bounded = async {
        tokio::time::timeout(std::time::Duration::from_secs(10), read)
            .await
            .expect("reading a fifo must not block")
    };
    assert_refused_unchanged(bounded, "NOT_A_FILE", &ws).await;
    srv.stop().await;
}

fn replace_all(old: &str, new: &str) -> pb::Edit {
    pb::Edit {
        replace_all: true,
        ..edit(old, new)
    }
}

/// A hostile client's edit requests are refused by bounds checked before
/// any large allocation; each refusal names the bound and the file is
/// byte-for-byte unchanged.
#[tokio::test]
async fn edit_allocation_bombs_are_refused_and_the_file_is_untouched() {
    let srv = TestServer::start().await;
    let (sid, ws) = srv.session().await;
    // 10 MB minus a little: under the file ceiling, full of "a".
    let big = format!("start\n{}\n", "a".repeat(10 * 1024 * 1024 - 16));
    std::fs::write(ws.join("big.txt"), &big).unwrap();
    let small: String = (0..200).map(|i| format!("line {i}\n")).collect();
    std::fs::write(ws.join("small.txt"), &small).unwrap();
    let mut c = srv.client.clone();

    // The reported bomb: 100 identical replace_all edits of "a".
    let req = edit_req(&sid, "big.txt", vec![replace_all("a", "b"); 100]);
    let err = assert_refused_unchanged(c.edit_file(req), "DUPLICATE_OLD_STRING", &ws).await;
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("Edits 1 and 2"), "{}", err.message());
    assert!(
        err.message().contains("Nothing was changed"),
        "{}",
        err.message()
    );

    // One replace_all of "a": ten million sites, past the site cap.
    let req = edit_req(&sid, "big.txt", vec![replace_all("a", "b")]);
    let err = assert_refused_unchanged(c.edit_file(req), "LIMIT_EXCEEDED", &ws).await;
    assert!(err.message().contains("100000"), "{}", err.message());
    let info = tonic_types::StatusExt::get_details_error_info(&err).unwrap();
    assert_eq!(info.metadata["field"], "replacements");

    // More edits than allowed in one call.
    let many: Vec<_> = (0..101).map(|i| edit(&format!("line {i}\n"), "")).collect();
    let req = edit_req(&sid, "small.txt", many);
    let err = assert_refused_unchanged(c.edit_file(req), "LIMIT_EXCEEDED", &ws).await;
    assert!(err.message().contains("101 edits"), "{}", err.message());

    // A result over the file ceiling, refused before it is built.
    let req = edit_req(
        &sid,
        "small.txt",
        vec![replace_all("line", &"x".repeat(100_000))],
    );
    let err = assert_refused_unchanged(c.edit_file(req), "FILE_TOO_LARGE", &ws).await;
    assert!(
        err.message().contains("would make small.txt"),
        "{}",
        err.message()
    );

    // An ambiguous old_string over the big file: counted, a few lines listed.
    let req = edit_req(&sid, "big.txt", vec![edit(&"a".repeat(1000), "b")]);
    let err = assert_refused_unchanged(c.edit_file(req), "OLD_STRING_AMBIGUOUS", &ws).await;
    let info = tonic_types::StatusExt::get_details_error_info(&err).unwrap();
    assert_eq!(
        info.metadata["count"],
        (10 * 1024 * 1024 - 16 - 999).to_string()
    );

    // Within the bounds, 100 edits in one call apply.
    let hundred: Vec<_> = (0..100)
        .map(|i| edit(&format!("line {i}\n"), &format!("LINE {i}\n")))
        .collect();
    let out = c
        .edit_file(edit_req(&sid, "small.txt", hundred))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.replacements, 100);
    srv.stop().await;
}

//! Names a command chooses, in the GetChanges patch: a name with newlines
//! spread over directory names (the slashes come for free) spells a whole
//! `diff --git` section; a name with a tab, a quote, a backslash, ESC or
//! bytes that are not UTF-8 must reach `git apply` intact. Every path in the
//! patch is quoted as git quotes it, so `git apply` on a clean copy changes
//! exactly what changed in the workspace, and nothing else.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

use crate::common::TestServer;
use sandboxd::pb;

/// The attack: directory names that, joined by `/`, spell a patch of
/// `victim.txt`. The last component is the file's own name.
const FORGED: &[&str] = &[
    "x\ndiff --git a",
    "victim.txt b",
    "victim.txt\n--- a",
    "victim.txt\n+++ b",
    "victim.txt\n@@ -1 +1 @@\n-original\n+pwned\nz",
];

/// Names of text files that exist before and change, by their bytes.
fn odd_names() -> Vec<Vec<u8>> {
    vec![
        b"tab\there.txt".to_vec(),
        b"quote\"d.txt".to_vec(),
        b"back\\slash.txt".to_vec(),
        b"esc\x1b[2Kape.txt".to_vec(),
        b"not-utf8-\xff\xfe.txt".to_vec(),
        "caf\u{e9} space.txt".as_bytes().to_vec(),
        b"new\nline.txt".to_vec(),
    ]
}

fn write(root: &Path, rel: &[u8], bytes: &[u8]) {
    let p = root.join(OsStr::from_bytes(rel));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

/// The tree before the session's first change.
fn before(root: &Path) {
    write(root, b"victim.txt", b"original\n");
    for (i, name) in odd_names().iter().enumerate() {
        write(root, name, format!("line {i}\nsame\n").as_bytes());
    }
    write(root, b"gone\ttoo.txt", b"bye\n");
}

fn git_apply(dir: &Path, patch: &[u8], check: bool) -> std::process::Output {
    let file = dir.join("..").join(format!(
        "{}.patch",
        dir.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&file, patch).unwrap();
    let mut cmd = Command::new("git");
    cmd.arg("apply");
    if check {
        cmd.arg("--check");
    }
    let out = cmd.arg(&file).current_dir(dir).output().unwrap();
    std::fs::remove_file(&file).unwrap();
    out
}

#[tokio::test]
async fn a_name_that_spells_a_diff_section_cannot_change_another_file() {
    let server = TestServer::start().await;
    let (id, ws) = server.session().await;
    before(&ws);
    // The session's first change takes the baseline.
    server
        .client
        .clone()
        .create_file(pb::CreateFileRequest {
            session_id: id.clone(),
            path: "trigger.txt".into(),
            content: "t\n".into(),
        })
        .await
        .unwrap();
    // What a command does: the forged name as a binary file, as a git hook
    // and as a text file; every odd name changed; one deleted.
    let forged = FORGED.join("/");
    write(&ws, forged.as_bytes(), b"\0binary");
    write(
        &ws,
        format!(".git/hooks/{}", FORGED.join("/")).as_bytes(),
        b"#!/bin/sh\n",
    );
    write(&ws, format!("text/{forged}").as_bytes(), b"text\n");
    for (i, name) in odd_names().iter().enumerate() {
        write(&ws, name, format!("line {i}\nchanged\n").as_bytes());
    }
    let mut added = b"added-".to_vec();
    added.extend_from_slice(b"\x07\x08\x0b\x0c\r\"\\\xc3\xa9.txt");
    write(&ws, &added, b"new\n");
    std::fs::remove_file(ws.join("gone\ttoo.txt")).unwrap();

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
    let patch = changes.patch.clone();
    let text = String::from_utf8_lossy(&patch);
    // No line of the patch starts with what the name spells, and every
    // header names a path git can read back.
    for line in text.lines() {
        assert!(
            !line.starts_with("+pwned") && !line.starts_with("-original"),
            "forged line {line:?} in:\n{text}"
        );
    }
    // The odd names, the added one, the forged text file, the deleted one
    // and trigger.txt: no section more.
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("diff --git "))
            .count(),
        odd_names().len() + 4,
        "{text}"
    );
    assert!(text.contains("(binary, Added)"), "{text}");
    assert!(text.contains("(git configuration or hook"), "{text}");
    assert!(
        text.contains("\"x\\ndiff --git a/victim.txt b/victim.txt\\n--- a/victim.txt"),
        "{text}"
    );
    assert!(text.contains("\"a/not-utf8-\\377\\376.txt\""), "{text}");
    assert!(text.contains("\"a/esc\\033[2Kape.txt\""), "{text}");
    assert!(
        text.contains("--- \"a/caf\\303\\251 space.txt\"\t\n"),
        "{text}"
    );
    assert!(!patch.contains(&0x1b), "ESC reached the patch");

    // git apply on a clean copy of the tree before: exactly the text
    // changes land, and victim.txt is untouched.
    let clean = tempfile::tempdir().unwrap();
    let copy = clean.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    before(&copy);
    let check = git_apply(&copy, &patch, true);
    assert!(
        check.status.success(),
        "git apply --check: {check:?}\n{text}"
    );
    let applied = git_apply(&copy, &patch, false);
    assert!(applied.status.success(), "git apply: {applied:?}");
    assert_eq!(
        std::fs::read(copy.join("victim.txt")).unwrap(),
        b"original\n"
    );
    for (i, name) in odd_names().iter().enumerate() {
        assert_eq!(
            std::fs::read(copy.join(OsStr::from_bytes(name))).unwrap(),
            format!("line {i}\nchanged\n").as_bytes(),
            "{}",
            String::from_utf8_lossy(name)
        );
    }
    assert_eq!(
        std::fs::read(copy.join(OsStr::from_bytes(&added))).unwrap(),
        b"new\n"
    );
    assert_eq!(
        std::fs::read(copy.join("text").join(OsStr::from_bytes(forged.as_bytes()))).unwrap(),
        b"text\n"
    );
    assert!(!copy.join("gone\ttoo.txt").exists());
    // The binary file and the hook are named, never carried.
    assert!(!copy.join(OsStr::from_bytes(forged.as_bytes())).exists());
    assert!(!copy.join(".git").exists());
    server.stop().await;
}

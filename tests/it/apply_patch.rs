//! ApplyPatch over gRPC: a multi-file patch made by `git diff` (changes,
//! a created file in a new directory, a deletion, a rename, a mode change)
//! turns the workspace into git's tree, one journal entry per file; and
//! every bad patch is refused with its reason, every file left
//! byte-for-byte as it was.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::{TestServer, assert_refused_unchanged, git, refusals, snapshot};
use sandboxd::pb;

const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n";

fn project(ws: &Path) {
    std::fs::create_dir_all(ws.join("pkg")).unwrap();
    std::fs::write(ws.join("pkg/calc.py"), CALC).unwrap();
    std::fs::write(ws.join("README.md"), "# calc\n\nAdds numbers.\n").unwrap();
    std::fs::write(ws.join("old_name.txt"), "keep me\n").unwrap();
    std::fs::write(ws.join("obsolete.txt"), "remove me\n").unwrap();
    std::fs::write(ws.join("run.sh"), "#!/bin/sh\necho run\n").unwrap();
    std::fs::write(ws.join("blob.bin"), b"\x00\x01\x02binary").unwrap();
}

async fn apply(
    server: &TestServer,
    id: &str,
    patch: &str,
) -> Result<pb::ApplyPatchResponse, tonic::Status> {
    server
        .client
        .clone()
        .apply_patch(pb::ApplyPatchRequest {
            session_id: id.into(),
            patch: patch.into(),
        })
        .await
        .map(|r| r.into_inner())
}

async fn session(server: &TestServer) -> (String, std::path::PathBuf) {
    server
        .session_with(pb::Policy {
            deny_writes: vec!["**/*.secret".into()],
            ..Default::default()
        })
        .await
}

#[tokio::test]
async fn a_git_diff_of_several_files_applies_whole_and_is_journaled_per_file() {
    let server = TestServer::start().await;
    let (id, ws) = session(&server).await;
    project(&ws);
    // The same project in a git repository, changed there.
    let repo = tempfile::tempdir().unwrap();
    let r = repo.path();
    project(r);
    git(r, &["init", "-q"]);
    git(r, &["add", "-A"]);
    git(r, &["commit", "-qm", "base"]);
    std::fs::write(r.join("pkg/calc.py"), CALC.replacen("a - b", "a + b", 1)).unwrap();
    std::fs::write(
        r.join("README.md"),
        "# calc\n\nAdds and subtracts numbers.\n",
    )
    .unwrap();
    std::fs::create_dir_all(r.join("tests/unit")).unwrap();
    std::fs::write(
        r.join("tests/unit/test_calc.py"),
        "from pkg.calc import add\nassert add(2, 3) == 5",
    )
    .unwrap();
    git(r, &["mv", "old_name.txt", "new_name.txt"]);
    git(r, &["rm", "-q", "obsolete.txt"]);
    std::fs::set_permissions(r.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    git(r, &["add", "-A"]);
    let diff = git(r, &["diff", "--cached", "-M"]);

    let out = apply(&server, &id, &diff).await.unwrap();
    let mut got: Vec<(String, pb::PatchAction)> = out
        .files
        .iter()
        .map(|f| (f.path.clone(), f.action()))
        .collect();
    got.sort();
    use pb::PatchAction::{Created, Deleted, Modified, Renamed};
    assert_eq!(
        got,
        vec![
            ("README.md".to_string(), Modified),
            ("new_name.txt".to_string(), Renamed),
            ("obsolete.txt".to_string(), Deleted),
            ("pkg/calc.py".to_string(), Modified),
            ("run.sh".to_string(), Modified),
            ("tests/unit/test_calc.py".to_string(), Created),
        ],
        "{}",
        out.message
    );
    // The workspace is git's tree, modes included.
    let without_git = |root: &Path| {
        let mut s = snapshot(root);
        s.retain(|k, _| !k.starts_with(".git"));
        s
    };
    assert_eq!(without_git(&ws), without_git(r));
    let mode = std::fs::metadata(ws.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);

    let report = server
        .client
        .clone()
        .get_session_report(pb::GetSessionReportRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let written: Vec<&str> = report
        .files_written
        .iter()
        .filter(|w| w.tool == "ApplyPatch")
        .map(|w| w.path.as_str())
        .collect();
    assert_eq!(written.len(), 6, "{written:?}");
    server.stop().await;
}

/// The bad patches: (name, patch, reason).
fn bad_patches() -> Vec<(&'static str, String, &'static str)> {
    let calc_hunk = |context: &str| {
        format!(
            "--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -1,2 +1,2 @@\n {context}\n-    return a - b\n+    return a + b\n"
        )
    };
    vec![
        (
            "context that matches twice",
            "--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -20,1 +20,1 @@\n-    return a - b\n+    return a + b\n".into(),
            "PATCH_CONTEXT_AMBIGUOUS",
        ),
        (
            "a hunk against a file that changed since",
            calc_hunk("def add(x, y):"),
            "PATCH_CONTEXT_MISMATCH",
        ),
        (
            "context differing only in whitespace",
            calc_hunk("def add(a,  b):"),
            "PATCH_CONTEXT_MISMATCH",
        ),
        (
            "a path outside the workspace",
            "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-root\n+toor\n".into(),
            "PATH_OUTSIDE_WORKSPACE",
        ),
        (
            "an absolute path",
            "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-root\n+toor\n".into(),
            "PATH_OUTSIDE_WORKSPACE",
        ),
        (
            "a path through a symlink out of the workspace",
            "--- /dev/null\n+++ b/out/planted.txt\n@@ -0,0 +1 @@\n+x\n".into(),
            "PATH_OUTSIDE_WORKSPACE",
        ),
        (
            "a deny-glob path",
            "--- /dev/null\n+++ b/keys/id.secret\n@@ -0,0 +1 @@\n+x\n".into(),
            "POLICY_DENIED",
        ),
        (
            "a malformed header",
            "--- a/README.md\n@@ -1 +1 @@\n-# calc\n+# calculator\n".into(),
            "PATCH_MALFORMED",
        ),
        (
            "hunk counts that do not match the body",
            "--- a/README.md\n+++ b/README.md\n@@ -1,3 +1,3 @@\n-# calc\n+# calculator\n".into(),
            "PATCH_MALFORMED",
        ),
        ("no file in it", "just some words\n".into(), "PATCH_MALFORMED"),
        (
            "a binary patch",
            "diff --git a/blob.bin b/blob.bin\nindex 1..2 100644\nGIT binary patch\nliteral 3\nKcmZQz00004\n\n".into(),
            "PATCH_UNSUPPORTED",
        ),
        (
            "binary files marked as differing",
            "diff --git a/blob.bin b/blob.bin\nindex 1..2 100644\nBinary files a/blob.bin and b/blob.bin differ\n".into(),
            "PATCH_UNSUPPORTED",
        ),
        (
            "a copy",
            "diff --git a/README.md b/COPY.md\nsimilarity index 100%\ncopy from README.md\ncopy to COPY.md\n".into(),
            "PATCH_UNSUPPORTED",
        ),
        (
            "creating a file that exists",
            "--- /dev/null\n+++ b/README.md\n@@ -0,0 +1 @@\n+new\n".into(),
            "FILE_EXISTS",
        ),
        (
            "changing a file that does not exist",
            "--- a/missing.py\n+++ b/missing.py\n@@ -1 +1 @@\n-a\n+b\n".into(),
            "FILE_NOT_FOUND",
        ),
        (
            "deleting a file with other contents",
            "--- a/obsolete.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-something else\n".into(),
            "PATCH_CONTEXT_MISMATCH",
        ),
        (
            "deleting only part of a file",
            "diff --git a/README.md b/README.md\ndeleted file mode 100644\n--- a/README.md\n+++ /dev/null\n@@ -1 +0,0 @@\n-# calc\n".into(),
            "PATCH_CONTEXT_MISMATCH",
        ),
        (
            "renaming onto an existing file",
            "diff --git a/old_name.txt b/README.md\nsimilarity index 100%\nrename from old_name.txt\nrename to README.md\n".into(),
            "FILE_EXISTS",
        ),
        (
            "a text patch to a binary file",
            "--- a/blob.bin\n+++ b/blob.bin\n@@ -1 +1 @@\n-x\n+y\n".into(),
            "NOT_TEXT",
        ),
        (
            "a good first file and a bad second one",
            format!(
                "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# calc\n+# calculator\n{}",
                calc_hunk("def nope():")
            ),
            "PATCH_CONTEXT_MISMATCH",
        ),
        (
            "the same file patched twice",
            "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# calc\n+# a\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# calc\n+# b\n".into(),
            "PATCH_MALFORMED",
        ),
        (
            "a hunk past the end of the file",
            "--- a/README.md\n+++ b/README.md\n@@ -40,0 +41 @@\n+tail\n".into(),
            "PATCH_CONTEXT_MISMATCH",
        ),
    ]
}

#[tokio::test]
async fn every_bad_patch_is_refused_with_its_reason_and_no_file_changes() {
    let server = TestServer::start().await;
    let (id, ws) = session(&server).await;
    project(&ws);
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.join("out")).unwrap();
    let cases = bad_patches();
    assert!(cases.len() >= 15);
    let calls = cases
        .iter()
        .map(|(name, patch, want)| (*name, *want, apply(&server, &id, patch)))
        .collect();
    let failures = refusals(&ws, calls).await;
    assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
    assert!(failures.is_empty(), "{failures:#?}");

    // The refusal names the file and the hunk and shows what is there.
    let stale = "--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -1,2 +1,2 @@\n def add(x, y):\n-    return x - y\n+    return x + y\n";
    let status =
        assert_refused_unchanged(apply(&server, &id, stale), "PATCH_CONTEXT_MISMATCH", &ws).await;
    let m = status.message();
    assert!(m.contains("Hunk 1 of pkg/calc.py (@@ -1,2 +1,2 @@)"), "{m}");
    assert!(
        m.contains("def add(x, y):") && m.contains("def add(a, b):"),
        "{m}"
    );
    assert!(m.contains("Nothing was changed"), "{m}");
    let twice = "--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -20,1 +20,1 @@\n-    return a - b\n+    return 0\n";
    let status =
        assert_refused_unchanged(apply(&server, &id, twice), "PATCH_CONTEXT_AMBIGUOUS", &ws).await;
    assert!(
        status.message().contains("lines 2, 6"),
        "{}",
        status.message()
    );
    server.stop().await;
}

#[tokio::test]
async fn a_read_only_session_cannot_patch() {
    let server = TestServer::start().await;
    let (id, ws) = server
        .session_with(pb::Policy {
            read_only: true,
            ..Default::default()
        })
        .await;
    project(&ws);
    let patch = "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# calc\n+# calculator\n";
    assert_refused_unchanged(apply(&server, &id, patch), "POLICY_DENIED", &ws).await;
    server.stop().await;
}

/// A patch of 12,000 hunks, each naming a place 1,000 lines from where it
/// is (past what the hunk before taught), over lines that almost match:
/// refused at the patch's search budget, quickly, the file unchanged.
/// Before the budget it took 26 s of CPU.
#[tokio::test]
async fn thousands_of_hunks_far_from_where_they_say_are_refused_at_the_search_budget() {
    let server = TestServer::start().await;
    let (id, ws) = session(&server).await;
    let mut file = String::new();
    let mut patch = String::from("--- a/far.txt\n+++ b/far.txt\n");
    let mut shift: i64 = 0;
    for i in 0..12_000i64 {
        for _ in 0..19 {
            file.push_str("a\n");
        }
        file.push_str(&format!("b{i}\n"));
        let at = 20 * i;
        let old_start = at + 1000 - shift + 1;
        shift = at - (old_start - 1);
        patch.push_str(&format!("@@ -{old_start},20 +{old_start},19 @@\n"));
        for _ in 0..19 {
            patch.push_str(" a\n");
        }
        patch.push_str(&format!("-b{i}\n"));
    }
    file.push_str(&"z\n".repeat(2000));
    std::fs::write(ws.join("far.txt"), &file).unwrap();
    let t = std::time::Instant::now();
    let status =
        assert_refused_unchanged(apply(&server, &id, &patch), "PATCH_SEARCH_BUDGET", &ws).await;
    // Generous: 2 busy cores, a debug build.
    assert!(
        t.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        t.elapsed()
    );
    assert!(status.message().contains("20000000"), "{status:?}");
    assert!(status.message().contains("far.txt"), "{status:?}");

    // An ordinary patch whose hunk moved applies as before.
    std::fs::write(
        ws.join("moved.txt"),
        format!("{}target\n", "filler\n".repeat(500)),
    )
    .unwrap();
    let moved = "--- a/moved.txt\n+++ b/moved.txt\n@@ -2,1 +2,1 @@\n-target\n+hit\n";
    apply(&server, &id, moved).await.unwrap();
    assert!(
        std::fs::read_to_string(ws.join("moved.txt"))
            .unwrap()
            .ends_with("filler\nhit\n")
    );
    server.stop().await;
}

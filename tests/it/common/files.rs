//! File-tool requests, and the check every refusal must pass: the call is
//! refused with its literal ErrorInfo reason, and the workspace is left
//! byte-for-byte as it was.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::path::Path;

use sandboxd::pb;
use tonic_types::StatusExt;

/// The ErrorInfo reason of a refusal.
pub fn reason(status: &tonic::Status) -> String {
    status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("status without ErrorInfo: {status:?}"))
        .reason
}

/// Awaits `call`, which must be refused with the ErrorInfo reason `want`.
/// Returns the refusal, for checks of its code and message.
pub async fn assert_refused<T: Debug>(
    call: impl Future<Output = Result<T, tonic::Status>>,
    want: &str,
) -> tonic::Status {
    let status = call.await.expect_err("the call must be refused");
    assert_eq!(reason(&status), want, "{status:?}");
    status
}

/// [`assert_refused`], and nothing under `root` changed meanwhile: every
/// file's bytes, every link's target, no entry made or removed.
pub async fn assert_refused_unchanged<T: Debug>(
    call: impl Future<Output = Result<T, tonic::Status>>,
    want: &str,
    root: &Path,
) -> tonic::Status {
    // The call is a future: nothing has been sent yet.
    let before = snapshot(root);
    let status = assert_refused(call, want).await;
    assert_eq!(
        snapshot(root),
        before,
        "refused with {want}, yet {} changed",
        root.display()
    );
    status
}

/// Runs a table of hostile calls, one after the other: each must be
/// refused with its reason and leave `root` as it was. Returns what went
/// wrong, one line per case, so that a table reports every failing row.
pub async fn refusals<T: Debug, F: Future<Output = Result<T, tonic::Status>>>(
    root: &Path,
    cases: Vec<(&str, &str, F)>,
) -> Vec<String> {
    let mut failures = Vec::new();
    for (name, want, call) in cases {
        let before = snapshot(root);
        match call.await {
            Ok(r) => failures.push(format!("{name}: accepted ({r:?})")),
            Err(status) => {
                let got = reason(&status);
                if got != want {
                    failures.push(format!(
                        "{name}: {got} instead of {want}: {}",
                        status.message()
                    ));
                }
            }
        }
        if snapshot(root) != before {
            failures.push(format!("{name}: the workspace changed"));
        }
    }
    failures
}

/// Every regular file and symlink under `root` with its bytes (symlinks as
/// their target), to prove a refusal changed nothing.
pub fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                out.insert(
                    format!("{rel}@"),
                    std::fs::read_link(&path)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                );
            } else if ft.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(root, &path, out);
            } else if ft.is_file() {
                out.insert(rel, std::fs::read(&path).unwrap());
            } else {
                // A fifo or socket: reading it could block forever.
                out.insert(format!("{rel}|"), Vec::new());
            }
        }
    }
    walk(root, root, &mut out);
    out
}

/// One edit of `old` to `new`, at a single site.
pub fn edit(old: &str, new: &str) -> pb::Edit {
    pb::Edit {
        old_string: old.into(),
        new_string: new.into(),
        replace_all: false,
    }
}

/// An EditFile request without an expected hash.
pub fn edit_req(session: &str, path: &str, edits: Vec<pb::Edit>) -> pb::EditFileRequest {
    pb::EditFileRequest {
        session_id: session.into(),
        path: path.into(),
        edits,
        expected_sha256: String::new(),
    }
}

/// A ReadFile request for the whole file.
pub fn read_req(session: &str, path: &str) -> pb::ReadFileRequest {
    pb::ReadFileRequest {
        session_id: session.into(),
        path: path.into(),
        offset: 0,
        limit: 0,
    }
}

//! Archives in and out over gRPC: a repository uploaded, changed by the
//! file tools and by a command, downloaded again, and its changes applied
//! with `git apply` to a pristine copy; the table of hostile archives, each
//! refused with its reason and the workspace byte-for-byte unchanged; and
//! downloads of trees a command made (30,000 levels deep, symlinks out).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::common::{
    TestServer, assert_refused, assert_refused_unchanged, edit, edit_req, git, refusals, run,
    snapshot,
};
use sandboxd::pb;
use tokio_stream::StreamExt;

/// Sends `archive` in chunks of `chunk` bytes to UploadArchive.
async fn upload(
    server: &TestServer,
    id: &str,
    dest: &str,
    archive: Vec<u8>,
) -> Result<pb::UploadArchiveResponse, tonic::Status> {
    use pb::upload_archive_request::Part;
    let mut msgs = vec![pb::UploadArchiveRequest {
        part: Some(Part::Header(pb::UploadArchiveHeader {
            session_id: id.into(),
            destination: dest.into(),
        })),
    }];
    for c in archive.chunks(64 * 1024) {
        msgs.push(pb::UploadArchiveRequest {
            part: Some(Part::Chunk(c.to_vec())),
        });
    }
    server
        .client
        .clone()
        .upload_archive(tokio_stream::iter(msgs))
        .await
        .map(|r| r.into_inner())
}

/// Downloads `path`; returns the archive and the summary.
async fn download(
    server: &TestServer,
    id: &str,
    path: &str,
    gitignore: bool,
    gzip: bool,
) -> Result<(Vec<u8>, pb::DownloadSummary), tonic::Status> {
    use pb::download_archive_response::Part;
    let mut stream = server
        .client
        .clone()
        .download_archive(pb::DownloadArchiveRequest {
            session_id: id.into(),
            path: path.into(),
            gitignore,
            gzip,
            max_bytes: 0,
        })
        .await?
        .into_inner();
    let (mut bytes, mut done) = (Vec::new(), None);
    while let Some(msg) = stream.next().await {
        match msg?.part {
            Some(Part::Chunk(c)) => bytes.extend_from_slice(&c),
            Some(Part::Done(d)) => done = Some(d),
            None => {}
        }
    }
    Ok((bytes, done.expect("a summary ends the stream")))
}

/// Extracts `archive` with the system's tar into a fresh directory.
fn untar(archive: &[u8], gzip: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut tar = Command::new("tar")
        .arg(if gzip { "-xzf" } else { "-xf" })
        .arg("-")
        .arg("-C")
        .arg(dir.path())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tar.stdin.take().unwrap().write_all(archive).unwrap();
    assert!(tar.wait().unwrap().success());
    dir
}

/// The system's tar of `dir` (as a user would make it).
fn tar_of(dir: &Path, gzip: bool) -> Vec<u8> {
    let out = Command::new("tar")
        .arg(if gzip { "-czf" } else { "-cf" })
        .arg("-")
        .arg("-C")
        .arg(dir)
        .arg(".")
        .output()
        .unwrap();
    assert!(out.status.success());
    out.stdout
}

/// Files and symlinks under `root` with their bytes and executable bit
/// (directories aside: a patch cannot carry an empty one).
fn files(root: &Path) -> BTreeMap<String, (bool, Vec<u8>)> {
    snapshot(root)
        .into_iter()
        .filter(|(k, _)| !k.ends_with('/'))
        .map(|(k, v)| {
            let p = root.join(k.trim_end_matches('@'));
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let exec = meta.is_file() && meta.permissions().mode() & 0o100 != 0;
            (k, (exec, v))
        })
        .collect()
}

#[tokio::test]
async fn a_repository_goes_in_is_changed_and_comes_out_as_archive_and_patch() {
    let server = TestServer::with_docker().await;
    let (id, ws) = server.session().await;
    // A repository on "another machine".
    let repo = tempfile::tempdir().unwrap();
    let r = repo.path();
    std::fs::create_dir_all(r.join("src")).unwrap();
    std::fs::write(r.join("src/calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(
        r.join("test_calc.py"),
        "from src.calc import add\nassert add(2, 3) == 5\n",
    )
    .unwrap();
    std::fs::write(r.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(r.join("build.sh"), "#!/bin/sh\necho build\n").unwrap();
    std::fs::set_permissions(r.join("build.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/calc.py", r.join("calc.py")).unwrap();
    git(r, &["init", "-q"]);
    git(r, &["add", "-A"]);
    git(r, &["commit", "-qm", "init"]);

    let up = upload(&server, &id, "", tar_of(r, true)).await.unwrap();
    assert_eq!((up.symlinks, up.replaced), (1, 0), "{up:?}");
    assert!(up.files >= 5, "{up:?}");
    assert_eq!(files(&ws), files(r));

    // Red, then a fix through the file tools and changes by a command.
    let red = run(&server.client, &id, "python3 test_calc.py", 30_000).await;
    assert_ne!(red.exit.exit_code, 0);
    server
        .client
        .clone()
        .edit_file(edit_req(&id, "src/calc.py", vec![edit("a - b", "a + b")]))
        .await
        .unwrap();
    let cmd = "set -e; python3 test_calc.py; echo '# notes' > NOTES.md; rm build.sh; echo x > run.log; git status --short > /dev/null";
    let green = run(&server.client, &id, cmd, 30_000).await;
    assert_eq!(green.exit.exit_code, 0, "{}", green.stderr());

    // The archive out holds the workspace as it is.
    let (tarball, done) = download(&server, &id, "", false, true).await.unwrap();
    let out = untar(&tarball, true);
    assert_eq!(files(out.path()), files(&ws));
    assert_eq!(done.symlinks, 1);
    assert!(done.skipped.is_empty(), "{done:?}");
    // gitignore mode leaves out run.log and .git.
    let (plain, _) = download(&server, &id, "", true, false).await.unwrap();
    let out2 = untar(&plain, false);
    assert!(!out2.path().join("run.log").exists() && !out2.path().join(".git").exists());
    assert!(out2.path().join("NOTES.md").exists());

    // The patch turns a pristine copy into the workspace.
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
    let listed: Vec<&str> = changes.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(
        listed,
        ["NOTES.md", "build.sh", "run.log", "src/calc.py"],
        "{}",
        changes.message
    );
    let patch = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(patch.path(), &changes.patch).unwrap();
    let applied = Command::new("git")
        .arg("apply")
        .arg(patch.path())
        .current_dir(r)
        .output()
        .unwrap();
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let without_git = |m: BTreeMap<String, (bool, Vec<u8>)>| -> BTreeMap<String, (bool, Vec<u8>)> {
        m.into_iter()
            .filter(|(k, _)| !k.starts_with(".git/"))
            .collect()
    };
    assert_eq!(without_git(files(r)), without_git(files(&ws)));
    server.stop().await;
}

#[tokio::test]
async fn an_upload_merges_into_a_directory_replaces_files_and_drops_set_id_bits() {
    let server = TestServer::start().await;
    let (id, ws) = server.session().await;
    std::fs::create_dir_all(ws.join("app/keep")).unwrap();
    std::fs::write(ws.join("app/keep/old.txt"), "old\n").unwrap();
    std::fs::write(ws.join("app/main.py"), "print(1)\n").unwrap();

    let mut b = tar::Builder::new(Vec::new());
    let file = |b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8], mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, path, data).unwrap();
    };
    file(&mut b, "main.py", b"print(2)\n", 0o644);
    file(&mut b, "bin/tool", b"#!/bin/sh\n", 0o4755);
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Link);
    h.set_size(0);
    b.append_link(&mut h, "bin/tool-again", "bin/tool").unwrap();
    let up = upload(&server, &id, "/workspace/app", b.into_inner().unwrap())
        .await
        .unwrap();
    assert_eq!((up.files, up.replaced, up.stripped), (3, 1, 1), "{up:?}");
    assert_eq!(up.destination, "/workspace/app");
    assert_eq!(
        std::fs::read_to_string(ws.join("app/main.py")).unwrap(),
        "print(2)\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("app/keep/old.txt")).unwrap(),
        "old\n"
    );
    let mode = std::fs::metadata(ws.join("app/bin/tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    assert_eq!(
        std::fs::read(ws.join("app/bin/tool-again")).unwrap(),
        b"#!/bin/sh\n"
    );
    server.stop().await;
}

/// One raw tar header (no path checks), then `data` padded to 512.
fn raw(out: &mut Vec<u8>, name: &[u8], kind: tar::EntryType, data: &[u8], link: &[u8]) {
    raw_sized(out, name, kind, data, link, data.len() as u64, 0o644);
}

fn raw_sized(
    out: &mut Vec<u8>,
    name: &[u8],
    kind: tar::EntryType,
    data: &[u8],
    link: &[u8],
    size: u64,
    mode: u32,
) {
    let mut h = tar::Header::new_gnu();
    h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name);
    h.as_gnu_mut().unwrap().linkname[..link.len()].copy_from_slice(link);
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

/// A long path, as GNU tar writes it: a `././@LongLink` entry first.
fn long(out: &mut Vec<u8>, name: &[u8], data: &[u8]) {
    let mut n = name.to_vec();
    n.push(0);
    raw(out, b"././@LongLink", tar::EntryType::GNULongName, &n, b"");
    raw(out, b"placeholder", tar::EntryType::Regular, data, b"");
}

fn end(mut out: Vec<u8>) -> Vec<u8> {
    out.extend_from_slice(&[0u8; 1024]);
    out
}

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn archive(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    f(&mut out);
    end(out)
}

/// The hostile archives: (name, archive, reason).
fn hostile() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    use tar::EntryType::*;
    const UNSAFE: &str = "ARCHIVE_ENTRY_UNSAFE";
    const INVALID: &str = "ARCHIVE_ENTRY_INVALID";
    const MALFORMED: &str = "ARCHIVE_MALFORMED";
    let ok_file = |out: &mut Vec<u8>| raw(out, b"fine.txt", Regular, b"fine\n", b"");
    let mut cases: Vec<(&'static str, Vec<u8>, &'static str)> = vec![
        (
            "zip-slip ../../x",
            archive(|o| raw(o, b"../../x", Regular, b"x", b"")),
            UNSAFE,
        ),
        (
            "dotdot inside a path",
            archive(|o| raw(o, b"a/../../x", Regular, b"x", b"")),
            UNSAFE,
        ),
        (
            "absolute path",
            archive(|o| raw(o, b"/etc/cron.d/x", Regular, b"x", b"")),
            UNSAFE,
        ),
        (
            "symlink then a file through it",
            archive(|o| {
                raw(o, b"link", Symlink, b"", b"/etc");
                raw(o, b"link/passwd", Regular, b"x", b"");
            }),
            UNSAFE,
        ),
        (
            "symlink to a directory inside, then a file through it",
            archive(|o| {
                raw(o, b"sub/", Directory, b"", b"");
                raw(o, b"l", Symlink, b"", b"sub");
                raw(o, b"l/x", Regular, b"x", b"");
            }),
            UNSAFE,
        ),
        (
            "a file through the workspace's own symlink",
            archive(|o| raw(o, b"planted/x", Regular, b"x", b"")),
            UNSAFE,
        ),
        (
            "a file through a workspace symlink to a directory inside",
            archive(|o| raw(o, b"inner-link/x", Regular, b"x", b"")),
            UNSAFE,
        ),
        (
            "hard link to /etc/shadow",
            archive(|o| raw(o, b"shadow", Link, b"", b"/etc/shadow")),
            UNSAFE,
        ),
        (
            "hard link up and out",
            archive(|o| raw(o, b"h", Link, b"", b"../../etc/passwd")),
            UNSAFE,
        ),
        (
            "hard link to a file of the workspace, not the archive",
            archive(|o| raw(o, b"h", Link, b"", b"existing.txt")),
            UNSAFE,
        ),
        (
            "hard link to a later entry",
            archive(|o| {
                raw(o, b"h", Link, b"", b"later.txt");
                raw(o, b"later.txt", Regular, b"x", b"");
            }),
            UNSAFE,
        ),
        (
            "hard link to a directory of the archive",
            archive(|o| {
                raw(o, b"d/", Directory, b"", b"");
                raw(o, b"h", Link, b"", b"d");
            }),
            UNSAFE,
        ),
        (
            "character device",
            archive(|o| raw(o, b"null", Char, b"", b"")),
            UNSAFE,
        ),
        (
            "block device",
            archive(|o| raw(o, b"sda", Block, b"", b"")),
            UNSAFE,
        ),
        ("fifo", archive(|o| raw(o, b"pipe", Fifo, b"", b"")), UNSAFE),
        (
            "sparse file",
            archive(|o| {
                let mut h = tar::Header::new_gnu();
                h.as_gnu_mut().unwrap().name[..6].copy_from_slice(b"sparse");
                h.set_entry_type(GNUSparse);
                h.set_size(0);
                h.as_gnu_mut().unwrap().set_real_size(4096);
                // One hole of 4096 bytes and no data: a valid sparse file.
                let chunk = &mut h.as_gnu_mut().unwrap().sparse[0];
                chunk.offset.copy_from_slice(b"00000010000\0");
                chunk.numbytes.copy_from_slice(b"00000000000\0");
                h.set_cksum();
                o.extend_from_slice(h.as_bytes());
            }),
            UNSAFE,
        ),
        (
            "a file below a file of the archive",
            archive(|o| {
                raw(o, b"f", Regular, b"x", b"");
                raw(o, b"f/x", Regular, b"x", b"");
            }),
            UNSAFE,
        ),
        (
            "duplicate names",
            archive(|o| {
                raw(o, b"twice.txt", Regular, b"one", b"");
                raw(o, b"twice.txt", Regular, b"two", b"");
            }),
            INVALID,
        ),
        (
            "duplicate through ./",
            archive(|o| {
                raw(o, b"a.txt", Regular, b"one", b"");
                raw(o, b"./a.txt", Regular, b"two", b"");
            }),
            INVALID,
        ),
        (
            "non-UTF-8 name",
            archive(|o| raw(o, b"caf\xe9.txt", Regular, b"x", b"")),
            INVALID,
        ),
        (
            "5,000-character path",
            archive(|o| long(o, "d/".repeat(2500).as_bytes(), b"x")),
            INVALID,
        ),
        (
            "300 levels deep",
            archive(|o| long(o, "a/".repeat(300).as_bytes(), b"x")),
            INVALID,
        ),
        (
            "300-byte component",
            archive(|o| long(o, "n".repeat(300).as_bytes(), b"x")),
            INVALID,
        ),
        (
            "file over the size ceiling",
            archive(|o| {
                ok_file(o);
                raw_sized(o, b"huge.bin", Regular, b"", b"", 600 << 20, 0o644);
            }),
            "ARCHIVE_TOO_LARGE",
        ),
        (
            "1000:1 gzip bomb",
            gz(&archive(|o| {
                raw_sized(
                    o,
                    b"zeros",
                    Regular,
                    &vec![0u8; 64 << 20],
                    b"",
                    64 << 20,
                    0o644,
                )
            })),
            "ARCHIVE_BOMB",
        ),
        (
            "stream cut inside a file",
            {
                let mut a = archive(|o| raw(o, b"big.txt", Regular, &[b'x'; 4000], b""));
                a.truncate(1500);
                a
            },
            MALFORMED,
        ),
        (
            "stream cut between entries (no end blocks)",
            {
                let mut a = Vec::new();
                ok_file(&mut a);
                a
            },
            MALFORMED,
        ),
        (
            "gzip stream cut short",
            {
                let mut a = gz(&archive(ok_file));
                a.truncate(a.len() - 6);
                a
            },
            MALFORMED,
        ),
        (
            "not an archive",
            b"hello, this is not a tar file at all\n".repeat(40),
            MALFORMED,
        ),
        ("empty stream", Vec::new(), MALFORMED),
        ("zstd", vec![0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0], MALFORMED),
        (
            "a file over a directory of the workspace",
            archive(|o| raw(o, b"existing-dir", Regular, b"x", b"")),
            "ARCHIVE_CONFLICT",
        ),
        (
            "a directory over a file of the workspace",
            archive(|o| raw(o, b"existing.txt/", Directory, b"", b"")),
            "ARCHIVE_CONFLICT",
        ),
        (
            "a path the session's policy denies",
            archive(|o| {
                ok_file(o);
                raw(o, b"keys/id.secret", Regular, b"x", b"");
            }),
            "POLICY_DENIED",
        ),
        (
            "a symlink with no target",
            archive(|o| raw(o, b"dangling", Symlink, b"", b"")),
            MALFORMED,
        ),
    ];
    // Good entries first: a refusal late in the archive undoes them too.
    for (_, a, _) in cases.iter_mut().take(3) {
        let mut with_good = Vec::new();
        ok_file(&mut with_good);
        with_good.extend_from_slice(a);
        *a = with_good;
    }
    cases
}

#[tokio::test]
async fn every_hostile_archive_is_refused_with_its_reason_and_changes_nothing() {
    let server = TestServer::start().await;
    let (id, ws) = server
        .session_with(pb::Policy {
            deny_writes: vec!["**/*.secret".into()],
            ..Default::default()
        })
        .await;
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.join("planted")).unwrap();
    std::fs::create_dir_all(ws.join("inner/dir")).unwrap();
    std::os::unix::fs::symlink("inner/dir", ws.join("inner-link")).unwrap();
    std::fs::create_dir(ws.join("existing-dir")).unwrap();
    std::fs::write(ws.join("existing.txt"), "mine\n").unwrap();
    let cases = hostile();
    assert!(cases.len() >= 25, "{} cases", cases.len());
    let calls = cases
        .into_iter()
        .map(|(name, bytes, want)| (name, want, upload(&server, &id, "", bytes)))
        .collect();
    let failures = refusals(&ws, calls).await;
    assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
    assert!(failures.is_empty(), "{failures:#?}");

    // A refusal names the entry, and says nothing was extracted.
    let status = assert_refused_unchanged(
        upload(
            &server,
            &id,
            "",
            archive(|o| raw(o, b"../../x", tar::EntryType::Regular, b"x", b"")),
        ),
        "ARCHIVE_ENTRY_UNSAFE",
        &ws,
    )
    .await;
    assert!(status.message().contains("\"../../x\""), "{status:?}");
    assert!(
        status.message().contains("Nothing was extracted"),
        "{status:?}"
    );
    // A destination outside the workspace.
    assert_refused_unchanged(
        upload(
            &server,
            &id,
            "../up",
            archive(|o| raw(o, b"a", tar::EntryType::Regular, b"x", b"")),
        ),
        "INVALID_PATH",
        &ws,
    )
    .await;
    // A stream that does not start with the header.
    let chunk_first = vec![pb::UploadArchiveRequest {
        part: Some(pb::upload_archive_request::Part::Chunk(vec![0; 512])),
    }];
    assert_refused(
        server
            .client
            .clone()
            .upload_archive(tokio_stream::iter(chunk_first)),
        "INVALID_ARGUMENT",
    )
    .await;
    server.stop().await;
}

/// A million empty entries, streamed: refused at the entry ceiling, and
/// the files staged until then are gone.
#[tokio::test]
async fn a_million_empty_entries_are_refused_at_the_entry_ceiling() {
    let server = TestServer::start().await;
    let (id, ws) = server.session().await;
    std::fs::write(ws.join("existing.txt"), "mine\n").unwrap();
    let mut tar = Vec::with_capacity(8 << 20);
    {
        let mut gz = flate2::write::GzEncoder::new(&mut tar, flate2::Compression::fast());
        let mut block = Vec::new();
        for i in 0..1_000_000u32 {
            block.clear();
            raw(
                &mut block,
                format!("e/{i}").as_bytes(),
                tar::EntryType::Regular,
                b"",
                b"",
            );
            gz.write_all(&block).unwrap();
        }
        gz.write_all(&[0u8; 1024]).unwrap();
        gz.finish().unwrap();
    }
    let before = snapshot(&ws);
    let status = upload(&server, &id, "", tar).await.expect_err("refused");
    assert_eq!(
        crate::common::reason(&status),
        "ARCHIVE_TOO_LARGE",
        "{status:?}"
    );
    assert!(status.message().contains("200000 entries"), "{status:?}");
    assert_eq!(snapshot(&ws), before);
    server.stop().await;
}

#[tokio::test]
async fn a_download_survives_a_30000_deep_tree_and_keeps_symlinks_as_symlinks() {
    let server = TestServer::with_docker().await;
    let (id, ws) = server.session().await;
    let make = "set -e
mkdir src && echo code > src/main.py
ln -s /etc/shadow src/shadow-link
ln -s ../src src/loop
mkfifo src/pipe
python3 -c '
import os
os.mkdir(\"deep\"); os.chdir(\"deep\")
for _ in range(30000):
    os.mkdir(\"d\"); os.chdir(\"d\")
open(\"f\", \"w\").write(\"bottom\")
'";
    let made = run(&server.client, &id, make, 300_000).await;
    assert_eq!(made.exit.exit_code, 0, "{}", made.stderr());
    let (bytes, done) = download(&server, &id, "", false, false).await.unwrap();
    assert_eq!(done.files, 1, "{done:?}");
    assert_eq!(done.symlinks, 2);
    let why: Vec<(&str, &str)> = done
        .skipped
        .iter()
        .map(|s| (s.path.as_str(), s.why.as_str()))
        .collect();
    assert_eq!(done.skipped_count, 2, "{why:?}");
    assert!(
        why.iter()
            .any(|(p, w)| *p == "src/pipe" && w.contains("special")),
        "{why:?}"
    );
    assert!(
        why.iter()
            .any(|(p, w)| p.starts_with("deep/d/") && w.contains("deeper")),
        "{why:?}"
    );
    let out = untar(&bytes, false);
    let link = std::fs::read_link(out.path().join("src/shadow-link")).unwrap();
    assert_eq!(link, Path::new("/etc/shadow"));
    assert_eq!(
        std::fs::read_to_string(out.path().join("src/main.py")).unwrap(),
        "code\n"
    );
    // One file, alone, by its name.
    let (one, _) = download(&server, &id, "src/main.py", false, false)
        .await
        .unwrap();
    let mut names = Vec::new();
    for e in tar::Archive::new(one.as_slice()).entries().unwrap() {
        let mut e = e.unwrap();
        let mut body = String::new();
        e.read_to_string(&mut body).unwrap();
        names.push((e.path().unwrap().display().to_string(), body));
    }
    assert_eq!(names, [("main.py".to_string(), "code\n".to_string())]);
    // A path that is not there, or outside.
    assert_refused(
        download(&server, &id, "nope", false, false),
        "FILE_NOT_FOUND",
    )
    .await;
    assert_refused(
        download(&server, &id, "../..", false, false),
        "PATH_OUTSIDE_WORKSPACE",
    )
    .await;
    let _ = ws;
    server.stop().await;
}

/// A caller that stops sending mid-upload, or never reads its download, is
/// dropped after the stall time: its blocking thread, writer's turn and
/// download slot come back, and the session goes on serving.
#[tokio::test]
async fn callers_that_stall_are_dropped_and_their_slots_come_back() {
    let server = TestServer::start_with(|c| {
        c.archives.stall = std::time::Duration::from_secs(2);
        c.download_slots = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
        c.upload_slots = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
    })
    .await;
    let (id, ws) = server.session().await;
    std::fs::write(ws.join("big.bin"), vec![7u8; 8 << 20]).unwrap();
    let before = snapshot(&ws);
    // Half an archive, then silence with the stream left open.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    use pb::upload_archive_request::Part;
    tx.send(pb::UploadArchiveRequest {
        part: Some(Part::Header(pb::UploadArchiveHeader {
            session_id: id.clone(),
            destination: String::new(),
        })),
    })
    .await
    .unwrap();
    let mut half = Vec::new();
    raw(
        &mut half,
        b"a.txt",
        tar::EntryType::Regular,
        &[b'a'; 3000],
        b"",
    );
    half.truncate(1024);
    tx.send(pb::UploadArchiveRequest {
        part: Some(Part::Chunk(half)),
    })
    .await
    .unwrap();
    let t = std::time::Instant::now();
    let mut client = server.client.clone();
    let stalled = tokio::spawn(async move {
        client
            .upload_archive(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
    });
    // Another upload waits for the only slot, unread, and gets it once the
    // stalled one is dropped.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let good = archive(|o| raw(o, b"b.txt", tar::EntryType::Regular, b"b", b""));
    let second = upload(&server, &id, "", good).await.unwrap();
    assert_eq!(second.files, 1);
    let status = stalled
        .await
        .unwrap()
        .expect_err("a stalled upload is dropped");
    assert_eq!(
        crate::common::reason(&status),
        "ARCHIVE_MALFORMED",
        "{status:?}"
    );
    assert!(status.message().contains("no data came"), "{status:?}");
    assert!(t.elapsed() < std::time::Duration::from_secs(30));
    drop(tx);
    assert!(!ws.join("a.txt").exists());
    std::fs::remove_file(ws.join("b.txt")).unwrap();
    assert_eq!(snapshot(&ws), before);
    // A download nobody reads holds the only slot until the stall time.
    let unread = server
        .client
        .clone()
        .download_archive(pb::DownloadArchiveRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let (bytes, done) = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        download(&server, &id, "", false, false),
    )
    .await
    .expect("the slot came back")
    .unwrap();
    assert_eq!(done.files, 1);
    assert!(bytes.len() > 8 << 20);
    drop(unread);
    server.stop().await;
}

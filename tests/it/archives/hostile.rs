//! The table of hostile archives, each refused with its reason and the
//! workspace byte-for-byte unchanged, and the entry ceiling.

use std::io::Write;

use crate::common::{TestServer, assert_refused, assert_refused_unchanged, refusals, snapshot};
use sandboxd::pb;

use super::*;

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
            "5,000-character long name: past the record's bound, unread",
            archive(|o| long(o, "d/".repeat(2500).as_bytes(), b"x")),
            "ARCHIVE_HEADER_TOO_LARGE",
        ),
        (
            "5,000-character PAX path",
            archive(|o| {
                let path = "d/".repeat(2500);
                let record = format!("{} path={path}\n", path.len() + 11);
                raw(o, b"././@PaxHeader", XHeader, record.as_bytes(), b"");
                raw(o, b"placeholder", Regular, b"x", b"");
            }),
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

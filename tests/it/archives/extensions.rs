//! Extension records (GNU long names `L` and links `K`, PAX `x` and `g`):
//! each is bounded from its header before a byte of it is read, so a record
//! that claims a gigabyte costs no memory; the ones real archivers write
//! (GNU tar's long names, PAX paths, `git archive`'s global header) still
//! work; the ones that let tar readers disagree are refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::common::{TestServer, reason, refusals, snapshot};
use sandboxd::pb;
use tar::EntryType::{self, *};

use super::*;

const HEADER_TOO_LARGE: &str = "ARCHIVE_HEADER_TOO_LARGE";
const MALFORMED: &str = "ARCHIVE_MALFORMED";

/// One PAX record, `LEN key=value\n`, LEN counting itself.
fn rec(key: &str, value: &[u8]) -> Vec<u8> {
    let body = key.len() + value.len() + 3;
    let mut len = body + body.to_string().len();
    if len.to_string().len() != body.to_string().len() {
        len += 1;
    }
    let mut out = format!("{len} {key}=").into_bytes();
    out.extend_from_slice(value);
    out.push(b'\n');
    out
}

/// A header of `kind` that claims `size` bytes, followed by `data` only.
fn claims(out: &mut Vec<u8>, kind: EntryType, size: u64, data: &[u8]) {
    raw_sized(out, b"././@LongLink", kind, data, b"", size, 0o644);
}

fn named(out: &mut Vec<u8>, kind: EntryType, name: &[u8]) {
    let mut n = name.to_vec();
    n.push(0);
    raw(out, b"././@LongLink", kind, &n, b"");
}

fn pax(out: &mut Vec<u8>, kind: EntryType, records: &[Vec<u8>]) {
    raw(out, b"././@PaxHeader", kind, &records.concat(), b"");
}

#[tokio::test]
async fn extension_records_past_their_bounds_are_refused_unread() {
    let server = TestServer::start().await;
    let (id, ws) = server.session().await;
    std::fs::write(ws.join("existing.txt"), "mine\n").unwrap();
    let gib = 1u64 << 30;
    let some = vec![b'a'; 64 << 10];
    let mut cases: Vec<(&str, Vec<u8>, &str)> = Vec::new();
    for (name, kind) in [
        ("long name of 1 GiB", GNULongName),
        ("long link of 1 GiB", GNULongLink),
        ("PAX header of 1 GiB", XHeader),
        ("PAX global header of 1 GiB", XGlobalHeader),
    ] {
        let plain = archive(|o| {
            claims(o, kind, gib, &some);
        });
        cases.push((name, plain.clone(), HEADER_TOO_LARGE));
        cases.push((name, gz(&plain), HEADER_TOO_LARGE));
    }
    // Just past each bound: a name of 4096 bytes and its NUL fit, one
    // byte more does not; a PAX record set of 64 KiB fits, one more not.
    cases.push((
        "long name one byte past its bound",
        archive(|o| claims(o, GNULongName, 4098, &vec![b'n'; 4098])),
        HEADER_TOO_LARGE,
    ));
    cases.push((
        "PAX header one byte past its bound",
        archive(|o| claims(o, XHeader, (64 << 10) + 1, &vec![b'\n'; (64 << 10) + 1])),
        HEADER_TOO_LARGE,
    ));
    // A directory that carries data: its bytes count like a file's.
    cases.push((
        "a directory claiming 2 GiB",
        archive(|o| raw_sized(o, b"d/", Directory, b"", b"", 2 * gib, 0o755)),
        "ARCHIVE_TOO_LARGE",
    ));
    let calls = cases
        .into_iter()
        .map(|(name, bytes, want)| (name, want, upload(&server, &id, "", bytes)))
        .collect();
    let failures = refusals(&ws, calls).await;
    assert!(failures.is_empty(), "{failures:#?}");

    // The refusal names the record, its size and the bound.
    let status = upload(
        &server,
        &id,
        "",
        archive(|o| claims(o, GNULongName, gib, &some)),
    )
    .await
    .expect_err("refused");
    assert_eq!(reason(&status), HEADER_TOO_LARGE);
    for want in [
        "long-name record",
        "1073741824 bytes",
        "4097 bytes",
        "Nothing",
    ] {
        assert!(status.message().contains(want), "{want}: {status:?}");
    }
    server.stop().await;
}

/// Reads the resident set of this process (the service runs in it).
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb << 10
}

/// A long-name record of 1 GiB, really sent (generated as it streams, so
/// the client holds none of it): the service refuses it from its header,
/// reads only what the transport had already buffered, and its memory
/// stays flat. Before the bound, it grew by gigabytes.
#[tokio::test]
async fn a_gigabyte_long_name_costs_no_memory() {
    let server = TestServer::start().await;
    let (id, ws) = server.session().await;
    let before_tree = snapshot(&ws);
    let chunk = 1usize << 20;
    let total = 1u64 << 30;
    let mut head = Vec::new();
    claims(&mut head, GNULongName, total, b"");
    let pulled = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&pulled);
    use pb::upload_archive_request::Part;
    let msgs = std::iter::once(Part::Header(pb::UploadArchiveHeader {
        session_id: id.clone(),
        destination: String::new(),
    }))
    .chain(std::iter::once(Part::Chunk(head)))
    .chain((0..total / chunk as u64).map(move |_| {
        counter.fetch_add(chunk as u64, Ordering::Relaxed);
        Part::Chunk(vec![b'n'; chunk])
    }))
    .map(|part| pb::UploadArchiveRequest { part: Some(part) });

    let base = rss();
    let peak = Arc::new(AtomicU64::new(base));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
        std::thread::spawn(move || {
            // Bounded: at most 120 s of samples.
            for _ in 0..6000 {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                peak.fetch_max(rss(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let t = std::time::Instant::now();
    let status = tokio::time::timeout(
        Duration::from_secs(120),
        server
            .client
            .clone()
            .upload_archive(tokio_stream::iter(msgs)),
    )
    .await
    .expect("answered in time")
    .expect_err("refused");
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    assert_eq!(reason(&status), HEADER_TOO_LARGE, "{status:?}");
    let grew = peak.load(Ordering::Relaxed).saturating_sub(base);
    let sent = pulled.load(Ordering::Relaxed);
    eprintln!(
        "1 GiB long name: refused in {:?}, {} MiB pulled from the client, resident grew {} MiB",
        t.elapsed(),
        sent >> 20,
        grew >> 20
    );
    // Generous: the record alone was 1024 MiB, and reading it whole took
    // several times that.
    assert!(grew < 256 << 20, "resident grew {} MiB", grew >> 20);
    assert!(sent < 512 << 20, "{} MiB were read", sent >> 20);
    assert_eq!(snapshot(&ws), before_tree);
    server.stop().await;
}

#[tokio::test]
async fn long_names_links_and_pax_paths_within_their_bounds_are_used() {
    let server = TestServer::start().await;
    let (id, ws) = server.session().await;
    // A name of 4000 bytes: 16 components of 249 bytes and a file name.
    let dir: String = (0..16).map(|i| format!("{:0>248}/", i)).collect();
    let long_name = format!("{dir}{}", "f".repeat(4000 - dir.len()));
    assert_eq!(long_name.len(), 4000);
    let link_target = format!("{}/target", "t".repeat(200));
    let bytes = archive(|o| {
        // GNU tar's long name.
        long(o, long_name.as_bytes(), b"deep\n");
        // A long link target, for a symlink.
        named(o, GNULongLink, link_target.as_bytes());
        raw(o, b"gnu-link", Symlink, b"", b"short");
        // PAX: path and linkpath, with times and attributes beside them.
        pax(
            o,
            XHeader,
            &[
                rec("path", b"pax/named/by/pax.txt"),
                rec("mtime", b"1700000000.5"),
                rec("SCHILY.xattr.user.x", b"y"),
            ],
        );
        raw(o, b"placeholder-1", Regular, b"pax\n", b"");
        pax(o, XHeader, &[rec("linkpath", b"pax.txt")]);
        raw(o, b"pax/named/by/link", Symlink, b"", b"ignored");
        // Chained: a long name, a long link and a PAX header (that agrees)
        // for one symlink.
        named(o, GNULongName, b"chained/link");
        named(o, GNULongLink, b"../pax/named/by/pax.txt");
        pax(
            o,
            XHeader,
            &[rec("path", b"chained/link"), rec("size", b"0")],
        );
        raw(o, b"x", Symlink, b"", b"y");
        // A PAX size that agrees with the header.
        pax(o, XHeader, &[rec("size", b"6")]);
        raw(o, b"sized.txt", Regular, b"sized\n", b"");
    });
    let done = upload(&server, &id, "", bytes.clone()).await.unwrap();
    assert_eq!(done.files, 3, "{done:?}");
    assert_eq!(done.symlinks, 3, "{done:?}");
    assert_eq!(std::fs::read(ws.join(&long_name)).unwrap(), b"deep\n");
    assert_eq!(
        std::fs::read_link(ws.join("gnu-link")).unwrap(),
        std::path::Path::new(&link_target)
    );
    assert_eq!(
        std::fs::read(ws.join("pax/named/by/pax.txt")).unwrap(),
        b"pax\n"
    );
    assert_eq!(
        std::fs::read_link(ws.join("pax/named/by/link")).unwrap(),
        std::path::Path::new("pax.txt")
    );
    assert_eq!(
        std::fs::read_link(ws.join("chained/link")).unwrap(),
        std::path::Path::new("../pax/named/by/pax.txt")
    );
    assert!(!ws.join("placeholder-1").exists());
    assert_eq!(std::fs::read(ws.join("sized.txt")).unwrap(), b"sized\n");
    // The same, gzip-compressed, into a directory.
    let done = upload(&server, &id, "again", gz(&bytes)).await.unwrap();
    assert_eq!(done.files, 3, "{done:?}");
    assert_eq!(
        std::fs::read(ws.join("again").join(&long_name)).unwrap(),
        b"deep\n"
    );
    server.stop().await;
}

/// What `git archive` writes (a PAX global header with the commit id
/// first) and what GNU tar writes in PAX format for long names.
#[tokio::test]
async fn archives_from_git_archive_and_gnu_tar_pax_upload() {
    let server = TestServer::start().await;
    let (id, ws) = server.session().await;
    let repo = tempfile::tempdir().unwrap();
    let sh = |cmd: &str| {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .current_dir(repo.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{cmd}: {out:?}");
        out.stdout
    };
    let long_dir = "l".repeat(150);
    sh(&format!(
        "git init -q . && mkdir -p src/{long_dir} && echo code > src/{long_dir}/main.py && \
         git -c user.name=t -c user.email=t@t add . && \
         git -c user.name=t -c user.email=t@t commit -qm one"
    ));
    let git_tar = sh("git archive --format=tar HEAD");
    assert!(
        git_tar.windows(14).any(|w| w == b"pax_global_hea"),
        "git archive writes a global header"
    );
    upload(&server, &id, "git", git_tar).await.unwrap();
    assert_eq!(
        std::fs::read(ws.join(format!("git/src/{long_dir}/main.py"))).unwrap(),
        b"code\n"
    );
    // A global header alone, as `git archive` writes for an empty tree.
    let only_global = archive(|o| pax(o, XGlobalHeader, &[rec("comment", b"abc")]));
    upload(&server, &id, "empty", only_global).await.unwrap();
    let pax_tar = sh("tar --format=pax -cf - src");
    upload(&server, &id, "pax", pax_tar).await.unwrap();
    assert_eq!(
        std::fs::read(ws.join(format!("pax/src/{long_dir}/main.py"))).unwrap(),
        b"code\n"
    );
    server.stop().await;
}

#[tokio::test]
async fn extension_records_that_let_readers_disagree_are_refused() {
    let server = TestServer::start().await;
    let (id, ws) = server.session().await;
    std::fs::write(ws.join("existing.txt"), "mine\n").unwrap();
    let file = |o: &mut Vec<u8>| raw(o, b"f.txt", Regular, b"file\n", b"");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "two long names in a row",
            archive(|o| {
                named(o, GNULongName, b"one");
                named(o, GNULongName, b"two");
                file(o);
            }),
            MALFORMED,
        ),
        (
            "two long links in a row",
            archive(|o| {
                named(o, GNULongLink, b"one");
                named(o, GNULongLink, b"two");
                raw(o, b"l", Symlink, b"", b"x");
            }),
            MALFORMED,
        ),
        (
            "two PAX headers in a row",
            archive(|o| {
                pax(o, XHeader, &[rec("path", b"one")]);
                pax(o, XHeader, &[rec("path", b"two")]);
                file(o);
            }),
            MALFORMED,
        ),
        (
            "two PAX global headers in a row",
            archive(|o| {
                pax(o, XGlobalHeader, &[rec("comment", b"one")]);
                pax(o, XGlobalHeader, &[rec("comment", b"two")]);
                file(o);
            }),
            MALFORMED,
        ),
        (
            "a long name with no entry after it",
            archive(|o| {
                file(o);
                named(o, GNULongName, b"dangling");
            }),
            MALFORMED,
        ),
        (
            "a PAX header with no entry after it",
            archive(|o| {
                file(o);
                pax(o, XHeader, &[rec("path", b"dangling")]);
            }),
            MALFORMED,
        ),
        (
            "a PAX size other than the header's",
            archive(|o| {
                pax(o, XHeader, &[rec("size", b"0")]);
                // The file's data holds what another reader would take
                // for the next header.
                let mut hidden = Vec::new();
                raw(&mut hidden, b"hidden.txt", Regular, b"hidden\n", b"");
                raw(o, b"f.txt", Regular, &hidden, b"");
            }),
            MALFORMED,
        ),
        (
            "a long name and a PAX path that disagree",
            archive(|o| {
                named(o, GNULongName, b"gnu.txt");
                pax(o, XHeader, &[rec("path", b"pax.txt")]);
                file(o);
            }),
            MALFORMED,
        ),
        (
            "a long name holding a NUL",
            archive(|o| {
                named(o, GNULongName, b"ok.txt\0../../etc/passwd");
                file(o);
            }),
            MALFORMED,
        ),
        (
            "a PAX record whose length lies",
            archive(|o| {
                raw(o, b"p", XHeader, b"99 path=x\n", b"");
                file(o);
            }),
            MALFORMED,
        ),
        (
            "a PAX path that climbs out",
            archive(|o| {
                pax(o, XHeader, &[rec("path", b"../../escaped")]);
                file(o);
            }),
            "ARCHIVE_ENTRY_UNSAFE",
        ),
        (
            "a long name that is absolute",
            archive(|o| {
                named(o, GNULongName, b"/etc/cron.d/x");
                file(o);
            }),
            "ARCHIVE_ENTRY_UNSAFE",
        ),
        (
            "a PAX sparse file",
            archive(|o| {
                pax(
                    o,
                    XHeader,
                    &[
                        rec("GNU.sparse.major", b"1"),
                        rec("GNU.sparse.minor", b"0"),
                        rec("GNU.sparse.name", b"s"),
                        rec("GNU.sparse.realsize", b"1099511627776"),
                    ],
                );
                raw(o, b"GNUSparseFile.0/s", Regular, b"1\n0\n512\n", b"");
            }),
            "ARCHIVE_ENTRY_UNSAFE",
        ),
        (
            "a sparse header with 100,000 extension blocks",
            archive(|o| {
                let mut h = tar::Header::new_gnu();
                h.as_gnu_mut().unwrap().name[..6].copy_from_slice(b"sparse");
                h.set_entry_type(GNUSparse);
                h.set_size(0);
                h.as_gnu_mut().unwrap().set_real_size(1 << 40);
                h.as_gnu_mut().unwrap().isextended[0] = 1;
                h.set_cksum();
                o.extend_from_slice(h.as_bytes());
                let mut ext = [0u8; 512];
                ext[504] = 1; // isextended: another block follows
                for _ in 0..100_000 {
                    o.extend_from_slice(&ext);
                }
                o.extend_from_slice(&[0u8; 512]);
            }),
            "ARCHIVE_ENTRY_UNSAFE",
        ),
    ];
    let calls = cases
        .into_iter()
        .map(|(name, bytes, want)| (name, want, upload(&server, &id, "", bytes)))
        .collect();
    let failures = refusals(&ws, calls).await;
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(!ws.join("f.txt").exists());
    server.stop().await;
}

/// `.`, `./`, `/workspace` and `/workspace/` name the workspace root, as
/// they do for every other tool.
#[tokio::test]
async fn the_root_may_be_named_as_every_other_tool_names_it() {
    let server = TestServer::start().await;
    let (id, ws) = server.session().await;
    for (i, dest) in [".", "./", "/workspace", "/workspace/", "/workspace/.", ""]
        .into_iter()
        .enumerate()
    {
        let name = format!("root-{i}.txt");
        let bytes = archive(|o| raw(o, name.as_bytes(), Regular, b"x", b""));
        upload(&server, &id, dest, bytes)
            .await
            .unwrap_or_else(|e| panic!("{dest:?}: {e:?}"));
        assert!(ws.join(&name).is_file(), "{dest:?}");
    }
    server.stop().await;
}

//! Archives in and out over gRPC, and the helpers that build archives by
//! hand: a round trip through the file tools, a command and `git apply`
//! (`roundtrip`); hostile archives, each refused with its reason and the
//! workspace unchanged (`hostile`); extension records bounded before they
//! are read (`extensions`); downloads and stalled callers (`transfers`).

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::common::{TestServer, snapshot};
use sandboxd::pb;
use tokio_stream::StreamExt;

mod extensions;
mod hostile;
mod roundtrip;
mod transfers;

/// Sends `archive` in chunks of `chunk` bytes to UploadArchive.
pub(crate) async fn upload(
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
pub(crate) async fn download(
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
pub(crate) fn untar(archive: &[u8], gzip: bool) -> tempfile::TempDir {
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
pub(crate) fn tar_of(dir: &Path, gzip: bool) -> Vec<u8> {
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
pub(crate) fn files(root: &Path) -> BTreeMap<String, (bool, Vec<u8>)> {
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

/// One raw tar header (no path checks), then `data` padded to 512.
pub(crate) fn raw(out: &mut Vec<u8>, name: &[u8], kind: tar::EntryType, data: &[u8], link: &[u8]) {
    raw_sized(out, name, kind, data, link, data.len() as u64, 0o644);
}

pub(crate) fn raw_sized(
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
pub(crate) fn long(out: &mut Vec<u8>, name: &[u8], data: &[u8]) {
    let mut n = name.to_vec();
    n.push(0);
    raw(out, b"././@LongLink", tar::EntryType::GNULongName, &n, b"");
    raw(out, b"placeholder", tar::EntryType::Regular, data, b"");
}

pub(crate) fn end(mut out: Vec<u8>) -> Vec<u8> {
    out.extend_from_slice(&[0u8; 1024]);
    out
}

pub(crate) fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

pub(crate) fn archive(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    f(&mut out);
    end(out)
}

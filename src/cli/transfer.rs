//! `sandboxd upload`, `sandboxd download` and `sandboxd apply`: a project
//! into a session's workspace (a directory, packed here, or a tar or
//! tar.gz file as it is), a directory or file of it out as a tar archive,
//! and a patch applied to it.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use sandboxd::pb;

use super::AnyError;
use super::connect::Client;
use super::print::Stdio;

/// Bytes per message of an upload.
const CHUNK: usize = 1 << 20;

/// The archive to send: a directory packed (symlinks kept as symlinks), or
/// an archive file as it is.
fn archive_of(path: &Path) -> Result<Vec<u8>, AnyError> {
    if path.is_dir() {
        let mut tar = tar::Builder::new(Vec::new());
        tar.follow_symlinks(false);
        tar.append_dir_all(".", path)
            .map_err(|e| format!("cannot pack {}: {e}", path.display()))?;
        return Ok(tar.into_inner()?);
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(bytes)
}

/// `sandboxd upload PATH [--to DEST]`.
pub async fn upload(
    c: &mut Client,
    session_id: String,
    path: &Path,
    to: String,
    con: &mut Stdio,
) -> Result<Result<(), tonic::Status>, AnyError> {
    use pb::upload_archive_request::Part;
    let archive = archive_of(path)?;
    let header = pb::UploadArchiveRequest {
        part: Some(Part::Header(pb::UploadArchiveHeader {
            session_id,
            destination: to,
        })),
    };
    let chunks: Vec<pb::UploadArchiveRequest> = archive
        .chunks(CHUNK)
        .map(|c| pb::UploadArchiveRequest {
            part: Some(Part::Chunk(c.to_vec())),
        })
        .collect();
    let msgs = std::iter::once(header).chain(chunks);
    Ok(c.upload_archive(tokio_stream::iter(msgs))
        .await
        .map(|r| con.out(format_args!("{}\n", r.into_inner().message))))
}

/// `sandboxd download [PATH] [-o FILE]`: the archive to FILE, or to stdout
/// when it is not a terminal.
pub async fn download(
    c: &mut Client,
    req: pb::DownloadArchiveRequest,
    output: Option<PathBuf>,
    con: &mut Stdio,
) -> Result<Result<(), tonic::Status>, AnyError> {
    use pb::download_archive_response::Part;
    let mut out: Box<dyn Write> = match &output {
        Some(p) => Box::new(
            std::fs::File::create(p).map_err(|e| format!("cannot create {}: {e}", p.display()))?,
        ),
        None if std::io::stdout().is_terminal() => {
            return Err("the archive is binary: pass -o FILE, or redirect stdout".into());
        }
        None => Box::new(std::io::stdout()),
    };
    let mut stream = match c.download_archive(req).await {
        Ok(r) => r.into_inner(),
        Err(status) => return Ok(Err(status)),
    };
    loop {
        match stream.message().await {
            Ok(Some(pb::DownloadArchiveResponse {
                part: Some(Part::Chunk(bytes)),
            })) => out.write_all(&bytes)?,
            Ok(Some(pb::DownloadArchiveResponse {
                part: Some(Part::Done(done)),
            })) => {
                out.flush()?;
                for s in &done.skipped {
                    con.status(format_args!(
                        "left out: {} ({})",
                        crate::cli::print::name(&s.path),
                        s.why
                    ));
                }
                con.status(format_args!("{}", done.message));
                return Ok(Ok(()));
            }
            Ok(Some(_)) => {}
            Ok(None) => return Err("the stream ended without its summary".into()),
            Err(status) => return Ok(Err(status)),
        }
    }
}

/// `sandboxd apply [FILE]`: the patch from FILE, or from stdin; the
/// service's answer.
pub async fn apply(
    c: &mut Client,
    session_id: String,
    file: Option<PathBuf>,
) -> Result<Result<pb::ApplyPatchResponse, tonic::Status>, AnyError> {
    let mut patch = String::new();
    match &file {
        Some(p) => {
            std::fs::File::open(p)
                .and_then(|mut f| f.read_to_string(&mut patch))
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        }
        None => {
            std::io::stdin().read_to_string(&mut patch)?;
        }
    }
    Ok(c.apply_patch(pb::ApplyPatchRequest { session_id, patch })
        .await
        .map(tonic::Response::into_inner))
}

//! The timed workspace calls of the workspace figures: an upload, a
//! download drained whole, a checkpoint and a restore.

use std::time::{Duration, Instant};

use sandboxd::pb;

use super::{AnyError, Client};

/// Uploads `archive` (a tar) to the workspace of `sid`: the time taken.
pub(super) async fn upload(
    client: &Client,
    sid: &str,
    archive: &[u8],
) -> Result<Duration, AnyError> {
    use pb::upload_archive_request::Part;
    let mut msgs = vec![pb::UploadArchiveRequest {
        part: Some(Part::Header(pb::UploadArchiveHeader {
            session_id: sid.into(),
            destination: String::new(),
        })),
    }];
    msgs.extend(archive.chunks(1 << 20).map(|c| pb::UploadArchiveRequest {
        part: Some(Part::Chunk(c.to_vec())),
    }));
    let t = Instant::now();
    client
        .clone()
        .upload_archive(tokio_stream::iter(msgs))
        .await?;
    Ok(t.elapsed())
}

/// Downloads the workspace of `sid`, drained whole: the time and the bytes.
pub(super) async fn download(client: &Client, sid: &str) -> Result<(Duration, usize), AnyError> {
    let t = Instant::now();
    let mut stream = client
        .clone()
        .download_archive(pb::DownloadArchiveRequest {
            session_id: sid.into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut bytes = 0;
    while let Some(msg) = stream.message().await? {
        if let Some(pb::download_archive_response::Part::Chunk(c)) = msg.part {
            bytes += c.len();
        }
    }
    Ok((t.elapsed(), bytes))
}

/// Checkpoints `sid`: the time and the checkpoint.
pub(super) async fn checkpoint(client: &Client, sid: &str) -> Result<(Duration, String), AnyError> {
    let t = Instant::now();
    let r = client
        .clone()
        .create_checkpoint(pb::CreateCheckpointRequest {
            session_id: sid.into(),
            label: String::new(),
        })
        .await?
        .into_inner();
    let id = r.checkpoint.map(|c| c.checkpoint_id).unwrap_or_default();
    Ok((t.elapsed(), id))
}

/// Restores `sid` to checkpoint `cp`: the time taken.
pub(super) async fn restore(client: &Client, sid: &str, cp: &str) -> Result<Duration, AnyError> {
    let t = Instant::now();
    client
        .clone()
        .restore_checkpoint(pb::RestoreCheckpointRequest {
            session_id: sid.into(),
            checkpoint_id: cp.into(),
            stop_commands: false,
        })
        .await?;
    Ok(t.elapsed())
}

//! Conversions of archive uploads and downloads between the wire and the
//! domain.

use crate::pb;
use crate::session::{DownloadEvent, Upload};

impl From<Upload> for pb::UploadArchiveResponse {
    fn from(u: Upload) -> Self {
        let d = &u.uploaded;
        let shown = if u.destination.is_empty() {
            ".".to_string()
        } else {
            u.destination.clone()
        };
        let mut message = format!(
            "extracted into {shown}: {} files, {} directories, {} symlinks, {} bytes",
            d.files, d.dirs, d.symlinks, d.bytes
        );
        if d.replaced > 0 {
            message.push_str(&format!("; {} existing files replaced", d.replaced));
        }
        if d.stripped > 0 {
            message.push_str(&format!(
                "; set-id bits dropped from {} entries",
                d.stripped
            ));
        }
        pb::UploadArchiveResponse {
            destination: u.destination,
            files: d.files,
            directories: d.dirs,
            symlinks: d.symlinks,
            bytes: d.bytes,
            stripped: d.stripped,
            replaced: d.replaced,
            duration_ms: u.duration.as_millis() as u64,
            message,
        }
    }
}

impl From<DownloadEvent> for pb::DownloadArchiveResponse {
    fn from(e: DownloadEvent) -> Self {
        use pb::download_archive_response::Part;
        let part = match e {
            DownloadEvent::Chunk(data) => Part::Chunk(data),
            DownloadEvent::Done { summary, duration } => {
                let mut message = format!(
                    "{} files, {} directories, {} symlinks, {} bytes",
                    summary.files, summary.dirs, summary.symlinks, summary.bytes
                );
                if summary.skipped_count > 0 {
                    message.push_str(&format!(
                        "; {} paths left out (see skipped)",
                        summary.skipped_count
                    ));
                }
                Part::Done(pb::DownloadSummary {
                    files: summary.files,
                    directories: summary.dirs,
                    symlinks: summary.symlinks,
                    bytes: summary.bytes,
                    skipped: summary
                        .skipped
                        .into_iter()
                        .map(|(path, why)| pb::SkippedPath {
                            path,
                            why: why.to_string(),
                        })
                        .collect(),
                    skipped_count: summary.skipped_count,
                    duration_ms: duration.as_millis() as u64,
                    message,
                })
            }
        };
        pb::DownloadArchiveResponse { part: Some(part) }
    }
}

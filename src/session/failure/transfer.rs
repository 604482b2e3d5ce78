//! What a caller is told when an upload or a download of an archive fails:
//! part of the one table in [`super`].

use tonic::Code;

use super::{Described, denial_status, reason, status, workspace_status};
use crate::workspace::archive;

pub(super) fn upload_status(err: &archive::Error) -> Described {
    use archive::{BadName, Ceiling, Error as A, Unsafe};
    const NONE: &str = "Nothing was extracted: the workspace is as it was.";
    match err {
        A::Unsafe { entry, why } => {
            let what = match why {
                Unsafe::Absolute => "has an absolute path".to_string(),
                Unsafe::DotDot => "has a `..` component".to_string(),
                Unsafe::ThroughSymlink(at) => {
                    format!("would be written through the symlink {at}")
                }
                Unsafe::BelowFile(at) => format!("lies below {at}, which is not a directory"),
                Unsafe::HardLinkOutside(to) => {
                    format!("is a hard link to {to}, which is not a file earlier in the archive")
                }
                Unsafe::Special(what) => format!("is {what}"),
            };
            status(
                Code::InvalidArgument,
                reason::ARCHIVE_ENTRY_UNSAFE,
                format!(
                    "The archive entry {entry:?} {what}: it cannot be extracted safely. {NONE} \
                     Rebuild the archive with relative paths of files, directories and symlinks only."
                ),
                &[("entry", entry.clone())],
            )
        }
        A::BadName { entry, why } => {
            let what = match why {
                BadName::Duplicate => "appears twice in the archive".to_string(),
                BadName::NotUtf8 => "is not UTF-8".to_string(),
                BadName::TooLong(max) => {
                    format!("is longer than {max} bytes (or has a component over 255)")
                }
                BadName::Empty => "names nothing".to_string(),
                BadName::TooDeep(max) => format!("has more than {max} levels"),
            };
            status(
                Code::InvalidArgument,
                reason::ARCHIVE_ENTRY_INVALID,
                format!("The archive entry {entry:?} {what}. {NONE} Fix the archive and retry."),
                &[("entry", entry.clone())],
            )
        }
        A::TooLarge { what, limit, entry } => {
            let what = match what {
                Ceiling::Bytes => format!("the archive's files hold more than {limit} bytes"),
                Ceiling::FileBytes => format!("{entry} is larger than {limit} bytes"),
                Ceiling::Entries => format!("the archive has more than {limit} entries"),
            };
            status(
                Code::ResourceExhausted,
                reason::ARCHIVE_TOO_LARGE,
                format!(
                    "The archive is past a ceiling: {what} (at entry {entry:?}). {NONE} Send a \
                     smaller archive (leave out build output and caches), or several."
                ),
                &[("entry", entry.clone()), ("limit", limit.to_string())],
            )
        }
        A::HeaderTooLarge { what, size, limit } => status(
            Code::ResourceExhausted,
            reason::ARCHIVE_HEADER_TOO_LARGE,
            format!(
                "The archive holds a {what} of {size} bytes, past its bound of {limit} bytes; it \
                 was refused before it was read. {NONE} Rebuild the archive with shorter names \
                 and fewer extended attributes."
            ),
            &[("limit", limit.to_string()), ("size", size.to_string())],
        ),
        A::Bomb { ratio } => status(
            Code::ResourceExhausted,
            reason::ARCHIVE_BOMB,
            format!(
                "The archive expands to more than {ratio} times its compressed size, as a \
                 decompression bomb does. {NONE} Send it uncompressed if it is genuine."
            ),
            &[("ratio", ratio.to_string())],
        ),
        A::Malformed(why) => status(
            Code::InvalidArgument,
            reason::ARCHIVE_MALFORMED,
            format!(
                "The stream is not a whole tar archive (plain or gzip): {why}. {NONE} Send the \
                 whole archive, as `tar -c` (or `tar -cz`) writes it."
            ),
            &[],
        ),
        A::Conflict { path, why } => status(
            Code::FailedPrecondition,
            reason::ARCHIVE_CONFLICT,
            format!(
                "{path}: {why}. {NONE} Remove or rename it in the workspace, or extract \
                 elsewhere (destination)."
            ),
            &[("path", path.clone())],
        ),
        A::Destination(dest) => status(
            Code::InvalidArgument,
            reason::INVALID_PATH,
            format!(
                "The destination {dest:?} is not a path inside the workspace. {NONE} Give a \
                 relative directory, or nothing for the root."
            ),
            &[("path", dest.clone())],
        ),
        A::Denied(denial) => denial_status(denial),
        A::Land(e) => status(
            Code::Aborted,
            reason::IO_ERROR,
            match &e.left_in {
                None => format!(
                    "The archive could not be extracted ({e}); every step taken was undone. {NONE} \
                     Free space (the disk quota counts the staged files too) and retry."
                ),
                Some(dir) => format!(
                    "The archive could not be extracted ({e}), and something changed the workspace \
                     meanwhile, so not every step could be undone: what could not be put back is in \
                     {dir}. Stop what writes in the workspace and retry."
                ),
            },
            &[("path", e.path.clone())],
        ),
        A::Read(e) => match crate::session::slots::TooSlow::within(e) {
            Some(slow) => too_slow(slow, "upload", NONE),
            None => status(
                Code::Aborted,
                reason::ARCHIVE_MALFORMED,
                format!("The archive's stream failed: {e}. {NONE} Send it again."),
                &[],
            ),
        },
    }
}

/// A transfer stopped because its caller fell behind the minimum pace.
pub(super) fn too_slow(slow: &crate::session::slots::TooSlow, what: &str, none: &str) -> Described {
    status(
        Code::ResourceExhausted,
        reason::TRANSFER_TOO_SLOW,
        format!(
            "The {what} was stopped: {slow}. A transfer holds one of the service's few \
             transfer slots, so it must keep up that pace. {none} Retry from a faster link, \
             or send (or read) the stream as fast as it comes."
        ),
        &[
            ("min_bytes_per_sec", slow.rate.bytes_per_sec.to_string()),
            ("grace_seconds", slow.rate.grace.as_secs().to_string()),
        ],
    )
}

pub(super) fn download_status(err: &archive::DownloadError) -> Described {
    use archive::DownloadError as D;
    match err {
        D::Path(e) => workspace_status(e),
        D::TooLarge { limit } => status(
            Code::ResourceExhausted,
            reason::DOWNLOAD_TOO_LARGE,
            format!(
                "The files to download hold more than {limit} bytes; the stream so far is not a \
                 whole archive. Download a smaller directory, use gitignore to leave out build \
                 output, or ask for a larger max_bytes (up to the ceiling)."
            ),
            &[("limit", limit.to_string())],
        ),
        D::Read { path, source } => status(
            Code::Internal,
            reason::IO_ERROR,
            format!(
                "Could not read {path}: {source}. The stream so far is not a whole archive. Retry."
            ),
            &[("path", path.clone())],
        ),
        D::Write(e) => match crate::session::slots::TooSlow::within(e) {
            Some(slow) => too_slow(
                slow,
                "download",
                "The stream so far is not a whole archive; the workspace is as it was.",
            ),
            None => status(
                Code::Aborted,
                reason::IO_ERROR,
                format!("The archive could not be sent: {e}."),
                &[],
            ),
        },
        D::Walk(e) => status(
            Code::FailedPrecondition,
            reason::IO_ERROR,
            format!(
                "The walk of the workspace stopped: {e}. Download without gitignore, or a smaller directory."
            ),
            &[],
        ),
    }
}

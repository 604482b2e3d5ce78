//! Tar archives out of a workspace ([`download`]): a tar stream of a
//! directory (or file) of the workspace, written as it is walked. Symlinks are stored as symlinks and
//! never followed; special files are left out; a directory deeper than the
//! depth bound, or a name that is not UTF-8 in `.gitignore` mode, is left
//! out and reported, so any tree a command can make is walked in bounded
//! memory and fds. Past the size ceiling the download stops with an error.

use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType};

use crate::workspace::path::{RelPath, Root};
use crate::workspace::tree::{open_dir, open_file, show};
use crate::workspace::walk;

/// What a download wrote, and what it left out.
#[derive(Debug, Clone, Default)]
pub struct Downloaded {
    /// Regular files.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symlinks.
    pub symlinks: u64,
    /// Bytes of file contents.
    pub bytes: u64,
    /// Paths left out, and why (at most [`MAX_SKIPPED_LISTED`]).
    pub skipped: Vec<(String, &'static str)>,
    /// Paths left out in all.
    pub skipped_count: u64,
}

/// Most left-out paths a download names.
pub const MAX_SKIPPED_LISTED: usize = 100;

/// Options of one download.
#[derive(Debug, Clone, Copy)]
pub struct DownloadOptions {
    /// Most bytes of file contents; past it the download fails.
    pub max_bytes: u64,
    /// Deepest directory level entered below the start.
    pub max_depth: usize,
    /// Leave out what `.gitignore` files ignore, and `.git`.
    pub gitignore: bool,
}

/// Why a download failed.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    /// The start path is not in the workspace, or not there.
    #[error(transparent)]
    Path(#[from] crate::workspace::Error),
    /// Past the size ceiling.
    #[error("the files hold more than {limit} bytes")]
    TooLarge {
        /// The ceiling.
        limit: u64,
    },
    /// Reading the workspace failed.
    #[error("read {path}: {source}")]
    Read {
        /// Workspace-relative path.
        path: String,
        /// The OS error.
        source: io::Error,
    },
    /// The receiver went away or the stream could not be written.
    #[error("write the archive: {0}")]
    Write(io::Error),
    /// A walk bound (`.gitignore` mode).
    #[error(transparent)]
    Walk(#[from] walk::WalkError),
}

/// Writes a tar archive of `start` (a workspace-relative directory or
/// file) under `root` to `out`: a directory's entries are named relative
/// to it, a file by its own name.
pub fn download(
    root: &Root,
    start: &RelPath,
    opts: DownloadOptions,
    walk_limits: &walk::WalkLimits,
    out: impl Write,
) -> Result<Downloaded, DownloadError> {
    let mut tar = tar::Builder::new(out);
    tar.mode(tar::HeaderMode::Deterministic);
    tar.follow_symlinks(false);
    let mut done = Downloaded::default();
    let mut writer = Writer {
        tar: &mut tar,
        done: &mut done,
        max_bytes: opts.max_bytes,
    };
    // The start, opened one component at a time.
    let parent_and_name = start.split_last();
    let mut dir = open_dir(root.fd(), b".").map_err(|e| read_err_at("", e))?;
    if let Some((parent, name)) = &parent_and_name {
        for c in parent.as_str().split('/').filter(|c| !c.is_empty()) {
            dir = open_dir(&dir, c.as_bytes()).map_err(|e| read_err_at(parent.as_str(), e))?;
        }
        let st = rustix::fs::statat(&dir, *name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| read_err_at(start.as_str(), e.into()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            writer.entry(&dir, name.as_bytes(), name.as_bytes(), &st)?;
            tar.finish().map_err(DownloadError::Write)?;
            return Ok(done);
        }
        dir = open_dir(&dir, name.as_bytes()).map_err(|e| read_err_at(start.as_str(), e))?;
    }
    if opts.gitignore {
        let mut visit = |rel: &RelPath,
                         dir: &OwnedFd,
                         name: &str,
                         kind: walk::Kind|
         -> io::Result<walk::Flow> {
            let inner = rel
                .as_str()
                .strip_prefix(start.as_str())
                .unwrap_or(rel.as_str())
                .trim_start_matches('/');
            let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => return Ok(walk::Flow::Continue),
                Err(e) => return Err(e.into()),
            };
            let _ = kind;
            writer
                .entry(dir, name.as_bytes(), inner.as_bytes(), &st)
                .map_err(|e| match e {
                    DownloadError::Write(e) => e,
                    other => io::Error::other(other.to_string()),
                })?;
            Ok(walk::Flow::Continue)
        };
        walk::walk_all(root, start, walk_limits, opts.max_depth, &mut visit)?;
    } else {
        writer.tree(dir, opts.max_depth)?;
    }
    tar.finish().map_err(DownloadError::Write)?;
    Ok(done)
}

fn read_err_at(path: &str, source: io::Error) -> DownloadError {
    DownloadError::Read {
        path: if path.is_empty() {
            ".".into()
        } else {
            path.to_string()
        },
        source,
    }
}

struct Writer<'a, W: Write> {
    tar: &'a mut tar::Builder<W>,
    done: &'a mut Downloaded,
    max_bytes: u64,
}

impl<W: Write> Writer<'_, W> {
    fn skip(&mut self, path: &[u8], why: &'static str) {
        self.done.skipped_count += 1;
        if self.done.skipped.len() < MAX_SKIPPED_LISTED {
            self.done.skipped.push((show(path), why));
        }
    }

    /// Writes the entry `name` of `dir` (stat `st`) as `path`.
    fn entry(
        &mut self,
        dir: &OwnedFd,
        name: &[u8],
        path: &[u8],
        st: &rustix::fs::Stat,
    ) -> Result<(), DownloadError> {
        let mut header = tar::Header::new_gnu();
        header.set_mode(st.st_mode & 0o777);
        header.set_mtime(u64::try_from(st.st_mtime).unwrap_or(0));
        let os = OsStr::from_bytes(path);
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                self.tar
                    .append_data(&mut header, os, io::empty())
                    .map_err(DownloadError::Write)?;
                self.done.dirs += 1;
            }
            FileType::Symlink => {
                let target = match rustix::fs::readlinkat(dir, OsStr::from_bytes(name), Vec::new())
                {
                    Ok(t) => t.into_bytes(),
                    Err(rustix::io::Errno::NOENT) => return Ok(()),
                    Err(e) => return Err(read_err_at(&show(path), e.into())),
                };
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                self.tar
                    .append_link(&mut header, os, OsStr::from_bytes(&target))
                    .map_err(DownloadError::Write)?;
                self.done.symlinks += 1;
            }
            FileType::RegularFile => {
                let file = match open_file(dir, name) {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                    Err(e) => return Err(read_err_at(&show(path), e)),
                };
                let st =
                    rustix::fs::fstat(&file).map_err(|e| read_err_at(&show(path), e.into()))?;
                if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                    self.skip(path, "not a regular file when opened");
                    return Ok(());
                }
                let size = st.st_size as u64;
                if self.done.bytes + size > self.max_bytes {
                    return Err(DownloadError::TooLarge {
                        limit: self.max_bytes,
                    });
                }
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(size);
                // Exactly `size` bytes, whatever the file does meanwhile.
                let body = Exact {
                    inner: file.take(size),
                    left: size,
                };
                self.tar
                    .append_data(&mut header, os, body)
                    .map_err(DownloadError::Write)?;
                self.done.files += 1;
                self.done.bytes += size;
            }
            _ => self.skip(path, "a special file (fifo, socket or device)"),
        }
        Ok(())
    }

    /// Writes everything below the directory `top`, iteratively, at most
    /// `max_depth` levels down.
    fn tree(&mut self, top: OwnedFd, max_depth: usize) -> Result<(), DownloadError> {
        struct Frame {
            fd: OwnedFd,
            path: Vec<u8>,
            names: std::vec::IntoIter<Vec<u8>>,
            depth: usize,
        }
        let names = |fd: &OwnedFd, path: &[u8]| -> Result<Vec<Vec<u8>>, DownloadError> {
            crate::workspace::tree::names(fd).map_err(|e| read_err_at(&show(path), e))
        };
        let first = names(&top, b"")?;
        let mut stack = vec![Frame {
            fd: top,
            path: Vec::new(),
            names: first.into_iter(),
            depth: 0,
        }];
        while let Some(frame) = stack.last_mut() {
            let Some(name) = frame.names.next() else {
                stack.pop();
                continue;
            };
            let mut path = frame.path.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&name);
            let st = match rustix::fs::statat(
                &frame.fd,
                OsStr::from_bytes(&name),
                AtFlags::SYMLINK_NOFOLLOW,
            ) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(read_err_at(&show(&path), e.into())),
            };
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                if frame.depth + 1 > max_depth {
                    self.skip(&path, "deeper than the depth bound");
                    continue;
                }
                let fd = match open_dir(&frame.fd, &name) {
                    Ok(fd) => fd,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(read_err_at(&show(&path), e)),
                };
                self.entry(&frame.fd, &name, &path, &st)?;
                let children = names(&fd, &path)?;
                let depth = frame.depth + 1;
                stack.push(Frame {
                    fd,
                    path,
                    names: children.into_iter(),
                    depth,
                });
            } else {
                let fd = &stack.last().expect("non-empty").fd;
                self.entry(fd, &name, &path, &st)?;
            }
        }
        Ok(())
    }
}

/// Yields exactly `left` bytes: the file's, then zeros if it shrank.
struct Exact<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let mut n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            buf[..want].fill(0);
            n = want;
        }
        self.left -= n as u64;
        Ok(n)
    }
}

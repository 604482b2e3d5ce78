//! The content-addressed store of one workspace's pictures: each distinct
//! file content is kept once, as a file named by its sha256 in a directory
//! of the service's own (never inside the workspace, where a command could
//! reach it). Pictures hold references; a content no picture refers to is
//! removed. The store has a budget of bytes: past it, keeping more is
//! refused, and the blobs of the picture being taken are dropped again.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Mode, OFlags};
use sha2::{Digest, Sha256};

use super::{Hash, Manifest, Node};

/// Why the store could not keep a content.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Keeping it would pass the budget.
    #[error("keeping it would pass the {budget}-byte budget of kept contents ({used} bytes kept)")]
    Full {
        /// The budget.
        budget: u64,
        /// Bytes kept already.
        used: u64,
    },
    /// The source could not be read.
    #[error("read: {0}")]
    Read(io::Error),
    /// The store's own directory could not be written.
    #[error("write the store: {0}")]
    Write(io::Error),
}

#[derive(Debug)]
struct Blob {
    size: u64,
    refs: u32,
}

/// One workspace's kept contents.
#[derive(Debug)]
pub struct Store {
    dir: OwnedFd,
    blobs: HashMap<Hash, Blob>,
    bytes: u64,
    budget: u64,
    seq: u64,
}

impl Store {
    /// A store over the empty directory `dir` (opened for reading), keeping
    /// at most `budget` bytes.
    pub fn new(dir: OwnedFd, budget: u64) -> Store {
        Store {
            dir,
            blobs: HashMap::new(),
            bytes: 0,
            budget,
            seq: 0,
        }
    }

    /// Bytes kept.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The budget of bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Whether the content `hash` is kept.
    pub fn contains(&self, hash: &Hash) -> bool {
        self.blobs.contains_key(hash)
    }

    /// Keeps everything `src` yields; returns its hash and size. Hashes
    /// while copying, so the source is read once.
    pub fn put(&mut self, src: &mut impl Read) -> Result<(Hash, u64), Error> {
        self.seq += 1;
        let tmp = format!("tmp.{}", self.seq);
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, tmp.as_str(), flags, Mode::from_raw_mode(0o600))
            .map_err(|e| Error::Write(e.into()))?;
        let copied = self.copy(src, &mut File::from(fd));
        let (hash, size) = match copied {
            Ok(done) => done,
            Err(e) => {
                let _ = rustix::fs::unlinkat(&self.dir, tmp.as_str(), AtFlags::empty());
                return Err(e);
            }
        };
        if self.blobs.contains_key(&hash) {
            let _ = rustix::fs::unlinkat(&self.dir, tmp.as_str(), AtFlags::empty());
            return Ok((hash, size));
        }
        rustix::fs::renameat(
            &self.dir,
            tmp.as_str(),
            &self.dir,
            hex::encode(hash).as_str(),
        )
        .map_err(|e| Error::Write(e.into()))?;
        self.blobs.insert(hash, Blob { size, refs: 0 });
        self.bytes += size;
        Ok((hash, size))
    }

    fn copy(&self, src: &mut impl Read, dst: &mut File) -> Result<(Hash, u64), Error> {
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        loop {
            let n = match src.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::Read(e)),
            };
            total += n as u64;
            if self.bytes + total > self.budget {
                return Err(Error::Full {
                    budget: self.budget,
                    used: self.bytes,
                });
            }
            h.update(&buf[..n]);
            dst.write_all(&buf[..n]).map_err(Error::Write)?;
        }
        Ok((h.finalize().into(), total))
    }

    /// Opens the kept content `hash` for reading.
    pub fn open(&self, hash: &Hash) -> io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let name = hex::encode(hash);
        let fd = rustix::fs::openat(&self.dir, OsStr::new(&name), flags, Mode::empty())?;
        Ok(File::from(fd))
    }

    /// Reads the kept content `hash` whole.
    pub fn read(&self, hash: &Hash) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.open(hash)?.read_to_end(&mut out)?;
        Ok(out)
    }

    /// Every content of `m` gains a reference.
    pub fn retain(&mut self, m: &Manifest) {
        for hash in files(m) {
            if let Some(blob) = self.blobs.get_mut(hash) {
                blob.refs += 1;
            }
        }
    }

    /// Every content of `m` loses a reference; contents left without one
    /// are removed.
    pub fn release(&mut self, m: &Manifest) {
        for hash in files(m) {
            if let Some(blob) = self.blobs.get_mut(hash) {
                blob.refs = blob.refs.saturating_sub(1);
            }
        }
        self.collect();
    }

    /// Removes every content no picture refers to (those kept for a
    /// picture that was then not taken).
    pub fn collect(&mut self) {
        let dead: Vec<Hash> = self
            .blobs
            .iter()
            .filter(|(_, b)| b.refs == 0)
            .map(|(h, _)| *h)
            .collect();
        for hash in dead {
            if let Some(blob) = self.blobs.remove(&hash) {
                self.bytes -= blob.size;
            }
            let _ = rustix::fs::unlinkat(&self.dir, hex::encode(hash).as_str(), AtFlags::empty());
        }
    }

    /// Bytes of `m`'s contents that no other picture holds.
    pub fn own_bytes(&self, m: &Manifest) -> u64 {
        files(m)
            .into_iter()
            .filter_map(|h| self.blobs.get(h))
            .filter(|b| b.refs == 1)
            .map(|b| b.size)
            .sum()
    }
}

/// The distinct contents of `m`.
fn files(m: &Manifest) -> std::collections::HashSet<&Hash> {
    m.entries
        .values()
        .filter_map(|n| match n {
            Node::File { sha256, .. } => Some(sha256),
            _ => None,
        })
        .collect()
}

//! The content-addressed store of one workspace's pictures: each distinct
//! file content is kept once, by its sha256, in a directory of the
//! service's own (never inside the workspace, where a command could reach
//! it). Contents are appended to pack files, one per picture taken, so
//! keeping ten thousand files is one sequential write rather than ten
//! thousand file creations; a content already kept is not written again
//! (what was appended is cut off). Pictures hold references; a pack whose
//! contents no picture refers to any more is removed. The store has a
//! budget of bytes on disk: past it, keeping more is refused, and the pack
//! of the picture being taken is dropped again.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;

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
    pack: u64,
    offset: u64,
    size: u64,
    refs: u32,
}

#[derive(Debug)]
struct Pack {
    file: File,
    /// Bytes in the file.
    len: u64,
    /// Contents in it that are kept (with or without references).
    blobs: u32,
}

/// One workspace's kept contents.
#[derive(Debug)]
pub struct Store {
    dir: OwnedFd,
    blobs: HashMap<Hash, Blob>,
    packs: HashMap<u64, Pack>,
    /// The pack being appended to, until [`Store::seal`].
    open: Option<u64>,
    next_pack: u64,
    budget: u64,
}

/// What a store holds, written beside it so that a service that restarts
/// finds its contents again ([`Store::reopen`]). References are not kept:
/// they are counted again from the pictures read back.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Index {
    next_pack: u64,
    /// Each pack and its length.
    packs: Vec<(u64, u64)>,
    /// Each content: hex sha256, pack, offset, size.
    blobs: Vec<(String, u64, u64, u64)>,
}

#[cfg(test)]
impl Index {
    /// Claims the first pack is longer than it is.
    pub fn corrupt_for_tests(&mut self) {
        if let Some(p) = self.packs.first_mut() {
            p.1 += 1 << 20;
        }
    }
}

/// A kept content, read from its pack.
pub struct BlobReader<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for BlobReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end - self.pos;
        if left == 0 {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a kept content is cut short",
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl Store {
    /// A store over the empty directory `dir` (opened for reading), keeping
    /// at most `budget` bytes.
    pub fn new(dir: OwnedFd, budget: u64) -> Store {
        Store {
            dir,
            blobs: HashMap::new(),
            packs: HashMap::new(),
            open: None,
            next_pack: 0,
            budget,
        }
    }

    /// The directory the store keeps its packs in.
    pub fn dir(&self) -> &OwnedFd {
        &self.dir
    }

    /// What the store holds now (see [`Index`]).
    pub fn index(&self) -> Index {
        let mut packs: Vec<(u64, u64)> = self.packs.iter().map(|(n, p)| (*n, p.len)).collect();
        packs.sort_unstable();
        Index {
            next_pack: self.next_pack,
            packs,
            blobs: self
                .blobs
                .iter()
                .map(|(h, b)| (hex::encode(h), b.pack, b.offset, b.size))
                .collect(),
        }
    }

    /// The store `index` describes, over its directory `dir`, keeping at
    /// most `budget` bytes: each pack opened again and cut to the length
    /// the index knew (what was appended later no picture refers to), packs
    /// the index does not know removed. Contents have no references yet:
    /// [`Store::retain`] each picture read back, then [`Store::collect`].
    pub fn reopen(dir: OwnedFd, budget: u64, index: &Index) -> io::Result<Store> {
        let mut packs = HashMap::new();
        for &(n, len) in &index.packs {
            let fd = rustix::fs::openat(
                &dir,
                Self::pack_name(n).as_str(),
                OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let file = File::from(fd);
            if file.metadata()?.len() < len {
                return Err(io::Error::other(format!(
                    "pack {n} is shorter than its index says"
                )));
            }
            file.set_len(len)?;
            packs.insert(
                n,
                Pack {
                    file,
                    len,
                    blobs: 0,
                },
            );
        }
        let mut blobs = HashMap::new();
        for (hash, pack, offset, size) in &index.blobs {
            let hash: Hash = hex::decode(hash)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| io::Error::other("a malformed content hash in the index"))?;
            let Some(p) = packs.get_mut(pack) else {
                return Err(io::Error::other(format!(
                    "a content in pack {pack}, which is gone"
                )));
            };
            if offset + size > p.len {
                return Err(io::Error::other(format!(
                    "a content past the end of pack {pack}"
                )));
            }
            p.blobs += 1;
            blobs.insert(
                hash,
                Blob {
                    pack: *pack,
                    offset: *offset,
                    size: *size,
                    refs: 0,
                },
            );
        }
        // Packs begun after the index was written hold nothing it knows.
        for entry in rustix::fs::Dir::read_from(&dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            let known = name
                .strip_prefix("pack.")
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| packs.contains_key(&n));
            if name.starts_with("pack.") && !known {
                let _ = rustix::fs::unlinkat(&dir, name.as_str(), AtFlags::empty());
            }
        }
        Ok(Store {
            dir,
            blobs,
            packs,
            open: None,
            next_pack: index
                .next_pack
                .max(index.packs.iter().map(|(n, _)| n + 1).max().unwrap_or(0)),
            budget,
        })
    }

    /// Bytes on disk.
    pub fn bytes(&self) -> u64 {
        self.packs.values().map(|p| p.len).sum()
    }

    /// The budget of bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Whether the content `hash` is kept.
    pub fn contains(&self, hash: &Hash) -> bool {
        self.blobs.contains_key(hash)
    }

    fn pack_name(n: u64) -> String {
        format!("pack.{n}")
    }

    /// The pack being appended to, made if there is none.
    fn open_pack(&mut self) -> Result<u64, Error> {
        if let Some(n) = self.open {
            return Ok(n);
        }
        let n = self.next_pack;
        self.next_pack += 1;
        let flags =
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(
            &self.dir,
            Self::pack_name(n).as_str(),
            flags,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| Error::Write(e.into()))?;
        self.packs.insert(
            n,
            Pack {
                file: File::from(fd),
                len: 0,
                blobs: 0,
            },
        );
        self.open = Some(n);
        Ok(n)
    }

    /// Ends the pack being appended to: the next content starts a new one.
    /// Called once a picture is taken (or failed), so a picture's pack goes
    /// away whole when nothing refers to it.
    pub fn seal(&mut self) {
        self.open = None;
    }

    /// Keeps everything `src` yields; returns its hash and size. Hashes
    /// while appending, so the source is read once; a content kept already
    /// is cut off again.
    pub fn put(&mut self, src: &mut impl Read) -> Result<(Hash, u64), Error> {
        let n = self.open_pack()?;
        let used = self.bytes();
        let budget = self.budget;
        let pack = self.packs.get_mut(&n).expect("opened above");
        let offset = pack.len;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        let copied = (|| {
            loop {
                let got = match src.read(&mut buf) {
                    Ok(0) => break,
                    Ok(got) => got,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(Error::Read(e)),
                };
                total += got as u64;
                if used + total > budget {
                    return Err(Error::Full { budget, used });
                }
                h.update(&buf[..got]);
                pack.file
                    .write_all_at(&buf[..got], offset + total - got as u64)
                    .map_err(Error::Write)?;
            }
            Ok(())
        })();
        let hash: Hash = h.finalize().into();
        if copied.is_err() || self.blobs.contains_key(&hash) {
            // Nothing of it is kept: the pack ends where it ended.
            pack.file.set_len(offset).map_err(Error::Write)?;
            copied?;
            return Ok((hash, total));
        }
        pack.len = offset + total;
        pack.blobs += 1;
        self.blobs.insert(
            hash,
            Blob {
                pack: n,
                offset,
                size: total,
                refs: 0,
            },
        );
        Ok((hash, total))
    }

    /// The kept content `hash`, for reading.
    pub fn open(&self, hash: &Hash) -> io::Result<BlobReader<'_>> {
        let missing = || io::Error::new(io::ErrorKind::NotFound, "the content is not kept");
        let blob = self.blobs.get(hash).ok_or_else(missing)?;
        let pack = self.packs.get(&blob.pack).ok_or_else(missing)?;
        Ok(BlobReader {
            file: &pack.file,
            pos: blob.offset,
            end: blob.offset + blob.size,
        })
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

    /// Every content of `m` loses a reference; what is left without one is
    /// dropped.
    pub fn release(&mut self, m: &Manifest) {
        for hash in files(m) {
            if let Some(blob) = self.blobs.get_mut(hash) {
                blob.refs = blob.refs.saturating_sub(1);
            }
        }
        self.collect();
    }

    /// Drops every content no picture refers to (those kept for a picture
    /// that was then not taken, or whose pictures were deleted), and
    /// removes the packs left with none. Seals the open pack.
    pub fn collect(&mut self) {
        self.seal();
        let dead: Vec<Hash> = self
            .blobs
            .iter()
            .filter(|(_, b)| b.refs == 0)
            .map(|(h, _)| *h)
            .collect();
        for hash in dead {
            if let Some(blob) = self.blobs.remove(&hash)
                && let Some(pack) = self.packs.get_mut(&blob.pack)
            {
                pack.blobs -= 1;
            }
        }
        let empty: Vec<u64> = self
            .packs
            .iter()
            .filter(|(_, p)| p.blobs == 0)
            .map(|(n, _)| *n)
            .collect();
        for n in empty {
            self.packs.remove(&n);
            let _ = rustix::fs::unlinkat(&self.dir, Self::pack_name(n).as_str(), AtFlags::empty());
        }
    }

    /// Bytes of `m`'s contents that no other picture holds. (Disk space
    /// comes back when every content of a pack is dropped.)
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
fn files(m: &Manifest) -> HashSet<&Hash> {
    m.entries
        .values()
        .filter_map(|n| match n {
            Node::File { sha256, .. } => Some(sha256),
            _ => None,
        })
        .collect()
}

//! Reading an uploaded tar stream: plain or gzip, with the ratio guard on
//! what gzip expands to, and every entry with its extension records applied
//! by us, each bounded before a byte of it is read.
//!
//! The tar crate, left to itself, reads a GNU long name (`L`), long link
//! (`K`) or PAX record set (`x`, `g`) whole into memory, whatever size its
//! header claims, before anyone sees the name: one record of a gigabyte
//! made the service allocate gigabytes. So the crate iterates in raw mode
//! (it then reads no record's data and parses no GNU sparse extension
//! blocks), and [`Entries`] reads each extension record itself: its size is
//! checked against its bound from the header alone (a name: the longest
//! entry path plus its NUL; a PAX record set: [`MAX_PAX_BYTES`]), and only
//! then is it read, never more than the bound. Refused as malformed: two
//! records of one kind for one entry, records with no entry after them, a
//! PAX `size` other than the header's (tar readers would disagree on where
//! the next header starts), a long name and a PAX path that disagree, and
//! PAX records that do not parse. A PAX global record (`git archive` writes
//! one) is read, bounded, and ignored. A sparse entry (type `S`, or PAX
//! `GNU.sparse.*` keys) is refused from its header.

use std::borrow::Cow;
use std::io::{self, BufRead, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Ceiling, Error, Unsafe};
use crate::workspace::tree::show;

/// Largest PAX record set (`x` or `g`) read, in bytes. Real ones hold a
/// path, a link, times and a few attributes: a few KiB at most.
pub const MAX_PAX_BYTES: u64 = 64 << 10;

/// An extension record: metadata about the entry after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extension {
    /// A GNU long name (type `L`, `././@LongLink`).
    LongName,
    /// A GNU long link target (type `K`).
    LongLink,
    /// A PAX extended header for the next entry (type `x`).
    Pax,
    /// A PAX global header (type `g`).
    GlobalPax,
}

impl std::fmt::Display for Extension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Extension::LongName => "GNU long-name record (type L)",
            Extension::LongLink => "GNU long-link record (type K)",
            Extension::Pax => "PAX extended header (type x)",
            Extension::GlobalPax => "PAX global header (type g)",
        })
    }
}

/// Marks a read error that is the ratio guard's, not the stream's.
#[derive(Debug)]
struct RatioPassed;

impl std::fmt::Display for RatioPassed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the archive expands past the ratio ceiling")
    }
}

impl std::error::Error for RatioPassed {}

/// Counts what passes through.
struct Counted<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The expanded stream (the tar itself), refusing to go past `ratio` times
/// the compressed bytes read (once past a megabyte); remembers whether the
/// end was reached.
pub(super) struct Expanded<'a> {
    inner: Box<dyn Read + 'a>,
    out: u64,
    compressed: Arc<AtomicU64>,
    ratio: u64,
    /// The stream ended.
    pub(super) eof: bool,
}

impl Read for Expanded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.eof = true;
        }
        self.out += n as u64;
        let compressed = self.compressed.load(Ordering::Relaxed).max(1);
        if self.out > (1 << 20) && self.out > compressed.saturating_mul(self.ratio) {
            return Err(io::Error::other(RatioPassed));
        }
        Ok(n)
    }
}

/// The tar stream of `src`, gunzipped if it starts as gzip does, guarded
/// by `ratio`.
pub(super) fn open<'a>(src: impl Read + 'a, ratio: u64) -> Result<Expanded<'a>, Error> {
    let compressed = Arc::new(AtomicU64::new(0));
    let mut raw = BufReader::with_capacity(
        256 * 1024,
        Counted {
            inner: src,
            count: Arc::clone(&compressed),
        },
    );
    let head = raw.fill_buf().map_err(Error::Read)?;
    let gzip = head.starts_with(&[0x1f, 0x8b]);
    if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        return Err(Error::Malformed(
            "zstd is not accepted: send a plain or gzip-compressed tar".into(),
        ));
    }
    let inner: Box<dyn Read + 'a> = if gzip {
        Box::new(flate2::bufread::MultiGzDecoder::new(raw))
    } else {
        Box::new(raw)
    };
    Ok(Expanded {
        inner,
        out: 0,
        compressed,
        ratio,
        eof: false,
    })
}

/// The module's error for a failed read of the stream.
pub(super) fn read_err(e: io::Error, ratio: u64) -> Error {
    if e.get_ref().is_some_and(|inner| inner.is::<RatioPassed>()) {
        return Error::Bomb { ratio };
    }
    match e.kind() {
        io::ErrorKind::UnexpectedEof => Error::Malformed("the stream ends inside an entry".into()),
        io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput | io::ErrorKind::Other => {
            Error::Malformed(e.to_string())
        }
        _ => Error::Read(e),
    }
}

/// One entry of the archive, its extension records applied.
pub(super) struct Entry<'a, R: Read> {
    /// The entry: its header and its data.
    pub(super) inner: tar::Entry<'a, R>,
    /// Its path, from a long-name or PAX record if one came before it.
    pub(super) path: Vec<u8>,
    /// Its link target (symlinks and hard links), likewise.
    pub(super) link: Vec<u8>,
}

/// What the extension records read so far say about the next entry.
#[derive(Default)]
struct Pending {
    name: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
    pax: Option<Pax>,
    global: bool,
}

impl Pending {
    fn is_empty_but_global(&self) -> bool {
        self.name.is_none() && self.link.is_none() && self.pax.is_none()
    }
}

/// The keys of a PAX record set that matter here.
#[derive(Default)]
struct Pax {
    path: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
    size: Option<u64>,
    sparse: bool,
}

/// The archive's entries, each with its extensions applied, every
/// extension record bounded before it is read.
pub(super) struct Entries<'a, R: Read> {
    raw: tar::Entries<'a, R>,
    pending: Pending,
    /// Bound of a long-name or long-link record: the longest path and a NUL.
    name_bound: u64,
    /// Bound of the data of every record together.
    max_bytes: u64,
    /// Data bytes of every record so far.
    carried: u64,
    ratio: u64,
}

impl<'a, R: Read> Entries<'a, R> {
    /// The entries of `archive`, in raw mode: see the module docs.
    pub(super) fn new(
        archive: &'a mut tar::Archive<R>,
        max_path_bytes: usize,
        max_bytes: u64,
        ratio: u64,
    ) -> Result<Self, Error> {
        let raw = archive.entries().map_err(|e| read_err(e, ratio))?.raw(true);
        Ok(Entries {
            raw,
            pending: Pending::default(),
            name_bound: max_path_bytes as u64 + 1,
            max_bytes,
            carried: 0,
            ratio,
        })
    }

    /// The next entry, or `None` at the end of the archive.
    pub(super) fn next_entry(&mut self) -> Result<Option<Entry<'a, R>>, Error> {
        loop {
            let Some(entry) = self.raw.next() else {
                // A global header may close an archive (it describes the
                // archive, not an entry); the others describe what follows.
                if !self.pending.is_empty_but_global() {
                    return Err(Error::Malformed(
                        "the archive ends with extension records (long name, long link or PAX) \
                         that describe no entry"
                            .into(),
                    ));
                }
                return Ok(None);
            };
            let mut entry = entry.map_err(|e| read_err(e, self.ratio))?;
            let size = entry.size();
            let extension = match entry.header().entry_type() {
                tar::EntryType::GNULongName => Some(Extension::LongName),
                tar::EntryType::GNULongLink => Some(Extension::LongLink),
                tar::EntryType::XHeader => Some(Extension::Pax),
                tar::EntryType::XGlobalHeader => Some(Extension::GlobalPax),
                _ => None,
            };
            let bound = match extension {
                Some(Extension::LongName | Extension::LongLink) => self.name_bound,
                Some(Extension::Pax | Extension::GlobalPax) => MAX_PAX_BYTES,
                None => u64::MAX,
            };
            if let Some(what) = extension
                && size > bound
            {
                return Err(Error::HeaderTooLarge {
                    what,
                    size,
                    limit: bound,
                });
            }
            // Data no entry lands with (a directory's, a record's) still
            // costs reading: it counts against the ceiling like a file's.
            self.carried = self.carried.saturating_add(size);
            let past = self.carried > self.max_bytes;
            let limit = self.max_bytes;
            let past_err = move |entry: &[u8]| Error::TooLarge {
                what: Ceiling::Bytes,
                limit,
                entry: show(entry),
            };
            let Some(extension) = extension else {
                let entry = self.finish(entry)?;
                if past {
                    return Err(past_err(&entry.path));
                }
                return Ok(Some(entry));
            };
            if past {
                return Err(past_err(&entry.header().path_bytes()));
            }
            let taken = match extension {
                Extension::LongName => self.pending.name.is_some(),
                Extension::LongLink => self.pending.link.is_some(),
                Extension::Pax => self.pending.pax.is_some(),
                Extension::GlobalPax => self.pending.global,
            };
            if taken {
                return Err(Error::Malformed(format!(
                    "a second {extension} in a row, for one entry"
                )));
            }
            let mut data = Vec::with_capacity(size as usize);
            (&mut entry)
                .take(bound)
                .read_to_end(&mut data)
                .map_err(|e| read_err(e, self.ratio))?;
            if data.len() as u64 != size {
                return Err(Error::Malformed("the stream ends inside an entry".into()));
            }
            match extension {
                Extension::LongName => self.pending.name = Some(c_string(data, extension)?),
                Extension::LongLink => self.pending.link = Some(c_string(data, extension)?),
                Extension::Pax => self.pending.pax = Some(pax(&data)?),
                // Archive-wide metadata (git archive's commit id): nothing
                // an extraction uses, so it is checked for size only.
                Extension::GlobalPax => self.pending.global = true,
            }
        }
    }

    /// Applies the pending extension records to `entry`.
    fn finish(&mut self, entry: tar::Entry<'a, R>) -> Result<Entry<'a, R>, Error> {
        let pending = std::mem::take(&mut self.pending);
        let pax = pending.pax.unwrap_or_default();
        let path = pick("path", pending.name, pax.path, entry.header().path_bytes())?;
        let link = pick(
            "link target",
            pending.link,
            pax.link,
            entry.header().link_name_bytes().unwrap_or_default(),
        )?;
        if pax.sparse || entry.header().entry_type() == tar::EntryType::GNUSparse {
            return Err(Error::Unsafe {
                entry: show(&path),
                why: Unsafe::Special("a sparse file"),
            });
        }
        if let Some(size) = pax.size
            && size != entry.size()
        {
            return Err(Error::Malformed(format!(
                "the entry {:?} has a PAX size ({size}) other than its header's ({}): tar \
                 readers would disagree on where the next entry starts",
                show(&path),
                entry.size()
            )));
        }
        Ok(Entry {
            inner: entry,
            path,
            link,
        })
    }
}

/// The name from a GNU record (NUL-terminated); a NUL inside it is refused.
fn c_string(mut data: Vec<u8>, what: Extension) -> Result<Vec<u8>, Error> {
    while data.last() == Some(&0) {
        data.pop();
    }
    if data.contains(&0) {
        return Err(Error::Malformed(format!("a {what} holds a NUL byte")));
    }
    Ok(data)
}

/// An entry's path (or link): from a long-name record, a PAX record, or
/// the header. A long name and a PAX path that disagree are refused: tar
/// readers differ on which wins.
fn pick(
    what: &str,
    gnu: Option<Vec<u8>>,
    pax: Option<Vec<u8>>,
    header: Cow<'_, [u8]>,
) -> Result<Vec<u8>, Error> {
    match (gnu, pax) {
        (Some(g), Some(p)) if g != p => Err(Error::Malformed(format!(
            "an entry's GNU long {what} ({:?}) and PAX {what} ({:?}) disagree",
            show(&g),
            show(&p)
        ))),
        (Some(v), _) | (None, Some(v)) => Ok(v),
        (None, None) => Ok(header.into_owned()),
    }
}

/// Parses a PAX record set: records of `LEN KEY=VALUE\n`, LEN counting
/// the whole record.
fn pax(mut data: &[u8]) -> Result<Pax, Error> {
    let bad = |why: &str| Error::Malformed(format!("a PAX extended header {why}"));
    let mut out = Pax::default();
    while !data.is_empty() {
        let space = data
            .iter()
            .take(20)
            .position(|b| *b == b' ')
            .ok_or_else(|| bad("has a record without a length"))?;
        let len: usize = std::str::from_utf8(&data[..space])
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("has a record whose length is not a number"))?;
        if len <= space + 1 || len > data.len() || data[len - 1] != b'\n' {
            return Err(bad("has a record whose length does not match it"));
        }
        let record = &data[space + 1..len - 1];
        let eq = record
            .iter()
            .position(|b| *b == b'=')
            .ok_or_else(|| bad("has a record without `=`"))?;
        let (key, value) = (&record[..eq], &record[eq + 1..]);
        match key {
            b"path" => out.path = Some(value.to_vec()),
            b"linkpath" => out.link = Some(value.to_vec()),
            b"size" => {
                let size = std::str::from_utf8(value)
                    .ok()
                    .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| bad("has a size that is not a number"))?;
                out.size = Some(size);
            }
            k if k.starts_with(b"GNU.sparse.") => out.sparse = true,
            // Times, owners, attributes: the workspace's own are used.
            _ => {}
        }
        data = &data[len..];
    }
    if out.path.as_ref().is_some_and(|p| p.contains(&0))
        || out.link.as_ref().is_some_and(|p| p.contains(&0))
    {
        return Err(bad("holds a NUL byte in a path"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pax_records_parse_and_their_lengths_are_checked() {
        let p = pax(b"12 path=a/b\n16 linkpath=t/u\n11 size=42\n").unwrap();
        assert_eq!(p.path.as_deref(), Some(&b"a/b"[..]));
        assert_eq!(p.link.as_deref(), Some(&b"t/u"[..]));
        assert_eq!(p.size, Some(42));
        assert!(pax(b"14 path=a/b\n").is_err());
        assert!(pax(b"99999999999999999999999 path=a\n").is_err());
        assert!(pax(b"x path=a\n").is_err());
        assert!(pax(b"9 path=a").is_err());
        assert!(pax(b"11 size=-1\n").is_err());
        assert!(pax(b"22 GNU.sparse.major=1\n").is_ok_and(|p| p.sparse));
    }

    #[test]
    fn a_long_name_loses_its_nuls_and_a_nul_inside_is_refused() {
        assert_eq!(
            c_string(b"a/b\0\0".to_vec(), Extension::LongName).unwrap(),
            b"a/b"
        );
        assert!(c_string(b"a\0b\0".to_vec(), Extension::LongName).is_err());
    }
}

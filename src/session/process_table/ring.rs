//! One output stream of a process, kept within a bound: its first bytes
//! (the head, a quarter of the bound) and its most recent ones (the tail),
//! with every byte numbered by its offset in the stream, so a reader can
//! come back for what follows what it read and be told what was dropped.

use std::collections::VecDeque;

/// A stream's kept bytes.
#[derive(Debug)]
pub struct Ring {
    head: Vec<u8>,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    total: u64,
}

/// Bytes read from a [`Ring`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// Offset of the first byte.
    pub offset: u64,
    /// The bytes.
    pub data: Vec<u8>,
    /// Bytes between the offset asked for and `offset` no longer kept.
    pub skipped: u64,
}

impl Ring {
    /// A ring keeping at most `bytes` (at least 4 KiB).
    pub fn new(bytes: usize) -> Ring {
        let bytes = bytes.max(4096);
        Ring {
            head: Vec::new(),
            head_cap: bytes / 4,
            tail: VecDeque::new(),
            tail_cap: bytes - bytes / 4,
            total: 0,
        }
    }

    /// Bytes written in all (the offset the next byte gets).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Adds bytes written to the stream.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.head.len() < self.head_cap {
            let take = (self.head_cap - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
            return;
        }
        let over = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..over);
        self.tail.extend(bytes);
    }

    /// At most `max` kept bytes from offset `from` on (an offset past the
    /// end reads nothing, at the end).
    pub fn read(&self, from: u64, max: usize) -> Read {
        let head = self.head.len() as u64;
        if from < head {
            let end = head.min(from + max as u64);
            return Read {
                offset: from,
                data: self.head[from as usize..end as usize].to_vec(),
                skipped: 0,
            };
        }
        let tail_start = self.total - self.tail.len() as u64;
        let start = from.clamp(tail_start, self.total);
        let at = (start - tail_start) as usize;
        let end = self.tail.len().min(at + max);
        Read {
            offset: start,
            data: self.tail.range(at..end).copied().collect(),
            skipped: start.saturating_sub(from),
        }
    }

    /// The last `chars` characters kept, as text (invalid UTF-8 replaced).
    pub fn last_text(&self, chars: usize) -> String {
        let tail_start = self.total - self.tail.len() as u64;
        // The head only when nothing was dropped after it.
        let mut bytes: Vec<u8> = if tail_start == self.head.len() as u64 {
            self.head.iter().chain(self.tail.iter()).copied().collect()
        } else {
            self.tail.iter().copied().collect()
        };
        // Four bytes a character at most: no need to decode more.
        if bytes.len() > chars * 4 {
            bytes.drain(..bytes.len() - chars * 4);
        }
        let text = String::from_utf8_lossy(&bytes);
        let count = text.chars().count();
        text.chars().skip(count.saturating_sub(chars)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_is_read_once_in_order_while_it_fits() {
        let mut ring = Ring::new(4096);
        ring.push(b"hello ");
        ring.push(b"world");
        let r = ring.read(0, 100);
        assert_eq!(
            (r.offset, r.data.as_slice(), r.skipped),
            (0, &b"hello world"[..], 0)
        );
        let r = ring.read(6, 3);
        assert_eq!(r.data, b"wor");
        assert_eq!(ring.read(11, 100).data, b"");
        assert_eq!(
            ring.read(50, 100).offset,
            11,
            "past the end reads at the end"
        );
    }

    #[test]
    fn a_flood_keeps_the_head_and_the_latest_tail_and_counts_the_gap() {
        let mut ring = Ring::new(4096);
        for i in 0..10_000u32 {
            ring.push(format!("{i:08}\n").as_bytes());
        }
        assert_eq!(ring.total(), 90_000);
        assert!(ring.head.len() + ring.tail.len() <= 4096);
        // The head is the start of the stream.
        let head = ring.read(0, 1 << 20);
        assert_eq!(&head.data[..9], b"00000000\n");
        assert_eq!(head.data.len(), 1024);
        // Reading on from the head skips the dropped middle, counted.
        let next = ring.read(1024, 1 << 20);
        assert_eq!(next.offset, 90_000 - 3072);
        assert_eq!(next.skipped, 90_000 - 3072 - 1024);
        assert!(next.data.ends_with(b"00009999\n"));
        assert_eq!(ring.last_text(9), "00009999\n");
    }

    #[test]
    fn one_huge_write_keeps_its_end() {
        let mut ring = Ring::new(4096);
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        ring.push(&big);
        let r = ring.read(1024, usize::MAX);
        assert_eq!(r.data, &big[big.len() - 3072..]);
        assert_eq!(ring.total(), 100_000);
    }
}

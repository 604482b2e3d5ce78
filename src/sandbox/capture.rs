//! Per-stream output capping, applied while bytes arrive.
//!
//! A [`Capture`] keeps the first characters of a stream (forwarded live as
//! they arrive) and a ring of its last bytes, counts every byte, and never
//! holds more than a few times the cap in memory however much the command
//! writes. Text is decoded incrementally, so a UTF-8 character split across
//! reads is never cut; invalid bytes become U+FFFD.

/// Share of the cap given to the tail when a stream is truncated: test
/// runners print their summary last, so the end matters as much as the start.
const TAIL_DIVISOR: usize = 4;

/// The kept part of one output stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// The start of the stream (all of it when not truncated).
    pub text: String,
    /// The end of the stream, when truncated; empty otherwise.
    pub tail: String,
    /// Bytes the stream carried in all.
    pub total_bytes: u64,
    /// More was written than the cap keeps.
    pub truncated: bool,
    /// Bytes between `text` and `tail` that were dropped.
    pub omitted_bytes: u64,
}

/// Incremental capper for one stream. See the module docs.
#[derive(Debug)]
pub struct Capture {
    cap: usize,
    head: String,
    head_chars: usize,
    /// Bytes arrived past the cap: the stream is truncated.
    overflow: bool,
    /// An incomplete UTF-8 sequence at the end of the last read.
    pending: Vec<u8>,
    full: bool,
    ring: Vec<u8>,
    ring_keep: usize,
    total: u64,
}

impl Capture {
    /// A capture keeping at most `cap` characters in all.
    pub fn new(cap: usize) -> Capture {
        let tail_chars = cap / TAIL_DIVISOR;
        Capture {
            cap,
            head: String::new(),
            head_chars: 0,
            overflow: false,
            pending: Vec::new(),
            full: cap == 0,
            ring: Vec::new(),
            // Enough bytes for `tail_chars` characters of up to 4 bytes,
            // plus one cut character at the front.
            ring_keep: tail_chars * 4 + 4,
            total: 0,
        }
    }

    /// Feeds the next bytes; returns the text to forward live, if any.
    pub fn push(&mut self, bytes: &[u8]) -> Option<String> {
        self.total += bytes.len() as u64;
        self.remember_tail(bytes);
        if self.full {
            self.overflow |= !bytes.is_empty();
            return None;
        }
        let text = self.decode(bytes);
        let room = self.cap - self.head_chars;
        let (take, chars) = match text.char_indices().nth(room) {
            Some((cut, _)) => {
                self.overflow = true;
                (&text[..cut], room)
            }
            None => (text.as_str(), text.chars().count()),
        };
        self.head.push_str(take);
        self.head_chars += chars;
        if self.head_chars == self.cap {
            self.full = true;
            // Part of a character beyond the cap has already arrived.
            self.overflow |= !self.pending.is_empty();
        }
        (!take.is_empty()).then(|| take.to_string())
    }

    /// Ends the stream and returns what was kept.
    pub fn finish(mut self) -> Captured {
        if !self.full && !self.pending.is_empty() {
            // The stream ended inside a character: show it as U+FFFD.
            self.pending.clear();
            self.head.push(char::REPLACEMENT_CHARACTER);
            self.head_chars += 1;
        }
        if !self.overflow {
            return Captured {
                text: self.head,
                total_bytes: self.total,
                ..Captured::default()
            };
        }
        // Truncated: a head and a tail that together hold `cap` characters.
        let tail_chars = self.cap / TAIL_DIVISOR;
        let ring_text = String::from_utf8_lossy(&self.ring);
        let skip = ring_text.chars().count().saturating_sub(tail_chars);
        let tail: String = ring_text.chars().skip(skip).collect();
        let head_keep = self.cap - tail.chars().count();
        let mut text = self.head;
        if let Some((cut, _)) = text.char_indices().nth(head_keep) {
            text.truncate(cut);
        }
        let kept = (text.len() + tail.len()) as u64;
        Captured {
            omitted_bytes: self.total.saturating_sub(kept),
            text,
            tail,
            total_bytes: self.total,
            truncated: true,
        }
    }

    fn remember_tail(&mut self, bytes: &[u8]) {
        if self.ring_keep == 0 {
            return;
        }
        if bytes.len() >= self.ring_keep {
            self.ring.clear();
            self.ring
                .extend_from_slice(&bytes[bytes.len() - self.ring_keep..]);
            return;
        }
        self.ring.extend_from_slice(bytes);
        // Trim lazily so appends stay amortised O(1) per byte.
        if self.ring.len() > 2 * self.ring_keep {
            let excess = self.ring.len() - self.ring_keep;
            self.ring.drain(..excess);
        }
    }

    /// Decodes `bytes` after any pending partial character, keeping a new
    /// trailing partial character for the next read.
    fn decode(&mut self, bytes: &[u8]) -> String {
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(bytes);
        let mut out = String::with_capacity(buf.len());
        let mut rest = &buf[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // valid_up_to guarantees this prefix is UTF-8.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[n..];
                        }
                        None => {
                            // Incomplete sequence at the end: wait for more.
                            self.pending = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cap: usize, chunks: &[&[u8]]) -> (String, Captured) {
        let mut c = Capture::new(cap);
        let mut live = String::new();
        for chunk in chunks {
            if let Some(s) = c.push(chunk) {
                live.push_str(&s);
            }
        }
        (live, c.finish())
    }

    #[test]
    fn short_output_is_kept_whole() {
        let (live, out) = run(100, &[b"hello ", b"world\n"]);
        assert_eq!(live, "hello world\n");
        assert_eq!(out.text, "hello world\n");
        assert_eq!(out.total_bytes, 12);
        assert!(!out.truncated);
        assert!(out.tail.is_empty());
    }

    #[test]
    fn exactly_cap_is_not_truncated() {
        let (_, out) = run(5, &[b"abc", b"de"]);
        assert_eq!(out.text, "abcde");
        assert!(!out.truncated);
    }

    #[test]
    fn long_output_keeps_head_and_tail_summing_to_cap() {
        let data: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        let chunks: Vec<&[u8]> = data.as_bytes().chunks(777).collect();
        let (live, out) = run(4000, &chunks);
        assert_eq!(live.chars().count(), 4000);
        assert!(out.truncated);
        assert_eq!(out.text.chars().count() + out.tail.chars().count(), 4000);
        assert_eq!(out.tail.chars().count(), 1000);
        assert!(data.starts_with(&out.text));
        assert!(data.ends_with(&out.tail));
        assert_eq!(out.total_bytes, data.len() as u64);
        assert_eq!(out.omitted_bytes, data.len() as u64 - 4000);
    }

    #[test]
    fn multibyte_characters_split_across_reads_are_never_cut() {
        let data = "é€😀".repeat(100);
        let chunks: Vec<&[u8]> = data.as_bytes().chunks(1).collect();
        let (live, out) = run(10, &chunks);
        assert_eq!(live.chars().count(), 10);
        assert!(data.starts_with(&out.text));
        assert!(data.ends_with(&out.tail));
        assert_eq!(out.text.chars().count() + out.tail.chars().count(), 10);
        assert!(!out.text.contains('\u{fffd}') && !out.tail.contains('\u{fffd}'));
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let (_, out) = run(100, &[b"a\xffb", b"\xe2\x82"]);
        assert_eq!(out.text, "a\u{fffd}b\u{fffd}");
    }

    #[test]
    fn memory_stays_bounded_for_huge_streams() {
        let mut c = Capture::new(4000);
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..2048 {
            c.push(&chunk);
        }
        assert!(c.ring.len() <= 2 * c.ring_keep + chunk.len());
        assert!(c.head.len() <= 4000);
        let out = c.finish();
        assert_eq!(out.total_bytes, 2048 * 64 * 1024);
        assert!(out.truncated);
    }

    #[test]
    fn zero_cap_keeps_nothing_but_counts() {
        let (live, out) = run(0, &[b"abc"]);
        assert!(live.is_empty());
        assert_eq!(out.total_bytes, 3);
        assert!(out.truncated);
        assert!(out.text.is_empty() && out.tail.is_empty());
    }
}

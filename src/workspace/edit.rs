//! The exact-match edit engine: a pure function from a file's bytes and a list
//! of edits to the new bytes, or a refusal. No I/O happens here, so every rule
//! of the handbook's "Editing" list is testable in isolation.
//!
//! Rules: old text must occur exactly once (or `replace_all`), never fuzzy;
//! several edits are matched against the same original, must not overlap and
//! apply all or nothing; a file whose line breaks are all CRLF is matched on
//! its LF-normalised text and written back with CRLF; a UTF-8 BOM is kept; a
//! file with mixed line endings is edited byte-exactly.
//!
//! Bounds (the client is hostile, any request, any size): at most
//! [`MAX_EDITS`] edits per call, no old text twice in one call, at most
//! [`MAX_SITES`] replacement sites in all, counted without storing more, and
//! the size of the result is checked before it is built. Counting an
//! ambiguous old text keeps only the first line numbers. Each edit costs at
//! most two linear scans of the file (a third, linear too, to count an
//! ambiguous one), so a call costs O(edits x file size) whatever the text.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use memchr::memmem;
use similar::TextDiff;

/// One requested replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditSpec {
    /// Exact text to replace; must not be empty.
    pub old: String,
    /// Replacement text; empty deletes `old`.
    pub new: String,
    /// Replace every occurrence instead of requiring exactly one.
    pub replace_all: bool,
}

/// What an accepted edit produced.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The complete new file contents, BOM and line endings restored.
    pub bytes: Vec<u8>,
    /// Sites replaced across all edits.
    pub replacements: usize,
    /// 1-based line (in the original, which is also the new file's numbering
    /// up to that point) where the first change starts.
    pub first_changed_line: usize,
    /// Lines after minus lines before.
    pub line_delta: i64,
    /// Unified diff of the LF-normalised texts, capped at [`DIFF_CAP`] bytes.
    pub diff: String,
    /// True when `diff` was cut at the cap.
    pub diff_truncated: bool,
}

/// Largest diff returned in a reply; a bigger one is cut at a line boundary.
pub const DIFF_CAP: usize = 64 * 1024;

/// Line numbers listed in an ambiguity refusal; the count is always complete.
const MAX_LISTED_LINES: usize = 20;

/// Most edits one call may carry.
pub const MAX_EDITS: usize = 100;

/// Most sites one call may replace, across all its edits.
pub const MAX_SITES: usize = 100_000;

/// Which edit of a multi-edit call a refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Which {
    /// 0-based index into the request's edits.
    pub index: usize,
    /// Number of edits in the request.
    pub total: usize,
}

impl fmt::Display for Which {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.total > 1 {
            write!(f, " (edit {} of {})", self.index + 1, self.total)
        } else {
            Ok(())
        }
    }
}

/// Line-ending style of a text file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEndings {
    /// Only LF line breaks, or none at all.
    Lf,
    /// Every line break is CRLF.
    Crlf,
    /// Both CRLF and bare LF occur: edits match byte for byte.
    Mixed,
}

/// Why an edit was refused. In every case the file is left unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// The request carried no edits.
    #[error("no edits were given")]
    NoEdits,
    /// An edit's old text is empty.
    #[error("old_string{which} is empty")]
    EmptyOldString {
        /// The edit concerned.
        which: Which,
    },
    /// An edit's old and new text are identical.
    #[error("old_string and new_string{which} are identical")]
    NoChange {
        /// The edit concerned.
        which: Which,
    },
    /// The old text does not occur.
    #[error("old_string{which} cannot be found")]
    NotFound {
        /// The edit concerned.
        which: Which,
        /// The file's line endings, to explain near misses.
        endings: LineEndings,
    },
    /// The old text occurs more than once and `replace_all` is not set.
    #[error("old_string{which} occurs {count} times")]
    Ambiguous {
        /// The edit concerned.
        which: Which,
        /// Number of (possibly overlapping) occurrences.
        count: usize,
        /// 1-based lines of the first occurrences (at most 20).
        lines: Vec<usize>,
    },
    /// Two edits of one call touch the same text.
    #[error("edits {} and {} overlap at line {line}", first + 1, second + 1)]
    Overlap {
        /// 0-based index of the earlier edit in the request.
        first: usize,
        /// 0-based index of the later edit in the request.
        second: usize,
        /// 1-based line where they meet.
        line: usize,
    },
    /// The file is not UTF-8 text (invalid UTF-8 or a NUL byte).
    #[error("the file is not UTF-8 text")]
    NotText,
    /// The call carries more edits than [`MAX_EDITS`].
    #[error("{count} edits were given, more than the limit of {max}")]
    TooManyEdits {
        /// Edits in the request.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// Two edits of one call have the same old text.
    #[error("edits {} and {} have the same old_string", first + 1, second + 1)]
    DuplicateOldString {
        /// 0-based index of the first edit with that old text.
        first: usize,
        /// 0-based index of the repeat.
        second: usize,
    },
    /// The edits would replace more than [`MAX_SITES`] sites.
    #[error("old_string{which} brings the replacements past the limit of {max}")]
    TooManySites {
        /// The edit whose sites crossed the limit.
        which: Which,
        /// The limit.
        max: usize,
    },
    /// The file after the edits would be larger than allowed.
    #[error("the edited file would be {size} bytes, over the limit of {limit} bytes")]
    ResultTooLarge {
        /// Size the file would have.
        size: u64,
        /// The limit.
        limit: u64,
    },
}

/// A text file split into the parts the engine keeps apart.
#[derive(Debug)]
pub struct Decoded<'a> {
    /// Whether the file starts with a UTF-8 byte-order mark.
    pub bom: bool,
    /// The file's line-ending style.
    pub endings: LineEndings,
    /// The text without BOM, exactly as stored.
    pub text: &'a str,
}

const BOM: &str = "\u{feff}";

/// Splits `bytes` into BOM, line-ending style and text; refuses non-text.
pub fn decode(bytes: &[u8]) -> Result<Decoded<'_>, EditError> {
    let text = std::str::from_utf8(bytes).map_err(|_| EditError::NotText)?;
    if text.as_bytes().contains(&0) {
        return Err(EditError::NotText);
    }
    let (bom, text) = match text.strip_prefix(BOM) {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    Ok(Decoded {
        bom,
        endings: line_endings(text),
        text,
    })
}

/// Classifies the line breaks of `text`.
pub fn line_endings(text: &str) -> LineEndings {
    let bytes = text.as_bytes();
    let (mut lf, mut crlf) = (0usize, 0usize);
    for i in memchr::memchr_iter(b'\n', bytes) {
        lf += 1;
        crlf += usize::from(i > 0 && bytes[i - 1] == b'\r');
    }
    match crlf {
        0 => LineEndings::Lf,
        n if n == lf => LineEndings::Crlf,
        _ => LineEndings::Mixed,
    }
}

/// Number of lines: a final line without a newline counts, an empty file has 0.
pub fn count_lines(text: &str) -> usize {
    let newlines = memchr::memchr_iter(b'\n', text.as_bytes()).count();
    if text.is_empty() || text.ends_with('\n') {
        newlines
    } else {
        newlines + 1
    }
}

/// Refusals that need no file: no edits, too many, an empty old text, old
/// equal to new, or the same old text twice.
pub fn validate(edits: &[EditSpec]) -> Result<(), EditError> {
    if edits.is_empty() {
        return Err(EditError::NoEdits);
    }
    let total = edits.len();
    if total > MAX_EDITS {
        return Err(EditError::TooManyEdits {
            count: total,
            max: MAX_EDITS,
        });
    }
    for (index, e) in edits.iter().enumerate() {
        let which = Which { index, total };
        if e.old.is_empty() {
            return Err(EditError::EmptyOldString { which });
        }
        if e.old == e.new {
            return Err(EditError::NoChange { which });
        }
    }
    let mut seen = std::collections::HashMap::with_capacity(total);
    for (second, e) in edits.iter().enumerate() {
        if let Some(&first) = seen.get(e.old.as_str()) {
            return Err(EditError::DuplicateOldString { first, second });
        }
        seen.insert(e.old.as_str(), second);
    }
    Ok(())
}

/// One replacement site in the working text.
#[derive(Debug, Clone, Copy)]
struct Site {
    start: usize,
    end: usize,
    edit: usize,
}

/// Applies `edits` to the file `bytes`, or refuses without producing anything.
/// `max_bytes` bounds the size of the result, checked before it is built.
///
/// `label` names the file in the diff header.
pub fn apply(
    bytes: &[u8],
    edits: &[EditSpec],
    label: &str,
    max_bytes: u64,
) -> Result<Applied, EditError> {
    validate(edits)?;
    let total = edits.len();
    let decoded = decode(bytes)?;
    let crlf = decoded.endings == LineEndings::Crlf;
    // In a pure-CRLF file matching happens on LF text; the model's strings are
    // normalised the same way, so either spelling of a line break matches.
    let owned_text;
    let text: &str = if crlf {
        owned_text = decoded.text.replace("\r\n", "\n");
        &owned_text
    } else {
        decoded.text
    };
    let lf = |s: &str| -> String { s.replace("\r\n", "\n") };
    let normalised: Vec<(Cow<'_, str>, Cow<'_, str>)> = edits
        .iter()
        .map(|e| {
            if crlf {
                (Cow::Owned(lf(&e.old)), Cow::Owned(lf(&e.new)))
            } else {
                (Cow::Borrowed(e.old.as_str()), Cow::Borrowed(e.new.as_str()))
            }
        })
        .collect();

    let hay = text.as_bytes();
    let mut sites = Vec::new();
    for (index, ((old, _), spec)) in normalised.iter().zip(edits).enumerate() {
        let which = Which { index, total };
        let not_found = EditError::NotFound {
            which,
            endings: decoded.endings,
        };
        let too_many = EditError::TooManySites {
            which,
            max: MAX_SITES,
        };
        let finder = memmem::Finder::new(old.as_bytes());
        // Byte matches of UTF-8 text in UTF-8 text start and end on
        // character boundaries.
        if spec.replace_all {
            let before = sites.len();
            let mut from = 0;
            while let Some(found) = finder.find(&hay[from..]) {
                if sites.len() == MAX_SITES {
                    return Err(too_many);
                }
                let start = from + found;
                sites.push(Site {
                    start,
                    end: start + old.len(),
                    edit: index,
                });
                from = start + old.len();
            }
            if sites.len() == before {
                return Err(not_found);
            }
        } else {
            let Some(start) = finder.find(hay) else {
                return Err(not_found);
            };
            // Unique means unique counting overlaps: "aa" occurs twice in
            // "aaa". A second match can start one byte on at the earliest.
            if finder.find(&hay[start + 1..]).is_some() {
                let (count, firsts) = count_overlapping(&hay[start..], old.as_bytes());
                let lines = line_numbers(text, firsts.into_iter().map(|off| start + off));
                return Err(EditError::Ambiguous {
                    which,
                    count,
                    lines,
                });
            }
            if sites.len() == MAX_SITES {
                return Err(too_many);
            }
            sites.push(Site {
                start,
                end: start + old.len(),
                edit: index,
            });
        }
    }
    sites.sort_by_key(|s| s.start);
    for pair in sites.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.start < a.end {
            return Err(EditError::Overlap {
                first: a.edit.min(b.edit),
                second: a.edit.max(b.edit),
                line: line_numbers(text, [b.start])[0],
            });
        }
    }

    // The result's size, from the sites alone, before anything is built:
    // what the text loses and gains, the BOM, and in a CRLF file one more
    // byte for every line break of the new text.
    let newlines = |s: &str| memchr::memchr_iter(b'\n', s.as_bytes()).count() as u64;
    let per_edit: Vec<(u64, u64, u64, u64)> = normalised
        .iter()
        .map(|(old, new)| {
            (
                old.len() as u64,
                new.len() as u64,
                newlines(old),
                newlines(new),
            )
        })
        .collect();
    let (mut size, mut breaks) = (text.len() as u64, newlines(text));
    for s in &sites {
        let (old_len, new_len, old_nl, new_nl) = per_edit[s.edit];
        size = size - old_len + new_len;
        breaks = breaks - old_nl + new_nl;
    }
    let bom = if decoded.bom { BOM } else { "" };
    let lf_size = size;
    let size = bom.len() as u64 + size + if crlf { breaks } else { 0 };
    if size > max_bytes {
        return Err(EditError::ResultTooLarge {
            size,
            limit: max_bytes,
        });
    }

    // The new text is built once, behind the BOM, so a plain file needs no
    // second copy (large buffers cost a page fault per 4 KiB when fresh).
    let mut out = String::with_capacity(bom.len() + lf_size as usize);
    out.push_str(bom);
    let mut cursor = 0;
    for s in &sites {
        out.push_str(&text[cursor..s.start]);
        out.push_str(&normalised[s.edit].1);
        cursor = s.end;
    }
    out.push_str(&text[cursor..]);
    let new_text = &out[bom.len()..];

    let first_changed_line = line_numbers(text, [sites[0].start])[0];
    // Lines after minus lines before, from the sites alone: newlines added
    // or removed, plus a change in whether the file ends mid-line.
    let newline_delta: i64 = sites
        .iter()
        .map(|s| {
            let (_, _, old_nl, new_nl) = per_edit[s.edit];
            new_nl as i64 - old_nl as i64
        })
        .sum();
    let open_end = |t: &str| i64::from(!t.is_empty() && !t.ends_with('\n'));
    let line_delta = newline_delta + open_end(new_text) - open_end(text);
    let last_end = sites.iter().map(|s| s.end).max().unwrap_or(0);
    let (diff, diff_truncated) = unified_diff(text, new_text, sites[0].start, last_end, label);

    let bytes = if crlf {
        let mut crlf_text = String::with_capacity(size as usize);
        crlf_text.push_str(bom);
        for line in new_text.split_inclusive('\n') {
            match line.strip_suffix('\n') {
                Some(body) => {
                    crlf_text.push_str(body);
                    crlf_text.push_str("\r\n");
                }
                None => crlf_text.push_str(line),
            }
        }
        crlf_text.into_bytes()
    } else {
        out.into_bytes()
    };
    Ok(Applied {
        bytes,
        replacements: sites.len(),
        first_changed_line,
        line_delta,
        diff,
        diff_truncated,
    })
}

/// Occurrences of `needle` in `hay`, overlapping ones included, and the
/// offsets of the first [`MAX_LISTED_LINES`]: one linear pass
/// (Knuth-Morris-Pratt), however periodic the needle, storing nothing per
/// occurrence beyond the listed ones.
fn count_overlapping(hay: &[u8], needle: &[u8]) -> (usize, Vec<usize>) {
    let m = needle.len();
    if u32::try_from(m).is_err() {
        // Border lengths fit in u32 for anything a request can carry; past
        // that, count correctly if slowly.
        let finder = memmem::Finder::new(needle);
        let (mut count, mut firsts, mut from) = (0, Vec::new(), 0);
        while let Some(found) = finder.find(&hay[from..]) {
            count += 1;
            if firsts.len() < MAX_LISTED_LINES {
                firsts.push(from + found);
            }
            from += found + 1;
        }
        return (count, firsts);
    }
    let mut border = vec![0u32; m];
    let mut k = 0usize;
    for i in 1..m {
        while k > 0 && needle[i] != needle[k] {
            k = border[k - 1] as usize;
        }
        if needle[i] == needle[k] {
            k += 1;
        }
        border[i] = k as u32;
    }
    let (mut count, mut firsts, mut q) = (0, Vec::new(), 0usize);
    for (i, &b) in hay.iter().enumerate() {
        while q > 0 && b != needle[q] {
            q = border[q - 1] as usize;
        }
        if b == needle[q] {
            q += 1;
        }
        if q == m {
            count += 1;
            if firsts.len() < MAX_LISTED_LINES {
                firsts.push(i + 1 - m);
            }
            q = border[m - 1] as usize;
        }
    }
    (count, firsts)
}

/// 1-based line numbers of ascending byte offsets, in one pass.
fn line_numbers(text: &str, offsets: impl IntoIterator<Item = usize>) -> Vec<usize> {
    let bytes = text.as_bytes();
    let mut line = 1;
    let mut pos = 0;
    offsets
        .into_iter()
        .map(|off| {
            line += bytes[pos..off].iter().filter(|&&b| b == b'\n').count();
            pos = off;
            line
        })
        .collect()
}

/// Lines of context around each change in the diff.
const CONTEXT: usize = 3;

/// Unified diff of `old` -> `new` with 3 lines of context, cut at a line
/// boundary past [`DIFF_CAP`]. Everything before `first` (the first changed
/// byte) and after `last_end` (the end of the last replaced text in `old`) is
/// identical in both, so only the window of lines around the changes is
/// diffed: the cost follows the size of the change, not of the file.
fn unified_diff(
    old: &str,
    new: &str,
    first: usize,
    last_end: usize,
    label: &str,
) -> (String, bool) {
    use std::fmt::Write as _;
    let (ob, nb) = (old.as_bytes(), new.as_bytes());
    // Window start: CONTEXT + 1 lines above the first change.
    let mut start = memchr::memrchr(b'\n', &ob[..first]).map_or(0, |i| i + 1);
    for _ in 0..=CONTEXT {
        if start == 0 {
            break;
        }
        start = memchr::memrchr(b'\n', &ob[..start - 1]).map_or(0, |i| i + 1);
    }
    // Window end: CONTEXT + 1 lines below the last change.
    let mut end = last_end;
    for _ in 0..=CONTEXT + 1 {
        if end >= ob.len() {
            break;
        }
        end = memchr::memchr(b'\n', &ob[end..]).map_or(ob.len(), |i| end + i + 1);
    }
    let new_end = (end + nb.len()).saturating_sub(ob.len()).max(start);
    let offset = memchr::memchr_iter(b'\n', &ob[..start]).count();

    let diff = TextDiff::configure()
        .timeout(Duration::from_millis(500))
        .diff_lines(&old[start..end], &new[start..new_end]);
    let mut text = String::new();
    let range = |r: std::ops::Range<usize>| {
        let begin = r.start + offset + 1;
        match r.len() {
            0 => format!("{},0", begin - 1),
            1 => begin.to_string(),
            n => format!("{begin},{n}"),
        }
    };
    let mut truncated = false;
    for hunk in diff.unified_diff().context_radius(CONTEXT).iter_hunks() {
        if text.is_empty() {
            let _ = writeln!(text, "--- a/{label}\n+++ b/{label}");
        }
        let ops = hunk.ops();
        let (Some(first_op), Some(last_op)) = (ops.first(), ops.last()) else {
            continue;
        };
        let old_r = first_op.old_range().start..last_op.old_range().end;
        let new_r = first_op.new_range().start..last_op.new_range().end;
        let _ = writeln!(text, "@@ -{} +{} @@", range(old_r), range(new_r));
        for change in hunk.iter_changes() {
            let sign = match change.tag() {
                similar::ChangeTag::Equal => ' ',
                similar::ChangeTag::Delete => '-',
                similar::ChangeTag::Insert => '+',
            };
            text.push(sign);
            text.push_str(change.value());
            if change.missing_newline() {
                text.push_str("\n\\ No newline at end of file\n");
            }
        }
        if text.len() > DIFF_CAP {
            truncated = true;
            break;
        }
    }
    if truncated {
        let mut cut = DIFF_CAP;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let cut = text[..cut].rfind('\n').map_or(0, |i| i + 1);
        text.truncate(cut);
    }
    (text, truncated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn edit(old: &str, new: &str) -> EditSpec {
        EditSpec {
            old: old.into(),
            new: new.into(),
            replace_all: false,
        }
    }

    fn all(old: &str, new: &str) -> EditSpec {
        EditSpec {
            replace_all: true,
            ..edit(old, new)
        }
    }

    fn apply_str(text: &str, edits: &[EditSpec]) -> Result<Applied, EditError> {
        apply(text.as_bytes(), edits, "f.txt", u64::MAX)
    }

    #[test]
    fn unique_match_is_replaced() {
        let out = apply_str("a\nb\nc\n", &[edit("b", "B")]).unwrap();
        assert_eq!(out.bytes, b"a\nB\nc\n");
        assert_eq!(out.replacements, 1);
        assert_eq!(out.first_changed_line, 2);
        assert_eq!(out.line_delta, 0);
        assert!(out.diff.contains("-b\n+B\n"), "{}", out.diff);
        assert!(out.diff.starts_with("--- a/f.txt\n+++ b/f.txt\n"));
    }

    #[test]
    fn missing_text_is_refused() {
        let err = apply_str("a\nb\n", &[edit("x", "y")]).unwrap_err();
        assert!(matches!(err, EditError::NotFound { .. }));
    }

    #[test]
    fn whitespace_differences_do_not_match() {
        let err =
            apply_str("    return a - b;\n", &[edit("  return a - b;\n  ", "x")]).unwrap_err();
        assert!(matches!(err, EditError::NotFound { .. }));
        let err = apply_str("return a - b;\n", &[edit("return a -  b;", "x")]).unwrap_err();
        assert!(matches!(err, EditError::NotFound { .. }));
    }

    #[test]
    fn ambiguous_match_reports_count_and_lines() {
        let err = apply_str("x\ny\nx\nz\nx\n", &[edit("x", "q")]).unwrap_err();
        assert_eq!(
            err,
            EditError::Ambiguous {
                which: Which { index: 0, total: 1 },
                count: 3,
                lines: vec![1, 3, 5]
            }
        );
    }

    #[test]
    fn overlapping_occurrences_count_as_ambiguous() {
        let err = apply_str("aaa", &[edit("aa", "b")]).unwrap_err();
        assert!(matches!(err, EditError::Ambiguous { count: 2, .. }));
    }

    #[test]
    fn replace_all_reports_every_site() {
        let out = apply_str("x y x y x", &[all("x", "zz")]).unwrap();
        assert_eq!(out.bytes, b"zz y zz y zz");
        assert_eq!(out.replacements, 3);
    }

    #[test]
    fn empty_old_string_is_refused() {
        let err = apply_str("abc", &[edit("", "x")]).unwrap_err();
        assert!(matches!(err, EditError::EmptyOldString { .. }));
    }

    #[test]
    fn empty_new_string_deletes() {
        let out = apply_str("keep\ndrop\nkeep2\n", &[edit("drop\n", "")]).unwrap();
        assert_eq!(out.bytes, b"keep\nkeep2\n");
        assert_eq!(out.line_delta, -1);
    }

    #[test]
    fn identical_strings_are_refused() {
        let err = apply_str("abc", &[edit("b", "b")]).unwrap_err();
        assert!(matches!(err, EditError::NoChange { .. }));
    }

    #[test]
    fn multi_edits_match_the_original_not_each_other() {
        // The second edit's old text only exists before the first is applied.
        let out = apply_str("one two", &[edit("one", "two"), edit("two", "three")]).unwrap();
        assert_eq!(out.bytes, b"two three");
        assert_eq!(out.replacements, 2);
    }

    #[test]
    fn one_bad_edit_refuses_all() {
        let err =
            apply_str("a b c", &[edit("a", "A"), edit("zz", "Z"), edit("c", "C")]).unwrap_err();
        assert_eq!(
            err,
            EditError::NotFound {
                which: Which { index: 1, total: 3 },
                endings: LineEndings::Lf
            }
        );
    }

    #[test]
    fn overlapping_edits_are_refused() {
        let err = apply_str("abcdef", &[edit("abcd", "x"), edit("cdef", "y")]).unwrap_err();
        assert!(matches!(
            err,
            EditError::Overlap {
                first: 0,
                second: 1,
                line: 1
            }
        ));
    }

    #[test]
    fn adjacent_edits_are_fine() {
        let out = apply_str("abcdef", &[edit("abc", "1"), edit("def", "2")]).unwrap();
        assert_eq!(out.bytes, b"12");
    }

    #[test]
    fn crlf_file_matches_lf_text_and_keeps_crlf() {
        let src = "fn a() {\r\n    1\r\n}\r\n";
        let out = apply_str(src, &[edit("{\n    1\n}", "{\n    2\n    3\n}")]).unwrap();
        assert_eq!(out.bytes, b"fn a() {\r\n    2\r\n    3\r\n}\r\n");
        assert_eq!(out.line_delta, 1);
        // The CRLF spelling of old_string matches as well.
        let out = apply_str(src, &[edit("{\r\n    1", "{\r\n    9")]).unwrap();
        assert_eq!(out.bytes, b"fn a() {\r\n    9\r\n}\r\n");
    }

    #[test]
    fn bom_is_kept() {
        let src = "\u{feff}hello\nworld\n";
        let out = apply_str(src, &[edit("hello", "bye")]).unwrap();
        assert_eq!(out.bytes, "\u{feff}bye\nworld\n".as_bytes());
    }

    #[test]
    fn mixed_endings_are_edited_byte_exactly() {
        let src = "a\r\nb\nc\r\n";
        let err = apply_str(src, &[edit("a\nb", "x")]).unwrap_err();
        assert_eq!(
            err,
            EditError::NotFound {
                which: Which { index: 0, total: 1 },
                endings: LineEndings::Mixed
            }
        );
        let out = apply_str(src, &[edit("a\r\nb\n", "z\n")]).unwrap();
        assert_eq!(out.bytes, b"z\nc\r\n");
    }

    #[test]
    fn binary_and_invalid_utf8_are_refused() {
        assert_eq!(
            apply(b"a\0b", &[edit("a", "b")], "f", u64::MAX).unwrap_err(),
            EditError::NotText
        );
        assert_eq!(
            apply(b"a\xffb", &[edit("a", "b")], "f", u64::MAX).unwrap_err(),
            EditError::NotText
        );
    }

    #[test]
    fn no_edits_is_refused() {
        assert_eq!(apply_str("abc", &[]).unwrap_err(), EditError::NoEdits);
    }

    #[test]
    fn line_counting() {
        assert_eq!(count_lines(""), 0);
        assert_eq!(count_lines("a"), 1);
        assert_eq!(count_lines("a\n"), 1);
        assert_eq!(count_lines("a\nb"), 2);
        assert_eq!(count_lines("\n\n"), 2);
    }

    #[test]
    fn multibyte_text_is_handled_on_char_boundaries() {
        let out = apply_str("ééé ü", &[edit("ü", "u")]).unwrap();
        assert_eq!(out.bytes, "ééé u".as_bytes());
        let err = apply_str("ééé", &[edit("éé", "e")]).unwrap_err();
        assert!(matches!(err, EditError::Ambiguous { count: 2, .. }));
    }

    #[test]
    fn more_than_the_edit_cap_is_refused() {
        let edits: Vec<_> = (0..=MAX_EDITS)
            .map(|i| edit(&format!("x{i}y"), "z"))
            .collect();
        assert_eq!(
            apply_str("x1y", &edits).unwrap_err(),
            EditError::TooManyEdits {
                count: MAX_EDITS + 1,
                max: MAX_EDITS
            }
        );
        let edits: Vec<_> = (0..MAX_EDITS)
            .map(|i| edit(&format!("<{i}>"), ""))
            .collect();
        let text: String = (0..MAX_EDITS).map(|i| format!("<{i}>\n")).collect();
        assert_eq!(apply_str(&text, &edits).unwrap().replacements, MAX_EDITS);
    }

    #[test]
    fn the_same_old_string_twice_is_refused() {
        let err = apply_str("a b c", &[edit("a", "A"), edit("b", "B"), all("a", "x")]).unwrap_err();
        assert_eq!(
            err,
            EditError::DuplicateOldString {
                first: 0,
                second: 2
            }
        );
    }

    /// The reported bomb: 100 identical replace_all edits of "a" over a
    /// 10 MB file would have stored edits x matches sites (6 GB).
    #[test]
    fn identical_replace_all_edits_over_a_big_file_are_refused_before_matching() {
        let text = "a".repeat(10 * 1024 * 1024);
        let edits = vec![all("a", "b"); 100];
        assert!(matches!(
            apply_str(&text, &edits).unwrap_err(),
            EditError::DuplicateOldString {
                first: 0,
                second: 1
            }
        ));
    }

    #[test]
    fn replacement_sites_past_the_cap_are_refused() {
        let text = "a".repeat(MAX_SITES + 1);
        assert_eq!(
            apply_str(&text, &[all("a", "b")]).unwrap_err(),
            EditError::TooManySites {
                which: Which { index: 0, total: 1 },
                max: MAX_SITES
            }
        );
        // Exactly the cap is fine.
        let out = apply_str(&text[1..], &[all("a", "b")]).unwrap();
        assert_eq!(out.replacements, MAX_SITES);
        // The cap is over all edits of the call together.
        let text = format!(
            "{}{}",
            "a".repeat(MAX_SITES / 2 + 1),
            "b".repeat(MAX_SITES / 2)
        );
        assert_eq!(
            apply_str(&text, &[all("a", "x"), all("b", "y")]).unwrap_err(),
            EditError::TooManySites {
                which: Which { index: 1, total: 2 },
                max: MAX_SITES
            }
        );
    }

    #[test]
    fn a_result_over_the_size_limit_is_refused_before_it_is_built() {
        let text = format!("x\n{}", "a".repeat(1000));
        let edits = [all("a", &"b".repeat(1000))];
        assert_eq!(
            apply(text.as_bytes(), &edits, "f", 100_000).unwrap_err(),
            EditError::ResultTooLarge {
                size: 1_000_002,
                limit: 100_000
            }
        );
        // A CRLF file grows by its new line breaks too, a BOM counts.
        let crlf = "\u{feff}a\r\nb\r\n";
        let edits = [edit("a", "a\nc")];
        let size = "\u{feff}a\r\nc\r\nb\r\n".len() as u64;
        assert!(apply(crlf.as_bytes(), &edits, "f", size).is_ok());
        assert_eq!(
            apply(crlf.as_bytes(), &edits, "f", size - 1).unwrap_err(),
            EditError::ResultTooLarge {
                size,
                limit: size - 1
            }
        );
    }

    /// A periodic old text over a periodic file: overlapping occurrences
    /// are counted in one linear pass (a restart per occurrence would cost
    /// occurrences x length, here 16 G steps).
    #[test]
    fn ambiguity_of_a_long_periodic_old_string_is_counted_linearly() {
        let text = format!("x\n{}", "a".repeat(4 * 1024 * 1024));
        let old = "a".repeat(4096);
        let err = apply_str(&text, &[edit(&old, "b")]).unwrap_err();
        let EditError::Ambiguous { count, lines, .. } = err else {
            panic!("{err:?}");
        };
        assert_eq!(count, 4 * 1024 * 1024 - 4096 + 1);
        assert_eq!(lines, vec![2; MAX_LISTED_LINES]);
    }

    #[test]
    fn huge_diff_is_capped_on_a_line_boundary() {
        let src: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        let out = apply_str(&src, &[all("line", "LINE")]).unwrap();
        assert!(out.diff_truncated);
        assert!(out.diff.len() <= DIFF_CAP);
        assert!(out.diff.ends_with('\n'));
        assert_eq!(out.replacements, 20_000);
    }

    /// Counts non-overlapping occurrences like `str::matches` and overlapping
    /// ones like the uniqueness rule, independently of the engine.
    fn naive_overlapping(hay: &str, needle: &str) -> usize {
        (0..hay.len())
            .filter(|&i| hay.is_char_boundary(i) && hay[i..].starts_with(needle))
            .count()
    }

    /// Applies a unified diff (as produced here) to `old`.
    fn patch(old: &str, diff: &str) -> String {
        let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
        let mut out = String::new();
        let mut next = 0; // index of the next old line not yet copied
        let mut lines = diff.lines().skip(2).peekable();
        while let Some(header) = lines.next() {
            let minus = header
                .trim_start_matches("@@ -")
                .split([',', ' '])
                .next()
                .unwrap();
            let start: usize = minus.parse().unwrap();
            let len_is_zero = header.split(' ').nth(1).unwrap().ends_with(",0");
            let begin = if len_is_zero { start } else { start - 1 };
            for l in &old_lines[next..begin] {
                out.push_str(l);
            }
            next = begin;
            while let Some(l) = lines.next_if(|l| !l.starts_with("@@")) {
                let no_newline = lines.next_if(|n| n.starts_with("\\ No newline")).is_some();
                let body = if no_newline {
                    l[1..].to_string()
                } else {
                    format!("{}\n", &l[1..])
                };
                match &l[..1] {
                    " " => {
                        out.push_str(&body);
                        next += 1;
                    }
                    "-" => next += 1,
                    "+" => out.push_str(&body),
                    other => panic!("bad diff line {other:?}"),
                }
            }
        }
        for l in &old_lines[next..] {
            out.push_str(l);
        }
        out
    }

    #[test]
    fn diff_line_numbers_are_those_of_the_whole_file() {
        let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let out = apply_str(&text, &[edit("line 50\n", "line fifty\n")]).unwrap();
        assert!(
            out.diff.contains("@@ -47,7 +47,7 @@\n line 47\n"),
            "{}",
            out.diff
        );
        assert_eq!(
            patch(&text, &out.diff),
            String::from_utf8(out.bytes).unwrap()
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// For random files and random edits: a refused edit produces nothing
        /// (the caller keeps the original bytes); an accepted one changes
        /// exactly the counted sites and nothing else.
        #[test]
        fn accepted_edits_change_exactly_the_counted_sites(
            text in "[abc\n]{0,60}",
            old in "[abc\n]{1,4}",
            new in "[xyz\n]{0,4}",
            replace_all in any::<bool>(),
        ) {
            let spec = EditSpec { old: old.clone(), new: new.clone(), replace_all };
            let overlapping = naive_overlapping(&text, &old);
            match apply(text.as_bytes(), std::slice::from_ref(&spec), "f", u64::MAX) {
                Ok(out) => {
                    let expected = text.replace(&old, &new);
                    prop_assert_eq!(out.line_delta, count_lines(&expected) as i64 - count_lines(&text) as i64);
                    prop_assert_eq!(out.bytes, expected.into_bytes());
                    if replace_all {
                        prop_assert_eq!(out.replacements, text.matches(&old).count());
                    } else {
                        prop_assert_eq!(overlapping, 1);
                        prop_assert_eq!(out.replacements, 1);
                    }
                }
                Err(EditError::NotFound { .. }) => prop_assert_eq!(overlapping, 0),
                Err(EditError::NoChange { .. }) => prop_assert_eq!(old, new),
                Err(EditError::Ambiguous { count, .. }) => {
                    prop_assert!(!replace_all);
                    prop_assert_eq!(count, overlapping);
                    prop_assert!(count > 1);
                }
                Err(e) => prop_assert!(false, "unexpected refusal {e:?}"),
            }
        }

        /// Two edits at once: accepted exactly when each is unique and they do
        /// not overlap, and then both sites change and the rest is intact.
        #[test]
        fn multi_edit_is_all_or_nothing(
            text in "[abcd ]{0,40}",
            old1 in "[abcd]{1,3}",
            old2 in "[abcd]{1,3}",
        ) {
            let edits = [
                EditSpec { old: old1.clone(), new: "X".into(), replace_all: false },
                EditSpec { old: old2.clone(), new: "Y".into(), replace_all: false },
            ];
            let unique1 = naive_overlapping(&text, &old1) == 1;
            let unique2 = naive_overlapping(&text, &old2) == 1;
            match apply(text.as_bytes(), &edits, "f", u64::MAX) {
                Ok(out) => {
                    prop_assert!(unique1 && unique2);
                    let (s1, s2) = (text.find(&old1).unwrap(), text.find(&old2).unwrap());
                    let (e1, e2) = (s1 + old1.len(), s2 + old2.len());
                    prop_assert!(e1 <= s2 || e2 <= s1);
                    let mut expected = text.clone();
                    if s1 < s2 {
                        expected.replace_range(s2..e2, "Y");
                        expected.replace_range(s1..e1, "X");
                    } else {
                        expected.replace_range(s1..e1, "X");
                        expected.replace_range(s2..e2, "Y");
                    }
                    prop_assert_eq!(out.bytes, expected.into_bytes());
                }
                Err(EditError::NotFound { .. } | EditError::Ambiguous { .. }) => {
                    prop_assert!(!(unique1 && unique2));
                }
                Err(EditError::Overlap { .. }) => prop_assert!(unique1 && unique2 && old1 != old2),
                Err(EditError::DuplicateOldString { first: 0, second: 1 }) => prop_assert_eq!(old1, old2),
                Err(EditError::NoChange { .. }) => prop_assert!(false, "X/Y never equal old"),
                Err(e) => prop_assert!(false, "unexpected refusal {e:?}"),
            }
        }

        /// The windowed diff is a correct unified diff of the whole files:
        /// applied to the old text it gives the new text.
        #[test]
        fn windowed_diff_applies_to_the_whole_file(
            lines in proptest::collection::vec("[abc]{0,3}", 0..40),
            at in 0usize..40,
            new in "[xyz\n]{0,6}",
            trailing_newline in any::<bool>(),
        ) {
            let mut text = lines.join("\n");
            if trailing_newline && !text.is_empty() {
                text.push('\n');
            }
            let marker_at = text.char_indices().map(|(i, _)| i).nth(at % (text.len() + 1)).unwrap_or(text.len());
            text.insert_str(marker_at, "MARK");
            let out = apply(text.as_bytes(), &[EditSpec { old: "MARK".into(), new: new.clone(), replace_all: false }], "f", u64::MAX).unwrap();
            let new_text = String::from_utf8(out.bytes).unwrap();
            prop_assert_eq!(patch(&text, &out.diff), new_text);
        }

        /// CRLF files round-trip: editing with LF strings writes CRLF only.
        #[test]
        fn crlf_files_stay_crlf(lines in proptest::collection::vec("[ab]{1,3}", 1..8), new in "[xy\n]{1,4}") {
            let text: String = lines.iter().map(|l| format!("{l}\r\n")).collect();
            let target = format!("{}\n", lines[0]);
            if let Ok(out) = apply(text.as_bytes(), &[EditSpec { old: target, new: new.clone(), replace_all: true }], "f", u64::MAX) {
                let s = String::from_utf8(out.bytes).unwrap();
                prop_assert!(!s.replace("\r\n", "").contains('\n'));
            }
        }
    }

    /// Cases of [`fuzz_edit_engine`]: `SANDBOXD_FUZZ_CASES` (default 500;
    /// run long with `SANDBOXD_FUZZ_CASES=1000000 cargo test --release --lib
    /// fuzz_edit_engine`, see SECURITY.md).
    fn fuzz_cases() -> u32 {
        std::env::var("SANDBOXD_FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(500)
    }

    /// What the engine must do, written independently and naively: bytes
    /// and replacements on acceptance, the kind of refusal otherwise.
    fn model(bytes: &[u8], edits: &[EditSpec]) -> Result<(Vec<u8>, usize), &'static str> {
        for e in edits {
            if e.old.is_empty() {
                return Err("empty");
            }
            if e.old == e.new {
                return Err("nochange");
            }
        }
        for (i, e) in edits.iter().enumerate() {
            if edits[..i].iter().any(|earlier| earlier.old == e.old) {
                return Err("duplicate");
            }
        }
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Err("nottext");
        };
        if text.contains('\0') {
            return Err("nottext");
        }
        let (bom, text) = match text.strip_prefix('\u{feff}') {
            Some(rest) => ("\u{feff}", rest),
            None => ("", text),
        };
        let lf = text.matches('\n').count();
        let crlf_count = text.matches("\r\n").count();
        let crlf = crlf_count > 0 && crlf_count == lf;
        let norm = |s: &str| {
            if crlf {
                s.replace("\r\n", "\n")
            } else {
                s.to_string()
            }
        };
        let text = norm(text);
        let mut sites: Vec<(usize, usize, String)> = Vec::new();
        for e in edits {
            let (old, new) = (norm(&e.old), norm(&e.new));
            let all: Vec<usize> = (0..=text.len().saturating_sub(old.len()))
                .filter(|&i| text.is_char_boundary(i) && text[i..].starts_with(old.as_str()))
                .collect();
            if all.is_empty() {
                return Err("notfound");
            }
            if e.replace_all {
                let mut next = 0;
                for &i in &all {
                    if i >= next {
                        sites.push((i, i + old.len(), new.clone()));
                        next = i + old.len();
                    }
                }
            } else if all.len() > 1 {
                return Err("ambiguous");
            } else {
                sites.push((all[0], all[0] + old.len(), new));
            }
        }
        sites.sort_by_key(|s| s.0);
        if sites.windows(2).any(|w| w[1].0 < w[0].1) {
            return Err("overlap");
        }
        let mut out = String::new();
        let mut cursor = 0;
        for (start, end, new) in &sites {
            out.push_str(&text[cursor..*start]);
            out.push_str(new);
            cursor = *end;
        }
        out.push_str(&text[cursor..]);
        if crlf {
            out = out.replace('\n', "\r\n");
        }
        Ok((format!("{bom}{out}").into_bytes(), sites.len()))
    }

    fn kind(e: &EditError) -> &'static str {
        match e {
            EditError::NoEdits => "noedits",
            EditError::EmptyOldString { .. } => "empty",
            EditError::NoChange { .. } => "nochange",
            EditError::NotFound { .. } => "notfound",
            EditError::Ambiguous { .. } => "ambiguous",
            EditError::Overlap { .. } => "overlap",
            EditError::NotText => "nottext",
            EditError::TooManyEdits { .. } => "toomanyedits",
            EditError::DuplicateOldString { .. } => "duplicate",
            EditError::TooManySites { .. } => "toomanysites",
            EditError::ResultTooLarge { .. } => "toolarge",
        }
    }

    /// Files mixing LF, CRLF, a BOM, multibyte characters and (sometimes)
    /// bytes that are not UTF-8.
    fn file_bytes() -> impl Strategy<Value = Vec<u8>> {
        (
            proptest::collection::vec(
                prop_oneof![
                    Just("a"),
                    Just("b"),
                    Just("ab"),
                    Just("é"),
                    Just("日"),
                    Just("\n"),
                    Just("\r\n"),
                    Just(" "),
                ],
                0..40,
            ),
            any::<bool>(),
            proptest::option::weighted(
                0.1,
                (
                    any::<usize>(),
                    prop_oneof![Just(0xffu8), Just(0u8), Just(0xc3u8)],
                ),
            ),
        )
            .prop_map(|(parts, bom, junk)| {
                let mut bytes = if bom {
                    "\u{feff}".as_bytes().to_vec()
                } else {
                    Vec::new()
                };
                bytes.extend(parts.concat().into_bytes());
                if let Some((at, b)) = junk {
                    let at = at % (bytes.len() + 1);
                    bytes.insert(at, b);
                }
                bytes
            })
    }

    fn edit_spec() -> impl Strategy<Value = EditSpec> {
        (
            "(a|b|é|日|\n|\r\n| ){0,4}",
            "(x|é|\n|\r\n){0,3}",
            proptest::bool::weighted(0.3),
        )
            .prop_map(|(old, new, replace_all)| EditSpec {
                old,
                new,
                replace_all,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(fuzz_cases()))]

        /// The engine against the naive model on hostile files: refused
        /// means no bytes come out (the caller writes nothing), with the
        /// refusal the model expects; accepted means exactly the counted
        /// sites changed and every other byte (BOM and line endings
        /// included) is as it was.
        #[test]
        fn fuzz_edit_engine(
            bytes in file_bytes(),
            edits in proptest::collection::vec(edit_spec(), 1..3),
        ) {
            let got = apply(&bytes, &edits, "f", u64::MAX);
            match (got, model(&bytes, &edits)) {
                (Ok(out), Ok((expected, sites))) => {
                    // The size checked before building is the size built.
                    let size = out.bytes.len() as u64;
                    prop_assert!(apply(&bytes, &edits, "f", size).is_ok());
                    if size > 0 {
                        prop_assert_eq!(
                            apply(&bytes, &edits, "f", size - 1).map(|o| o.bytes),
                            Err(EditError::ResultTooLarge { size, limit: size - 1 })
                        );
                    }
                    prop_assert_eq!(out.bytes, expected);
                    prop_assert_eq!(out.replacements, sites);
                }
                (Err(e), Err(want)) => prop_assert_eq!(kind(&e), want),
                (got, want) => prop_assert!(
                    false,
                    "engine {:?} but model {:?}",
                    got.map(|o| o.bytes).map_err(|e| kind(&e)),
                    want
                ),
            }
        }
    }
}

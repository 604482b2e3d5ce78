//! Unified diffs, as `git diff` writes them, parsed and applied to bytes.
//!
//! The rule is EditFile's, per hunk: the hunk's context and removed lines
//! must be found exactly, byte for byte, where the hunk says (shifted by
//! what earlier hunks added or removed), or else at exactly one place
//! after the previous hunk and within [`NEARBY`] lines of where it says
//! (which bounds what one hunk can cost, whatever the file), and within the
//! [`SEARCH_BUDGET`] of line comparisons shared by the whole patch (which
//! bounds what thousands of such hunks cost). No fuzz: no line is ever
//! skipped or matched loosely. A hunk found nowhere, or at more than one place, refuses the
//! whole patch, naming the file and the hunk and showing the lines that are
//! there instead, so the model can read again and retry.
//!
//! Git's extended headers are understood: new and deleted files, mode
//! changes, renames, quoted paths. Binary patches and copies are refused.

use std::fmt;

/// One hunk line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Line {
    Context(Vec<u8>),
    Remove(Vec<u8>),
    Add(Vec<u8>),
}

/// One hunk.
#[derive(Debug, Clone)]
pub struct Hunk {
    /// Its header, as written (for messages).
    pub header: String,
    old_start: usize,
    old_len: usize,
    new_len: usize,
    lines: Vec<Line>,
    /// The search budget of the patch it came from.
    budget: Budget,
}

/// What looking for hunks away from where they say may cost one patch,
/// shared by every hunk of every file that [`parse`] read from it.
#[derive(Debug, Clone, Default)]
struct Budget(std::sync::Arc<std::sync::atomic::AtomicU64>);

/// Most line comparisons one patch may make looking for its hunks (a line
/// compared with one of the same length costs one more per 64 bytes).
/// An ordinary hunk that moved costs a few thousand; a patch of thousands
/// of hunks that each sit [`NEARBY`] lines from where they say, over lines
/// that almost match, would cost billions.
pub const SEARCH_BUDGET: u64 = 20_000_000;

/// What a file patch does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Change an existing file (and perhaps its mode).
    Modify,
    /// Create a new file.
    Create,
    /// Delete an existing file.
    Delete,
    /// Rename an existing file (and perhaps change it).
    Rename,
}

/// The patch of one file.
#[derive(Debug, Clone)]
pub struct FilePatch {
    /// What it does.
    pub action: Action,
    /// The path before (`None` for a creation).
    pub old_path: Option<String>,
    /// The path after (`None` for a deletion).
    pub new_path: Option<String>,
    /// The mode after, when the patch sets one (0o644 or 0o755).
    pub new_mode: Option<u32>,
    /// Its hunks, in order.
    pub hunks: Vec<Hunk>,
}

impl FilePatch {
    /// The path it is known by: the new one, else the old one.
    pub fn path(&self) -> &str {
        self.new_path
            .as_deref()
            .or(self.old_path.as_deref())
            .unwrap_or_default()
    }
}

/// Why a patch could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The text is not a unified diff as expected.
    #[error("line {line}: {why}")]
    Malformed {
        /// 1-based line of the patch.
        line: usize,
        /// What is wrong.
        why: String,
    },
    /// A binary patch (or a copy), which is not applied.
    #[error("{path}: {what} cannot be applied")]
    Unsupported {
        /// The file.
        path: String,
        /// What it is.
        what: &'static str,
    },
}

fn malformed(line: usize, why: impl Into<String>) -> ParseError {
    ParseError::Malformed {
        line,
        why: why.into(),
    }
}

/// Undoes git's C-style quoting of a path (`"a/caf\303\251"`).
fn unquote(s: &str) -> Option<String> {
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = Vec::new();
    let mut bytes = inner.bytes().peekable();
    while let Some(b) = bytes.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let e = bytes.next()?;
        out.push(match e {
            b'n' => b'\n',
            b't' => b'\t',
            b'r' => b'\r',
            b'a' => 7,
            b'b' => 8,
            b'v' => 11,
            b'f' => 12,
            b'"' => b'"',
            b'\\' => b'\\',
            b'0'..=b'7' => {
                let mut v = u32::from(e - b'0');
                for _ in 0..2 {
                    let d = *bytes.peek()?;
                    if !(b'0'..=b'7').contains(&d) {
                        return None;
                    }
                    v = v * 8 + u32::from(d - b'0');
                    bytes.next();
                }
                u8::try_from(v).ok()?
            }
            _ => return None,
        });
    }
    String::from_utf8(out).ok()
}

/// A path of a `---`/`+++` line: `None` for /dev/null; `a/`/`b/` dropped.
fn header_path(raw: &str, line: usize) -> Result<Option<String>, ParseError> {
    // diff -u appends a tab and a timestamp.
    let raw = raw.split('\t').next().unwrap_or(raw).trim_end_matches('\r');
    if raw == "/dev/null" {
        return Ok(None);
    }
    let path = if raw.starts_with('"') {
        unquote(raw).ok_or_else(|| malformed(line, format!("bad quoted path {raw}")))?
    } else {
        raw.to_string()
    };
    let path = path
        .strip_prefix("a/")
        .or_else(|| path.strip_prefix("b/"))
        .unwrap_or(&path)
        .to_string();
    if path.is_empty() {
        return Err(malformed(line, "empty path"));
    }
    Ok(Some(path))
}

/// `@@ -a,b +c,d @@` → (a, b, d).
fn hunk_header(text: &str, line: usize) -> Result<(usize, usize, usize), ParseError> {
    let bad = || malformed(line, format!("bad hunk header {text:?}"));
    let rest = text.strip_prefix("@@ -").ok_or_else(bad)?;
    let (ranges, _) = rest.split_once(" @@").ok_or_else(bad)?;
    let (old, new) = ranges.split_once(" +").ok_or_else(bad)?;
    let range = |r: &str| -> Result<(usize, usize), ParseError> {
        match r.split_once(',') {
            Some((s, l)) => Ok((s.parse().map_err(|_| bad())?, l.parse().map_err(|_| bad())?)),
            None => Ok((r.parse().map_err(|_| bad())?, 1)),
        }
    };
    let (old_start, old_len) = range(old)?;
    let (_, new_len) = range(new)?;
    Ok((old_start, old_len, new_len))
}

fn mode_of(text: &str, line: usize) -> Result<u32, ParseError> {
    match text.trim() {
        "100644" => Ok(0o644),
        "100755" => Ok(0o755),
        "120000" => Err(ParseError::Unsupported {
            path: String::new(),
            what: "a symlink patch",
        }),
        m => Err(malformed(
            line,
            format!("mode {m} is not a file mode git writes"),
        )),
    }
}

/// Reads a unified diff of one or more files.
pub fn parse(text: &str) -> Result<Vec<FilePatch>, ParseError> {
    // Lines with their endings, so "\r" and a missing final newline stay
    // exactly as written.
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut files = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim_end_matches('\n');
        if l.starts_with("diff --git ") || l.starts_with("--- ") {
            let (file, next) = parse_file(&lines, i)?;
            files.push(file);
            i = next;
        } else {
            // Text before and between files (a commit message, comments)
            // is not part of the patch, as for git apply.
            i += 1;
        }
    }
    if files.is_empty() {
        return Err(malformed(
            1,
            "no file patch found (no `diff --git` or `---` line)",
        ));
    }
    // One budget for the whole patch, however many files it spans.
    let budget = Budget::default();
    for h in files.iter_mut().flat_map(|f| f.hunks.iter_mut()) {
        h.budget = budget.clone();
    }
    let mut seen = std::collections::HashSet::new();
    for f in &files {
        let mut paths: Vec<&String> = [&f.old_path, &f.new_path].into_iter().flatten().collect();
        paths.dedup();
        for p in paths {
            if !seen.insert(p.clone()) {
                return Err(malformed(1, format!("{p} is patched twice")));
            }
        }
    }
    Ok(files)
}

/// Parses one file's patch starting at line `start`; returns it and the
/// index of the line after it.
fn parse_file(lines: &[&str], start: usize) -> Result<(FilePatch, usize), ParseError> {
    let mut i = start;
    let mut git = false;
    let (mut old_path, mut new_path) = (None, None);
    let (mut created, mut deleted) = (false, false);
    let (mut rename_from, mut rename_to) = (None, None);
    let mut new_mode = None;
    let mut saw_minus = false;
    let line_no = |i: usize| i + 1;
    if lines[i].starts_with("diff --git ") {
        git = true;
        i += 1;
        // Extended headers.
        while i < lines.len() {
            let l = lines[i].trim_end_matches('\n').trim_end_matches('\r');
            let n = line_no(i);
            if let Some(m) = l.strip_prefix("new file mode ") {
                created = true;
                new_mode = Some(mode_of(m, n)?);
            } else if let Some(m) = l.strip_prefix("deleted file mode ") {
                deleted = true;
                mode_of(m, n)?;
            } else if let Some(m) = l.strip_prefix("new mode ") {
                new_mode = Some(mode_of(m, n)?);
            } else if let Some(m) = l.strip_prefix("old mode ") {
                mode_of(m, n)?;
            } else if let Some(p) = l.strip_prefix("rename from ") {
                rename_from = Some(plain_path(p, n)?);
            } else if let Some(p) = l.strip_prefix("rename to ") {
                rename_to = Some(plain_path(p, n)?);
            } else if l.starts_with("copy from ") || l.starts_with("copy to ") {
                return Err(ParseError::Unsupported {
                    path: l.to_string(),
                    what: "a copy",
                });
            } else if l.starts_with("similarity index ")
                || l.starts_with("dissimilarity index ")
                || l.starts_with("index ")
            {
            } else if l.starts_with("GIT binary patch") || l.starts_with("Binary files ") {
                return Err(ParseError::Unsupported {
                    path: git_header_path(lines[start]),
                    what: "a binary patch",
                });
            } else {
                break;
            }
            i += 1;
        }
    }
    if i < lines.len() && lines[i].starts_with("--- ") {
        let n = line_no(i);
        old_path = header_path(lines[i][4..].trim_end_matches('\n'), n)?;
        saw_minus = true;
        i += 1;
        if i >= lines.len() || !lines[i].starts_with("+++ ") {
            return Err(malformed(
                n + 1,
                "a `---` line must be followed by a `+++` line",
            ));
        }
        new_path = header_path(lines[i][4..].trim_end_matches('\n'), n + 1)?;
        i += 1;
    }
    if !saw_minus {
        if !git {
            return Err(malformed(line_no(start), "expected a `---` line"));
        }
        // A git patch without hunks: a mode change, a rename, an empty
        // file created or deleted. Paths from the extended headers or the
        // `diff --git` line.
        let p = rename_to
            .clone()
            .or_else(|| Some(git_header_path(lines[start])))
            .filter(|p| !p.is_empty())
            .ok_or_else(|| malformed(line_no(start), "cannot tell the file's path"))?;
        let old = rename_from.clone().unwrap_or_else(|| p.clone());
        old_path = (!created).then_some(old);
        new_path = (!deleted).then_some(p);
    }
    if created {
        old_path = None;
    }
    if deleted {
        new_path = None;
    }
    if let (Some(from), Some(to)) = (&rename_from, &rename_to) {
        old_path = Some(from.clone());
        new_path = Some(to.clone());
    }
    let mut hunks = Vec::new();
    while i < lines.len() && lines[i].starts_with("@@ ") {
        let (hunk, next) = parse_hunk(lines, i)?;
        if let Some(prev) = hunks.last()
            && hunk_end(prev) > hunk.old_start.max(1)
        {
            return Err(malformed(line_no(i), "hunks overlap or are out of order"));
        }
        hunks.push(hunk);
        i = next;
    }
    let action = match (&old_path, &new_path) {
        (None, Some(_)) => Action::Create,
        (Some(_), None) => Action::Delete,
        (Some(a), Some(b)) if a != b => Action::Rename,
        (Some(_), Some(_)) => Action::Modify,
        (None, None) => return Err(malformed(line_no(start), "both paths are /dev/null")),
    };
    if saw_minus && hunks.is_empty() {
        return Err(malformed(
            line_no(i.min(lines.len().saturating_sub(1))),
            "no hunk follows the file header",
        ));
    }
    Ok((
        FilePatch {
            action,
            old_path,
            new_path,
            new_mode,
            hunks,
        },
        i,
    ))
}

fn hunk_end(h: &Hunk) -> usize {
    h.old_start + h.old_len
}

fn plain_path(p: &str, line: usize) -> Result<String, ParseError> {
    let p = p.trim_end_matches('\r');
    if p.starts_with('"') {
        unquote(p).ok_or_else(|| malformed(line, format!("bad quoted path {p}")))
    } else {
        Ok(p.to_string())
    }
}

/// The `b/` path of a `diff --git a/X b/Y` line (best effort, for
/// messages and hunkless patches).
fn git_header_path(line: &str) -> String {
    let rest = line
        .trim_end_matches('\n')
        .trim_end_matches('\r')
        .trim_start_matches("diff --git ");
    if let Some(i) = rest.find(" \"b/") {
        return unquote(&rest[i + 1..])
            .map(|p| p[2..].to_string())
            .unwrap_or_default();
    }
    match rest.find(" b/") {
        Some(i) => rest[i + 3..].to_string(),
        None => String::new(),
    }
}

fn parse_hunk(lines: &[&str], start: usize) -> Result<(Hunk, usize), ParseError> {
    let header = lines[start].trim_end_matches('\n').trim_end_matches('\r');
    let (old_start, old_len, new_len) = hunk_header(header, start + 1)?;
    let (mut old_seen, mut new_seen) = (0, 0);
    let mut body: Vec<Line> = Vec::new();
    let mut i = start + 1;
    while (old_seen < old_len || new_seen < new_len) && i < lines.len() {
        let l = lines[i];
        let (tag, text) = match l.as_bytes().first() {
            Some(b' ') => ('=', &l[1..]),
            Some(b'-') => ('-', &l[1..]),
            Some(b'+') => ('+', &l[1..]),
            // An empty context line whose space was lost in transit.
            Some(b'\n') => ('=', l),
            Some(b'\r') if l == "\r\n" => ('=', l),
            Some(b'\\') => {
                strip_newline(&mut body);
                i += 1;
                continue;
            }
            _ => break,
        };
        let text = text.as_bytes().to_vec();
        match tag {
            '=' => {
                old_seen += 1;
                new_seen += 1;
                body.push(Line::Context(text));
            }
            '-' => {
                old_seen += 1;
                body.push(Line::Remove(text));
            }
            _ => {
                new_seen += 1;
                body.push(Line::Add(text));
            }
        }
        i += 1;
    }
    if old_seen != old_len || new_seen != new_len {
        return Err(malformed(
            start + 1,
            format!(
                "hunk {header:?} promises {old_len} old and {new_len} new lines, but has {old_seen} and {new_seen}"
            ),
        ));
    }
    // A "no newline" marker right after the last line.
    if i < lines.len() && lines[i].starts_with('\\') {
        strip_newline(&mut body);
        i += 1;
    }
    Ok((
        Hunk {
            header: header.to_string(),
            old_start,
            old_len,
            new_len,
            lines: body,
            budget: Budget::default(),
        },
        i,
    ))
}

/// The line before a `\ No newline at end of file` marker has no newline.
fn strip_newline(body: &mut [Line]) {
    if let Some(Line::Context(t) | Line::Remove(t) | Line::Add(t)) = body.last_mut()
        && t.last() == Some(&b'\n')
    {
        t.pop();
    }
}

/// Why a hunk did not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// Its lines are nowhere after the previous hunk; `found` is what is
    /// at the place it names (1-based first line, the lines).
    NotFound {
        /// The place the hunk names (1-based).
        at: usize,
        /// The lines there (as many as the hunk's old lines, at most 12).
        found: Vec<String>,
        /// The file has fewer lines than the hunk needs there.
        past_end: bool,
    },
    /// Its lines are at several places (1-based first lines), none of them
    /// the one it names.
    Ambiguous {
        /// Where.
        at: Vec<usize>,
    },
    /// Looking for it passed the patch's [`SEARCH_BUDGET`].
    SearchBudget {
        /// The budget, in line comparisons.
        limit: u64,
    },
}

/// A hunk that did not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HunkError {
    /// 1-based number of the hunk in its file.
    pub hunk: usize,
    /// Its header.
    pub header: String,
    /// The lines it expected (context and removed), at most 12.
    pub expected: Vec<String>,
    /// Why.
    pub why: Mismatch,
}

impl fmt::Display for HunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hunk {} ({})", self.hunk, self.header)
    }
}

const SHOWN_LINES: usize = 12;

/// How far from where a hunk says (in lines, either way) it is looked for.
pub const NEARBY: usize = 1000;

fn shown(lines: &[&[u8]]) -> Vec<String> {
    lines
        .iter()
        .take(SHOWN_LINES)
        .map(|l| {
            String::from_utf8_lossy(l)
                .trim_end_matches(['\n', '\r'])
                .to_string()
        })
        .collect()
}

/// What applying the hunks did.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The new contents.
    pub bytes: Vec<u8>,
    /// Lines after minus lines before.
    pub line_delta: i64,
}

/// Whether `want` is at line `at` of `lines`; adds what comparing cost to
/// `cost`.
fn fits(lines: &[&[u8]], want: &[&[u8]], at: usize, cost: &mut u64) -> bool {
    if at + want.len() > lines.len() {
        return false;
    }
    for (have, want) in lines[at..].iter().zip(want) {
        // Lines of different lengths differ at once; equal lengths cost
        // a comparison of their bytes.
        *cost += 1;
        if have.len() == want.len() {
            *cost += have.len() as u64 >> 6;
        }
        if have != want {
            return false;
        }
    }
    true
}

/// Applies `hunks` to `old`, all or nothing, within the search budget of
/// the patch they came from.
pub fn apply(old: &[u8], hunks: &[Hunk]) -> Result<Applied, HunkError> {
    let mut cost = 0;
    let result = apply_counted(old, hunks, &mut cost);
    if let Some(h) = hunks.first() {
        h.budget
            .0
            .fetch_add(cost, std::sync::atomic::Ordering::Relaxed);
    }
    result
}

fn apply_counted(old: &[u8], hunks: &[Hunk], cost: &mut u64) -> Result<Applied, HunkError> {
    let spent = hunks
        .first()
        .map_or(0, |h| h.budget.0.load(std::sync::atomic::Ordering::Relaxed));
    let lines: Vec<&[u8]> = old.split_inclusive(|b| *b == b'\n').collect();
    let mut out: Vec<u8> = Vec::with_capacity(old.len() + 256);
    let mut cursor = 0usize; // next line of `old` not yet copied
    let mut shift: i64 = 0; // where hunks land relative to what they say
    let mut delta: i64 = 0;
    for (n, hunk) in hunks.iter().enumerate() {
        let want: Vec<&[u8]> = hunk
            .lines
            .iter()
            .filter_map(|l| match l {
                Line::Context(t) | Line::Remove(t) => Some(t.as_slice()),
                Line::Add(_) => None,
            })
            .collect();
        // 0-based line the hunk names; a hunk of no old lines names the
        // line after which it inserts.
        let named = if hunk.old_len == 0 {
            hunk.old_start
        } else {
            hunk.old_start.saturating_sub(1)
        };
        let named = usize::try_from(named as i64 + shift)
            .unwrap_or(0)
            .max(cursor);
        let at = if fits(&lines, &want, named, cost) {
            named
        } else if want.is_empty() {
            // Pure insertion past the end of the file.
            return Err(HunkError {
                hunk: n + 1,
                header: hunk.header.clone(),
                expected: Vec::new(),
                why: Mismatch::NotFound {
                    at: named + 1,
                    found: Vec::new(),
                    past_end: true,
                },
            });
        } else {
            let lo = cursor.max(named.saturating_sub(NEARBY));
            let hi = (named + NEARBY).min(lines.len().saturating_sub(want.len()));
            let mut found = Vec::new();
            for at in lo..=hi {
                if fits(&lines, &want, at, cost) {
                    found.push(at);
                    if found.len() == 10 {
                        break;
                    }
                }
                if spent + *cost > SEARCH_BUDGET {
                    return Err(HunkError {
                        hunk: n + 1,
                        header: hunk.header.clone(),
                        expected: shown(&want),
                        why: Mismatch::SearchBudget {
                            limit: SEARCH_BUDGET,
                        },
                    });
                }
            }
            match found.as_slice() {
                [one] => *one,
                [] => {
                    let end = (named + want.len()).min(lines.len());
                    return Err(HunkError {
                        hunk: n + 1,
                        header: hunk.header.clone(),
                        expected: shown(&want),
                        why: Mismatch::NotFound {
                            at: named + 1,
                            found: shown(&lines[named.min(lines.len())..end]),
                            past_end: named + want.len() > lines.len(),
                        },
                    });
                }
                many => {
                    return Err(HunkError {
                        hunk: n + 1,
                        header: hunk.header.clone(),
                        expected: shown(&want),
                        why: Mismatch::Ambiguous {
                            at: many.iter().map(|a| a + 1).collect(),
                        },
                    });
                }
            }
        };
        for l in &lines[cursor..at] {
            out.extend_from_slice(l);
        }
        for l in &hunk.lines {
            match l {
                Line::Context(t) | Line::Add(t) => out.extend_from_slice(t),
                Line::Remove(_) => {}
            }
        }
        cursor = at + want.len();
        shift = at as i64 - (hunk.old_start.saturating_sub(1)) as i64;
        if hunk.old_len == 0 {
            shift = at as i64 - hunk.old_start as i64;
        }
        delta += hunk.new_len as i64 - hunk.old_len as i64;
    }
    for l in &lines[cursor..] {
        out.extend_from_slice(l);
    }
    Ok(Applied {
        bytes: out,
        line_delta: delta,
    })
}

#[cfg(test)]
mod tests;

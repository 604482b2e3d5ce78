//! Workspace names written into text that a tool parses line by line (a
//! patch for `git apply`, a listing a script reads, a terminal). A command
//! in the sandbox chooses its file names, and a name may hold a newline, a
//! quote or an escape sequence: written as it is, it forges lines (a whole
//! `diff --git` section in a patch) or drives the terminal.
//!
//! Quoting is git's (quote.c, `quote_c_style`): a name that holds a control
//! character, `"` or `\` (or, with [`NonAscii::Octal`], a byte of 0x80 or
//! more, as git does with `core.quotePath` on) is written between double
//! quotes, with `\n`, `\t`, `\"`, `\\` and the like, and every other such
//! byte as a three-digit octal escape. `git apply` reads it back exactly.

use std::borrow::Cow;
use std::fmt::Write as _;

/// What becomes of bytes of 0x80 and more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonAscii {
    /// Octal escapes, as git writes paths in a patch (`core.quotePath`).
    Octal,
    /// Kept when they are UTF-8 that shows as itself (what a person
    /// reads); the characters that do not ([`crate::text::hidden`]: C1,
    /// line separators, bidirectional and zero-width characters) written
    /// as their code point, `\u{202e}`, as every surface shows them, and
    /// bytes that are not UTF-8 in octal.
    Readable,
}

/// Whether `c` would act on a terminal or a line-based reader, or read as
/// something other than it is, rather than be shown: the characters every
/// surface a person reads renders visibly ([`crate::text::hidden`]: C0,
/// DEL, C1, line separators, bidirectional and other format characters).
fn is_control(c: char) -> bool {
    crate::text::hidden(c)
}

/// Whether `name` is written quoted.
pub fn needs_quotes(name: &[u8], non_ascii: NonAscii) -> bool {
    let plain = |b: u8| b >= 0x20 && b != 0x7f && b != b'"' && b != b'\\';
    match non_ascii {
        NonAscii::Octal => !name.iter().all(|&b| b < 0x80 && plain(b)),
        NonAscii::Readable => match std::str::from_utf8(name) {
            Ok(s) => s.chars().any(|c| is_control(c) || c == '"' || c == '\\'),
            Err(_) => true,
        },
    }
}

fn escape_byte(out: &mut String, b: u8) {
    match b {
        b'"' => out.push_str("\\\""),
        b'\\' => out.push_str("\\\\"),
        b'\n' => out.push_str("\\n"),
        b'\t' => out.push_str("\\t"),
        b'\r' => out.push_str("\\r"),
        0x07 => out.push_str("\\a"),
        0x08 => out.push_str("\\b"),
        0x0b => out.push_str("\\v"),
        0x0c => out.push_str("\\f"),
        b if !(0x20..0x7f).contains(&b) => {
            let _ = write!(out, "\\{b:03o}");
        }
        b => out.push(b as char),
    }
}

/// `prefix` and `name` as one name, quoted as git quotes it when it needs
/// it (see the module docs); the prefix (`a/`, `b/`) is inside the quotes.
pub fn quote(prefix: &str, name: &[u8], non_ascii: NonAscii) -> String {
    if !needs_quotes(name, non_ascii) {
        // Not quoted: ASCII, or (Readable) valid UTF-8.
        return format!("{prefix}{}", String::from_utf8_lossy(name));
    }
    let mut out = String::with_capacity(name.len() + prefix.len() + 8);
    out.push('"');
    for b in prefix.bytes() {
        escape_byte(&mut out, b);
    }
    match (non_ascii, std::str::from_utf8(name)) {
        (NonAscii::Readable, Ok(s)) => {
            let mut buf = [0u8; 4];
            for c in s.chars() {
                if c.is_ascii() {
                    for &b in c.encode_utf8(&mut buf).as_bytes() {
                        escape_byte(&mut out, b);
                    }
                } else if is_control(c) {
                    // As every surface a person reads shows it.
                    let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
                } else {
                    out.push(c);
                }
            }
        }
        _ => name.iter().for_each(|&b| escape_byte(&mut out, b)),
    }
    out.push('"');
    out
}

/// A path as git writes it in a patch (`a/`, `b/` or no prefix).
pub fn git_path(prefix: &str, path: &[u8]) -> String {
    quote(prefix, path, NonAscii::Octal)
}

/// A name as a person or a script reads it in a listing: unchanged when it
/// is plain text, quoted when it holds a control character, `"` or `\`.
pub fn shown(name: &str) -> Cow<'_, str> {
    if needs_quotes(name.as_bytes(), NonAscii::Readable) {
        Cow::Owned(quote("", name.as_bytes(), NonAscii::Readable))
    } else {
        Cow::Borrowed(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_left_alone() {
        assert_eq!(git_path("a/", b"src/main.rs"), "a/src/main.rs");
        assert_eq!(git_path("", b"with space.txt"), "with space.txt");
        assert_eq!(shown("caf\u{e9}/\u{65e5}.txt"), "caf\u{e9}/\u{65e5}.txt");
    }

    #[test]
    fn git_quotes_controls_quotes_backslashes_and_high_bytes() {
        assert_eq!(
            git_path("a/", b"x\ndiff --git a/y b/y\n"),
            "\"a/x\\ndiff --git a/y b/y\\n\""
        );
        assert_eq!(git_path("b/", b"t\tq\"b\\"), "\"b/t\\tq\\\"b\\\\\"");
        assert_eq!(git_path("", b"\x1b[2K\x7f"), "\"\\033[2K\\177\"");
        assert_eq!(git_path("", "caf\u{e9}".as_bytes()), "\"caf\\303\\251\"");
        assert_eq!(git_path("", b"\xff\xfe"), "\"\\377\\376\"");
        assert_eq!(git_path("", b"\x07\x08\x0b\x0c\r"), "\"\\a\\b\\v\\f\\r\"");
    }

    #[test]
    fn listings_quote_only_what_would_act() {
        assert_eq!(shown("a\nb"), "\"a\\nb\"");
        assert_eq!(shown("x\x1b]0;t\x07"), "\"x\\033]0;t\\a\"");
        assert_eq!(shown("\u{e9}\u{202e}"), "\"\u{e9}\\u{202e}\"");
        assert_eq!(shown("tests\u{200b}/x"), "\"tests\\u{200b}/x\"");
        assert_eq!(shown("a\u{2028}b"), "\"a\\u{2028}b\"");
        assert_eq!(shown("q\"uote"), "\"q\\\"uote\"");
        assert_eq!(shown("\u{85}"), "\"\\u{85}\"");
    }

    #[test]
    fn every_quoted_name_is_one_line_of_printable_ascii_or_text() {
        for b in 0..=255u8 {
            let name = [b'a', b, b'z'];
            let q = git_path("a/", &name);
            assert!(q.bytes().all(|c| (0x20..0x7f).contains(&c)), "{b}: {q}");
            let s = String::from_utf8_lossy(&name);
            assert!(!shown(&s).contains(is_control), "{b}");
        }
    }
}

//! Text a person reads, made to show what it holds. Names, notes, plans,
//! command lines and command output come from the sandboxed side or from a
//! model, and a character that acts instead of showing (a terminal escape,
//! a bidirectional override, a line separator, an invisible joiner) would
//! make the reader see something other than what is there: a retitled
//! terminal, `invoice\u{202e}txt.exe` read as `invoiceexe.txt`, a forged
//! line of an approval form, `tests\u{200b}/x.py` passing for `tests/x.py`.
//!
//! [`visible`] is the one rendering every surface uses (the CLI on a
//! terminal, the MCP bridge's texts and forms, the web view), one
//! character at a time, so text split across streamed chunks renders the
//! same:
//! - newline and tab are kept ([`one_line`] shows them as `\n` and `\t`);
//! - the other C0 controls in caret notation, as `cat -v` and `less` show
//!   them: ESC as `^[`, CR as `^M`, BEL as `^G`; DEL as `^?`;
//! - every other character that is not shown as itself, as its code point
//!   (`\u{202e}`): the C1 controls U+0080..U+009F, the line and paragraph
//!   separators U+2028 and U+2029, and every format character (Unicode
//!   category Cf: the bidirectional controls U+061C, U+200E, U+200F,
//!   U+202A..U+202E and U+2066..U+2069, the zero-width U+200B..U+200D,
//!   U+2060..U+2064 and U+FEFF, the soft hyphen, tag characters, ...);
//! - everything else, multibyte text included, unchanged.
//!
//! The rendering is idempotent: what it produces holds nothing it would
//! render again.

use std::borrow::Cow;
use std::fmt::Write as _;

/// The format characters (Unicode 15, general category Cf), as ranges.
const FORMAT: &[(u32, u32)] = &[
    (0x00ad, 0x00ad),
    (0x0600, 0x0605),
    (0x061c, 0x061c),
    (0x06dd, 0x06dd),
    (0x070f, 0x070f),
    (0x0890, 0x0891),
    (0x08e2, 0x08e2),
    (0x180e, 0x180e),
    (0x200b, 0x200f),
    (0x202a, 0x202e),
    (0x2060, 0x2064),
    (0x2066, 0x206f),
    (0xfeff, 0xfeff),
    (0xfff9, 0xfffb),
    (0x110bd, 0x110bd),
    (0x110cd, 0x110cd),
    (0x13430, 0x1343f),
    (0x1bca0, 0x1bca3),
    (0x1d173, 0x1d17a),
    (0xe0001, 0xe0001),
    (0xe0020, 0xe007f),
];

/// Whether `c` is shown escaped rather than as itself (newline and tab
/// included: [`visible`] keeps those two, [`one_line`] does not).
pub fn hidden(c: char) -> bool {
    let u = u32::from(c);
    match u {
        0..=0x1f | 0x7f..=0x9f | 0x2028 | 0x2029 => true,
        0x20..=0x7e => false,
        _ => FORMAT.iter().any(|&(lo, hi)| (lo..=hi).contains(&u)),
    }
}

fn render(out: &mut String, c: char) {
    match c {
        '\x7f' => out.push_str("^?"),
        '\0'..='\x1f' => {
            out.push('^');
            // ^@ for NUL, ^A for SOH, ... ^[ for ESC, ^_ for US.
            out.push(char::from(b'@' + c as u8));
        }
        c => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
}

/// `text` with every character that is not shown as itself rendered
/// visibly (see the module docs); newlines and tabs kept. Borrows when
/// there is nothing to render.
pub fn visible(text: &str) -> Cow<'_, str> {
    let keep = |c: char| c == '\n' || c == '\t' || !hidden(c);
    if text.chars().all(keep) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if keep(c) {
            shown.push(c);
        } else {
            render(&mut shown, c);
        }
    }
    Cow::Owned(shown)
}

/// `text` on one line: as [`visible`], with newline shown as `\n` and tab
/// as `\t`, so it cannot pose as lines of the text around it.
pub fn one_line(text: &str) -> Cow<'_, str> {
    if !text.contains(hidden) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => shown.push_str("\\n"),
            '\t' => shown.push_str("\\t"),
            c if hidden(c) => render(&mut shown, c),
            c => shown.push(c),
        }
    }
    Cow::Owned(shown)
}

/// The first character of `text` that is not shown as itself, if any.
pub fn first_hidden(text: &str) -> Option<char> {
    text.chars().find(|&c| hidden(c))
}

/// Most characters of one field a model wrote (a goal, a step, a risk, a
/// note, a command) that an approval shows; the rest is counted, not shown,
/// so no field can push what is granted or withheld out of sight.
pub const FIELD_CHARS: usize = 1000;

/// `text` cut to at most `max` characters, and how many were cut.
pub fn cut(text: &str, max: usize) -> (&str, usize) {
    match text.char_indices().nth(max) {
        None => (text, 0),
        Some((end, _)) => (&text[..end], text[end..].chars().count()),
    }
}

/// What [`cut`] left out, in words: "… 1234 more characters", or nothing.
pub fn more(cut_chars: usize) -> String {
    match cut_chars {
        0 => String::new(),
        1 => "… 1 more character".to_string(),
        n => format!("… {n} more characters"),
    }
}

/// `text` cut to at most `max` characters, with what was cut said:
/// "… 1234 more characters".
pub fn capped(text: &str, max: usize) -> Cow<'_, str> {
    match cut(text, max) {
        (all, 0) => Cow::Borrowed(all),
        (head, n) => Cow::Owned(format!("{head}{}", more(n))),
    }
}

/// A command as an approval shows it: [`code_span`] of at most `max`
/// characters and, when cut, how much was left out and its full length,
/// so padding cannot hide the end of a command from the person.
pub fn command_span(command: &str, max: usize) -> String {
    match cut(command, max) {
        (all, 0) => code_span(all),
        (head, n) => format!(
            "{} {} (the command is {} characters long; not all of it is shown)",
            code_span(head),
            more(n),
            command.chars().count()
        ),
    }
}

/// One line of text as a Markdown code span that the text cannot close:
/// its fence is one backtick longer than the longest run of backticks in
/// it, so a client that renders Markdown shows it literally (no emphasis,
/// links, headings, HTML or images), and one that does not shows it in
/// backticks. Newlines are rendered first ([`one_line`]): a blank line
/// would end the span's paragraph.
pub fn code_span(text: &str) -> String {
    let text = one_line(text);
    let (mut run, mut longest) = (0, 0);
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    // A span that begins or ends with a backtick or a space is padded: a
    // renderer strips one space from each end.
    let pad = text.starts_with(['`', ' ']) || text.ends_with(['`', ' ']) || text.is_empty();
    let pad = if pad { " " } else { "" };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// One character of each class [`visible`] renders, with how it renders:
/// the table every surface's test feeds through what it shows.
#[doc(hidden)]
pub const CLASSES: &[(&str, char, &str)] = &[
    ("C0 escape", '\x1b', "^["),
    ("C0 bell", '\x07', "^G"),
    ("C0 carriage return", '\r', "^M"),
    ("C0 backspace", '\x08', "^H"),
    ("delete", '\x7f', "^?"),
    ("C1 next line", '\u{85}', "\\u{85}"),
    ("C1 CSI", '\u{9b}', "\\u{9b}"),
    ("line separator", '\u{2028}', "\\u{2028}"),
    ("paragraph separator", '\u{2029}', "\\u{2029}"),
    ("right-to-left override", '\u{202e}', "\\u{202e}"),
    ("left-to-right embedding", '\u{202a}', "\\u{202a}"),
    ("right-to-left isolate", '\u{2067}', "\\u{2067}"),
    ("pop directional isolate", '\u{2069}', "\\u{2069}"),
    ("left-to-right mark", '\u{200e}', "\\u{200e}"),
    ("right-to-left mark", '\u{200f}', "\\u{200f}"),
    ("arabic letter mark", '\u{61c}', "\\u{61c}"),
    ("zero-width space", '\u{200b}', "\\u{200b}"),
    ("zero-width non-joiner", '\u{200c}', "\\u{200c}"),
    ("zero-width joiner", '\u{200d}', "\\u{200d}"),
    ("word joiner", '\u{2060}', "\\u{2060}"),
    ("invisible plus", '\u{2064}', "\\u{2064}"),
    ("byte order mark", '\u{feff}', "\\u{feff}"),
    ("soft hyphen", '\u{ad}', "\\u{ad}"),
    ("interlinear annotation", '\u{fff9}', "\\u{fff9}"),
    ("tag character", '\u{e0041}', "\\u{e0041}"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_separators_and_format_characters_are_shown() {
        assert_eq!(visible("a\x1b]0;T\x07b\n\tc"), "a^[]0;T^Gb\n\tc");
        assert_eq!(visible("\x7f\u{85}"), "^?\\u{85}");
        assert_eq!(visible("invoice\u{202e}txt.exe"), "invoice\\u{202e}txt.exe");
        assert_eq!(visible("a\u{2028}b\u{2029}"), "a\\u{2028}b\\u{2029}");
        assert_eq!(
            visible("tests\u{200b}/\u{2060}\u{feff}\u{ad}\u{e0041}"),
            "tests\\u{200b}/\\u{2060}\\u{feff}\\u{ad}\\u{e0041}"
        );
        assert_eq!(visible("plain é 世 🦀 \\u{41}"), "plain é 世 🦀 \\u{41}");
        assert!(matches!(visible("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn every_class_renders_as_its_table_says() {
        for &(class, c, shown) in CLASSES {
            assert!(hidden(c), "{class}");
            assert_eq!(visible(&format!("a{c}b")), format!("a{shown}b"), "{class}");
            assert_eq!(one_line(&format!("a{c}b")), format!("a{shown}b"), "{class}");
        }
    }

    #[test]
    fn rendering_is_idempotent_and_one_line_has_no_line_break() {
        let hostile = "x\n\r\t\x1b\u{9b}\u{2028}\u{202e}\u{200d}";
        let once = visible(hostile).into_owned();
        assert_eq!(visible(&once), once);
        let line = one_line(hostile);
        assert_eq!(line, "x\\n^M\\t^[\\u{9b}\\u{2028}\\u{202e}\\u{200d}");
        assert!(!line.contains(hidden));
    }

    #[test]
    fn caps_say_how_much_was_cut() {
        assert_eq!(capped("abcdef", 3), "abc… 3 more characters");
        assert_eq!(capped("ééé", 3), "ééé");
        assert_eq!(capped("éééé", 2), "éé… 2 more characters");
        assert_eq!(capped("abcd", 3), "abc… 1 more character");
        let padded = format!("ls{}; echo pwned > x", " ".repeat(3000));
        let shown = command_span(&padded, 10);
        assert!(
            shown.starts_with("` ls         ` … 3008 more characters"),
            "{shown}"
        );
        assert!(
            shown.contains("the command is 3018 characters long"),
            "{shown}"
        );
    }

    #[test]
    fn code_spans_cannot_be_closed_by_their_text() {
        assert_eq!(code_span("fix add"), "`fix add`");
        assert_eq!(code_span("a `b` c"), "``a `b` c``");
        assert_eq!(code_span("``x"), "``` ``x ```");
        assert_eq!(code_span("a\n# Withheld"), "`a\\n# Withheld`");
        assert_eq!(code_span(""), "`  `");
    }
}

//! The text log's fields, each value written with its control characters
//! escaped. Paths, names, images and messages in the log are often chosen
//! by a client or a command (a lent directory named with a newline, an
//! error quoting a file name): escaped where the line is written, whatever
//! the call site, none of them can start a line of its own or drive the
//! terminal that shows the log. (The JSON format escapes them already.)

use std::fmt::{self, Write};

use tracing::field::Field;
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::format::{Writer, debug_fn};

/// The field formatter of the text log: `name=value` pairs separated by a
/// space, the message bare, as the default one writes them, but escaped.
pub fn escaped() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static {
    debug_fn(field as fn(&mut Writer<'_>, &Field, &dyn fmt::Debug) -> fmt::Result).delimited(" ")
}

fn field(w: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug) -> fmt::Result {
    if field.name() != "message" {
        write!(w, "{}=", field.name())?;
    }
    write_escaped(w, &format!("{value:?}"))
}

/// Writes `text` on one line, every character that is not shown as itself
/// (controls, line separators, bidirectional and zero-width characters;
/// [`sandboxd::text::hidden`]) as an escape.
fn write_escaped(w: &mut impl Write, text: &str) -> fmt::Result {
    for c in text.chars() {
        match c {
            '\n' => w.write_str("\\n")?,
            '\r' => w.write_str("\\r")?,
            '\t' => w.write_str("\\t")?,
            c if sandboxd::text::hidden(c) => write!(w, "\\u{{{:x}}}", c as u32)?,
            c => w.write_char(c)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_is_kept() {
        let mut out = String::new();
        write_escaped(
            &mut out,
            "repo\n2026-12-02T00:00:00Z  INFO forged\r\t\u{1b}[2J\u{85}\u{2028}é/ok",
        )
        .unwrap();
        assert_eq!(
            out,
            "repo\\n2026-12-02T00:00:00Z  INFO forged\\r\\t\\u{1b}[2J\\u{85}\\u{2028}é/ok"
        );
        assert!(!out.contains('\n'));
    }
}

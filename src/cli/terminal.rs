//! What the CLI prints. Most of it is text the sandboxed side controls:
//! command output, file contents, search matches, file names, diffs, and
//! messages that echo paths. A hostile command could hide control sequences
//! in any of it to move the cursor, erase lines, print a fake `[exit 0 ...]`
//! over the real result or retitle the terminal.
//!
//! [`Console`] owns stdout and stderr for the client verbs. A stream that is
//! a terminal (each checked on its own) gets text through [`neutralise`]: the
//! terminal shows control characters instead of acting on them. A stream
//! that is piped or redirected gets the bytes exactly as received, for
//! scripts. [`Console::status`] writes the CLI's own lines (exit summaries,
//! refusals) and starts them on a line of their own on a terminal.
//!
//! The rendering is the one every surface a person reads uses
//! ([`sandboxd::text::visible`]): newline and tab kept, other C0 controls
//! in caret notation (`^[`, `^M`), DEL as `^?`, and C1 controls, line
//! separators and format characters (bidirectional controls, zero-width
//! characters) as their code point (`\u{202e}`).

use std::borrow::Cow;
use std::fmt;
use std::io::{self, IsTerminal, Write};

/// `text` as a terminal must receive it: every character that would act
/// rather than show rendered visibly (see the module docs), newline and tab
/// kept. Borrows when there is nothing to render.
pub fn neutralise(text: &str) -> Cow<'_, str> {
    sandboxd::text::visible(text)
}

/// One of the CLI's output streams.
struct Stream<W> {
    writer: W,
    /// A terminal gets neutralised text; anything else the exact bytes.
    terminal: bool,
    /// The first write error; nothing more is written after it.
    failed: Option<io::Error>,
}

impl<W: Write> Stream<W> {
    fn new(writer: W, terminal: bool) -> Self {
        Stream {
            writer,
            terminal,
            failed: None,
        }
    }

    fn write_str(&mut self, text: &str) {
        if self.failed.is_some() || text.is_empty() {
            return;
        }
        let written = if self.terminal {
            self.writer.write_all(neutralise(text).as_bytes())
        } else {
            self.writer.write_all(text.as_bytes())
        };
        if let Err(e) = written {
            self.failed = Some(e);
        }
    }

    fn flush(&mut self) {
        if self.failed.is_none()
            && let Err(e) = self.writer.flush()
        {
            self.failed = Some(e);
        }
    }
}

/// Stdout and stderr of the client verbs. Every print of text the sandboxed
/// side controls goes through here, so none of it reaches a terminal raw.
///
/// Writes never panic: a failed stream is recorded, written no more, and
/// reported by [`Console::finish`].
pub struct Console<O: Write, E: Write> {
    out: Stream<O>,
    err: Stream<E>,
    /// Whether the last character written to a terminal, on either stream,
    /// ended a line. Both streams usually share one terminal, so output
    /// without a final newline on stdout leaves stderr's cursor mid-line too.
    at_line_start: bool,
    /// A live status line is on stdout's terminal, to be erased before
    /// anything else is written.
    live: bool,
}

impl Console<io::Stdout, io::Stderr> {
    /// The process's stdout and stderr, each neutralised if it is a terminal.
    pub fn stdio() -> Self {
        let (out, err) = (io::stdout(), io::stderr());
        let (out_terminal, err_terminal) = (out.is_terminal(), err.is_terminal());
        Console::new(out, out_terminal, err, err_terminal)
    }
}

impl<O: Write, E: Write> Console<O, E> {
    /// A console over any two writers, saying which of them is a terminal.
    pub fn new(out: O, out_terminal: bool, err: E, err_terminal: bool) -> Self {
        Console {
            out: Stream::new(out, out_terminal),
            err: Stream::new(err, err_terminal),
            at_line_start: true,
            live: false,
        }
    }

    /// Shows one line of the CLI's own progress on stdout's terminal,
    /// replacing the previous one; it is erased before anything else is
    /// printed. Nothing is shown elsewhere. The text is neutralised, and
    /// cut to `width` characters so it never wraps.
    pub fn live(&mut self, args: fmt::Arguments<'_>, width: usize) {
        if !self.out.terminal || self.out.failed.is_some() {
            return;
        }
        self.erase_live();
        let text = args.to_string();
        let line: String = text
            .chars()
            .map(|c| if c == '\n' { ' ' } else { c })
            .take(width)
            .collect();
        self.out.write_str(&line);
        self.out.flush();
        self.live = true;
    }

    /// Erases the live line, if one shows.
    fn erase_live(&mut self) {
        if self.live {
            self.live = false;
            // The CLI's own control sequence: carriage return, erase line.
            if let Err(e) = self.out.writer.write_all(b"\r\x1b[2K") {
                self.out.failed = Some(e);
            }
        }
    }

    /// Prints to stdout, like `print!`.
    pub fn out(&mut self, args: fmt::Arguments<'_>) {
        self.erase_live();
        write_args(&mut self.out, &mut self.at_line_start, args);
    }

    /// Writes bytes to stdout: exactly as they are when stdout is not a
    /// terminal (a patch redirected to a file), shown as neutralised text
    /// when it is.
    pub fn out_bytes(&mut self, bytes: &[u8]) {
        self.erase_live();
        if self.out.terminal {
            let text = String::from_utf8_lossy(bytes);
            write_args(
                &mut self.out,
                &mut self.at_line_start,
                format_args!("{text}"),
            );
        } else if self.out.failed.is_none() && !bytes.is_empty() {
            if let Err(e) = self.out.writer.write_all(bytes) {
                self.out.failed = Some(e);
            }
            self.at_line_start = bytes.ends_with(b"\n");
        }
    }

    /// Writes `text` to stdout exactly as it is, also to a terminal: for
    /// output the user asked to have raw (`run --raw`).
    pub fn out_exact(&mut self, text: &str) {
        self.erase_live();
        write_exact(&mut self.out, &mut self.at_line_start, text);
    }

    /// Writes `text` to stderr exactly as it is, also to a terminal, after
    /// what stdout holds (see [`Console::out_exact`]).
    pub fn err_exact(&mut self, text: &str) {
        self.erase_live();
        self.out.flush();
        write_exact(&mut self.err, &mut self.at_line_start, text);
    }

    /// Prints to stderr, like `eprint!`, after what stdout holds so the
    /// two stay in order on a shared terminal.
    pub fn err(&mut self, args: fmt::Arguments<'_>) {
        self.erase_live();
        self.out.flush();
        write_args(&mut self.err, &mut self.at_line_start, args);
    }

    /// Prints a line of the CLI's own to stderr: an exit summary, a refusal,
    /// an error. On a terminal it starts on a line of its own, whatever
    /// output came before it, so nothing can be glued in front of it.
    pub fn status(&mut self, args: fmt::Arguments<'_>) {
        self.erase_live();
        self.out.flush();
        if self.err.terminal && !self.at_line_start {
            self.err.write_str("\n");
        }
        write_args(&mut self.err, &mut self.at_line_start, args);
        write_args(&mut self.err, &mut self.at_line_start, format_args!("\n"));
    }

    /// Sends what stdout buffers, so streamed output shows as it arrives.
    pub fn flush(&mut self) {
        self.out.flush();
        self.err.flush();
    }

    /// The two writers, flushed, with what was written to them.
    pub fn into_writers(mut self) -> (O, E) {
        self.flush();
        (self.out.writer, self.err.writer)
    }

    /// Flushes both streams and returns the first write error, if any. A
    /// reader that went away (`sandboxd read f | head`) is not an error.
    pub fn finish(mut self) -> io::Result<()> {
        self.flush();
        match self.out.failed.take().or_else(|| self.err.failed.take()) {
            Some(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e),
            _ => Ok(()),
        }
    }
}

/// Writes `text` to `stream` unchanged, terminal or not, keeping track of
/// the terminal's line start.
fn write_exact<W: Write>(stream: &mut Stream<W>, at_line_start: &mut bool, text: &str) {
    if stream.failed.is_some() || text.is_empty() {
        return;
    }
    if let Err(e) = stream.writer.write_all(text.as_bytes()) {
        stream.failed = Some(e);
    }
    if stream.terminal {
        *at_line_start = text.ends_with('\n');
    }
}

/// Formats `args` into `stream` piece by piece (no intermediate string for a
/// whole file) and keeps track of the terminal's line start.
fn write_args<W: Write>(
    stream: &mut Stream<W>,
    at_line_start: &mut bool,
    args: fmt::Arguments<'_>,
) {
    struct Pieces<'a, W> {
        stream: &'a mut Stream<W>,
        at_line_start: &'a mut bool,
    }
    impl<W: Write> fmt::Write for Pieces<'_, W> {
        fn write_str(&mut self, piece: &str) -> fmt::Result {
            if piece.is_empty() {
                return Ok(());
            }
            self.stream.write_str(piece);
            if self.stream.terminal {
                // Neutralised text ends with a newline exactly when the raw
                // piece does: a newline is kept, nothing else becomes one.
                *self.at_line_start = piece.ends_with('\n');
            }
            Ok(())
        }
    }
    // Only Pieces could fail, and it does not: errors stay in the stream.
    let _ = fmt::write(
        &mut Pieces {
            stream,
            at_line_start,
        },
        args,
    );
}

/// How many bytes at the end of `bytes` begin a UTF-8 character whose rest
/// has not come yet (0 when the end is whole, or is not UTF-8 at all).
pub fn unfinished_char(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(4) {
        let b = bytes[bytes.len() - back];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let len = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if len > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A console over two buffers, stdout and stderr terminals as given.
    fn console(out_terminal: bool, err_terminal: bool) -> Console<Vec<u8>, Vec<u8>> {
        Console::new(Vec::new(), out_terminal, Vec::new(), err_terminal)
    }

    fn text(bytes: &[u8]) -> &str {
        std::str::from_utf8(bytes).unwrap()
    }

    #[test]
    fn a_live_line_shows_on_a_terminal_only_and_is_erased_before_output() {
        let mut con = console(true, true);
        con.live(format_args!("step 1\x1b[31m\nlong"), 12);
        con.out(format_args!("line\n"));
        let Console { out, .. } = con;
        assert_eq!(text(&out.writer), "step 1^[[31m \r\x1b[2Kline\n");
        let mut piped = console(false, false);
        piped.live(format_args!("step 1"), 80);
        piped.out(format_args!("line\n"));
        let Console { out, .. } = piped;
        assert_eq!(text(&out.writer), "line\n");
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let line = "fn main() {\n\tprintln!(\"hi\");\n}\n";
        assert!(matches!(neutralise(line), Cow::Borrowed(s) if s == line));
    }

    #[test]
    fn newline_and_tab_are_kept() {
        assert_eq!(neutralise("a\tb\nc\n"), "a\tb\nc\n");
    }

    #[test]
    fn escape_is_shown_in_caret_notation() {
        assert_eq!(neutralise("\x1b"), "^[");
        assert_eq!(neutralise("\x1b[31mred\x1b[0m"), "^[[31mred^[[0m");
    }

    #[test]
    fn csi_cursor_moves_cannot_forge_an_exit_line() {
        let forged = "\x1b[1A\x1b[2K[exit 0 in 1 ms]";
        assert_eq!(neutralise(forged), "^[[1A^[[2K[exit 0 in 1 ms]");
    }

    #[test]
    fn osc_title_sets_are_shown_with_either_terminator() {
        assert_eq!(neutralise("\x1b]0;owned\x07after"), "^[]0;owned^Gafter");
        assert_eq!(neutralise("\x1b]2;owned\x1b\\after"), "^[]2;owned^[\\after");
    }

    #[test]
    fn carriage_return_cannot_overwrite_a_line() {
        assert_eq!(neutralise("FAILED\rPASSED"), "FAILED^MPASSED");
        // A CRLF line ending shows its CR too: on a terminal the newline
        // alone ends the line.
        assert_eq!(neutralise("ok\r\n"), "ok^M\n");
    }

    #[test]
    fn backspace_bell_nul_and_delete_are_shown() {
        assert_eq!(neutralise("ab\x08\x08xy"), "ab^H^Hxy");
        assert_eq!(neutralise("\x07\0\x7f"), "^G^@^?");
        assert_eq!(neutralise("\x01\x1f"), "^A^_");
    }

    #[test]
    fn c1_controls_are_shown_as_code_points() {
        // U+009B is a one-character CSI; U+009D a one-character OSC.
        assert_eq!(neutralise("\u{9b}2J"), "\\u{9b}2J");
        assert_eq!(neutralise("\u{80}\u{9d}\u{9f}"), "\\u{80}\\u{9d}\\u{9f}");
    }

    #[test]
    fn bidirectional_controls_are_shown_as_code_points() {
        // `if access != "user\u{202e} \u{2066}// admin"` reads differently
        // from what the compiler sees.
        let shown = neutralise("a\u{202e}b\u{2066}c\u{200f}d");
        assert_eq!(shown, "a\\u{202e}b\\u{2066}c\\u{200f}d");
    }

    #[test]
    fn multibyte_text_next_to_controls_is_left_intact() {
        let text = "héllo → 世界 🦀 \u{a0}\u{a9}";
        assert_eq!(neutralise(text), text);
        assert_eq!(neutralise("é\x1b[2J世"), "é^[[2J世");
        // U+00A0 and up are text, not C1 controls.
        assert_eq!(neutralise("\u{9f}\u{a0}"), "\\u{9f}\u{a0}");
    }

    #[test]
    fn every_control_is_rendered_and_nothing_else() {
        for c in (0..=0x10_ffff_u32).filter_map(char::from_u32) {
            let shown = neutralise(c.encode_utf8(&mut [0; 4])).into_owned();
            let kept = shown == c.to_string();
            let control = sandboxd::text::hidden(c) && c != '\n' && c != '\t';
            assert_eq!(kept, !control, "U+{:04X} -> {shown:?}", u32::from(c));
            assert!(
                !shown.contains(|c| sandboxd::text::hidden(c) && c != '\n' && c != '\t'),
                "U+{:04X} renders as a control",
                u32::from(c)
            );
        }
    }

    #[test]
    fn a_sequence_split_across_chunks_is_still_shown() {
        let mut con = console(true, true);
        for chunk in ["partial \x1b", "[1A\x1b", "[2K", "[exit 0 in 1 ms]\r"] {
            con.out(format_args!("{chunk}"));
        }
        assert_eq!(
            text(&con.out.writer),
            "partial ^[[1A^[[2K[exit 0 in 1 ms]^M"
        );
    }

    #[test]
    fn a_terminal_gets_neutralised_text_and_a_pipe_the_exact_bytes() {
        let hostile = "a\x1b]0;t\x07b\rc\u{9b}d\n";
        let mut con = console(true, false);
        con.out(format_args!("{hostile}"));
        con.err(format_args!("{hostile}"));
        assert_eq!(text(&con.out.writer), "a^[]0;t^Gb^Mc\\u{9b}d\n");
        assert_eq!(text(&con.err.writer), hostile);

        let mut con = console(false, true);
        con.out(format_args!("{hostile}"));
        con.err(format_args!("{hostile}"));
        assert_eq!(text(&con.out.writer), hostile);
        assert_eq!(text(&con.err.writer), "a^[]0;t^Gb^Mc\\u{9b}d\n");
    }

    #[test]
    fn formatting_around_hostile_text_is_neutralised_as_a_whole() {
        let mut con = console(true, true);
        let (path, line, text_) = ("a\x1b[2Kb.py", 7, "x\ry");
        con.out(format_args!("{path}:{line}: {text_}\n"));
        assert_eq!(text(&con.out.writer), "a^[[2Kb.py:7: x^My\n");
    }

    #[test]
    fn status_starts_on_its_own_line_after_output_without_newline() {
        let mut con = console(true, true);
        con.out(format_args!("no newline at the end"));
        con.status(format_args!("[exit 3 in 5 ms]"));
        assert_eq!(text(&con.err.writer), "\n[exit 3 in 5 ms]\n");

        // The same after stderr output, and after a trailing CR, which no
        // longer returns the cursor.
        let mut con = console(true, true);
        con.err(format_args!("warning\r"));
        con.status(format_args!("[exit 0 in 1 ms]"));
        assert_eq!(text(&con.err.writer), "warning^M\n[exit 0 in 1 ms]\n");
    }

    #[test]
    fn status_adds_no_blank_line_after_a_complete_line() {
        let mut con = console(true, true);
        con.out(format_args!("done\n"));
        con.status(format_args!("[exit 0 in 1 ms]"));
        assert_eq!(text(&con.err.writer), "[exit 0 in 1 ms]\n");

        let mut con = console(true, true);
        con.status(format_args!("refused [NOT_FOUND]: no such file"));
        assert_eq!(text(&con.err.writer), "refused [NOT_FOUND]: no such file\n");
    }

    #[test]
    fn status_follows_the_last_terminal_write_of_either_stream() {
        // stdout ended mid-line, then stderr completed a line: the cursor is
        // at a line start again.
        let mut con = console(true, true);
        con.out(format_args!("partial"));
        con.err(format_args!("line\n"));
        con.status(format_args!("[exit 1 in 2 ms]"));
        assert_eq!(text(&con.err.writer), "line\n[exit 1 in 2 ms]\n");
    }

    #[test]
    fn piped_output_is_left_as_received_before_a_status_line() {
        // Piped stdout does not move a terminal's cursor; piped stderr keeps
        // exactly the bytes it has always had.
        let mut con = console(false, true);
        con.out(format_args!("partial"));
        con.status(format_args!("[exit 0 in 1 ms]"));
        assert_eq!(text(&con.err.writer), "[exit 0 in 1 ms]\n");

        let mut con = console(false, false);
        con.err(format_args!("partial\x1b[1A"));
        con.status(format_args!("[exit 0 in 1 ms]"));
        assert_eq!(text(&con.err.writer), "partial\x1b[1A[exit 0 in 1 ms]\n");
    }

    #[test]
    fn exact_writes_reach_a_terminal_unchanged_and_status_still_starts_a_line() {
        let hostile = "a\x1b]52;c;b3duZWQ=\x07b\x1b[2J";
        let mut con = console(true, true);
        con.out_exact(hostile);
        con.err_exact(hostile);
        con.status(format_args!("[exit 0 in 1 ms]"));
        assert_eq!(text(&con.out.writer), hostile);
        assert_eq!(
            text(&con.err.writer),
            format!("{hostile}\n[exit 0 in 1 ms]\n")
        );
    }

    #[test]
    fn status_text_is_neutralised_too() {
        let mut con = console(true, true);
        con.status(format_args!("refused [X]: {}", "bad\x1b[2Kpath"));
        assert_eq!(text(&con.err.writer), "refused [X]: bad^[[2Kpath\n");
    }

    /// A writer whose every write fails with `kind`.
    struct Failing(io::ErrorKind);

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(self.0.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_is_not_an_error_and_other_write_failures_are() {
        let mut con = Console::new(Failing(io::ErrorKind::BrokenPipe), false, Vec::new(), false);
        con.out(format_args!("lost\n"));
        con.out(format_args!("lost too\n"));
        assert!(con.finish().is_ok());

        let mut con = Console::new(
            Failing(io::ErrorKind::StorageFull),
            false,
            Vec::new(),
            false,
        );
        con.out(format_args!("lost\n"));
        let e = con.finish().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
    }
}

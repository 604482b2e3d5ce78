//! Readiness on output: a regular expression matched against each line a
//! process writes (stdout and stderr apart), and against the line it is
//! still writing, so a prompt with no newline counts.

use regex::Regex;

/// Longest line matched; past it, the rest of a line is not looked at.
/// Kept short: a pattern costs time in proportion to what it scans, and
/// that time is the service's, not the container's.
pub const MAX_LINE: usize = 4 * 1024;

/// A readiness pattern and the lines it has not seen whole yet.
#[derive(Debug)]
pub struct Matcher {
    regex: Regex,
    lines: [Vec<u8>; 2],
}

impl Matcher {
    /// A matcher of `regex`.
    pub fn new(regex: Regex) -> Matcher {
        Matcher {
            regex,
            lines: [Vec::new(), Vec::new()],
        }
    }

    /// Takes bytes of stream `stream` (0 stdout, 1 stderr); true once a
    /// line matched.
    pub fn push(&mut self, stream: usize, bytes: &[u8]) -> bool {
        let line = &mut self.lines[stream.min(1)];
        for piece in bytes.split_inclusive(|&b| b == b'\n') {
            let body = piece.strip_suffix(b"\n").unwrap_or(piece);
            let room = MAX_LINE.saturating_sub(line.len());
            line.extend_from_slice(&body[..body.len().min(room)]);
            if piece.ends_with(b"\n") {
                if matches(&self.regex, line) {
                    return true;
                }
                line.clear();
            }
        }
        !line.is_empty() && matches(&self.regex, line)
    }
}

fn matches(regex: &Regex, line: &[u8]) -> bool {
    let text = String::from_utf8_lossy(line);
    regex.is_match(text.trim_end_matches('\r'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_split_across_writes_matches_once_whole() {
        let mut m = Matcher::new(Regex::new("^Serving HTTP on .* port 8000").unwrap());
        assert!(!m.push(0, b"starting\nServing HT"));
        assert!(m.push(0, b"TP on :: port 8000 (http://[::]:8000/) ...\n"));
    }

    #[test]
    fn a_prompt_without_newline_matches_and_streams_stay_apart() {
        let mut m = Matcher::new(Regex::new(r"^>>> $").unwrap());
        assert!(!m.push(1, b">>"));
        assert!(
            !m.push(0, b"> "),
            "stdout's piece does not finish stderr's line"
        );
        assert!(m.push(1, b"> "));
    }

    #[test]
    fn endless_lines_are_bounded() {
        let mut m = Matcher::new(Regex::new("READY").unwrap());
        for _ in 0..100 {
            assert!(!m.push(0, &[b'x'; 1024]));
        }
        assert!(m.lines[0].len() <= MAX_LINE);
        assert!(m.push(0, b"\nREADY\n"));
    }
}

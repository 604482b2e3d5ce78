//! Messages too large to read still get an answer. The MCP transport
//! drops a line over its limit (16 MiB) without a word, so the client's
//! request would wait forever. This filter sits between stdin and the
//! transport: a line over the limit is not passed on; in its place goes a
//! small call of the reserved tool [`TOOL`] with the same request id,
//! which the bridge answers as a refusal (ARGUMENT_TOO_LARGE). The id is
//! found by a streaming scan of the dropped line, so nothing of it is kept
//! past the limit; a line without an id (a notification) is dropped.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The longest line passed on: the transport's own limit.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// The reserved tool name the substitute call names.
pub const TOOL: &str = "sandboxd.oversized";

/// Longest request id kept, in bytes (a longer one cannot be answered).
const MAX_ID: usize = 256;

/// Copies `input` to `output` line by line until `input` ends, replacing
/// each line over `max` bytes with the substitute call.
pub async fn filter(
    mut input: impl AsyncRead + Unpin,
    mut output: impl AsyncWrite + Unpin,
    max: usize,
) -> std::io::Result<()> {
    let mut line: Vec<u8> = Vec::new();
    let mut over: Option<(Scan, usize)> = None;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = input.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        let mut rest = &chunk[..n];
        while !rest.is_empty() {
            let (part, ended) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..=i], true),
                None => (rest, false),
            };
            rest = &rest[part.len()..];
            match &mut over {
                Some((scan, bytes)) => {
                    scan.feed(part);
                    *bytes += part.len();
                }
                None if line.len() + part.len() > max => {
                    let mut scan = Scan::default();
                    scan.feed(&line);
                    scan.feed(part);
                    over = Some((scan, line.len() + part.len()));
                    line = Vec::new();
                }
                None => line.extend_from_slice(part),
            }
            if ended {
                match over.take() {
                    Some((scan, bytes)) => {
                        if let Some(id) = scan.id {
                            output.write_all(&substitute(&id, bytes)).await?;
                        }
                    }
                    None => output.write_all(&line).await?,
                }
                output.flush().await?;
                line.clear();
            }
        }
    }
}

/// The call that stands for a dropped request.
fn substitute(id: &[u8], bytes: usize) -> Vec<u8> {
    let mut out = br#"{"jsonrpc":"2.0","id":"#.to_vec();
    out.extend_from_slice(id);
    out.extend_from_slice(
        format!(
            r#","method":"tools/call","params":{{"name":"{TOOL}","arguments":{{"bytes":{bytes}}}}}}}"#
        )
        .as_bytes(),
    );
    out.push(b'\n');
    out
}

/// A streaming scan of a JSON object for the value of its top-level `id`
/// (a number or a string, kept as its JSON text).
#[derive(Default)]
struct Scan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The string being read at depth 1 (cut at a few bytes: only "id"
    /// matters).
    string: Vec<u8>,
    /// The last string at depth 1 was `"id"`, and a `:` may follow.
    key_id: bool,
    /// Reading the id's value.
    value: Option<Vec<u8>>,
    id: Option<Vec<u8>>,
}

impl Scan {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    fn byte(&mut self, b: u8) {
        if let Some(value) = &mut self.value {
            let string = value.first() == Some(&b'"');
            let done = if string {
                let closing = b == b'"' && !self.escaped && value.len() > 1;
                self.escaped = !self.escaped && b == b'\\';
                value.push(b);
                closing
            } else if value.is_empty() && b.is_ascii_whitespace() {
                false
            } else if (b == b'"' && value.is_empty()) || b.is_ascii_digit() || b"-+.eE".contains(&b)
            {
                value.push(b);
                false
            } else {
                // The number ended; this byte is read as usual below.
                let v = self.value.take().unwrap_or_default();
                self.finish(v);
                return self.byte(b);
            };
            if value.len() > MAX_ID {
                self.value = None;
            } else if done {
                let v = self.value.take().unwrap_or_default();
                self.finish(v);
            }
            return;
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                self.key_id = self.depth == 1 && self.string == b"id";
                return;
            }
            if self.depth == 1 && self.string.len() < 8 {
                self.string.push(b);
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                self.string.clear();
            }
            b'{' | b'[' => {
                self.depth += 1;
                self.key_id = false;
            }
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                self.key_id = false;
            }
            b':' if self.key_id && self.depth == 1 => {
                self.key_id = false;
                self.value = Some(Vec::new());
            }
            b if b.is_ascii_whitespace() => {}
            _ => self.key_id = false,
        }
    }

    fn finish(&mut self, value: Vec<u8>) {
        if !value.is_empty() && self.id.is_none() {
            self.id = Some(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn filtered(input: &[u8], max: usize) -> String {
        let mut out = Vec::new();
        filter(input, &mut out, max).await.unwrap();
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn lines_within_the_limit_pass_unchanged() {
        let input = b"{\"id\":1}\n{\"jsonrpc\":\"2.0\"}\n";
        assert_eq!(filtered(input, 100).await, String::from_utf8_lossy(input));
    }

    #[tokio::test]
    async fn an_oversized_request_becomes_a_call_with_its_id() {
        let big = "x".repeat(500);
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{{\"name\":\"create_file\",\"arguments\":{{\"id\":\"inner\",\"content\":\"{big}\\\"\"}}}},\"id\":\"req-7\"}}\n{{\"id\":2}}\n"
        );
        let out = filtered(line.as_bytes(), 100).await;
        let mut lines = out.lines();
        let first: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!(first["id"], "req-7", "the top-level id, not the argument's");
        assert_eq!(first["params"]["name"], TOOL);
        assert_eq!(
            first["params"]["arguments"]["bytes"],
            line.find('\n').unwrap() + 1
        );
        assert_eq!(lines.next(), Some("{\"id\":2}"), "the next line is intact");
    }

    #[tokio::test]
    async fn numeric_ids_and_notifications() {
        let big = "y".repeat(300);
        let input = format!(
            "{{\"id\": 42 ,\"params\":\"{big}\"}}\n{{\"method\":\"notifications/x\",\"params\":\"{big}\"}}\n"
        );
        let out = filtered(input.as_bytes(), 100).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "a notification gets no answer: {out}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["id"], 42);
    }
}

//! Images built from a recipe: what an image build is given, what it says
//! while it runs, and what is known about an image in the engine's store.
//! The engine runs the build ([`super::docker`]); which recipe to build, and
//! when, is the environments' business.

use std::collections::BTreeMap;
use std::pin::Pin;

use futures_util::Stream;

use super::Error;

/// One image build.
#[derive(Debug, Clone)]
pub struct BuildSpec {
    /// The build context, a tar archive; it holds the Dockerfile.
    pub context: Vec<u8>,
    /// Path of the Dockerfile inside the context.
    pub dockerfile: String,
    /// Reference the built image is tagged with, `repo:tag`.
    pub tag: String,
    /// Labels of the built image.
    pub labels: BTreeMap<String, String>,
    /// Build arguments (Docker's predefined proxy arguments among them,
    /// which are not recorded in the image).
    pub args: BTreeMap<String, String>,
}

/// What a running build says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildMessage {
    /// A step began: `number` of `total`, and its instruction.
    Step {
        /// 1-based.
        number: u32,
        /// Steps in the recipe.
        total: u32,
        /// The instruction as the engine prints it (`RUN apt-get ...`).
        instruction: String,
    },
    /// A line of output (of a step, or of the engine about it), without
    /// its line ending.
    Line(String),
    /// The build failed; the engine's words.
    Failed(String),
    /// The build is done: the new image's id.
    Built(String),
}

/// Messages of a running build; dropping the stream cancels the build
/// (the engine then removes the step's container).
pub type BuildStream = Pin<Box<dyn Stream<Item = Result<BuildMessage, Error>> + Send>>;

/// An image in the engine's store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// `sha256:...`.
    pub id: String,
    /// Its `repo:tag` names.
    pub tags: Vec<String>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Creation time, seconds since the Unix epoch.
    pub created: u64,
    /// Bytes on disk.
    pub size: u64,
    /// Its `ONBUILD` triggers, instructions that run in any build FROM it
    /// (read by `image_info`; a listing leaves them empty).
    pub onbuild: Vec<String>,
}

/// Splits the classic builder's stream text into messages: `Step n/m :
/// INSTR` lines become [`BuildMessage::Step`], every other line a
/// [`BuildMessage::Line`]. `partial` carries an unfinished line from one
/// chunk to the next (the engine does not promise whole lines).
pub fn split_stream(partial: &mut String, chunk: &str, out: &mut Vec<BuildMessage>) {
    partial.push_str(chunk);
    while let Some(end) = partial.find('\n') {
        let line: String = partial.drain(..=end).collect();
        out.push(parse_line(line.trim_end_matches(['\n', '\r'])));
    }
    // A step printing without newlines must not grow one line without end.
    if partial.len() > MAX_LINE_BYTES {
        let mut cut = MAX_LINE_BYTES;
        while !partial.is_char_boundary(cut) {
            cut -= 1;
        }
        let line: String = partial.drain(..cut).collect();
        out.push(BuildMessage::Line(strip_ansi(&line)));
    }
}

/// Bytes of build output held before a line is passed on unfinished.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// One whole line of the classic builder's output.
fn parse_line(line: &str) -> BuildMessage {
    let step = line.strip_prefix("Step ").and_then(|rest| {
        let (counts, instruction) = rest.split_once(" : ")?;
        let (n, m) = counts.split_once('/')?;
        Some(BuildMessage::Step {
            number: n.parse().ok()?,
            total: m.parse().ok()?,
            instruction: instruction.to_string(),
        })
    });
    step.unwrap_or_else(|| BuildMessage::Line(strip_ansi(line)))
}

/// Removes the colour escapes the engine wraps a step's stderr in.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A path an image declares as a volume, cleaned as the engine cleans it
/// before mounting (Go's `filepath.Clean`: `//`, `.` and `..` resolved by
/// name), and absolute: `VOLUME //workspace` and `VOLUME /./.sandboxd`
/// are the paths they hide, and are compared as such.
pub fn clean_volume_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// What the trait's engines without builds answer.
pub fn unsupported(what: &str) -> Error {
    Error::BuildImage {
        image: String::new(),
        why: format!("this container engine cannot {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_paths_are_cleaned_as_the_engine_cleans_them() {
        for (given, clean) in [
            ("/workspace", "/workspace"),
            ("//workspace", "/workspace"),
            ("/./.sandboxd", "/.sandboxd"),
            ("/workspace/", "/workspace"),
            ("/data/../workspace/sub", "/workspace/sub"),
            ("/../../.sandboxd/run", "/.sandboxd/run"),
            ("workspace", "/workspace"),
            ("/", "/"),
            ("//", "/"),
            ("/.sandboxd/..", "/"),
            ("/data", "/data"),
        ] {
            assert_eq!(clean_volume_path(given), clean, "{given}");
        }
    }

    #[test]
    fn steps_and_lines_are_told_apart_across_chunks() {
        let mut partial = String::new();
        let mut out = Vec::new();
        split_stream(&mut partial, "Step 2/5 : RUN apt-get", &mut out);
        assert!(out.is_empty());
        split_stream(
            &mut partial,
            " install -y x\n ---> Running in abc\n\u{1b}[91mwarn\u{1b}[0m\nStep x\n",
            &mut out,
        );
        assert_eq!(
            out,
            vec![
                BuildMessage::Step {
                    number: 2,
                    total: 5,
                    instruction: "RUN apt-get install -y x".into()
                },
                BuildMessage::Line(" ---> Running in abc".into()),
                BuildMessage::Line("warn".into()),
                BuildMessage::Line("Step x".into()),
            ]
        );
        assert!(partial.is_empty());
    }

    #[test]
    fn output_without_newlines_is_cut_into_bounded_lines() {
        let mut partial = String::new();
        let mut out = Vec::new();
        for _ in 0..100 {
            split_stream(&mut partial, &"é".repeat(1000), &mut out);
            assert!(partial.len() <= MAX_LINE_BYTES + 2000);
        }
        assert!(out.len() >= 10, "{}", out.len());
        for m in &out {
            let BuildMessage::Line(l) = m else {
                panic!("{m:?}")
            };
            assert!(l.len() <= MAX_LINE_BYTES && l.chars().all(|c| c == 'é'));
        }
    }
}

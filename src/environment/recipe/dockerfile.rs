//! The Dockerfile read as the engine reads it (Docker 20.10's classic
//! builder: parser directives, continuations, comments, each instruction's
//! command, flags and arguments), and what its instructions may make the
//! engine reach on the caller's behalf.
//!
//! The engine fetches an `ADD` URL itself, from its own network namespace,
//! which is the host's: there, every service of the host's loopback
//! answers. So no source of `ADD` or `COPY` may be remote, and an `ADD`
//! source the engine would rewrite before reading (a variable, quotes, an
//! escape) is refused, since what it becomes is not known here. Images named by
//! `COPY --from` (and `RUN --mount=from=`) are found like bases: local ones
//! only, their ids part of the recipe's key. Anything this reader might
//! read differently from the engine is refused rather than guessed at.

use std::collections::BTreeSet;

use super::super::error::Error;
use super::check_reference;

/// The engine's longest line (Go's `bufio.Scanner` default).
const MAX_LINE_BYTES: usize = 64 * 1024 - 1;

/// A `FROM` of the Dockerfile: the physical lines it spans, the image it
/// names (`None` for an earlier stage or `scratch`), and its words.
#[derive(Debug, PartialEq)]
pub(super) struct From {
    pub(super) first_line: usize,
    pub(super) last_line: usize,
    pub(super) image: Option<String>,
    pub(super) words: Vec<String>,
}

/// What a Dockerfile names.
#[derive(Debug, Default)]
pub(super) struct Read {
    /// Its `FROM`s, in order.
    pub(super) froms: Vec<From>,
    /// Images (not stages) that `COPY --from` or `RUN --mount=from=` read
    /// files from, in order of appearance, each once.
    pub(super) images: Vec<String>,
}

/// Checks an `ONBUILD` trigger of base image `base` (`text` as the engine
/// keeps it, e.g. `ADD http://x /y`): it runs in a build FROM that image,
/// so it gets the checks of the recipe's own instructions.
pub(super) fn check_trigger(base: &str, text: &str) -> Result<(), Error> {
    let mut images = Vec::new();
    split_line(text, 0)
        .and_then(|s| check_step(&s, '\\', None, &mut images, 0))
        .map_err(|e| match e {
            Error::InvalidRecipe(why) => Error::InvalidRecipe(format!(
                "base image {base} has the ONBUILD trigger `{text}`, which would run in this \
                 build: {}",
                why.trim_start_matches("line 0: ")
            )),
            other => other,
        })
}

/// One instruction, its continuation lines joined as the engine joins them.
#[derive(Debug)]
struct Instruction {
    /// 0-based physical lines it spans.
    first_line: usize,
    last_line: usize,
    /// The joined text (the engine's `Original`).
    text: String,
}

/// The instruction split as the engine splits it.
#[derive(Debug)]
struct Split {
    /// Lowercase.
    command: String,
    /// `--name=value` flags, unquoted.
    flags: Vec<String>,
    /// The rest, trimmed.
    args: String,
}

/// Reads `text` (its byte-order mark already dropped).
pub(super) fn read(text: &str) -> Result<Read, Error> {
    let (instructions, escape) = instructions(text)?;
    let mut out = Read::default();
    let mut stages: BTreeSet<String> = BTreeSet::new();
    for ins in instructions {
        let at = ins.first_line + 1;
        let split = split_line(&ins.text, at)?;
        match split.command.as_str() {
            "from" => {
                let from = from(&ins, &split, &stages, at)?;
                if let Some(name) = stage_name(&split.args) {
                    stages.insert(name);
                }
                out.froms.push(from);
            }
            "onbuild" => {
                // The trigger runs in whatever build uses this image as its
                // base: it gets the same checks, and names no stage.
                let inner = split_line(&split.args, at)?;
                check_step(&inner, escape, None, &mut out.images, at)?;
            }
            _ => check_step(&split, escape, Some(&stages), &mut out.images, at)?,
        }
    }
    Ok(out)
}

/// The instructions of `text`, and the escape character in force.
fn instructions(text: &str) -> Result<(Vec<Instruction>, char), Error> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if text.ends_with('\n') {
        lines.pop();
    }
    // The engine's scanner drops one carriage return before each newline
    // (and at the end).
    let lines: Vec<&str> = lines
        .into_iter()
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    if let Some(i) = lines.iter().position(|l| l.len() > MAX_LINE_BYTES) {
        return Err(Error::InvalidRecipe(format!(
            "line {}: longer than the engine reads ({MAX_LINE_BYTES} bytes)",
            i + 1
        )));
    }
    let mut directives = Directives::new();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let first_line = i;
        let token = lines[i].trim_start();
        directives.take(token, i + 1)?;
        i += 1;
        let token = if token.starts_with('#') { "" } else { token };
        let (mut text, mut end) = continuation(token, directives.escape);
        if end && text.is_empty() {
            continue;
        }
        while !end && i < lines.len() {
            let raw = lines[i];
            i += 1;
            // Comments and blank lines inside a continued instruction are
            // skipped: the next line still continues it.
            let trimmed = raw.trim_start();
            if trimmed.starts_with('#') || trimmed.is_empty() {
                continue;
            }
            let (more, e) = continuation(raw, directives.escape);
            text.push_str(&more);
            end = e;
        }
        out.push(Instruction {
            first_line,
            last_line: i - 1,
            text,
        });
    }
    Ok((out, directives.escape))
}

/// The parser directives, read as the engine reads them: only at the very
/// top, each a line `# key=value`; the first line that is not one (a
/// comment, a blank line, an instruction, or a directive the engine does
/// not know) ends them.
struct Directives {
    escape: char,
    done: bool,
    seen: BTreeSet<String>,
}

impl Directives {
    fn new() -> Self {
        Directives {
            escape: '\\',
            done: false,
            seen: BTreeSet::new(),
        }
    }

    /// Looks at `line` (left-trimmed), the `number`th.
    fn take(&mut self, line: &str, number: usize) -> Result<(), Error> {
        if self.done {
            return Ok(());
        }
        let Some((key, value)) = directive(line) else {
            self.done = true;
            return Ok(());
        };
        let key = key.to_ascii_lowercase();
        if key != "escape" && key != "syntax" {
            self.done = true;
            return Ok(());
        }
        if !self.seen.insert(key.clone()) {
            return Err(Error::InvalidRecipe(format!(
                "line {number}: only one `# {key}=` parser directive may be given"
            )));
        }
        if key == "syntax" {
            // The classic builder ignores it; another builder would fetch
            // and run the image it names.
            return Err(Error::InvalidRecipe(format!(
                "line {number}: the `# syntax=` parser directive is not supported (sandboxd \
                 builds with the engine's own Dockerfile reader); remove that line"
            )));
        }
        match value {
            "\\" => self.escape = '\\',
            "`" => self.escape = '`',
            other => {
                return Err(Error::InvalidRecipe(format!(
                    "line {number}: `# escape={other}`: the escape character is either \\ or `"
                )));
            }
        }
        Ok(())
    }
}

/// The engine's `^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$`, where `\s`
/// is one of tab, newline, form feed, carriage return and space. A value
/// of whitespace only is returned as its last character (as the lazy
/// `.+?` takes it).
fn directive(line: &str) -> Option<(&str, &str)> {
    let space = |c: char| matches!(c, '\t' | '\n' | '\x0c' | '\r' | ' ');
    let rest = line.strip_prefix('#')?.trim_start_matches(space);
    let key_end = rest
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(rest.len());
    let key = &rest[..key_end];
    if !key.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    let rest = rest[key_end..]
        .trim_start_matches(space)
        .strip_prefix('=')?;
    if rest.is_empty() {
        return None;
    }
    let value = rest.trim_matches(space);
    if value.is_empty() {
        return Some((key, &rest[rest.len() - 1..]));
    }
    Some((key, value))
}

/// The engine's continuation: `escape` followed by spaces and tabs at the
/// end of the line. Returns the line without it, and whether the
/// instruction ends here.
fn continuation(line: &str, escape: char) -> (String, bool) {
    match line.trim_end_matches([' ', '\t']).strip_suffix(escape) {
        Some(body) => (body.to_string(), false),
        None => (line.to_string(), true),
    }
}

/// The engine's whitespace between an instruction's words.
fn is_word_space(c: char) -> bool {
    matches!(c, '\t' | '\x0b' | '\x0c' | '\r' | ' ')
}

/// Splits an instruction as the engine does (`splitCommand`).
fn split_line(text: &str, at: usize) -> Result<Split, Error> {
    let text = text.trim();
    let (command, rest) = match text.find(is_word_space) {
        Some(i) => (&text[..i], text[i..].trim_start_matches(is_word_space)),
        None => (text, ""),
    };
    let (args, flags) = flags(rest, at)?;
    Ok(Split {
        command: command.to_lowercase(),
        flags,
        args: args.trim().to_string(),
    })
}

/// The engine's `extractBuilderFlags`: the leading `--name=value` words
/// (quotes and backslashes taken out), and the rest of the line. The
/// engine reads these byte by byte, so a flag that is not ASCII is refused
/// rather than read one way here and another there.
fn flags(line: &str, at: usize) -> Result<(&str, Vec<String>), Error> {
    let bytes = line.as_bytes();
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace() && *b != 0x0b)
        .unwrap_or(bytes.len());
    if !line[start..].starts_with("--") {
        return Ok((&line[start..], Vec::new()));
    }
    if !line.is_ascii() {
        return Err(Error::InvalidRecipe(format!(
            "line {at}: an instruction with flags must be written in ASCII"
        )));
    }
    let space = |b: u8| b.is_ascii_whitespace() || b == 0x0b;
    let mut words = Vec::new();
    let mut word = String::new();
    let mut blank_ok = false;
    let mut quote: Option<u8> = None;
    let mut in_word = false;
    let mut pos = start;
    while pos <= bytes.len() {
        let end = pos == bytes.len();
        if !in_word {
            if end {
                break;
            }
            let b = bytes[pos];
            if space(b) {
                pos += 1;
                continue;
            }
            if b != b'-' || bytes.get(pos + 1) != Some(&b'-') {
                return Ok((&line[pos..], words));
            }
            in_word = true;
        }
        if end {
            if word != "--" && (blank_ok || !word.is_empty()) {
                words.push(word);
            }
            break;
        }
        let mut b = bytes[pos];
        match quote {
            None => {
                if space(b) {
                    in_word = false;
                    if word == "--" {
                        return Ok((&line[pos..], words));
                    }
                    if blank_ok || !word.is_empty() {
                        words.push(std::mem::take(&mut word));
                    }
                    word.clear();
                    blank_ok = false;
                    pos += 1;
                    continue;
                }
                if b == b'\'' || b == b'"' {
                    quote = Some(b);
                    blank_ok = true;
                    pos += 1;
                    continue;
                }
                if b == b'\\' {
                    if pos + 1 == bytes.len() {
                        pos += 1;
                        continue;
                    }
                    pos += 1;
                    b = bytes[pos];
                }
                word.push(b as char);
            }
            Some(q) => {
                if b == q {
                    quote = None;
                    pos += 1;
                    continue;
                }
                if b == b'\\' {
                    if pos + 1 == bytes.len() {
                        quote = None;
                        pos += 1;
                        continue;
                    }
                    pos += 1;
                    b = bytes[pos];
                }
                word.push(b as char);
            }
        }
        pos += 1;
    }
    Ok(("", words))
}

/// `--name=value` or `--name`: the name, lowercase, and the value.
fn flag(word: &str) -> (String, Option<&str>) {
    let word = word.trim_start_matches('-');
    match word.split_once('=') {
        Some((name, value)) => (name.to_ascii_lowercase(), Some(value)),
        None => (word.to_ascii_lowercase(), None),
    }
}

/// The engine's words of a plain argument list.
fn words(args: &str) -> Vec<&str> {
    args.split(is_word_space)
        .filter(|w| !w.is_empty())
        .collect()
}

/// A `FROM`, checked.
fn from(
    ins: &Instruction,
    split: &Split,
    stages: &BTreeSet<String>,
    at: usize,
) -> Result<From, Error> {
    let image = words(&split.args)
        .first()
        .map(|w| w.to_string())
        .ok_or_else(|| Error::InvalidRecipe(format!("line {at}: FROM names no image")))?;
    if image.contains('$') {
        return Err(Error::InvalidRecipe(format!(
            "line {at}: FROM {image}: name the base image itself; build arguments are not \
             resolved here"
        )));
    }
    let image = if image.eq_ignore_ascii_case("scratch") || stages.contains(&image.to_lowercase()) {
        None
    } else {
        check_reference(&image)?;
        Some(image)
    };
    Ok(From {
        first_line: ins.first_line,
        last_line: ins.last_line,
        image,
        words: ins.text.split_whitespace().map(str::to_string).collect(),
    })
}

/// The stage a `FROM`'s arguments name (`IMAGE AS NAME`), lowercase.
fn stage_name(args: &str) -> Option<String> {
    match words(args).as_slice() {
        [_, kw, name] if kw.eq_ignore_ascii_case("as") => Some(name.to_lowercase()),
        _ => None,
    }
}

/// Checks an instruction other than `FROM`. `stages` are the stages
/// defined so far; `None` inside an `ONBUILD`, whose `--from` would name
/// stages of a build not known here.
fn check_step(
    split: &Split,
    escape: char,
    stages: Option<&BTreeSet<String>>,
    images: &mut Vec<String>,
    at: usize,
) -> Result<(), Error> {
    let command = split.command.as_str();
    match command {
        "add" | "copy" => {
            let upper = command.to_uppercase();
            for word in &split.flags {
                if let (name, Some(value)) = flag(word)
                    && name == "from"
                {
                    if upper == "ADD" {
                        return Err(Error::InvalidRecipe(format!(
                            "line {at}: ADD --from is not an ADD flag; use COPY --from"
                        )));
                    }
                    from_image(value, stages, images, &upper, at)?;
                }
            }
            for source in sources(&split.args, &upper, at)? {
                check_source(&source, &upper, escape, at)?;
            }
        }
        "run" => {
            for word in &split.flags {
                match flag(word) {
                    (name, Some(spec)) if name == "mount" => {
                        if spec.contains(['"', '\'']) {
                            return Err(Error::InvalidRecipe(format!(
                                "line {at}: RUN --mount={spec}: write the mount without quotes"
                            )));
                        }
                        for field in spec.split(',') {
                            if let Some((key, value)) = field.split_once('=')
                                && key.trim().eq_ignore_ascii_case("from")
                            {
                                from_image(value.trim(), stages, images, "RUN --mount", at)?;
                            }
                        }
                    }
                    (name, _) => {
                        return Err(Error::InvalidRecipe(format!(
                            "line {at}: RUN --{name} is not allowed in a recipe (a step's \
                             network and privileges are sandboxd's to set)"
                        )));
                    }
                }
            }
        }
        "onbuild" if stages.is_none() => {
            return Err(Error::InvalidRecipe(format!(
                "line {at}: ONBUILD ONBUILD is not allowed"
            )));
        }
        _ => {}
    }
    Ok(())
}

/// An image (or stage) named by `--from`: a stage is fine, an image is
/// added to `images` (it must then be a local image, and its id goes into
/// the key).
fn from_image(
    value: &str,
    stages: Option<&BTreeSet<String>>,
    images: &mut Vec<String>,
    what: &str,
    at: usize,
) -> Result<(), Error> {
    if value.contains('$') {
        return Err(Error::InvalidRecipe(format!(
            "line {at}: {what} --from={value}: name the stage or image itself; build arguments \
             are not resolved here"
        )));
    }
    let Some(stages) = stages else {
        return Err(Error::InvalidRecipe(format!(
            "line {at}: ONBUILD {what} --from is not allowed: it would name a stage or image of \
             a later build"
        )));
    };
    // A number is a stage's index; the engine checks its range.
    if value.parse::<i64>().is_ok() || stages.contains(&value.to_lowercase()) {
        return Ok(());
    }
    check_reference(value)?;
    if !images.iter().any(|i| i == value) {
        images.push(value.to_string());
    }
    Ok(())
}

/// The sources of an `ADD` or `COPY` (every argument but the last), read
/// as the engine reads them: a JSON array of strings, or words.
fn sources(args: &str, what: &str, at: usize) -> Result<Vec<String>, Error> {
    // The engine decodes the first JSON value and ignores what follows
    // it: text after the array is refused rather than left to that.
    let mut stream = serde_json::Deserializer::from_str(args).into_iter::<Vec<serde_json::Value>>();
    let first = stream.next();
    if matches!(first, Some(Ok(_))) && !args[stream.byte_offset()..].trim().is_empty() {
        return Err(Error::InvalidRecipe(format!(
            "line {at}: {what}: nothing may follow the JSON array"
        )));
    }
    let mut all: Vec<String> = if args.starts_with('[') {
        match first {
            Some(Ok(values)) => {
                let mut out = Vec::new();
                for v in values {
                    match v {
                        serde_json::Value::String(s) => out.push(s),
                        _ => {
                            return Err(Error::InvalidRecipe(format!(
                                "line {at}: {what}: the JSON form holds only strings"
                            )));
                        }
                    }
                }
                out
            }
            _ => words(args).into_iter().map(str::to_string).collect(),
        }
    } else {
        words(args).into_iter().map(str::to_string).collect()
    };
    all.pop();
    Ok(all)
}

/// Refuses a source the engine would fetch from the network, or whose
/// final form is not known before the build.
fn check_source(source: &str, what: &str, escape: char, at: usize) -> Result<(), Error> {
    let lower = source.to_ascii_lowercase();
    let scp_like = || {
        // `user@host:path`, as git reads it.
        let head = lower.split('/').next().unwrap_or("");
        head.contains('@') && head.contains(':')
    };
    let remote = lower.contains("://")
        || lower.starts_with("git@")
        || (what == "ADD" && (lower.starts_with("github.com/") || scp_like()));
    if remote {
        return Err(Error::InvalidRecipe(format!(
            "line {at}: {what} {source}: a recipe may not fetch sources from the network in \
             {what} (the engine would fetch them itself, from the host's own network, not the \
             build's). Fetch it in a RUN step instead, which runs in the build's network: \
             e.g. `RUN curl -fsSL -o /path/in/image URL` (or wget), checking its sha256 with \
             sha256sum -c"
        )));
    }
    // The engine refuses a URL in COPY whatever it expands to: only what
    // ADD expands needs to be known here.
    if what != "ADD" {
        return Ok(());
    }
    if source.contains('$') {
        return Err(Error::InvalidRecipe(format!(
            "line {at}: {what} {source}: write the source itself; variables and build \
             arguments are not resolved here"
        )));
    }
    if source.contains(['"', '\'', '\\', '`', escape]) {
        return Err(Error::InvalidRecipe(format!(
            "line {at}: {what} {source}: write the source without quotes or escape characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;

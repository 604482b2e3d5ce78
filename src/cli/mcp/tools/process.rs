//! The long-running process tools: `start_process`, `process_output`,
//! `send_input`, `stop_process` and `list_processes`, their arguments,
//! calls and replies.
//!
//! A model reads a process's output one call at a time, so this bridge
//! keeps, per process, how far each stream has been shown: every
//! `process_output` (and the output `start_process` and `stop_process`
//! show) answers what is new since. Output is decoded as UTF-8 lossily; a
//! character the process has only half written yet is left for the next
//! read. What a model reads passes through the same neutralising as command
//! output and is capped per stream, keeping its start and its end.

use std::collections::{BTreeMap, HashMap};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::RoleServer;
use rmcp::model::JsonObject;
use rmcp::service::RequestContext;
use sandboxd::pb;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::call::args;
use super::{Refused, Reply, Session};
use crate::cli::connect::Client;
use crate::cli::terminal::{neutralise, unfinished_char};

/// The tools of this module, by name.
pub const TOOLS: [&str; 5] = [
    "start_process",
    "process_output",
    "send_input",
    "stop_process",
    "list_processes",
];

/// What `start_process` tells a model: when to use a process, not run_command.
pub const START: &str = "Start a long-running process in the sandbox and answer while it keeps \
     running: a development server, a file watcher, a database, a REPL, any program you talk to \
     over time. For anything that finishes by itself (tests, builds, scripts, a one-off query) \
     use run_command instead: it waits for the end, and a server would only time out there. \
     With ready_port (the port a server listens on) or ready_match (a regular expression for a \
     line it prints, e.g. \"listening on\"), it answers once the process is ready, so you can use \
     it at once: e.g. run_command a client or the tests against http://127.0.0.1:PORT \
     (the sandbox's own loopback: nothing outside reaches it, and it has no internet). Returns \
     the process id (e.g. \"p1\"), its state, whether it is ready, and its output so far. Then \
     read what it writes with process_output, type into it with send_input (start it with \
     stdin, or with pty for a REPL or anything that wants a terminal), and stop it with \
     stop_process when done. A process has no timeout; it ends with the session or with \
     reset_sandbox.";

/// What `process_output` tells a model.
pub const OUTPUT: &str = "Read what a process from start_process has written since your last \
     look at it (process_output, start_process or stop_process): each call answers only what is \
     new, per stream, so poll it freely. from_start reads everything still kept again (for long \
     output the service keeps its start and its most recent part; what it dropped is counted). \
     With wait_ms (at most 30000) it waits, when nothing is new yet, for new output or the \
     process's end before answering: use it after send_input to a REPL, or to let a server or a \
     watcher react. Also says whether the process still runs, and how it ended (exit code, \
     signal) when it did.";

/// What `send_input` tells a model.
pub const SEND: &str = "Type text into the input of a running process: one started with stdin \
     (a pipe) or pty (a terminal, as for a REPL such as `python3 -i`). A newline is added unless \
     newline is false; close ends its input after the text (end of file; Ctrl-D on a \
     terminal), which makes programs such as cat or a REPL finish. Answers once the process took \
     the input; read its reply with process_output (wait_ms gives it time to answer). On a \
     terminal, text \"\\u0003\" with newline false is Ctrl-C.";

/// What `stop_process` tells a model.
pub const STOP: &str = "Stop a process from start_process: SIGTERM to its process group, then \
     SIGKILL 2 s later if it is still there. Answers how it ended and the output it wrote since \
     you last read it. Stop servers and watchers once you no longer need them: a session runs a \
     limited number of processes at once (16 by default). Stopping one that already ended only \
     says how it ended.";

/// What `list_processes` tells a model.
pub const LIST: &str = "List the processes the session started, oldest first: id, command, \
     state (running, exited, killed), and how much output you have not read yet.";

/// Arguments of `start_process`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartArgs {
    /// Shell command, run with /bin/sh -c in its own process group, e.g.
    /// "python3 -m http.server 8000" or "npm run dev".
    pub command: String,
    /// Working directory relative to the workspace root (default: the root).
    pub cwd: Option<String>,
    /// Extra environment variables for the process.
    pub env: Option<BTreeMap<String, String>>,
    /// Open a pipe to its standard input for send_input. Without it (and
    /// without pty) its input is empty.
    #[serde(default)]
    pub stdin: bool,
    /// Run it on a terminal (24 rows, 80 columns), as REPLs and interactive
    /// programs want: everything it writes comes as one stream, and
    /// send_input types into the terminal.
    #[serde(default)]
    pub pty: bool,
    /// Answer once this TCP port on the sandbox's loopback accepts
    /// connections (the server is ready). Give this or ready_match.
    pub ready_port: Option<u16>,
    /// Answer once a line of its output matches this regular expression
    /// (Rust regex syntax), e.g. "Listening on|ready in".
    pub ready_match: Option<String>,
    /// How long to wait for readiness, in milliseconds (default 30000). A
    /// process not ready by then is left running, and the answer says so.
    pub ready_timeout_ms: Option<u64>,
}

/// Arguments of `process_output`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputArgs {
    /// The process's id as start_process or list_processes gave it, e.g. "p1".
    pub process_id: String,
    /// Read all of its output still kept, not only what is new since the
    /// last call.
    #[serde(default)]
    pub from_start: bool,
    /// When nothing is new yet, wait up to this many milliseconds (at most
    /// 30000) for new output or the process's end.
    pub wait_ms: Option<u64>,
    /// Characters shown per stream (default 4000): longer output keeps its
    /// start and its end, the middle counted.
    pub output_cap: Option<u64>,
}

/// Arguments of `send_input`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendArgs {
    /// The process's id, e.g. "p2".
    pub process_id: String,
    /// The text to type, e.g. "print(6*7)".
    pub text: String,
    /// Add a newline after the text, as pressing Enter does (default true).
    pub newline: Option<bool>,
    /// Close its input after the text: end of file on a pipe, Ctrl-D on a
    /// terminal. Nothing more can be sent after.
    #[serde(default)]
    pub close: bool,
}

/// Arguments of `stop_process`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopArgs {
    /// The process's id, e.g. "p1".
    pub process_id: String,
}

/// Arguments of `list_processes`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {}

/// The longest `process_output` waits.
const MAX_WAIT_MS: u64 = 30_000;

/// Characters of output shown per stream unless the call says otherwise:
/// what run_command shows.
const DEFAULT_CAP: usize = 4000;

/// Once new output came in a wait, how long more is gathered, so that a
/// burst (a reply, a log line and its follow-up) is answered in one piece.
const SETTLE: Duration = Duration::from_millis(200);

/// How far each process's output has been shown, per session and process:
/// (stdout, stderr) offsets. `sandboxd mcp` serves one session, whose
/// processes live no longer than it; the map lives as long as the server.
static SHOWN: LazyLock<Mutex<HashMap<ProcessKey, [u64; 2]>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// A process of a session: (session id, process id).
type ProcessKey = (String, String);

fn shown(session: &str, process: &str) -> [u64; 2] {
    let map = SHOWN.lock().unwrap_or_else(|e| e.into_inner());
    map.get(&(session.to_string(), process.to_string()))
        .copied()
        .unwrap_or_default()
}

fn set_shown(session: &str, process: &str, offsets: [u64; 2]) {
    let mut map = SHOWN.lock().unwrap_or_else(|e| e.into_inner());
    map.insert((session.to_string(), process.to_string()), offsets);
}

/// Runs the process tool `name` on `session`.
pub async fn call(
    session: &Session,
    name: &str,
    raw: JsonObject,
    ctx: &RequestContext<RoleServer>,
) -> Result<Reply, Refused> {
    let mut c = session.client.clone();
    let sid = session.id.as_str();
    match name {
        "start_process" => start(&mut c, sid, args(name, raw)?).await,
        "process_output" => output(&mut c, sid, args(name, raw)?, ctx).await,
        "send_input" => send(&mut c, sid, args(name, raw)?).await,
        "stop_process" => stop(&mut c, sid, args(name, raw)?).await,
        "list_processes" => {
            let _: ListArgs = args(name, raw)?;
            let r = c
                .list_processes(pb::ListProcessesRequest {
                    session_id: sid.to_string(),
                })
                .await?
                .into_inner();
            Ok(list(sid, &r.processes))
        }
        other => Err(Refused::new(
            "UNIMPLEMENTED",
            format!("there is no process tool {other:?}; nothing was done"),
        )),
    }
}

async fn start(c: &mut Client, sid: &str, a: StartArgs) -> Result<Reply, Refused> {
    let condition = match (a.ready_port, a.ready_match) {
        (Some(_), Some(_)) => {
            return Err(Refused::new(
                "INVALID_ARGUMENT",
                "give ready_port or ready_match, not both; nothing was started. Call \
                 start_process again with one of them",
            ));
        }
        (Some(port), None) => Some(pb::readiness::Condition::Port(port.into())),
        (None, Some(re)) => Some(pb::readiness::Condition::OutputRegex(re)),
        (None, None) => None,
    };
    let timeout_ms = a.ready_timeout_ms.unwrap_or(0);
    let ready = condition.map(|condition| pb::Readiness {
        condition: Some(condition),
        timeout_ms,
    });
    let what = format!("start_process of `{}`", short(&a.command));
    let r = c
        .start_process(pb::StartProcessRequest {
            session_id: sid.to_string(),
            command: a.command,
            cwd: a.cwd.unwrap_or_default(),
            env: a.env.unwrap_or_default().into_iter().collect(),
            stdin: a.stdin,
            pty: a.pty.then_some(pb::Pty { rows: 0, cols: 0 }),
            ready,
        })
        .await?
        .into_inner();
    if let Some(rejected) = &r.rejected {
        return Ok(Reply::rejected(&what, rejected));
    }
    let process = r.process.clone().unwrap_or_default();
    let pid = process.process_id.clone();
    let readiness = match r.ready_state() {
        pb::ReadyState::Unspecified => String::new(),
        pb::ReadyState::Ready => format!(", ready after {} ms", r.ready_ms),
        pb::ReadyState::Exited => ", but it ended before it was ready".to_string(),
        pb::ReadyState::TimedOut => format!(
            ", but NOT ready within {}: it is left running. Its output below may say why; \
             wait longer with process_output (wait_ms), or stop it with stop_process",
            span(if timeout_ms == 0 { 30_000 } else { timeout_ms })
        ),
    };
    let mut text = format!("started {pid}{readiness}\n");
    // The output so far, read from the start so that the next
    // process_output continues exactly where this one left off.
    let (body, structured) = match read(c, sid, &pid, [0, 0]).await {
        Ok(read) => {
            set_shown(sid, &pid, read.next);
            let body = read.render(DEFAULT_CAP, true, None);
            let structured = read.json();
            (body, structured)
        }
        Err(_) => {
            // The tails StartProcess carried stand in (the next
            // process_output shows everything from the start).
            let mut body = status_line(&process);
            for (name, tail) in [("stdout", &r.stdout_tail), ("stderr", &r.stderr_tail)] {
                if !tail.is_empty() {
                    body.push_str(&format!("{name} (its end):\n{}", neutralise(tail)));
                    end_line(&mut body);
                }
            }
            body.push_str(&notes(&process));
            (body, json!({ "process": process_json(&process) }))
        }
    };
    text.push_str(&body);
    if process.state() == pb::ProcessState::Running {
        text.push_str(&format!(
            "Read what it writes with process_output (process_id \"{pid}\"); stop it with \
             stop_process when done.\n"
        ));
    }
    let mut structured = structured;
    structured["ready_state"] = json!(ready_state_name(r.ready_state()));
    structured["ready_ms"] = json!(r.ready_ms);
    Ok(Reply {
        text,
        structured: Some(structured),
        is_error: false,
    })
}

async fn output(
    c: &mut Client,
    sid: &str,
    a: OutputArgs,
    ctx: &RequestContext<RoleServer>,
) -> Result<Reply, Refused> {
    let pid = a.process_id;
    let from = if a.from_start {
        [0, 0]
    } else {
        shown(sid, &pid)
    };
    let cap = match a.output_cap {
        None | Some(0) => DEFAULT_CAP,
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    };
    let mut got = read(c, sid, &pid, from).await?;
    let wait_ms = a.wait_ms.unwrap_or(0).min(MAX_WAIT_MS);
    let mut waited = None;
    if wait_ms > 0 && got.is_empty() && got.process.state() == pb::ProcessState::Running {
        let began = tokio::time::Instant::now();
        wait_for_news(c, sid, &pid, got.end, Duration::from_millis(wait_ms), ctx).await?;
        waited = Some(began.elapsed());
        got = read(c, sid, &pid, from).await?;
    }
    set_shown(sid, &pid, got.next);
    let mut text = got.render(cap, a.from_start, waited);
    if got.is_empty() && got.process.state() == pb::ProcessState::Running && waited.is_none() {
        text.push_str("Nothing new yet: call again with wait_ms to wait for it.\n");
    }
    Ok(Reply {
        text,
        structured: Some(got.json()),
        is_error: false,
    })
}

async fn send(c: &mut Client, sid: &str, a: SendArgs) -> Result<Reply, Refused> {
    let mut data = a.text.into_bytes();
    if a.newline.unwrap_or(true) {
        data.push(b'\n');
    }
    let r = c
        .write_process_input(pb::WriteProcessInputRequest {
            session_id: sid.to_string(),
            process_id: a.process_id.clone(),
            data,
            close: a.close,
        })
        .await?
        .into_inner();
    let closed = if r.closed {
        "; its input is closed"
    } else {
        ""
    };
    let text = format!(
        "{} took {} bytes{closed}. Read its answer with process_output (wait_ms gives it time).\n",
        a.process_id, r.written
    );
    Ok(Reply {
        text,
        structured: Some(json!({ "written": r.written, "closed": r.closed })),
        is_error: false,
    })
}

async fn stop(c: &mut Client, sid: &str, a: StopArgs) -> Result<Reply, Refused> {
    let pid = a.process_id;
    let r = c
        .stop_process(pb::StopProcessRequest {
            session_id: sid.to_string(),
            process_id: pid.clone(),
        })
        .await?
        .into_inner();
    let process = r.process.unwrap_or_default();
    // What it wrote last (a server's final log lines, a crash) is shown
    // with how it ended.
    let (body, structured) = match read(c, sid, &pid, shown(sid, &pid)).await {
        Ok(read) => {
            set_shown(sid, &pid, read.next);
            (read.render(DEFAULT_CAP, false, None), read.json())
        }
        Err(_) => (
            format!("{}{}", status_line(&process), notes(&process)),
            json!({ "process": process_json(&process) }),
        ),
    };
    Ok(Reply {
        text: body,
        structured: Some(structured),
        is_error: false,
    })
}

fn list(sid: &str, processes: &[pb::Process]) -> Reply {
    if processes.is_empty() {
        return Reply {
            text: "The session has started no process. Start one with start_process.\n".into(),
            structured: Some(json!({ "processes": [] })),
            is_error: false,
        };
    }
    let mut text = String::new();
    for p in processes {
        let seen = shown(sid, &p.process_id);
        let unread =
            p.stdout_bytes.saturating_sub(seen[0]) + p.stderr_bytes.saturating_sub(seen[1]);
        text.push_str(&format!(
            "{} {}: `{}` (output: {} bytes to stdout, {} to stderr; {unread} not read yet)\n",
            p.process_id,
            state(p),
            short(&p.command),
            p.stdout_bytes,
            p.stderr_bytes,
        ));
        for note in &p.notes {
            text.push_str(&format!("  [note: {}]\n", neutralise(note)));
        }
    }
    Reply {
        text,
        structured: Some(json!({
            "processes": processes.iter().map(process_json).collect::<Vec<_>>()
        })),
        is_error: false,
    }
}

/// What one read of a process's output brought.
struct Read {
    /// Where it started: (stdout, stderr) offsets.
    from: [u64; 2],
    /// stdout, stderr.
    streams: [Stream; 2],
    /// Where the service's answer ended.
    end: [u64; 2],
    /// Where the next read starts: `end`, less a character still being
    /// written at the end of a stream.
    next: [u64; 2],
    /// The process as the read ended.
    process: pb::Process,
}

/// The bytes of one stream a read brought.
#[derive(Default)]
struct Stream {
    bytes: Vec<u8>,
    /// Bytes the service no longer kept, each at its place in `bytes`.
    gaps: Vec<(usize, u64)>,
}

impl Stream {
    fn skipped(&self) -> u64 {
        self.gaps.iter().map(|g| g.1).sum()
    }

    /// The stream as text: each kept run decoded lossily, with a note where
    /// bytes were not kept.
    fn decoded(&self) -> String {
        let mut text = String::new();
        let mut at = 0;
        for &(pos, skipped) in &self.gaps {
            text.push_str(&String::from_utf8_lossy(&self.bytes[at..pos]));
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("[... {skipped} bytes no longer kept ...]\n"));
            at = pos;
        }
        text.push_str(&String::from_utf8_lossy(&self.bytes[at..]));
        text
    }
}

impl Read {
    /// Nothing new: no bytes, none skipped.
    fn is_empty(&self) -> bool {
        self.streams
            .iter()
            .all(|s| s.bytes.is_empty() && s.gaps.is_empty())
    }

    /// The process's state, then each stream's new output (capped at
    /// `cap` characters, start and end kept), then its notes.
    fn render(&self, cap: usize, from_start: bool, waited: Option<Duration>) -> String {
        let mut text = status_line(&self.process);
        if let Some(waited) = waited {
            let outcome = if self.is_empty() {
                ": nothing came"
            } else {
                " for it"
            };
            text.push_str(&format!(
                "(waited {}{outcome})\n",
                span(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX))
            ));
        }
        // On a terminal everything is one stream, shown as stdout.
        let names: &[(&str, usize)] = if self.process.pty {
            &[("output (terminal)", 0)]
        } else {
            &[("stdout", 0), ("stderr", 1)]
        };
        for &(name, i) in names {
            let s = &self.streams[i];
            let new = s.bytes.len();
            if new == 0 && s.gaps.is_empty() {
                let none = if from_start { "(empty)" } else { "nothing new" };
                text.push_str(&format!("{name}: {none}\n"));
                continue;
            }
            let what = if from_start {
                format!("{new} bytes kept")
            } else {
                format!("{new} new bytes")
            };
            let skipped = match s.skipped() {
                0 => String::new(),
                n => format!(", {n} more no longer kept"),
            };
            text.push_str(&format!("{name} ({what}{skipped}):\n"));
            let mut shown = s.decoded();
            if self.process.pty {
                // A terminal ends its lines with CR LF: shown as plain
                // lines, not as a ^M on each (a lone CR, as progress bars
                // write, is still shown).
                shown = shown.replace("\r\n", "\n");
            }
            text.push_str(&neutralise(&capped(&shown, cap)));
            end_line(&mut text);
        }
        text.push_str(&notes(&self.process));
        text
    }

    /// The read as JSON: the output as it was decoded, not neutralised.
    fn json(&self) -> Value {
        let stream = |i: usize| {
            let s = &self.streams[i];
            json!({
                "text": s.decoded(),
                "from": self.from[i],
                "next": self.next[i],
                "new_bytes": s.bytes.len(),
                "skipped_bytes": s.skipped(),
            })
        };
        json!({
            "process": process_json(&self.process),
            "stdout": stream(0),
            "stderr": stream(1),
        })
    }
}

/// Reads a process's output kept from `from` on, without following.
async fn read(c: &mut Client, sid: &str, pid: &str, from: [u64; 2]) -> Result<Read, Refused> {
    use pb::process_output::Kind;
    let mut stream = c
        .read_process_output(pb::ReadProcessOutputRequest {
            session_id: sid.to_string(),
            process_id: pid.to_string(),
            stdout_offset: from[0],
            stderr_offset: from[1],
            follow: false,
        })
        .await?
        .into_inner();
    let mut streams: [Stream; 2] = Default::default();
    while let Some(message) = stream.message().await? {
        match message.kind {
            Some(Kind::Chunk(chunk)) => {
                let s = &mut streams[usize::from(chunk.stream == pb::ProcessStream::Stderr as i32)];
                if chunk.skipped > 0 {
                    s.gaps.push((s.bytes.len(), chunk.skipped));
                }
                s.bytes.extend_from_slice(&chunk.data);
            }
            Some(Kind::End(end)) => {
                let process = end.process.unwrap_or_default();
                let end = [end.stdout_offset, end.stderr_offset];
                let mut next = end;
                // A process still running may write the rest of a
                // character it began: it is read next time, whole.
                if process.state() == pb::ProcessState::Running {
                    for (i, s) in streams.iter_mut().enumerate() {
                        let held = unfinished_char(&s.bytes);
                        let keep = s.bytes.len() - held;
                        s.bytes.truncate(keep);
                        for gap in &mut s.gaps {
                            gap.0 = gap.0.min(keep);
                        }
                        next[i] -= held as u64;
                    }
                }
                return Ok(Read {
                    from,
                    streams,
                    end,
                    next,
                    process,
                });
            }
            None => {}
        }
    }
    Err(Refused::new(
        "TRANSPORT",
        format!(
            "the output of {pid} ended without its last message; nothing was changed. Try \
             again; if it keeps failing, the service has stopped"
        ),
    ))
}

/// Follows a process's output from `end` until something new comes or it
/// ends (then gathers a moment more), or `wait` passes.
async fn wait_for_news(
    c: &mut Client,
    sid: &str,
    pid: &str,
    end: [u64; 2],
    wait: Duration,
    ctx: &RequestContext<RoleServer>,
) -> Result<(), Refused> {
    use pb::process_output::Kind;
    let mut stream = c
        .read_process_output(pb::ReadProcessOutputRequest {
            session_id: sid.to_string(),
            process_id: pid.to_string(),
            stdout_offset: end[0],
            stderr_offset: end[1],
            follow: true,
        })
        .await?
        .into_inner();
    let mut deadline = tokio::time::Instant::now() + wait;
    loop {
        tokio::select! {
            () = ctx.ct.cancelled() => {
                return Err(Refused::new(
                    "CANCELLED",
                    "the call was cancelled while it waited; nothing was changed",
                ));
            }
            () = tokio::time::sleep_until(deadline) => return Ok(()),
            message = stream.message() => match message? {
                Some(pb::ProcessOutput { kind: Some(Kind::Chunk(_)) }) => {
                    deadline = deadline.min(tokio::time::Instant::now() + SETTLE);
                }
                Some(pb::ProcessOutput { kind: None }) => {}
                // The end: the process ended.
                Some(pb::ProcessOutput { kind: Some(Kind::End(_)) }) | None => return Ok(()),
            },
        }
    }
}

/// `text` cut to `cap` characters: its start and its end, with a note of
/// the bytes between.
fn capped(text: &str, cap: usize) -> String {
    let chars = text.chars().count();
    if chars <= cap {
        return text.to_string();
    }
    let head = cap / 2;
    let tail = cap - head;
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(chars - tail)
        .map_or(text.len(), |(i, _)| i);
    let mut out = text[..head_end].to_string();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!(
        "[... {} bytes omitted ...]\n",
        tail_start - head_end
    ));
    out.push_str(&text[tail_start..]);
    out
}

/// Ends the line `text` left open.
fn end_line(text: &mut String) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
}

/// "p1 running for 12 s: `command`".
fn status_line(p: &pb::Process) -> String {
    format!("{} {}: `{}`\n", p.process_id, state(p), short(&p.command))
}

/// The service's notes on a process (why it ended, why it could not
/// start), one a line.
fn notes(p: &pb::Process) -> String {
    p.notes
        .iter()
        .map(|note| format!("[note: {}]\n", neutralise(note)))
        .collect()
}

/// How a process is or ended, in words.
fn state(p: &pb::Process) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let ran = |until: u64| span(until.saturating_sub(p.started_at_ms));
    match p.state() {
        pb::ProcessState::Running => {
            let mut s = format!("running for {}", ran(now));
            if !p.ready {
                s.push_str(", not ready yet");
            }
            if p.pty {
                s.push_str(", on a terminal");
            }
            if p.stdin_open {
                s.push_str(", input open");
            }
            s
        }
        pb::ProcessState::Exited => {
            format!(
                "exited with code {} after {}",
                p.exit_code,
                ran(p.ended_at_ms)
            )
        }
        pb::ProcessState::Killed => {
            let by = match p.killed_by() {
                pb::KilledBy::None => "by a signal",
                pb::KilledBy::ProcessGroupTerm => "by SIGTERM to its process group",
                pb::KilledBy::ProcessGroupKill => {
                    "by SIGKILL to its process group (SIGTERM did not end it)"
                }
                pb::KilledBy::Container => "by killing its container",
                pb::KilledBy::ContainerFailed => {
                    "with its container, which the engine failed to kill (it is being removed)"
                }
            };
            format!(
                "was killed {by} (exit {}) after {}",
                p.exit_code,
                ran(p.ended_at_ms)
            )
        }
        pb::ProcessState::Interrupted => {
            "was interrupted: the service stopped while it ran, and its output was not kept"
                .to_string()
        }
        pb::ProcessState::Failed => "could not be started".to_string(),
        pb::ProcessState::Unspecified => "is in a state this client does not know".to_string(),
    }
}

/// A process as JSON, as the service sent it.
fn process_json(p: &pb::Process) -> Value {
    let state = match p.state() {
        pb::ProcessState::Unspecified => "unspecified",
        pb::ProcessState::Running => "running",
        pb::ProcessState::Exited => "exited",
        pb::ProcessState::Killed => "killed",
        pb::ProcessState::Interrupted => "interrupted",
        pb::ProcessState::Failed => "failed",
    };
    let killed_by = match p.killed_by() {
        pb::KilledBy::None => "none",
        pb::KilledBy::ProcessGroupTerm => "process_group_term",
        pb::KilledBy::ProcessGroupKill => "process_group_kill",
        pb::KilledBy::Container => "container",
        pb::KilledBy::ContainerFailed => "container_failed",
    };
    json!({
        "process_id": p.process_id,
        "command": p.command,
        "cwd": p.cwd,
        "state": state,
        "exit_code": p.exit_code,
        "killed_by": killed_by,
        "ready": p.ready,
        "pty": p.pty,
        "stdin_open": p.stdin_open,
        "started_at_ms": p.started_at_ms,
        "ended_at_ms": p.ended_at_ms,
        "cpu_ms": p.cpu_ms,
        "stdout_bytes": p.stdout_bytes,
        "stderr_bytes": p.stderr_bytes,
        "notes": p.notes,
    })
}

fn ready_state_name(s: pb::ReadyState) -> &'static str {
    match s {
        pb::ReadyState::Unspecified => "not_asked",
        pb::ReadyState::Ready => "ready",
        pb::ReadyState::Exited => "exited",
        pb::ReadyState::TimedOut => "timed_out",
    }
}

/// A command as a reply names it: shown safely, long ones cut.
fn short(command: &str) -> String {
    const MOST: usize = 200;
    let cut: String = command.chars().take(MOST).collect();
    let more = if command.chars().count() > MOST {
        " ..."
    } else {
        ""
    };
    format!("{}{more}", neutralise(&cut))
}

/// A duration for a reader: ms, s, min or h.
fn span(ms: u64) -> String {
    match ms / 1000 {
        0 => format!("{ms} ms"),
        s @ 1..=119 => format!("{s} s"),
        s @ 120..=7199 => format!("{} min", s / 60),
        s => format!("{} h", s / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_cut_at_the_end_is_left_for_the_next_read() {
        assert_eq!(unfinished_char(b""), 0);
        assert_eq!(unfinished_char(b"abc"), 0);
        let e_acute = "\u{e9}".as_bytes();
        assert_eq!(unfinished_char(e_acute), 0);
        assert_eq!(unfinished_char(&e_acute[..1]), 1);
        let euro = "x\u{20ac}".as_bytes();
        assert_eq!(unfinished_char(&euro[..3]), 2);
        assert_eq!(unfinished_char(euro), 0);
        let emoji = "\u{1f600}".as_bytes();
        assert_eq!(unfinished_char(&emoji[..3]), 3);
        // Garbage is not held back: it is shown (lossily) at once.
        assert_eq!(unfinished_char(b"a\x80\x80"), 0);
    }

    #[test]
    fn long_output_keeps_its_start_and_end() {
        let text = format!("{}{}", "a".repeat(50), "b".repeat(50));
        let shown = capped(&text, 20);
        assert_eq!(
            shown,
            format!(
                "{}\n[... 80 bytes omitted ...]\n{}",
                "a".repeat(10),
                "b".repeat(10)
            )
        );
        assert_eq!(capped("short", 20), "short");
    }

    #[test]
    fn output_is_shown_safely_with_what_was_not_kept() {
        let read = Read {
            from: [0, 0],
            streams: [
                Stream {
                    bytes: b"ok\x1b[2K\r[exit 0]\ntail\n".to_vec(),
                    gaps: vec![(3, 1000)],
                },
                Stream::default(),
            ],
            end: [1024, 0],
            next: [1024, 0],
            process: pb::Process {
                process_id: "p1".into(),
                command: "serve".into(),
                state: pb::ProcessState::Exited as i32,
                exit_code: 0,
                ..Default::default()
            },
        };
        let text = read.render(4000, false, None);
        assert!(!text.contains('\x1b'), "{text}");
        assert!(text.contains("p1 exited with code 0"), "{text}");
        assert!(
            text.contains("stdout (21 new bytes, 1000 more no longer kept):\nok^[\n[... 1000 bytes no longer kept ...]\n[2K^M[exit 0]\ntail\n"),
            "{text}"
        );
        assert!(text.contains("stderr: nothing new"), "{text}");
        assert_eq!(read.json()["stdout"]["skipped_bytes"], 1000);
    }

    #[test]
    fn a_terminal_shows_plain_lines_and_one_stream() {
        let read = Read {
            from: [0, 0],
            streams: [
                Stream {
                    bytes: b">>> print(6*7)\r\n42\r\n50%\r100%\r\n>>> ".to_vec(),
                    gaps: vec![],
                },
                Stream::default(),
            ],
            end: [34, 0],
            next: [34, 0],
            process: pb::Process {
                process_id: "p2".into(),
                command: "python3 -i".into(),
                state: pb::ProcessState::Running as i32,
                pty: true,
                stdin_open: true,
                ready: true,
                ..Default::default()
            },
        };
        let text = read.render(4000, false, None);
        assert!(
            text.ends_with(
                "output (terminal) (34 new bytes):\n>>> print(6*7)\n42\n50%^M100%\n>>> \n"
            ),
            "{text}"
        );
        assert!(!text.contains("stderr"), "{text}");
        assert!(text.contains("on a terminal, input open"), "{text}");
    }
}

//! `sandboxd approvals`, `sandboxd approve` and `sandboxd reject`: a person
//! decides the plans and `ask` calls that wait for approval.
//!
//! On a terminal `approvals` shows one waiting item at a time and reads a
//! single key (`y` approve, `n` reject with a one-line note, `s` or Enter
//! skip, `q` quit), and when nothing waits it waits for the next item until
//! `q` or Ctrl-C. Piped, or with `--once`, it prints what waits once. The
//! terminal is put in a mode that hands over single keys (no echo, Ctrl-C
//! as a key) for as long as the verb runs and put back on every way out.

use std::collections::HashSet;
use std::io::{IsTerminal as _, Read as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use sandboxd::pb;

use super::connect::Client;
use super::print::{self, Stdio};
use super::{AnyError, EXIT_FAILURE};

/// How long one wait of the interactive loop asks the service to hold the
/// list when nothing waits (it answers as soon as something does).
const LONG_POLL_MS: u64 = 30_000;
/// Longest `--wait` the service accepts, in seconds.
const MAX_WAIT_SECS: u64 = 60;
/// How often the list is asked again while only skipped items wait.
const SKIPPED_RECHECK: Duration = Duration::from_secs(5);

/// The token the approval verbs send, when it is in a file (the approver
/// token `serve --approver-token-file` reads, say).
#[derive(Debug, Args)]
pub struct TokenFile {
    /// File holding the token to send (e.g. the approver token), instead of
    /// --token or SANDBOXD_TOKEN.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
}

impl TokenFile {
    /// The token in the file, if one was named.
    pub fn read(&self) -> Result<Option<String>, AnyError> {
        let Some(file) = &self.token_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read the token file {}: {e}", file.display()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(format!("the token file {} is empty", file.display()).into());
        }
        Ok(Some(token.to_string()))
    }
}

/// The flags of `sandboxd approvals`.
#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    /// Print what waits once and exit, even on a terminal.
    #[arg(long)]
    pub once: bool,
    /// When nothing waits, wait up to this many seconds for something to
    /// (at most 60), then print the list once.
    #[arg(long, default_value_t = 0)]
    pub wait: u64,
    /// The token to send.
    #[command(flatten)]
    pub token: TokenFile,
}

/// The flags of `sandboxd approve` and `sandboxd reject`.
#[derive(Debug, Args)]
pub struct DecideArgs {
    /// Approval id, as `sandboxd approvals` shows it (e.g. 7f3a-4).
    pub id: String,
    /// Why, in one line; the agent sees it.
    #[arg(long, default_value = "")]
    pub note: String,
    /// The token to send.
    #[command(flatten)]
    pub token: TokenFile,
}

/// `sandboxd approvals`: interactive on a terminal, else the list once.
pub async fn approvals(
    c: &mut Client,
    args: ApprovalsArgs,
    con: &mut Stdio,
) -> Result<ExitCode, AnyError> {
    let interactive = !args.once
        && args.wait == 0
        && std::io::stdin().is_terminal()
        && std::io::stdout().is_terminal();
    if interactive {
        return Interactive::new(c, con)?.run().await;
    }
    let wait_ms = args.wait.min(MAX_WAIT_SECS) * 1000;
    match c
        .list_pending_approvals(pb::ListPendingApprovalsRequest {
            wait_ms,
            ..Default::default()
        })
        .await
    {
        Ok(r) => {
            let pending = r.into_inner().pending;
            if pending.is_empty() {
                con.status(format_args!("nothing waits for approval"));
            }
            let now = now_ms();
            for (i, p) in pending.iter().enumerate() {
                if i > 0 {
                    con.out(format_args!("\n"));
                }
                print::pending(con, p, now);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(status) => {
            print::refusal(con, &status);
            Ok(ExitCode::from(EXIT_FAILURE))
        }
    }
}

/// `sandboxd approve ID` / `sandboxd reject ID`: decides one item and
/// prints the outcome.
pub async fn decide(
    c: &mut Client,
    args: DecideArgs,
    verdict: pb::Verdict,
    con: &mut Stdio,
) -> Result<Result<(), tonic::Status>, AnyError> {
    Ok(send_decision(c, &args.id, verdict, args.note)
        .await
        .map(|r| outcome(con, &r)))
}

/// Sends one decision, signed with the login name of who runs this.
async fn send_decision(
    c: &mut Client,
    id: &str,
    verdict: pb::Verdict,
    note: String,
) -> Result<pb::DecideResponse, tonic::Status> {
    c.decide(pb::DecideRequest {
        approval_id: id.to_string(),
        verdict: verdict.into(),
        note,
        decided_by: login_name(),
    })
    .await
    .map(tonic::Response::into_inner)
}

/// Prints what a decision did.
fn outcome(con: &mut Stdio, r: &pb::DecideResponse) {
    con.out(format_args!(
        "{} {} (session {})\n",
        r.outcome, r.approval_id, r.session_id
    ));
    if !r.message.is_empty() {
        con.out(format_args!("{}\n", r.message));
    }
}

/// Who decides, for the journal: $USER or $LOGNAME, else the name
/// /etc/passwd gives this process's uid, else the uid.
fn login_name() -> String {
    for var in ["USER", "LOGNAME"] {
        if let Ok(name) = std::env::var(var)
            && !name.trim().is_empty()
        {
            return name.trim().to_string();
        }
    }
    let uid = rustix::process::getuid().as_raw();
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| passwd_name(&text, uid))
        .unwrap_or_else(|| format!("uid {uid}"))
}

/// The name of `uid` in the text of /etc/passwd.
fn passwd_name(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id: u32 = fields.nth(1)?.parse().ok()?;
        (id == uid && !name.is_empty()).then(|| name.to_string())
    })
}

/// Milliseconds since the Unix epoch, now.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A key the person pressed, as far as the loop cares.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Approve,
    Reject,
    Skip,
    Quit,
    /// `r`: show the skipped items again.
    Review,
    Other,
}

impl Key {
    fn of(byte: u8) -> Key {
        match byte {
            b'y' | b'Y' => Key::Approve,
            b'n' | b'N' => Key::Reject,
            b's' | b'S' | b'\r' | b'\n' => Key::Skip,
            // Ctrl-C and Ctrl-D arrive as keys: the terminal sends no
            // signal in this mode.
            b'q' | b'Q' | 0x03 | 0x04 => Key::Quit,
            b'r' | b'R' => Key::Review,
            _ => Key::Other,
        }
    }
}

/// The interactive loop's state.
struct Interactive<'a> {
    c: &'a mut Client,
    con: &'a mut Stdio,
    keys: Keys,
    /// Items skipped: not shown again until `r`, or until they are gone.
    skipped: HashSet<String>,
}

impl<'a> Interactive<'a> {
    fn new(c: &'a mut Client, con: &'a mut Stdio) -> Result<Self, AnyError> {
        let keys = Keys::start().map_err(|e| format!("cannot read single keys: {e}"))?;
        Ok(Interactive {
            c,
            con,
            keys,
            skipped: HashSet::new(),
        })
    }

    /// Shows and decides items until the person quits.
    async fn run(mut self) -> Result<ExitCode, AnyError> {
        self.con.status(format_args!(
            "plans and calls waiting for approval: y approve, n reject, s or Enter skip, q quit"
        ));
        let mut wait_ms = 0;
        loop {
            let listed = tokio::select! {
                listed = self.c.list_pending_approvals(pb::ListPendingApprovalsRequest { wait_ms, ..Default::default() }) => listed,
                key = self.keys.next() => {
                    if key == Key::Quit {
                        return Ok(self.quit());
                    }
                    continue;
                }
            };
            let pending = match listed {
                Ok(r) => r.into_inner().pending,
                Err(status) => {
                    print::refusal(self.con, &status);
                    return Ok(ExitCode::from(EXIT_FAILURE));
                }
            };
            // Forget skipped items that are gone (decided, timed out, withdrawn).
            self.skipped
                .retain(|id| pending.iter().any(|p| &p.approval_id == id));
            let fresh: Vec<_> = pending
                .into_iter()
                .filter(|p| !self.skipped.contains(&p.approval_id))
                .collect();
            if fresh.is_empty() {
                if self.skipped.is_empty() {
                    self.con.live(
                        format_args!("nothing waits for approval; waiting (q to quit)"),
                        72,
                    );
                    self.con.flush();
                    wait_ms = LONG_POLL_MS;
                    continue;
                }
                self.con.live(
                    format_args!(
                        "{} skipped item(s) still wait (r to show them again, q to quit)",
                        self.skipped.len()
                    ),
                    72,
                );
                self.con.flush();
                tokio::select! {
                    () = tokio::time::sleep(SKIPPED_RECHECK) => {}
                    key = self.keys.next() => match key {
                        Key::Quit => return Ok(self.quit()),
                        Key::Review => self.skipped.clear(),
                        _ => {}
                    }
                }
                wait_ms = 0;
                continue;
            }
            wait_ms = 0;
            for item in fresh {
                if self.decide_one(&item).await? == Key::Quit {
                    return Ok(self.quit());
                }
            }
        }
    }

    /// Shows one item and acts on the key pressed; returns that key.
    async fn decide_one(&mut self, item: &pb::PendingApproval) -> Result<Key, AnyError> {
        self.con.out(format_args!("\n"));
        print::pending(self.con, item, now_ms());
        self.con.out(format_args!(
            "[y] approve  [n] reject  [s] skip  [q] quit: "
        ));
        self.con.flush();
        // Keys typed before this item was on screen were meant for another
        // (a double `y`): they decide nothing here. A quit among them
        // still quits.
        if self.keys.discard_typed_ahead() {
            self.con.out(format_args!("quit\n"));
            return Ok(Key::Quit);
        }
        loop {
            let key = self.keys.next().await;
            match key {
                Key::Approve => {
                    self.con.out(format_args!("approve\n"));
                    self.send(item, pb::Verdict::Approve, String::new()).await;
                }
                Key::Reject => {
                    self.con.out(format_args!("reject\n"));
                    match self.read_note().await {
                        Some(note) => self.send(item, pb::Verdict::Reject, note).await,
                        None => {
                            self.con.out(format_args!("(not rejected; skipped)\n"));
                            self.skipped.insert(item.approval_id.clone());
                            return Ok(Key::Skip);
                        }
                    }
                }
                Key::Skip => {
                    self.con.out(format_args!("skip\n"));
                    self.skipped.insert(item.approval_id.clone());
                }
                Key::Quit => self.con.out(format_args!("quit\n")),
                // Any other key (an arrow's bytes, say): the prompt stands.
                Key::Review | Key::Other => continue,
            }
            return Ok(key);
        }
    }

    /// Sends a decision and prints what it did, or why it was refused
    /// (the item may have timed out or been decided elsewhere meanwhile).
    async fn send(&mut self, item: &pb::PendingApproval, verdict: pb::Verdict, note: String) {
        match send_decision(self.c, &item.approval_id, verdict, note).await {
            Ok(r) => outcome(self.con, &r),
            Err(status) => print::refusal(self.con, &status),
        }
    }

    /// Reads a one-line note, echoing it: Enter ends it (empty: no note),
    /// Backspace takes back a character, Esc or Ctrl-C gives up (None).
    async fn read_note(&mut self) -> Option<String> {
        self.con.out(format_args!(
            "note for the agent (Enter for none, Esc to cancel): "
        ));
        self.con.flush();
        let mut bytes: Vec<u8> = Vec::new();
        loop {
            match self.keys.next_byte().await {
                None | Some(0x1b | 0x03 | 0x04) => {
                    self.con.out(format_args!("\n"));
                    return None;
                }
                Some(b'\r' | b'\n') => {
                    self.con.out(format_args!("\n"));
                    return Some(String::from_utf8_lossy(&bytes).trim().to_string());
                }
                Some(0x7f | 0x08) => {
                    // Take back one whole character, however many bytes.
                    let text = String::from_utf8_lossy(&bytes).into_owned();
                    if let Some((at, _)) = text.char_indices().last() {
                        bytes.truncate(text[..at].len());
                        self.con.out(format_args!("\x08 \x08"));
                    }
                }
                Some(b) if b < 0x20 => {}
                Some(b) => {
                    bytes.push(b);
                    // Echo once the bytes make whole characters.
                    if let Ok(text) = std::str::from_utf8(&bytes)
                        && let Some(last) = text.chars().last()
                    {
                        self.con.out(format_args!("{last}"));
                    }
                }
            }
            self.con.flush();
        }
    }

    /// Ends the loop: the terminal gets its mode back when `keys` drops.
    fn quit(self) -> ExitCode {
        self.con.out(format_args!("\n"));
        ExitCode::SUCCESS
    }
}

/// Single keys from the terminal on stdin: a thread reads them (a blocking
/// read cannot be cancelled; the thread ends with the process) while the
/// terminal is in [`RawMode`]. SIGTERM, SIGHUP and SIGINT (from `kill`:
/// Ctrl-C is a key here) arrive as `q`, so that the terminal's mode is put
/// back on those ways out too.
struct Keys {
    rx: tokio::sync::mpsc::UnboundedReceiver<u8>,
    term: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    // Dropped last: the mode goes back after everything else.
    _raw: RawMode,
}

impl Keys {
    fn start() -> std::io::Result<Keys> {
        use tokio::signal::unix::{SignalKind, signal};
        let raw = RawMode::enter()?;
        let term = signal(SignalKind::terminate())?;
        let hangup = signal(SignalKind::hangup())?;
        let interrupt = signal(SignalKind::interrupt())?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("keys".into())
            .spawn(move || {
                let mut stdin = std::io::stdin().lock();
                let mut buf = [0u8; 64];
                loop {
                    match stdin.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if buf[..n].iter().any(|&b| tx.send(b).is_err()) {
                                return;
                            }
                        }
                    }
                }
            })?;
        Ok(Keys {
            rx,
            term,
            hangup,
            interrupt,
            _raw: raw,
        })
    }

    /// The next byte typed; None when stdin ended or a signal asks to stop.
    async fn next_byte(&mut self) -> Option<u8> {
        tokio::select! {
            b = self.rx.recv() => b,
            _ = self.term.recv() => None,
            _ = self.hangup.recv() => None,
            _ = self.interrupt.recv() => None,
        }
    }

    /// Forgets every key typed so far and not yet read: what the terminal
    /// still holds and what the reading thread already took. Whether a
    /// quit (`q`, Ctrl-C, Ctrl-D) was among what the thread took.
    fn discard_typed_ahead(&mut self) -> bool {
        let _ = rustix::termios::tcflush(std::io::stdin(), rustix::termios::QueueSelector::IFlush);
        let mut quit = false;
        while let Ok(b) = self.rx.try_recv() {
            quit |= Key::of(b) == Key::Quit;
        }
        quit
    }

    /// The next key; stdin's end or a signal to stop is `q`.
    async fn next(&mut self) -> Key {
        self.next_byte().await.map_or(Key::Quit, Key::of)
    }
}

/// The terminal on stdin handing over each key as typed, unechoed, with
/// Ctrl-C as a key rather than a signal; its mode before is put back on
/// drop (output processing is left alone, so `\n` still starts a line).
struct RawMode {
    saved: libc::termios,
}

impl RawMode {
    fn enter() -> std::io::Result<RawMode> {
        let fd = libc::STDIN_FILENO;
        // SAFETY: termios is plain data; tcgetattr fills it or fails.
        let mut mode: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: fd is stdin and `mode` a valid termios to write.
        if unsafe { libc::tcgetattr(fd, &mut mode) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let saved = mode;
        mode.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG | libc::IEXTEN);
        mode.c_cc[libc::VMIN] = 1;
        mode.c_cc[libc::VTIME] = 0;
        // SAFETY: fd is stdin and `mode` a valid termios read from it.
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &mode) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: puts back the termios read from the same fd. Nothing to
        // do if it fails: the terminal is gone.
        unsafe {
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &self.saved);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_what_the_prompt_says() {
        assert_eq!(Key::of(b'y'), Key::Approve);
        assert_eq!(Key::of(b'N'), Key::Reject);
        assert_eq!(Key::of(b'\r'), Key::Skip);
        assert_eq!(Key::of(b's'), Key::Skip);
        assert_eq!(Key::of(0x03), Key::Quit);
        assert_eq!(Key::of(b'q'), Key::Quit);
        assert_eq!(Key::of(b'x'), Key::Other);
    }

    #[test]
    fn the_login_name_comes_from_passwd_by_uid() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      # a comment\n\
                      alice:x:1000:1000:Alice:/home/alice:/bin/sh\n";
        assert_eq!(passwd_name(passwd, 1000).as_deref(), Some("alice"));
        assert_eq!(passwd_name(passwd, 0).as_deref(), Some("root"));
        assert_eq!(passwd_name(passwd, 7), None);
    }
}

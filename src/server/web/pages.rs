//! The pages, rendered on the server with maud, which escapes every value
//! it is given: a file name, a command's output, a plan's text or a
//! label chosen by a command or a client is shown as text, never markup.
//! No script runs but the service's own (`live.js`, under a policy that
//! allows nothing else).

use std::time::{Duration, SystemTime};

use maud::{DOCTYPE, Markup, html};

use super::commands::visible;
use crate::journal::{Outcome, Report, Tally};
use crate::session::Info;
use crate::session::build_watch::WatchedBuild;

/// A whole page around `body`; `viewer` adds the navigation.
pub fn page(title: &str, viewer: bool, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · sandboxd" }
                link rel="stylesheet" href="/assets/style.css";
                script src="/assets/live.js" defer {}
            }
            body {
                header {
                    a href="/" { "sandboxd" }
                    @if viewer {
                        a href="/" { "Sessions" }
                        a href="/environments" { "Environments" }
                        a href="/health" { "Health" }
                        form method="post" action="/logout" {
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The login form; `error` says why the last try was refused.
pub fn login(error: Option<&str>) -> Markup {
    page(
        "Log in",
        false,
        html! {
            form.login method="post" action="/login" {
                h1 { "Watch sandboxd" }
                p.muted {
                    "Enter the service's token to see every session, or a session's own token to see that session."
                }
                @if let Some(error) = error { p.error { (error) } }
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="off" autofocus;
                button type="submit" { "Log in" }
            }
        },
    )
}

/// Rows of a timeline a page shows (the newest).
const TIMELINE_ROWS: usize = 300;

/// One session's row facts, gathered without touching it.
pub struct Row {
    /// Its snapshot.
    pub info: Info,
    /// Its calls counted.
    pub tally: Tally,
}

/// What a session is doing, in a word.
fn status(row: &Row) -> (&'static str, String) {
    if row.info.sandbox_status.is_some() {
        ("status-wedged", "wedged".into())
    } else if row.tally.running > 0 {
        (
            "status-running",
            format!("running {} command(s)", row.tally.running),
        )
    } else {
        ("status-idle", "idle".into())
    }
}

/// The sessions page: the table, refreshed in place.
pub fn sessions(rows: &[Row]) -> Markup {
    page(
        "Sessions",
        true,
        html! {
            h1 { "Sessions" }
            table {
                thead { tr {
                    th { "Session" } th { "Workspace" } th { "Environment" } th { "Age" }
                    th { "Last activity" } th { "Status" } th { "Commands run" } th { "Refusals" }
                } }
                tbody #sessions data-live="/parts/sessions" { (session_rows(rows)) }
            }
        },
    )
}

/// The rows of the sessions table.
pub fn session_rows(rows: &[Row]) -> Markup {
    html! {
        @if rows.is_empty() {
            tr { td colspan="8" .muted { "No session is open." } }
        }
        @for row in rows {
            @let (class, status) = status(row);
            tr {
                td.mono { a href={ "/sessions/" (row.info.id) } { (row.info.id) } }
                td.mono { (row.info.workspace_path.display()) }
                td { (row.info.environment.as_deref().unwrap_or(&row.info.image)) }
                td.nowrap { (ago(row.info.created)) }
                td.nowrap { (ago(row.info.last_used)) }
                td class={ (class) " nowrap" } { (status) }
                td { (row.tally.commands) }
                td { (row.tally.refused) }
            }
        }
    }
}

/// What a session page links to of the session's commands.
pub struct Watched {
    /// Running now: (sequence number, command line).
    pub running: Vec<(u64, String)>,
    /// Those whose output can be opened.
    pub kept: Vec<u64>,
    /// Its long-running processes, oldest first.
    pub processes: Vec<crate::session::ProcessInfo>,
}

/// A process's state in words.
fn process_state(p: &crate::session::ProcessInfo) -> (&'static str, String) {
    use crate::session::ProcessState as S;
    match p.state {
        S::Running if p.ready => ("status-running", "running".into()),
        S::Running => ("status-running", "running, not ready".into()),
        S::Exited => ("status-idle", format!("exited {}", p.exit_code)),
        S::Killed => ("status-wedged", format!("killed (exit {})", p.exit_code)),
        S::Interrupted => ("status-wedged", "interrupted by a restart".into()),
        S::Failed => ("status-wedged", "could not start".into()),
    }
}

/// A session's page: its facts, its running commands and the timeline of
/// its calls.
pub fn session(info: &Info, tally: &Tally, report: &Report, watched: &Watched) -> Markup {
    let id = &info.id;
    page(
        &format!("Session {id}"),
        true,
        html! {
            h1 { "Session " span.mono { (id) } }
            (super::tabs::nav(id, "Timeline"))
            dl {
                dt { "Workspace" } dd.mono { (info.workspace_path.display()) }
                dt { "Image" } dd.mono { (info.image) }
                @if let Some(env) = &info.environment { dt { "Environment" } dd { (env) } }
                dt { "Created" } dd { (ago(info.created)) }
                dt { "Calls" } dd { (tally.calls) }
                @for note in &info.notes { dt { "Note" } dd { (note) } }
            }
            @if !watched.running.is_empty() {
                h2 { "Running" }
                ul {
                    @for (seq, command) in &watched.running {
                        li { a.mono href={ "/sessions/" (id) "/commands/" (seq) } { (visible(command)) } }
                    }
                }
            }
            @if !watched.processes.is_empty() {
                h2 { "Processes" }
                table {
                    thead { tr {
                        th { "Id" } th { "Started (UTC)" } th { "State" } th { "CPU" } th { "Output" } th { "Command" }
                    } }
                    tbody {
                        @for p in &watched.processes {
                            @let (class, state) = process_state(p);
                            tr {
                                td.mono { "p" (p.id) }
                                td { (clock(p.started_at_ms)) }
                                td class={ (class) " nowrap" } { (state) }
                                td { (p.cpu_ms) " ms" }
                                td { (p.stdout_bytes + p.stderr_bytes) " bytes" }
                                td.mono { (visible(&p.command)) }
                            }
                        }
                    }
                }
            }
            h2 { "Timeline" }
            table {
                thead { tr {
                    th { "#" } th { "Time (UTC)" } th { "Call" } th { "Summary" } th { "Outcome" } th { "Took" }
                } }
                tbody data-live={ "/parts/sessions/" (id) "/timeline" } { (timeline(id, report, &watched.kept)) }
            }
        },
    )
}

/// The rows of a session's timeline, newest first; a command whose output
/// is kept (`kept`) links to it.
pub fn timeline(id: &str, report: &Report, kept: &[u64]) -> Markup {
    html! {
        @if report.entries.is_empty() {
            tr { td colspan="6" .muted { "No call yet." } }
        }
        @for e in report.entries.iter().rev().take(TIMELINE_ROWS) {
            @match &e.outcome {
                Outcome::Ok { detail } => tr {
                    td { (e.seq) } td { (clock(e.at_ms)) } td { (e.tool) }
                    td.mono {
                        @if e.tool == "RunCommand" && kept.contains(&e.seq) {
                            a href={ "/sessions/" (id) "/commands/" (e.seq) } { (visible(&e.summary)) }
                        } @else {
                            (visible(&e.summary))
                        }
                    }
                    td.mono { (visible(detail)) } td { (e.duration_ms) " ms" }
                },
                Outcome::Refused { reason, message } => tr.refused {
                    td { (e.seq) } td { (clock(e.at_ms)) } td { (e.tool) }
                    td.mono { (visible(&e.summary)) }
                    td { span.reason { (reason) } " " span.mono { (visible(message)) } }
                    td { (e.duration_ms) " ms" }
                },
            }
        }
        @if report.entries.len() > TIMELINE_ROWS {
            tr { td colspan="6" .muted { "The " (report.entries.len() - TIMELINE_ROWS) " calls before these are in the session's journal (GetSessionReport)." } }
        }
        @if report.dropped > 0 {
            tr { td colspan="6" .muted { (report.dropped) " older calls are no longer kept in memory." } }
        }
    }
}

/// What the health page shows.
pub struct Health<'a> {
    /// Whether the engine answers, or why not.
    pub engine: Result<(), String>,
    /// Sessions open.
    pub sessions: usize,
    /// Commands running in them.
    pub running: u64,
    /// Warm containers ready, and how many the pool keeps.
    pub pool: (usize, usize),
    /// The service's counters, in Prometheus's text format.
    pub metrics: Option<&'a str>,
}

/// The health page: whether the engine answers, and what the service
/// counts.
pub fn health(h: &Health) -> Markup {
    let metrics = h.metrics;
    page(
        "Health",
        true,
        html! {
            h1 { "Health" }
            dl {
                dt { "Container engine" }
                dd {
                    @match &h.engine {
                        Ok(()) => span.status-idle { "answers" },
                        Err(why) => span.reason { "does not answer: " (why) },
                    }
                }
                dt { "Sessions open" } dd { (h.sessions) }
                dt { "Commands running" } dd { (h.running) }
                dt { "Warm pool" } dd { (h.pool.0) " ready of " (h.pool.1) }
            }
            h2 { "Counters" }
            @match metrics {
                Some(text) => {
                    table {
                        thead { tr { th { "Counter" } th { "Value" } } }
                        tbody {
                            @for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
                                @if let Some((name, value)) = line.rsplit_once(' ') {
                                    tr { td.mono { (name) } td { (value) } }
                                }
                            }
                        }
                    }
                },
                None => p.muted { "The service keeps no counters (start it with --metrics-listen)." },
            }
        },
    )
}

/// The environments page: each environment, its image and the sessions
/// running it.
pub fn environments(
    list: &Result<Vec<crate::session::EnvironmentInfo>, String>,
    builds: &[WatchedBuild],
) -> Markup {
    page(
        "Environments",
        true,
        html! {
            h1 { "Environments" }
            h2 { "Builds" }
            div data-live="/parts/builds" { (build_list(builds)) }
            h2 { "Built" }
            @match list {
                Err(why) => p.error { "The environments cannot be listed now: " (why) },
                Ok(list) if list.is_empty() => p.muted { "No environment was built (sandboxd env build)." },
                Ok(list) => table {
                    thead { tr { th { "Name" } th { "Image" } th { "Base" } th { "Built" } th { "Size" } th { "Sessions" } } }
                    tbody {
                        @for e in list {
                            tr {
                                td { (e.environment.name) }
                                td.mono { (e.environment.image) }
                                td.mono { (e.environment.base) }
                                td { (ago(std::time::UNIX_EPOCH + Duration::from_secs(e.environment.created))) }
                                td { (e.environment.size / (1 << 20)) " MiB" }
                                td { (e.sessions.len()) }
                            }
                        }
                    }
                },
            }
        },
    )
}

/// The builds running now, each with its step and last lines, then
/// those that ended last.
pub fn build_list(builds: &[WatchedBuild]) -> Markup {
    html! {
        @if builds.is_empty() { p.muted { "No build since the service started." } }
        @for b in builds {
            div.build {
                p {
                    strong { (visible(&b.name)) } " · began " (ago(b.started)) " · "
                    @match &b.ended {
                        Some(how) => { (visible(how)) },
                        None => span.status-running { "building" },
                    }
                    @if let Some((n, total, instruction)) = &b.step {
                        " · step " (n) "/" (total) ": " span.mono { (visible(instruction)) }
                    }
                }
                @if !b.lines.is_empty() {
                    pre.mono.output { @for line in &b.lines { (visible(line)) "\n" } }
                }
            }
        }
    }
}

/// "3 min ago", from a wall time.
fn ago(at: SystemTime) -> String {
    let secs = SystemTime::now()
        .duration_since(at)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    match secs {
        0..60 => format!("{secs} s ago"),
        60..3600 => format!("{} min ago", secs / 60),
        _ => format!("{} h {} min ago", secs / 3600, secs % 3600 / 60),
    }
}

/// "HH:MM:SS" (UTC) of a wall time in ms since the Unix epoch.
pub fn clock(at_ms: u64) -> String {
    let secs = at_ms / 1000 % 86_400;
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

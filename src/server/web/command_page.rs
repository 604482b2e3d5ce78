//! The page of one command: its line, how it ended, and its output (the
//! start and the end of each stream, as kept), which grows in place while
//! it runs. Output is text: escaped, with control characters made visible.

use maud::{Markup, html};

use super::commands::visible;
use super::pages::page;
use crate::session::watch::{Shown, Watched};

/// The command page of `watched`, in session `id`.
pub fn command(id: &str, watched: &Watched) -> Markup {
    // The stream starts where this snapshot stops.
    let live = format!(
        "/sessions/{id}/commands/{}/live?out={}&err={}",
        watched.seq,
        watched.stdout.head.len(),
        watched.stderr.head.len()
    );
    page(
        &format!("Command {} of {id}", watched.seq),
        true,
        html! {
            p { a href={ "/sessions/" (id) } { "← session " (id) } }
            h1 { "Command " (watched.seq) }
            pre.mono.command { (visible(&watched.command)) }
            p #ended {
                @match &watched.ended {
                    Some(summary) => { "Ended: " (summary) },
                    None => span.status-running { "Running…" },
                }
            }
            h2 { "stdout" }
            (stream("stdout", &watched.stdout, watched.ended.is_some()))
            h2 { "stderr" }
            (stream("stderr", &watched.stderr, watched.ended.is_some()))
            @if watched.ended.is_none() {
                div #live data-stream=(live) {}
            }
        },
    )
}

fn stream(name: &str, shown: &Shown, ended: bool) -> Markup {
    html! {
        pre.mono.output id=(name) { (visible(&shown.head)) }
        @if ended && shown.head.is_empty() && shown.tail.is_empty() { p.muted { "(nothing)" } }
        @if shown.omitted_bytes > 0 {
            p.muted { "… " (shown.omitted_bytes) " bytes not shown …" }
        }
        @if !shown.tail.is_empty() {
            pre.mono.output { (visible(&shown.tail)) }
        }
    }
}

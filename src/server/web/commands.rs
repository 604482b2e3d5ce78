//! A command on the web view: its output so far (or as it ended), and its
//! output as it comes, over server-sent events. Live streams are bounded:
//! [`LIVE_MAX`] in all, [`LIVE_PER_VIEWER`] per token; one past the bound
//! is refused (503), so any number of open pages costs a bounded amount.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;

use super::{Shared, command_page, html, not_found_page, viewed, viewer};
use crate::server::listener::Admission;
use crate::session::Caller;
use crate::session::watch::Piece;

/// Live streams open at once, in all.
pub const LIVE_MAX: usize = 64;
/// Live streams one session's token keeps open at once.
pub const LIVE_PER_VIEWER: usize = 4;
/// Live streams kept for the operator (every operator tab shares them):
/// sessions together never take more than the rest.
pub const LIVE_OPERATOR: usize = 16;

/// The key all of the operator's live streams count under.
const OPERATOR: &str = "operator";

/// The live streams open, by viewer.
#[derive(Default)]
pub struct Lives {
    open: Mutex<HashMap<String, usize>>,
}

/// One open live stream; gives its place back when dropped.
pub struct Live {
    lives: Arc<super::Web>,
    key: String,
}

impl Drop for Live {
    fn drop(&mut self) {
        let mut open = self
            .lives
            .lives
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// A place for a live stream of `caller`, if one is free.
fn admit(web: &Arc<super::Web>, caller: &Caller) -> Option<Live> {
    let key = match caller {
        Caller::Session(id) => format!("session {id}"),
        Caller::Admin | Caller::Approver => OPERATOR.to_string(),
    };
    let mut open = web.lives.open.lock().unwrap_or_else(|e| e.into_inner());
    let operator = open.get(OPERATOR).copied().unwrap_or(0);
    let sessions: usize = open.values().sum::<usize>() - operator;
    let mine = open.get(&key).copied().unwrap_or(0);
    let room = if key == OPERATOR {
        mine < LIVE_OPERATOR
    } else {
        mine < LIVE_PER_VIEWER && sessions < LIVE_MAX - LIVE_OPERATOR
    };
    if !room {
        return None;
    }
    *open.entry(key.clone()).or_default() += 1;
    Some(Live {
        lives: Arc::clone(web),
        key,
    })
}

/// Text as the page shows it: every character that would act or deceive
/// (terminal controls, line separators, bidirectional and zero-width
/// characters) rendered visibly, as on every surface
/// ([`crate::text::visible`]); the page escapes the rest as HTML.
pub fn visible(text: &str) -> String {
    crate::text::visible(text).into_owned()
}

pub(super) async fn command(
    State(web): Shared,
    Path((id, seq)): Path<(String, u64)>,
    headers: HeaderMap,
    axum::Extension(admission): axum::Extension<Admission>,
) -> Response {
    let session = match viewed(&web, &headers, &admission, &id) {
        Ok(session) => session,
        Err(away) => return away.into_response(),
    };
    match session.watch.command(seq) {
        Some(watched) => html(command_page::command(&id, &watched)),
        None => not_found_page(),
    }
}

/// Where a page's snapshot of a running command stopped: bytes of stdout
/// and of stderr it showed.
#[derive(serde::Deserialize, Default)]
pub(super) struct From {
    #[serde(default)]
    out: usize,
    #[serde(default)]
    err: usize,
}

pub(super) async fn live(
    State(web): Shared,
    Path((id, seq)): Path<(String, u64)>,
    axum::extract::Query(from): axum::extract::Query<From>,
    headers: HeaderMap,
    axum::Extension(admission): axum::Extension<Admission>,
) -> Response {
    let Ok(caller) = viewer(&web, &headers, &admission) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let Ok(session) = web.registry.observe(&caller, &id) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    // The snapshot and the pieces after it: what the page has not shown
    // yet is sent first, then each piece as it comes.
    let Some((now, pieces)) = session.watch.follow(seq) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let since = |s: &str, from: usize| {
        let mut at = from.min(s.len());
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s[at..].to_string()
    };
    let missed = (
        since(&now.stdout.head, from.out),
        since(&now.stderr.head, from.err),
    );
    let dropped = now.stdout.omitted_bytes + now.stderr.omitted_bytes;
    let Some(place) = admit(&web, &caller) else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many live views are open; close some\n",
        )
            .into_response();
    };
    Sse::new(stream(
        seq, now.ended, missed, dropped, session, pieces, place,
    ))
    .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
    .into_response()
}

/// The pieces of command `seq` from now on, until it ends (at once, when
/// it has ended already).
#[allow(clippy::too_many_arguments)]
fn stream(
    seq: u64,
    ended: Option<String>,
    (out, err): (String, String),
    dropped: u64,
    session: Arc<crate::session::Session>,
    mut pieces: tokio::sync::broadcast::Receiver<Piece>,
    place: Live,
) -> impl Stream<Item = Result<Event, Infallible>> {
    async_stream(move |tx| async move {
        let _place = place;
        for (name, text) in [("out", out), ("err", err)] {
            if !text.is_empty() {
                let _ = tx
                    .send(Event::default().event(name).data(visible(&text)))
                    .await;
            }
        }
        if dropped > 0 {
            let note = format!(
                "[{dropped} bytes of output are not shown here; the command's own result keeps its end]"
            );
            let _ = tx.send(Event::default().event("gap").data(note)).await;
        }
        if let Some(summary) = ended {
            let _ = tx.send(Event::default().event("end").data(summary)).await;
            return;
        }
        loop {
            let piece = tokio::select! {
                piece = pieces.recv() => piece,
                // The viewer left while nothing was printed.
                () = tx.closed() => return,
            };
            match piece {
                Ok(Piece::Output {
                    seq: s,
                    stderr,
                    text,
                }) if s == seq => {
                    let name = if stderr { "err" } else { "out" };
                    let event = Event::default().event(name).data(visible(&text));
                    if tx.send(event).await.is_err() {
                        return;
                    }
                }
                Ok(Piece::Ended { seq: s, summary }) if s == seq => {
                    let _ = tx.send(Event::default().event("end").data(summary)).await;
                    return;
                }
                Ok(_) => {}
                Err(RecvError::Lagged(n)) => {
                    let note =
                        format!("[{n} pieces of output were skipped: this view fell behind]");
                    if tx
                        .send(Event::default().event("gap").data(note))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    // Its end may have been among them.
                    if let Some(summary) = session.watch.command(seq).and_then(|w| w.ended) {
                        let _ = tx.send(Event::default().event("end").data(summary)).await;
                        return;
                    }
                }
                Err(RecvError::Closed) => return,
            }
        }
    })
}

/// A stream fed by `body` through a small channel.
fn async_stream<F, Fut>(body: F) -> impl Stream<Item = Result<Event, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Event>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(body(tx));
    futures_util::StreamExt::map(tokio_stream::wrappers::ReceiverStream::new(rx), Ok)
}

#[cfg(test)]
mod tests {
    use super::visible;

    #[test]
    fn text_that_could_act_or_deceive_is_shown_as_what_it_is() {
        assert_eq!(visible("a\x1b[2Jb\n"), "a^[[2Jb\n");
        assert_eq!(visible("x\u{202e}txt"), "x\\u{202e}txt");
        assert_eq!(
            visible("\u{85}\u{200b}\u{feff}"),
            "\\u{85}\\u{200b}\\u{feff}"
        );
        assert_eq!(visible("plain é ✓"), "plain é ✓");
    }
}

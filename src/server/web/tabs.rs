//! A session's other tabs: its changes since it began (the unified diff,
//! additions and deletions marked, and its checkpoints), and its approved
//! plan beside the reconciliation (planned, unplanned, untouched, the
//! verification). Rendered when asked, never refreshed on a timer: each
//! look at the changes reads the workspace, within the session's bounds.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::commands::visible;
use super::pages::{clock, page};
use super::{Shared, html, viewed};
use crate::server::listener::Admission;
use crate::session::Reconciled;
use crate::workspace::history::ChangesOutput;

/// Most bytes of patch a page shows.
const PATCH_BYTES: usize = 256 << 10;

/// The tab links of session `id`, `current` marked.
pub fn nav(id: &str, current: &str) -> Markup {
    html! {
        nav.tabs {
            @for (name, path) in [("Timeline", ""), ("Changes", "/changes"), ("Plan", "/plan")] {
                @if name == current {
                    span.current { (name) }
                } @else {
                    a href={ "/sessions/" (id) (path) } { (name) }
                }
            }
        }
    }
}

pub(super) async fn changes(
    State(web): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    axum::Extension(admission): axum::Extension<Admission>,
) -> Response {
    let session = match viewed(&web, &headers, &admission, &id) {
        Ok(session) => session,
        Err(away) => return away.into_response(),
    };
    let changes = session
        .observed_changes(PATCH_BYTES)
        .await
        .map_err(|e| crate::session::failure::describe(&e).message);
    let report = session.observed_report().await;
    html(changes_page(&id, &changes, &report))
}

pub(super) async fn plan(
    State(web): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    axum::Extension(admission): axum::Extension<Admission>,
) -> Response {
    let session = match viewed(&web, &headers, &admission, &id) {
        Ok(session) => session,
        Err(away) => return away.into_response(),
    };
    html(plan_page(&id, &session.observed_report().await))
}

fn changes_page(id: &str, changes: &Result<ChangesOutput, String>, report: &Reconciled) -> Markup {
    page(
        &format!("Changes of {id}"),
        true,
        html! {
            h1 { "Session " span.mono { (id) } }
            (nav(id, "Changes"))
            @match changes {
                Err(why) => p.error { "The changes cannot be read now: " (why) },
                Ok(out) if out.changes.changes.is_empty() => p.muted { "Nothing has changed since the session began." },
                Ok(out) => {
                    h2 { "Changed since the session began: " (out.changes.changes.len()) }
                    @if out.changes.truncated { p.muted { "More paths changed than are listed." } }
                    pre.mono.diff { (diff(&out.changes.patch)) }
                    @if out.changes.patch.len() >= PATCH_BYTES {
                        p.muted { "The diff is cut at " (PATCH_BYTES) " bytes; GetChanges gives it whole." }
                    }
                },
            }
            h2 { "Checkpoints" }
            @if report.report.checkpoints.is_empty() {
                p.muted { "No checkpoint was taken." }
            } @else {
                table {
                    thead { tr { th { "Checkpoint" } th { "Label" } th { "Files" } th { "Bytes" } } }
                    tbody {
                        @for c in &report.report.checkpoints {
                            tr {
                                td.mono { (c.id) } td { (visible(&c.label)) }
                                td { (c.files) } td { (c.bytes) }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// A unified diff, each line marked by what it is.
fn diff(patch: &[u8]) -> Markup {
    let text = String::from_utf8_lossy(patch);
    html! {
        @for line in text.lines() {
            @let class = if line.starts_with("+++") || line.starts_with("---") || line.starts_with("diff ") || line.starts_with("index ") {
                "meta"
            } else if line.starts_with('+') {
                "add"
            } else if line.starts_with('-') {
                "del"
            } else if line.starts_with("@@") {
                "hunk"
            } else {
                "ctx"
            };
            span class=(class) { (visible(line)) "\n" }
        }
    }
}

/// A field a model wrote, shown visibly and cut to
/// [`FIELD_CHARS`](crate::text::FIELD_CHARS) characters with how many more.
fn field(text: &str) -> String {
    visible(&crate::text::capped(text, crate::text::FIELD_CHARS))
}

fn plan_page(id: &str, r: &Reconciled) -> Markup {
    page(
        &format!("Plan of {id}"),
        true,
        html! {
            h1 { "Session " span.mono { (id) } }
            (nav(id, "Plan"))
            @match &r.plan {
                None => p.muted { "No plan was approved for this session." },
                Some(a) => {
                    h2 { "Approved plan" }
                    // What was granted and withheld first, then what the
                    // model wrote, each field capped.
                    h2 { "Granted" }
                    @if a.granted.is_empty() { p.muted { "none" } }
                    @else { ul { @for f in &a.granted { li.mono { (field(f)) } } } }
                    h2 { "Withheld" }
                    @if a.withheld.is_empty() { p.muted { "none" } }
                    @else { ul { @for w in &a.withheld { li { span.mono { (field(&w.path)) } " — " (field(&w.rule)) } } } }
                    dl {
                        dt { "Goal" } dd { (field(&a.plan.goal)) }
                        dt { "Verification" } dd.mono { (field(&a.plan.verification)) }
                        dt { "Approved by" } dd { (field(&a.decision.by)) " at " (clock(a.decision.at_ms)) " UTC" }
                        @if !a.decision.note.is_empty() { dt { "Note" } dd { (field(&a.decision.note)) } }
                    }
                    h2 { "Steps" }
                    ol {
                        @for step in &a.plan.steps {
                            li {
                                (field(&step.description))
                                ul { @for f in &step.files { li.mono { (field(f)) } } }
                            }
                        }
                    }
                    @if !a.plan.risks.is_empty() {
                        h2 { "Risks" }
                        ul { @for risk in &a.plan.risks { li { (field(risk)) } } }
                    }
                    h2 { "Reconciliation" }
                    (reconciliation(r))
                },
            }
        },
    )
}

fn reconciliation(r: &Reconciled) -> Markup {
    let list = |paths: &[String]| {
        html! {
            @if paths.is_empty() { span.muted { "none" } }
            @else { ul { @for p in paths { li.mono { (visible(p)) } } } }
        }
    };
    html! {
        dl {
            @if let Some(check) = &r.report.plan {
                dt { "Planned and written" } dd { (list(&check.planned_touched)) }
                dt { "Written outside the plan (file tools)" } dd { (list(&check.unplanned)) }
                dt { "Planned, not written" } dd { (list(&check.untouched)) }
            }
            @match &r.changed_unplanned {
                Some(Ok(paths)) => { dt { "Changed outside the plan (anything)" } dd { (list(paths)) } },
                Some(Err(why)) => { dt { "Changed outside the plan" } dd.muted { (why) } },
                None => {},
            }
            @if let Some(v) = &r.report.verification {
                dt { "Verification" }
                dd {
                    @if !v.ran { "not run" }
                    @else if !v.ran_after_last_write { "ran, but not after the last write" }
                    @else if v.passed { span.status-idle { "ran after the last write and passed" } }
                    @else { span.reason { "ran after the last write and failed" } " (exit " (v.exit_code.map_or("?".to_string(), |c| c.to_string())) ")" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Report;
    use crate::policy::Withheld;
    use crate::policy::plan::{Plan, Step};
    use crate::session::{ApprovedPlan, Decision};

    pub(super) fn reconciled(text: &str, goal: &str) -> Reconciled {
        let plan = Plan {
            goal: goal.to_string(),
            steps: vec![Step {
                description: text.to_string(),
                files: vec![format!("src/{text}.py")],
            }],
            verification: text.to_string(),
            risks: vec![text.to_string()],
        };
        Reconciled {
            report: Report {
                entries: vec![],
                dropped: 0,
                file_lines_dropped: 0,
                files_written: vec![],
                commands: vec![],
                refused: vec![],
                touched: vec![],
                touched_dropped: 0,
                plan: None,
                verification: None,
                checkpoints: vec![],
                processes: vec![],
            },
            plan: Some(ApprovedPlan {
                id: "1".into(),
                plan,
                granted: vec![format!("src/{text}.py")],
                withheld: vec![Withheld {
                    path: format!("tests/{text}.py"),
                    rule: text.to_string(),
                }],
                decision: Decision {
                    by: text.to_string(),
                    note: text.to_string(),
                    at_ms: 0,
                },
            }),
            changed_unplanned: Some(Ok(vec![format!("lib/{text}.py")])),
            processes: vec![],
        }
    }

    #[test]
    fn the_plan_page_shows_every_hidden_character_as_what_it_is() {
        for &(class, c, shown) in crate::text::CLASSES {
            let text = format!("x{c}y");
            let page = plan_page("s1", &reconciled(&text, &text)).into_string();
            assert!(
                !page.contains(c),
                "{class}: the page holds U+{:04X} raw",
                u32::from(c)
            );
            // The page escapes `^` and `\` as they are; a `<` is HTML's.
            assert!(page.contains(&format!("x{shown}y")), "{class}: {page}");
        }
    }

    #[test]
    fn the_plan_page_shows_what_was_granted_first_and_caps_the_goal() {
        let page = plan_page("s1", &reconciled("t", &"g".repeat(200_000))).into_string();
        let withheld = page.find("tests/t.py").unwrap_or(usize::MAX);
        assert!(withheld < page.find("ggg").unwrap_or(0), "{page}");
        assert!(page.contains("… 199000 more characters"));
        assert!(page.len() < 20_000, "{}", page.len());
    }
}

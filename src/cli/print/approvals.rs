//! Printing of plans and approvals: a plan with the files it withholds, a
//! pending plan or call waiting for a person, an approved plan and a
//! rejection. Text a model wrote is printed on one line (see [`words`]).

use sandboxd::pb;

use std::io::Write;

use super::name;
use crate::cli::terminal::Console;

/// Text in words (a goal, a step, a risk, a note, a rule), on one line:
/// as it is unless it holds a newline or another control character, then
/// quoted with those escaped (see [`name`]), so that a model's text cannot
/// pose as lines of the listing around it. Quotes alone stay as they are.
fn words(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(sandboxd::text::hidden) {
        name(s)
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// A field a model wrote, as [`words`], cut to
/// [`FIELD_CHARS`](sandboxd::text::FIELD_CHARS) characters with how many
/// more there are, so no field pushes what is granted out of sight.
fn field(s: &str) -> String {
    let (head, more) = sandboxd::text::cut(s, sandboxd::text::FIELD_CHARS);
    format!("{}{}", words(head), sandboxd::text::more(more))
}

/// A span of milliseconds in words: "45 s", "9 min 48 s", "2 h 5 min".
fn span(ms: u64) -> String {
    let s = ms.div_ceil(1000);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// Prints a plan: its goal, each step with its files (a file approval
/// withholds marked with the rule that withholds it), the verification
/// and the risks.
pub fn plan(
    con: &mut Console<impl Write, impl Write>,
    p: &pb::Plan,
    withheld: &[pb::WithheldFile],
) {
    let rule_of = |path: &str| {
        withheld
            .iter()
            .find(|w| w.path == path)
            .map(|w| w.rule.as_str())
    };
    // What approval grants and withholds first, then what the model says.
    let mut seen = std::collections::HashSet::new();
    let granted: Vec<String> = p
        .steps
        .iter()
        .flat_map(|s| s.files.iter())
        .filter(|f| seen.insert(f.as_str()) && rule_of(f).is_none())
        .map(|f| field(f))
        .collect();
    con.out(format_args!("  grants ({})\n", granted.len()));
    for f in &granted {
        con.out(format_args!("    {f}\n"));
    }
    if withheld.is_empty() {
        con.out(format_args!("  withholds     (none)\n"));
    }
    withheld_files(con, withheld, "approval would withhold");
    con.out(format_args!("  goal          {}\n", field(&p.goal)));
    for (i, step) in p.steps.iter().enumerate() {
        con.out(format_args!(
            "  step {:<8} {}\n",
            i + 1,
            field(&step.description)
        ));
        for file in &step.files {
            match rule_of(file) {
                Some(rule) => con.out(format_args!(
                    "                  {}  (withheld: {})\n",
                    field(&name(file)),
                    field(rule)
                )),
                None => con.out(format_args!("                  {}\n", field(&name(file)))),
            }
        }
    }
    con.out(format_args!("  verification  {}\n", field(&p.verification)));
    if p.risks.is_empty() {
        con.out(format_args!("  risks         (none named)\n"));
    }
    for (i, risk) in p.risks.iter().enumerate() {
        let label = if i == 0 { "risks" } else { "" };
        con.out(format_args!("  {label:<13} - {}\n", field(risk)));
    }
}

/// Prints the planned files a rule withholds, each with its rule.
fn withheld_files(
    con: &mut Console<impl Write, impl Write>,
    withheld: &[pb::WithheldFile],
    what: &str,
) {
    if withheld.is_empty() {
        return;
    }
    con.out(format_args!("  {what} ({}):\n", withheld.len()));
    for w in withheld {
        con.out(format_args!(
            "    {}  by {}\n",
            field(&name(&w.path)),
            field(&w.rule)
        ));
    }
}

/// Prints one plan or call waiting for a person; `now_ms` (since the
/// epoch) dates its age and how long it has left.
pub fn pending(con: &mut Console<impl Write, impl Write>, p: &pb::PendingApproval, now_ms: u64) {
    use pb::pending_approval::What;
    let kind = match &p.what {
        Some(What::Plan(_)) => "plan",
        Some(What::Call(_)) => "call",
        None => "item",
    };
    let left = if p.expires_at_ms == 0 {
        String::new()
    } else if p.expires_at_ms > now_ms {
        format!(
            ", rejected in {} unless answered",
            span(p.expires_at_ms - now_ms)
        )
    } else {
        ", its time is up".to_string()
    };
    con.out(format_args!(
        "{kind} {}  session {}  (waiting {}{left})\n",
        words(&p.approval_id),
        words(&p.session_id),
        span(now_ms.saturating_sub(p.requested_at_ms)),
    ));
    con.out(format_args!(
        "  workspace     {}\n",
        name(&p.workspace_path)
    ));
    match &p.what {
        Some(What::Plan(pl)) => plan(con, pl, &p.withheld),
        Some(What::Call(c)) => {
            con.out(format_args!("  tool          {}\n", words(&c.tool)));
            if !c.path.is_empty() {
                con.out(format_args!("  path          {}\n", field(&name(&c.path))));
            }
            if !c.command.is_empty() {
                let (head, more) = sandboxd::text::cut(&c.command, sandboxd::text::FIELD_CHARS);
                con.out(format_args!("  command       {}", words(head)));
                if more > 0 {
                    con.out(format_args!(
                        "{} (the command is {} characters long; not all of it is shown)",
                        sandboxd::text::more(more),
                        c.command.chars().count()
                    ));
                }
                con.out(format_args!("\n"));
            }
            con.out(format_args!("  asked by      {}\n", field(&c.rule)));
            // A command's summary is the command again: shown once is enough.
            if c.summary != c.command {
                con.out(format_args!("  summary       {}\n", field(&c.summary)));
            }
            // What the write would change, line by line, each shown as text.
            if !c.change.is_empty() {
                con.out(format_args!("  change\n"));
                for line in c.change.lines() {
                    con.out(format_args!("    | {}\n", sandboxd::text::one_line(line)));
                }
            }
        }
        None => con.out(format_args!(
            "  (a kind of item this client does not know; update sandboxd)\n"
        )),
    }
}

/// Who decided and when, in words: "approver alice: \"looks right\"".
fn decision(d: &pb::Decision) -> String {
    let mut s = words(&d.decided_by).into_owned();
    if !d.note.is_empty() {
        s.push_str(&format!(": {}", words(&d.note)));
    }
    s
}

/// Prints the plan a session was granted: what it is for, the files it may
/// write, those a rule withholds and who approved it.
pub fn approved_plan(con: &mut Console<impl Write, impl Write>, a: &pb::ApprovedPlan) {
    let by = a
        .decision
        .as_ref()
        .map(|d| format!(", approved by {}", decision(d)))
        .unwrap_or_default();
    con.out(format_args!("plan      {}{by}\n", words(&a.approval_id)));
    let granted: Vec<_> = a.granted.iter().map(|g| field(&name(g))).collect();
    con.out(format_args!(
        "  granted       {}\n",
        if granted.is_empty() {
            "-".to_string()
        } else {
            granted.join(", ")
        }
    ));
    withheld_files(con, &a.withheld, "withheld");
    if let Some(p) = &a.plan {
        con.out(format_args!("  goal          {}\n", field(&p.goal)));
        con.out(format_args!("  verification  {}\n", field(&p.verification)));
    }
}

/// Prints that a person (or nobody, in time) rejected a call or plan:
/// nothing of it was executed.
pub fn rejection(con: &mut Console<impl Write, impl Write>, r: &pb::Rejection) {
    let who = match (&r.decision, r.timed_out) {
        (_, true) => "nobody answered in time".to_string(),
        (Some(d), false) => format!("rejected by {}", decision(d)),
        (None, false) => format!("rejected: {}", words(&r.reason)),
    };
    con.status(format_args!(
        "rejected [{}]: not executed; {who}",
        words(&r.approval_id)
    ));
    if !r.message.is_empty() {
        con.status(format_args!("{}", r.message));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::pending_approval::What;

    fn shown(p: &pb::PendingApproval) -> String {
        let mut con = Console::new(Vec::new(), true, Vec::new(), true);
        pending(&mut con, p, 0);
        String::from_utf8_lossy(&con.into_writers().0).into_owned()
    }

    #[test]
    fn a_pending_item_shows_what_is_granted_first_and_caps_the_model_s_fields() {
        let p = pb::PendingApproval {
            approval_id: "1".into(),
            what: Some(What::Plan(pb::Plan {
                goal: "g".repeat(200_000),
                steps: vec![pb::PlanStep {
                    description: "step".into(),
                    files: vec!["src/x.py".into(), "tests/test_x.py".into()],
                }],
                verification: "pytest".into(),
                risks: vec![],
            })),
            withheld: vec![pb::WithheldFile {
                path: "tests/test_x.py".into(),
                rule: "deny_writes \"tests/**\"".into(),
                message: String::new(),
            }],
            ..Default::default()
        };
        let out = shown(&p);
        let at = out.find("tests/test_x.py  by").unwrap_or(usize::MAX);
        assert!(at < 400, "the withheld file is at character {at}: {out}");
        assert!(
            out.find("    src/x.py\n").unwrap_or(usize::MAX) < 400,
            "{out}"
        );
        assert!(out.contains("… 199000 more characters"), "{out}");
        assert!(out.len() < 3000, "{}", out.len());

        let padded = format!("ls{}; echo pwned > x", " ".repeat(3000));
        let p = pb::PendingApproval {
            approval_id: "2".into(),
            what: Some(What::Call(pb::PendingCall {
                tool: "RunCommand".into(),
                summary: padded.clone(),
                command: padded,
                change: String::new(),
                rule: "ask_commands \"*\"".into(),
                path: String::new(),
            })),
            ..Default::default()
        };
        let out = shown(&p);
        assert!(
            out.contains("… 2018 more characters (the command is 3018 characters long"),
            "{out}"
        );
        assert_eq!(out.matches("ls  ").count(), 1, "{out}");
    }

    #[test]
    fn a_held_write_shows_what_it_would_change_line_by_line() {
        let p = pb::PendingApproval {
            approval_id: "3".into(),
            what: Some(What::Call(pb::PendingCall {
                tool: "CreateFile".into(),
                summary: "\"src/a.py\" (12 bytes)".into(),
                command: String::new(),
                change: "x = 1\n\u{1b}[2Jy = 2\n".into(),
                rule: "ask_writes \"src/**\"".into(),
                path: "src/a.py".into(),
            })),
            ..Default::default()
        };
        let out = shown(&p);
        assert!(
            out.contains("  change\n    | x = 1\n    | ^[[2Jy = 2\n"),
            "{out}"
        );
        assert!(!out.contains('\x1b'), "{out}");
    }
}

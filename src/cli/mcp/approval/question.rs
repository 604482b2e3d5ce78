//! The question an approval form puts to the person: what approving
//! grants and withholds first, then what the agent says of it. Every field
//! the agent or the workspace chose is on one line, capped at
//! [`FIELD_CHARS`] characters ("… N more characters"), in a Markdown code
//! span its text cannot close ([`sandboxd::text::code_span`]): a client
//! that renders the message as Markdown shows it literally, and no part of
//! it can pass for a heading or a line of the question, nor push what is
//! granted out of sight.

use std::collections::HashSet;

use sandboxd::pb;
use sandboxd::pb::pending_approval::What;
use sandboxd::text::{FIELD_CHARS, code_span, command_span, cut, more};

use super::minutes_left;

/// The question put to the person: what waits, and what approving means.
pub fn question(p: &pb::PendingApproval) -> String {
    let mut text = String::new();
    let whose = if p.workspace_path.is_empty() {
        format!("session {}", field(&p.session_id))
    } else {
        format!(
            "session {} over {}",
            field(&p.session_id),
            field(&p.workspace_path)
        )
    };
    match &p.what {
        Some(What::Plan(plan)) => {
            text.push_str(&format!(
                "The agent in {whose} proposes a plan (approval {}).\n\n",
                field(&p.approval_id)
            ));
            text.push_str(&files_text(plan, &p.withheld));
            text.push_str(&plan_text(plan));
            text.push_str(
                "\nApprove to let it write the granted files (not the withheld ones) and run \
                 commands; reject and nothing of the plan is executed. The note goes to the agent.",
            );
        }
        Some(What::Call(call)) => {
            text.push_str(&format!(
                "The agent in {whose} made a call a rule holds for your approval (approval {}).\n\n",
                field(&p.approval_id)
            ));
            text.push_str(&call_text(call));
            text.push_str(
                "\nApprove to let this one call run; reject and it is not executed. The note \
                 goes to the agent.",
            );
        }
        None => text.push_str(&format!(
            "The agent in {whose} waits for an approval ({}).",
            field(&p.approval_id)
        )),
    }
    if let Some(left) = minutes_left(p.expires_at_ms) {
        text.push_str(&format!(" Unanswered, it is rejected in about {left} min."));
    }
    text
}

/// A field from the other side: a code span of its first [`FIELD_CHARS`]
/// characters, and how many more there are.
fn field(text: &str) -> String {
    match cut(text, FIELD_CHARS) {
        (all, 0) => code_span(all),
        (head, n) => format!("{} {}", code_span(head), more(n)),
    }
}

/// What approval grants and what it withholds, before anything the agent
/// wrote about it: the planned files less the withheld ones, then the
/// withheld ones with their rules.
fn files_text(plan: &pb::Plan, withheld: &[pb::WithheldFile]) -> String {
    let mut seen = HashSet::new();
    let granted: Vec<String> = plan
        .steps
        .iter()
        .flat_map(|s| s.files.iter())
        .filter(|f| seen.insert(f.as_str()) && !withheld.iter().any(|w| &w.path == *f))
        .map(|f| field(f))
        .collect();
    let mut text = format!("Approval grants writes to {} files:\n", granted.len());
    for f in &granted {
        text.push_str(&format!("  {f}\n"));
    }
    if withheld.is_empty() {
        text.push_str("Withheld: none\n");
    } else {
        text.push_str(&format!(
            "Withheld ({}; a rule forbids them: approval does not grant them):\n",
            withheld.len()
        ));
        for w in withheld {
            text.push_str(&format!("  {} (rule {})", field(&w.path), field(&w.rule)));
            if !w.message.is_empty() {
                text.push_str(&format!(": {}", field(&w.message)));
            }
            text.push('\n');
        }
    }
    text.push_str("\nWhat the agent says of it:\n");
    text
}

/// A plan, section by section.
fn plan_text(plan: &pb::Plan) -> String {
    let mut text = format!("Goal: {}\n", field(&plan.goal));
    text.push_str("Steps:\n");
    for (i, step) in plan.steps.iter().enumerate() {
        text.push_str(&format!("  {}. {}\n", i + 1, field(&step.description)));
        if !step.files.is_empty() {
            let files: Vec<String> = step.files.iter().map(|f| field(f)).collect();
            text.push_str(&format!("     files: {}\n", files.join(", ")));
        }
    }
    text.push_str(&format!("Verification: {}\n", field(&plan.verification)));
    if !plan.risks.is_empty() {
        text.push_str("Risks:\n");
        for risk in &plan.risks {
            text.push_str(&format!("  - {}\n", field(risk)));
        }
    }
    text
}

/// A held call, field by field: the path or the command first (a cut
/// command says its full length), then what the agent says of it.
fn call_text(call: &pb::PendingCall) -> String {
    let mut text = format!("Tool: {}\n", field(&call.tool));
    if !call.path.is_empty() {
        text.push_str(&format!("Path: {}\n", field(&call.path)));
    }
    if !call.command.is_empty() {
        text.push_str(&format!(
            "Command: {}\n",
            command_span(&call.command, FIELD_CHARS)
        ));
    }
    if !call.rule.is_empty() {
        text.push_str(&format!("Rule: {}\n", field(&call.rule)));
    }
    // A command's summary is the command again: shown once is enough.
    if !call.summary.is_empty() && call.summary != call.command {
        text.push_str(&format!("Summary: {}\n", field(&call.summary)));
    }
    // What the write would change, as an indented block: a client that
    // renders Markdown shows it as code, and no line can pose as a field.
    if !call.change.is_empty() {
        text.push_str("Change:\n");
        for line in call.change.lines() {
            text.push_str(&format!("    {}\n", sandboxd::text::one_line(line)));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_question_shows_the_plan_and_the_withheld_files_with_their_rules() {
        let p = pb::PendingApproval {
            approval_id: "7f3a-4".into(),
            session_id: "s1".into(),
            workspace_path: "/w".into(),
            what: Some(What::Plan(pb::Plan {
                goal: "fix add\nWithheld: nothing".into(),
                steps: vec![pb::PlanStep {
                    description: "make add add".into(),
                    files: vec!["src/x.py".into(), "tests/test_x.py".into()],
                }],
                verification: "python3 -m pytest -q".into(),
                risks: vec!["callers\x1b[2K".into()],
            })),
            withheld: vec![pb::WithheldFile {
                path: "tests/test_x.py".into(),
                rule: "deny_writes \"tests/**\"".into(),
                message: String::new(),
            }],
            ..Default::default()
        };
        let q = question(&p);
        assert!(q.contains("approval `7f3a-4`"), "{q}");
        assert!(
            q.contains(
                "Approval grants writes to 1 files:\n  `src/x.py`\nWithheld (1; a rule forbids \
                 them: approval does not grant them):\n  `tests/test_x.py` (rule `deny_writes \
                 \"tests/**\"`)\n"
            ),
            "{q}"
        );
        assert!(q.find("Withheld (1") < q.find("Goal:"), "{q}");
        assert!(q.contains("Goal: `fix add\\nWithheld: nothing`\n"), "{q}");
        assert!(
            q.contains("  1. `make add add`\n     files: `src/x.py`, `tests/test_x.py`\n"),
            "{q}"
        );
        assert!(q.contains("Verification: `python3 -m pytest -q`\n"), "{q}");
        assert!(q.contains("  - `callers^[[2K`\n"), "{q}");
        assert!(!q.contains('\x1b'));
    }

    #[test]
    fn the_question_shows_a_held_call_once() {
        let p = pb::PendingApproval {
            approval_id: "1".into(),
            session_id: "s".into(),
            what: Some(What::Call(pb::PendingCall {
                tool: "RunCommand".into(),
                summary: "rm -rf build".into(),
                rule: "ask_commands \"rm\"".into(),
                path: String::new(),
                command: "rm -rf build".into(),
                change: String::new(),
            })),
            ..Default::default()
        };
        let q = question(&p);
        assert!(
            q.contains(
                "Tool: `RunCommand`\nCommand: `rm -rf build`\nRule: `ask_commands \"rm\"`\n"
            ),
            "{q}"
        );
        assert!(!q.contains("Summary"), "the command is shown once: {q}");
    }

    #[test]
    fn a_held_write_shows_what_it_would_change_as_text() {
        let p = pb::PendingApproval {
            approval_id: "1".into(),
            session_id: "s".into(),
            what: Some(What::Call(pb::PendingCall {
                tool: "EditFile".into(),
                summary: "\"src/a.py\" (1 edit)".into(),
                rule: "ask_writes \"src/**\"".into(),
                path: "src/a.py".into(),
                command: String::new(),
                change: "@@ edit 1\n-x = 1\n+x = 2 \u{1b}]0;t\u{7}\nRule: none\n".into(),
            })),
            ..Default::default()
        };
        let q = question(&p);
        assert!(
            q.contains("Change:\n    @@ edit 1\n    -x = 1\n    +x = 2 ^[]0;t^G\n    Rule: none\n"),
            "{q}"
        );
        assert!(!q.contains('\x1b'));
    }

    #[test]
    fn what_is_granted_comes_first_and_the_agent_s_fields_are_capped() {
        let p = pb::PendingApproval {
            approval_id: "1".into(),
            session_id: "s".into(),
            what: Some(What::Plan(pb::Plan {
                goal: "g".repeat(200_000),
                steps: vec![pb::PlanStep {
                    description: "d".repeat(5000),
                    files: vec!["src/x.py".into(), "tests/test_x.py".into()],
                }],
                verification: "pytest".into(),
                risks: vec!["r".repeat(3000)],
            })),
            withheld: vec![pb::WithheldFile {
                path: "tests/test_x.py".into(),
                rule: "deny_writes \"tests/**\"".into(),
                message: String::new(),
            }],
            ..Default::default()
        };
        let q = question(&p);
        let withheld = q.find("`tests/test_x.py` (rule").unwrap_or(usize::MAX);
        assert!(
            withheld < 300,
            "the withheld file is at character {withheld}: {q}"
        );
        assert!(q.find("`src/x.py`").unwrap_or(usize::MAX) < 300, "{q}");
        assert!(q.contains("… 199000 more characters"), "{q}");
        assert!(q.contains("… 4000 more characters"), "{q}");
        assert!(q.contains("… 2000 more characters"), "{q}");
        assert!(q.len() < 5000, "{} characters", q.len());

        let padded = format!("ls{}; echo pwned > x", " ".repeat(3000));
        let p = pb::PendingApproval {
            approval_id: "2".into(),
            session_id: "s".into(),
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
        let q = question(&p);
        assert!(
            q.contains("… 2018 more characters (the command is 3018 characters long"),
            "{q}"
        );
        assert_eq!(
            q.matches("ls  ").count(),
            1,
            "the command is shown once: {q}"
        );
        assert!(q.len() < 2000, "{} characters", q.len());
    }
}

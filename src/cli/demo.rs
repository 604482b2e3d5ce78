//! `sandboxd demo`: the baseline loop on a small project, printed as tool
//! cards. It starts its own service on 127.0.0.1 (an ephemeral port), drives
//! it over gRPC like any agent would, and shuts it down.

use std::process::ExitCode;

use sandboxd::pb;

use super::AnyError;
use super::print::exit_summary;

const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";
const TESTS: &str = "import unittest\n\nfrom calc import add, mul\n\n\nclass CalcTest(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n\n\nif __name__ == \"__main__\":\n    unittest.main()\n";
const TEST_COMMAND: &str = "python3 -m unittest -v 2>&1";

/// Runs the demo; exits 0 when the loop went red then green.
pub async fn run() -> Result<ExitCode, AnyError> {
    let local = sandboxd::local::Local::start("demo", 0, |_| {}).await?;
    let outcome = demo(local.client.clone()).await;
    local.stop().await?;
    let (red, green) = outcome?;
    println!("\nred (exit {red}) -> green (exit {green}): the loop works.");
    Ok(if red != 0 && green == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn demo(mut c: sandboxd::local::Client) -> Result<(i64, i64), AnyError> {
    let session = c
        .create_session(pb::CreateSessionRequest::default())
        .await?
        .into_inner();
    let sid = session.session_id;
    println!(
        "session {sid}: workspace {}, container {}",
        session.workspace_path,
        short(&session.container_id)
    );
    for (path, content) in [("calc.py", CALC), ("test_calc.py", TESTS)] {
        c.create_file(pb::CreateFileRequest {
            session_id: sid.clone(),
            path: path.into(),
            content: content.into(),
        })
        .await?;
    }
    println!("project: calc.py (add is wrong), test_calc.py\n");

    let red = run_card(&mut c, &sid, 1).await?;

    let read = c
        .read_file(pb::ReadFileRequest {
            session_id: sid.clone(),
            path: "calc.py".into(),
            offset: 0,
            limit: 0,
        })
        .await?
        .into_inner();
    let numbered: String = read
        .content
        .lines()
        .enumerate()
        .map(|(i, l)| format!("{:>4}  {l}\n", read.first_line as usize + i))
        .collect();
    card(2, "ReadFile calc.py", &numbered, &read.message);

    let edit = c
        .edit_file(pb::EditFileRequest {
            session_id: sid.clone(),
            path: "calc.py".into(),
            edits: vec![pb::Edit {
                old_string: "    return a - b".into(),
                new_string: "    return a + b".into(),
                replace_all: false,
            }],
            expected_sha256: read.sha256,
        })
        .await?
        .into_inner();
    card(
        3,
        "EditFile calc.py: `return a - b` -> `return a + b`",
        &edit.diff,
        &edit.message,
    );

    let green = run_card(&mut c, &sid, 4).await?;
    c.close_session(pb::CloseSessionRequest { session_id: sid })
        .await?;
    Ok((red, green))
}

async fn run_card(c: &mut sandboxd::local::Client, sid: &str, n: usize) -> Result<i64, AnyError> {
    let mut events = c
        .run_command(pb::RunCommandRequest {
            session_id: sid.to_string(),
            command: TEST_COMMAND.into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    while let Some(ev) = events.message().await? {
        if let Some(pb::run_command_event::Event::Exit(exit)) = ev.event {
            let out = exit.stdout.clone().unwrap_or_default();
            let mut body = out.text;
            if out.truncated {
                body.push_str(&format!(
                    "\n[... {} bytes omitted ...]\n{}",
                    out.omitted_bytes, out.tail
                ));
            }
            card(
                n,
                &format!("RunCommand `{TEST_COMMAND}`"),
                &body,
                &exit_summary(&exit),
            );
            return Ok(exit.exit_code);
        }
    }
    Err("the command stream ended without an exit event".into())
}

fn card(n: usize, title: &str, body: &str, footer: &str) {
    println!("╭─ {n}. {title}");
    for line in body.lines() {
        println!("│ {line}");
    }
    println!("╰─ {footer}\n");
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

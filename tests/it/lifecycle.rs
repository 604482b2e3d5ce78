//! The whole loop as a user meets it: the baseline task over gRPC, the
//! `sandboxd demo` command, and sessions that outlive their service: a
//! service killed with SIGKILL mid-command, over and over, brings every
//! session back with its files and journal, leaks no container and deletes
//! no workspace; what no session owns any more is quarantined, not deleted.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{SANDBOXD, TestServer, containers_labelled, edit, edit_req, read_req, run};
use crate::served::{RemoveOnDrop, Served, Unmount, service_name};
use sandboxd::pb::{self, sandbox_client::SandboxClient};

#[tokio::test]
async fn baseline_red_read_edit_green() {
    let srv = TestServer::with_docker().await;
    let (sid, ws) = srv.session().await;
    std::fs::create_dir(ws.join("shop")).unwrap();
    std::fs::write(
        ws.join("shop/pricing.py"),
        "def total(prices, discount):\n    \"\"\"Sum of prices minus a percentage discount.\"\"\"\n    subtotal = sum(prices)\n    return subtotal - subtotal * discount\n",
    )
    .unwrap();
    std::fs::write(ws.join("shop/__init__.py"), "").unwrap();
    std::fs::write(
        ws.join("test_pricing.py"),
        "import unittest\nfrom shop.pricing import total\n\nclass T(unittest.TestCase):\n    def test_percent(self):\n        self.assertAlmostEqual(total([10, 20], 10), 27.0)\n\nif __name__ == '__main__':\n    unittest.main()\n",
    )
    .unwrap();
    // Run the tests: red.
    let red = run(&srv.client, &sid, "python3 -m unittest 2>&1", 60_000).await;
    assert_ne!(red.exit.exit_code, 0, "{}", red.stdout());
    assert!(red.stdout().contains("FAILED"), "{}", red.stdout());
    // Read the code.
    let read = srv
        .client
        .clone()
        .read_file(read_req(&sid, "shop/pricing.py"))
        .await
        .unwrap()
        .into_inner();
    assert!(read.content.contains("subtotal * discount"));
    // Fix it.
    let mut req = edit_req(
        &sid,
        "shop/pricing.py",
        vec![edit(
            "subtotal - subtotal * discount",
            "subtotal - subtotal * discount / 100",
        )],
    );
    req.expected_sha256 = read.sha256;
    let fixed = srv
        .client
        .clone()
        .edit_file(req)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fixed.replacements, 1);
    // Run the tests again: green.
    let green = run(&srv.client, &sid, "python3 -m unittest 2>&1", 60_000).await;
    assert_eq!(green.exit.exit_code, 0, "{}", green.stdout());
    assert!(green.stdout().contains("OK"), "{}", green.stdout());
    srv.stop().await;
}

#[test]
fn demo_command_shows_red_then_green() {
    common::prepare_host();
    let out = Command::new(SANDBOXD).arg("demo").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for card in [
        "1. RunCommand",
        "2. ReadFile calc.py",
        "3. EditFile calc.py",
        "4. RunCommand",
    ] {
        assert!(stdout.contains(card), "missing {card}:\n{stdout}");
    }
    assert!(stdout.contains("[exit 1 in"), "{stdout}");
    assert!(stdout.contains("[exit 0 in"), "{stdout}");
    assert!(
        stdout.contains("red (exit 1) -> green (exit 0)"),
        "{stdout}"
    );
}

/// Starts `command` in `session` and returns once it runs (its `started`
/// event came), leaving the stream open.
async fn start_command(
    c: &mut common::Client,
    session: &str,
    command: &str,
) -> tonic::Streaming<pb::RunCommandEvent> {
    let mut stream = c
        .run_command(common::run_req(session, command, 600_000))
        .await
        .unwrap()
        .into_inner();
    loop {
        let ev = stream
            .message()
            .await
            .unwrap()
            .expect("the command started");
        if let Some(pb::run_command_event::Event::Started(_)) = ev.event {
            return stream;
        }
    }
}

async fn report(c: &mut common::Client, session: &str) -> pb::SessionReport {
    c.get_session_report(pb::GetSessionReportRequest {
        session_id: session.to_string(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

/// Ids of the sessions the service lists.
async fn listed(c: &mut common::Client) -> Vec<String> {
    let mut ids: Vec<String> = c
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner()
        .sessions
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_survive_twenty_kills_mid_command() {
    const CYCLES: usize = 20;
    const SESSIONS: usize = 3;
    common::prepare_host();
    let service = service_name();
    let label = format!("sandboxd.service={service}");
    let _cleanup = RemoveOnDrop(label.clone());
    let base = tempfile::tempdir().unwrap();
    let _unmount = Unmount(base.path().join("state"));
    // A warm container too: it must not leak either.
    let mut served = Served::start(&service, base.path(), 1).await;
    let mut c = served.client().await;
    let mut sessions = Vec::new();
    for i in 0..SESSIONS {
        let s = c
            .create_session(pb::CreateSessionRequest::default())
            .await
            .unwrap()
            .into_inner();
        std::fs::write(
            std::path::Path::new(&s.workspace_path).join("important.txt"),
            format!("session {i}\n"),
        )
        .unwrap();
        sessions.push(s);
    }
    let mut ids: Vec<String> = sessions.iter().map(|s| s.session_id.clone()).collect();
    ids.sort();
    let mut first_checkpoint = String::new();
    for cycle in 0..CYCLES {
        let s = &sessions[cycle % SESSIONS];
        // A file written through the service, then a command cut short.
        c.create_file(pb::CreateFileRequest {
            session_id: s.session_id.clone(),
            path: format!("cycle-{cycle}.txt"),
            content: format!("{cycle}\n"),
        })
        .await
        .unwrap();
        if cycle == 0 {
            first_checkpoint = c
                .create_checkpoint(pb::CreateCheckpointRequest {
                    session_id: s.session_id.clone(),
                    label: "before the first kill".into(),
                })
                .await
                .unwrap()
                .into_inner()
                .checkpoint
                .unwrap()
                .checkpoint_id;
        }
        let stream = start_command(
            &mut c,
            &s.session_id,
            &format!("echo {cycle} > ran-{cycle}.txt; sleep 600"),
        )
        .await;
        // Killed once the command has done something.
        let ran = std::path::Path::new(&s.workspace_path).join(format!("ran-{cycle}.txt"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read_to_string(&ran).unwrap_or_default().is_empty() {
            assert!(Instant::now() < deadline, "the command did not run");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        served.child.kill().unwrap();
        served.child.wait().unwrap();
        drop(stream);
        let left = containers_labelled(&label);
        assert!(
            !left.is_empty(),
            "the kill left containers behind, for the restart to remove"
        );
        served = Served::start(&service, base.path(), usize::from(cycle % 2 == 0)).await;
        c = served.client().await;
        // Every session is back, with the same id.
        assert_eq!(listed(&mut c).await, ids, "cycle {cycle}");
        // Nothing of the dead instance runs on: its containers are gone
        // (the pool may have warmed a new one already).
        let now = containers_labelled(&label);
        let survived: Vec<&String> = left.iter().filter(|id| now.contains(id)).collect();
        assert!(
            survived.is_empty(),
            "cycle {cycle}: containers of a dead instance survived: {survived:?}"
        );
        // The interrupted command is journaled as such, its effect kept.
        let r = report(&mut c, &s.session_id).await;
        let cut: Vec<&pb::CommandRecord> = r
            .commands
            .iter()
            .filter(|x| x.interrupted && x.command.starts_with(&format!("echo {cycle} ")))
            .collect();
        assert_eq!(cut.len(), 1, "cycle {cycle}: {:?}", r.commands);
        assert_eq!(cut[0].exit_code, -1);
        let ws = std::path::Path::new(&s.workspace_path);
        assert_eq!(
            std::fs::read_to_string(ws.join(format!("ran-{cycle}.txt"))).unwrap(),
            format!("{cycle}\n")
        );
    }
    // Every file of every session is intact: 0 workspaces deleted.
    for (i, s) in sessions.iter().enumerate() {
        let ws = std::path::Path::new(&s.workspace_path);
        assert_eq!(
            std::fs::read_to_string(ws.join("important.txt")).unwrap(),
            format!("session {i}\n")
        );
        for cycle in (i..CYCLES).step_by(SESSIONS) {
            let read = c
                .read_file(common::read_req(
                    &s.session_id,
                    &format!("cycle-{cycle}.txt"),
                ))
                .await
                .unwrap()
                .into_inner();
            assert_eq!(read.content, format!("{cycle}\n"));
        }
        // The next command runs, in a fresh container.
        let ran = run(&c, &s.session_id, "cat important.txt", 60_000).await;
        assert_eq!(ran.stdout(), format!("session {i}\n"));
        // The session's token survived too.
        assert_eq!(
            c.get_session(pb::GetSessionRequest {
                session_id: s.session_id.clone()
            })
            .await
            .unwrap()
            .into_inner()
            .session_id,
            s.session_id
        );
    }
    // The history came back too: changes since the start are those of the
    // whole session, across every restart, and a checkpoint taken before
    // the first kill restores.
    let s = &sessions[0];
    let since_start = c
        .get_changes(pb::GetChangesRequest {
            session_id: s.session_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let patch = String::from_utf8_lossy(&since_start.patch).into_owned();
    for cycle in (0..CYCLES).step_by(SESSIONS) {
        assert!(patch.contains(&format!("cycle-{cycle}.txt")), "{patch}");
    }
    assert!(
        !patch.contains("important.txt"),
        "the baseline held it: {patch}"
    );
    let listed_cps = c
        .list_checkpoints(pb::ListCheckpointsRequest {
            session_id: s.session_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .checkpoints;
    assert_eq!(listed_cps.len(), 1, "{listed_cps:?}");
    assert_eq!(listed_cps[0].checkpoint_id, first_checkpoint);
    c.restore_checkpoint(pb::RestoreCheckpointRequest {
        session_id: s.session_id.clone(),
        checkpoint_id: first_checkpoint.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let ws = std::path::Path::new(&s.workspace_path);
    assert!(ws.join("cycle-0.txt").exists() && !ws.join("cycle-3.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("important.txt")).unwrap(),
        "session 0\n"
    );
    // A clean stop keeps the sessions too (only their containers go), and
    // closing one then removes its workspace.
    served.sigterm_and_wait().await;
    assert!(containers_labelled(&label).is_empty());
    let served = Served::start(&service, base.path(), 0).await;
    let mut c = served.client().await;
    assert_eq!(listed(&mut c).await, ids);
    for s in &sessions {
        c.close_session(pb::CloseSessionRequest {
            session_id: s.session_id.clone(),
        })
        .await
        .unwrap();
        assert!(common::gone_soon(std::path::Path::new(&s.workspace_path)).await);
    }
    served.sigterm_and_wait().await;
    assert!(containers_labelled(&label).is_empty());
    assert_eq!(common::mounts_under(base.path()), Vec::<String>::new());
    let state = base.path().join("state");
    assert_eq!(
        std::fs::read_dir(state.join("sessions")).unwrap().count(),
        0
    );
    assert_eq!(
        std::fs::read_dir(state.join("quarantine")).unwrap().count(),
        0
    );
}

/// A killed service's sessions come back even while the engine is down;
/// a workspace whose record is gone is quarantined if it holds anything
/// and removed if it holds nothing, never deleted with files in it.
#[tokio::test]
async fn sessions_come_back_without_docker_and_orphans_are_quarantined() {
    let base = tempfile::tempdir().unwrap();
    let state = base.path().join("state");
    let _unmount = Unmount(state.clone());
    let start = || {
        let (child, addr) = common::spawn_listening(
            Command::new(SANDBOXD)
                .args(["serve", "--listen", "127.0.0.1:0"])
                .args(["--pool-size", "0", "--no-token"])
                .args(["--docker-host", common::NO_DOCKER])
                .arg("--state-dir")
                .arg(&state)
                .stdout(Stdio::null()),
        );
        (child, format!("http://{addr}"))
    };
    let serving = |addr: String| async move {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut c) = SandboxClient::connect(addr.clone()).await
                && c.list_sessions(pb::ListSessionsRequest {}).await.is_ok()
            {
                return c;
            }
            assert!(Instant::now() < deadline, "the service did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (mut first, addr) = start();
    let mut client = serving(addr).await;
    let mut make = async || {
        client
            .create_session(pb::CreateSessionRequest::default())
            .await
            .unwrap()
            .into_inner()
    };
    let kept = make().await;
    let orphan = make().await;
    let empty_orphan = make().await;
    std::fs::write(std::path::Path::new(&kept.workspace_path).join("f"), "x").unwrap();
    std::fs::write(std::path::Path::new(&orphan.workspace_path).join("g"), "y").unwrap();
    assert_eq!(common::mounts_under(&state).len(), 3);
    first.kill().unwrap();
    first.wait().unwrap();
    // Two records lost (say, the disk failed): their workspaces are orphans.
    for s in [&orphan, &empty_orphan] {
        std::fs::remove_file(state.join(format!("sessions/{}.json", s.session_id))).unwrap();
    }
    // And the host restarted: nothing is mounted any more.
    common::unmount_under(&state);
    let (mut second, addr) = start();
    let mut c = serving(addr).await;
    let listed = c
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].session_id, kept.session_id);
    assert!(
        listed[0].notes.iter().any(|n| n.contains("restarted")),
        "{:?}",
        listed[0].notes
    );
    // Mounted again from its volume file, with its quota.
    let read = c
        .read_file(common::read_req(&kept.session_id, "f"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.content, "x");
    assert_eq!(common::mounts_under(&state).len(), 1);
    assert_eq!(
        listed[0].limits.unwrap().disk_bytes,
        kept.limits.unwrap().disk_bytes
    );
    // The orphan with a file is in the quarantine, whole; the empty one is gone.
    let quarantined: Vec<String> = std::fs::read_dir(state.join("quarantine"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    assert!(
        quarantined[0].starts_with(&orphan.session_id),
        "{quarantined:?}"
    );
    let img = state.join("quarantine").join(&quarantined[0]);
    let look = base.path().join("look");
    std::fs::create_dir(&look).unwrap();
    let mounted = Command::new("mount")
        .args(["-o", "loop,ro"])
        .arg(&img)
        .arg(&look)
        .status()
        .unwrap();
    assert!(mounted.success());
    let g = std::fs::read_to_string(look.join("g"));
    let _ = Command::new("umount").arg(&look).status();
    assert_eq!(g.unwrap(), "y");
    assert!(!std::path::Path::new(&empty_orphan.workspace_path).exists());
    let images: Vec<_> = std::fs::read_dir(state.join("volumes")).unwrap().collect();
    assert_eq!(
        images.len(),
        1,
        "only the kept session's volume file is left"
    );
    second.kill().unwrap();
    second.wait().unwrap();
}

/// Two instances on one engine under the same name, with state directories
/// of their own, never remove each other's containers; two on one state
/// directory cannot both run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_told_apart_by_a_liveness_mark_not_by_name() {
    common::prepare_host();
    let service = service_name();
    let label = format!("sandboxd.service={service}");
    let _cleanup = RemoveOnDrop(label.clone());
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let _unmount = (
        Unmount(a_dir.path().join("state")),
        Unmount(b_dir.path().join("state")),
    );
    let a = Served::start(&service, a_dir.path(), 0).await;
    let mut ca = a.client().await;
    let sa = ca
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    let ran = run(&ca, &sa.session_id, "echo a", 60_000).await;
    assert_eq!(ran.stdout(), "a\n");
    let a_containers = containers_labelled(&label);
    assert_eq!(a_containers.len(), 1);
    // A second instance with the same name starts, and sweeps at start.
    let b = Served::start(&service, b_dir.path(), 1).await;
    for id in &a_containers {
        assert!(
            containers_labelled(&label).contains(id),
            "b removed a's container"
        );
    }
    let ran = run(&ca, &sa.session_id, "echo still", 60_000).await;
    assert_eq!(ran.stdout(), "still\n");
    // A third on a's state directory is refused while a lives.
    let third = Command::new(SANDBOXD)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--no-token",
            "--service-name",
            &service,
        ])
        .arg("--state-dir")
        .arg(a_dir.path().join("state"))
        .output()
        .unwrap();
    assert!(!third.status.success());
    let stderr = String::from_utf8_lossy(&third.stderr);
    assert!(stderr.contains("another sandboxd instance"), "{stderr}");
    b.sigterm_and_wait().await;
    // b's clean stop took only its own containers.
    for id in &a_containers {
        assert!(
            containers_labelled(&label).contains(id),
            "b's stop removed a's container"
        );
    }
    a.sigterm_and_wait().await;
    assert!(containers_labelled(&label).is_empty());
}

/// `--log-format json`: every line is one JSON object, and what is logged
/// for a session carries its id.
#[tokio::test]
async fn json_logs_are_one_object_a_line_with_the_session_id() {
    let base = tempfile::tempdir().unwrap();
    let state = base.path().join("state");
    let _unmount = Unmount(state.clone());
    let log = base.path().join("serve.log");
    let mut served = Command::new(SANDBOXD)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--pool-size", "0", "--no-token", "--log-format", "json"])
        .args(["--docker-host", common::NO_DOCKER])
        .arg("--state-dir")
        .arg(&state)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let addr = format!("http://{}", common::listening_in(&log).await);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut c = loop {
        if let Ok(mut c) = SandboxClient::connect(addr.clone()).await
            && c.list_sessions(pb::ListSessionsRequest {}).await.is_ok()
        {
            break c;
        }
        assert!(Instant::now() < deadline, "the service did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let s = c
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    c.close_session(pb::CloseSessionRequest {
        session_id: s.session_id.clone(),
    })
    .await
    .unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(served.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    served.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let about = |msg: &str| {
        lines
            .iter()
            .find(|l| l["fields"]["message"] == msg)
            .unwrap_or_else(|| panic!("no {msg:?} line in\n{text}"))
    };
    for msg in ["session created", "session closed"] {
        assert_eq!(
            about(msg)["fields"]["session"],
            s.session_id.as_str(),
            "{msg}"
        );
    }
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string())
    );
}

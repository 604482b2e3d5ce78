//! Per-session access: CreateSession returns a token of the session's own;
//! a call carrying it acts on that session alone (every other session is
//! "not found", exactly like one that does not exist), lists that session
//! alone, and cannot create sessions or touch environments. The operator's
//! token acts on every session. A closed session's token admits nothing.

use crate::common::{self, TestServer, assert_refused, read_req, reason, run_req};
use sandboxd::pb;
use tonic::transport::Channel;

const ADMIN: &str = "the-operators-token";

type Raw = pb::sandbox_client::SandboxClient<Channel>;

/// A client that sends no token of its own: every call says which it carries.
async fn raw(srv: &TestServer) -> Raw {
    let channel = Channel::from_shared(format!("http://{}", srv.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    pb::sandbox_client::SandboxClient::new(channel)
        .max_decoding_message_size(sandboxd::server::MAX_MESSAGE_BYTES)
}

fn with<T>(token: &str, msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    req
}

async fn server() -> TestServer {
    let access = sandboxd::server::Access {
        token: Some(ADMIN.into()),
        ..Default::default()
    };
    TestServer::with_docker_access(access, |_| {}).await
}

async fn create(c: &mut Raw) -> pb::Session {
    c.create_session(with(ADMIN, pb::CreateSessionRequest::default()))
        .await
        .unwrap()
        .into_inner()
}

/// Runs `command` in `session` with `token`; the exit event, or the refusal.
async fn run_with(
    c: &mut Raw,
    token: &str,
    session: &str,
    command: &str,
) -> Result<pb::CommandExit, tonic::Status> {
    let mut stream = c
        .run_command(with(token, run_req(session, command, 60_000)))
        .await?
        .into_inner();
    while let Some(ev) = stream.message().await? {
        if let Some(pb::run_command_event::Event::Exit(exit)) = ev.event {
            return Ok(exit);
        }
    }
    panic!("RunCommand ended without an exit event");
}

/// Every call naming session `id`, made with `token`: each must be refused
/// with `want` (or succeed, with `want` empty).
async fn every_session_call(c: &mut Raw, token: &str, id: &str) -> Vec<(&'static str, String)> {
    let s = || id.to_string();
    let mut out = Vec::new();
    let got = |r: Result<(), tonic::Status>| r.err().map(|e| reason(&e)).unwrap_or_default();
    let get = c
        .get_session(with(token, pb::GetSessionRequest { session_id: s() }))
        .await
        .map(drop);
    out.push(("GetSession", got(get)));
    let read = c.read_file(with(token, read_req(id, "a.txt"))).await;
    out.push(("ReadFile", got(read.map(drop))));
    let create = c
        .create_file(with(
            token,
            pb::CreateFileRequest {
                session_id: s(),
                path: format!("new-{}.txt", token.len()),
                content: "x".into(),
            },
        ))
        .await;
    out.push(("CreateFile", got(create.map(drop))));
    let edit = c
        .edit_file(with(
            token,
            common::edit_req(id, "a.txt", vec![common::edit("one", "one")]),
        ))
        .await;
    // An edit that changes nothing is refused as NO_CHANGE once admitted.
    out.push((
        "EditFile",
        got(edit.map(drop)).replace("NO_CHANGE", "").to_string(),
    ));
    let list = c
        .list_dir(with(
            token,
            pb::ListDirRequest {
                session_id: s(),
                path: String::new(),
            },
        ))
        .await;
    out.push(("ListDir", got(list.map(drop))));
    let find = c
        .find_files(with(
            token,
            pb::FindFilesRequest {
                session_id: s(),
                pattern: "*.txt".into(),
                ..Default::default()
            },
        ))
        .await;
    out.push(("FindFiles", got(find.map(drop))));
    let search = c
        .search_files(with(
            token,
            pb::SearchFilesRequest {
                session_id: s(),
                pattern: "one".into(),
                ..Default::default()
            },
        ))
        .await;
    out.push(("SearchFiles", got(search.map(drop))));
    let report = c
        .get_session_report(with(
            token,
            pb::GetSessionReportRequest {
                session_id: s(),
                ..Default::default()
            },
        ))
        .await;
    out.push(("GetSessionReport", got(report.map(drop))));
    let changes = c
        .get_changes(with(
            token,
            pb::GetChangesRequest {
                session_id: s(),
                ..Default::default()
            },
        ))
        .await;
    out.push(("GetChanges", got(changes.map(drop))));
    let checkpoints = c
        .list_checkpoints(with(token, pb::ListCheckpointsRequest { session_id: s() }))
        .await;
    out.push(("ListCheckpoints", got(checkpoints.map(drop))));
    let patch = c
        .apply_patch(with(
            token,
            pb::ApplyPatchRequest {
                session_id: s(),
                patch: "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+uno\n".into(),
            },
        ))
        .await;
    // Applied once by the first admitted caller; a second sees the change.
    out.push((
        "ApplyPatch",
        got(patch.map(drop))
            .replace("PATCH_CONTEXT_MISMATCH", "")
            .to_string(),
    ));
    let download = async {
        let mut stream = c
            .download_archive(with(
                token,
                pb::DownloadArchiveRequest {
                    session_id: s(),
                    ..Default::default()
                },
            ))
            .await?
            .into_inner();
        while stream.message().await?.is_some() {}
        Ok(())
    }
    .await;
    out.push(("DownloadArchive", got(download)));
    let header = pb::UploadArchiveRequest {
        part: Some(pb::upload_archive_request::Part::Header(
            pb::UploadArchiveHeader {
                session_id: s(),
                destination: String::new(),
            },
        )),
    };
    let upload = c
        .upload_archive(with(token, tokio_stream::iter(vec![header])))
        .await;
    // An empty archive is refused as malformed once admitted.
    out.push((
        "UploadArchive",
        got(upload.map(drop))
            .replace("ARCHIVE_MALFORMED", "")
            .to_string(),
    ));
    let made = c
        .create_checkpoint(with(
            token,
            pb::CreateCheckpointRequest {
                session_id: s(),
                label: String::new(),
            },
        ))
        .await;
    out.push(("CreateCheckpoint", got(made.map(drop))));
    let restore = c
        .restore_checkpoint(with(
            token,
            pb::RestoreCheckpointRequest {
                session_id: s(),
                checkpoint_id: "no-such-checkpoint".into(),
                ..Default::default()
            },
        ))
        .await;
    // A made-up checkpoint is not found once admitted.
    let admitted = |r: String| r.replace("CHECKPOINT_NOT_FOUND", "");
    out.push(("RestoreCheckpoint", admitted(got(restore.map(drop)))));
    let delete = c
        .delete_checkpoint(with(
            token,
            pb::DeleteCheckpointRequest {
                session_id: s(),
                checkpoint_id: "no-such-checkpoint".into(),
            },
        ))
        .await;
    out.push(("DeleteCheckpoint", admitted(got(delete.map(drop)))));
    let ran = run_with(c, token, id, "true").await;
    out.push(("RunCommand", got(ran.map(drop))));
    let reset = c
        .reset_sandbox(with(token, pb::ResetSandboxRequest { session_id: s() }))
        .await;
    out.push(("ResetSandbox", got(reset.map(drop))));
    let start = c
        .start_process(with(
            token,
            pb::StartProcessRequest {
                session_id: s(),
                command: "true".into(),
                ..Default::default()
            },
        ))
        .await;
    out.push(("StartProcess", got(start.map(drop))));
    let list = c
        .list_processes(with(token, pb::ListProcessesRequest { session_id: s() }))
        .await;
    out.push(("ListProcesses", got(list.map(drop))));
    // A made-up process is not found once admitted.
    let known = |r: String| r.replace("PROCESS_NOT_FOUND", "");
    let output = c
        .read_process_output(with(
            token,
            pb::ReadProcessOutputRequest {
                session_id: s(),
                process_id: "p999999".into(),
                ..Default::default()
            },
        ))
        .await;
    out.push(("ReadProcessOutput", known(got(output.map(drop)))));
    let input = c
        .write_process_input(with(
            token,
            pb::WriteProcessInputRequest {
                session_id: s(),
                process_id: "p999999".into(),
                data: b"x".to_vec(),
                close: false,
            },
        ))
        .await;
    out.push(("WriteProcessInput", known(got(input.map(drop)))));
    let resize = c
        .resize_process(with(
            token,
            pb::ResizeProcessRequest {
                session_id: s(),
                process_id: "p999999".into(),
                rows: 10,
                cols: 10,
            },
        ))
        .await;
    out.push(("ResizeProcess", known(got(resize.map(drop)))));
    let signal = c
        .signal_process(with(
            token,
            pb::SignalProcessRequest {
                session_id: s(),
                process_id: "p999999".into(),
                signal: pb::ProcessSignal::Term.into(),
            },
        ))
        .await;
    out.push(("SignalProcess", known(got(signal.map(drop)))));
    let stop = c
        .stop_process(with(
            token,
            pb::StopProcessRequest {
                session_id: s(),
                process_id: "p999999".into(),
            },
        ))
        .await;
    out.push(("StopProcess", known(got(stop.map(drop)))));
    out
}

/// The calls [`every_session_call`] makes, in its order.
const ON_A_SESSION: [&str; 25] = [
    "GetSession",
    "ReadFile",
    "CreateFile",
    "EditFile",
    "ListDir",
    "FindFiles",
    "SearchFiles",
    "GetSessionReport",
    "GetChanges",
    "ListCheckpoints",
    "ApplyPatch",
    "DownloadArchive",
    "UploadArchive",
    "CreateCheckpoint",
    "RestoreCheckpoint",
    "DeleteCheckpoint",
    "RunCommand",
    "ResetSandbox",
    "StartProcess",
    "ListProcesses",
    "ReadProcessOutput",
    "WriteProcessInput",
    "ResizeProcess",
    "SignalProcess",
    "StopProcess",
];

fn all_are(calls: &[(&'static str, String)], want: &str) {
    let names: Vec<&str> = calls.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ON_A_SESSION);
    let wrong: Vec<_> = calls.iter().filter(|(_, got)| got != want).collect();
    assert!(
        wrong.is_empty(),
        "calls that did not answer {want:?}: {wrong:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_token_acts_on_that_session_alone() {
    let srv = server().await;
    let mut c = raw(&srv).await;
    let a = create(&mut c).await;
    let b = create(&mut c).await;
    for s in [&a, &b] {
        assert!(
            s.session_token.starts_with("sbxs_") && s.session_token.len() > 60,
            "{}",
            s.session_token
        );
        std::fs::write(
            std::path::Path::new(&s.workspace_path).join("a.txt"),
            "one\n",
        )
        .unwrap();
    }
    assert_ne!(a.session_token, b.session_token);
    let b_before = common::snapshot(std::path::Path::new(&b.workspace_path));

    // A's token on B: every call is "not found", and B is unchanged.
    let on_b = every_session_call(&mut c, &a.session_token, &b.session_id).await;
    all_are(&on_b, "SESSION_NOT_FOUND");
    let close = c
        .close_session(with(
            &a.session_token,
            pb::CloseSessionRequest {
                session_id: b.session_id.clone(),
            },
        ))
        .await;
    assert_eq!(reason(&close.unwrap_err()), "SESSION_NOT_FOUND");
    assert_eq!(
        common::snapshot(std::path::Path::new(&b.workspace_path)),
        b_before
    );
    // Refused for another's session exactly as for none: the answer does
    // not tell whether B exists.
    let forbidden = c
        .read_file(with(&a.session_token, read_req(&b.session_id, "a.txt")))
        .await
        .unwrap_err();
    let missing = c
        .read_file(with(&a.session_token, read_req("no-such-session", "a.txt")))
        .await
        .unwrap_err();
    assert_eq!(forbidden.code(), missing.code());
    assert_eq!(
        forbidden.message().replace(&b.session_id, "ID"),
        missing.message().replace("no-such-session", "ID")
    );

    // A's token on A: every call is admitted.
    let on_a = every_session_call(&mut c, &a.session_token, &a.session_id).await;
    all_are(&on_a, "");
    let ran = run_with(&mut c, &a.session_token, &a.session_id, "cat a.txt")
        .await
        .unwrap();
    assert_eq!(ran.exit_code, 0);

    // Listing with A's token shows A alone; the operator sees both.
    let listed = c
        .list_sessions(with(&a.session_token, pb::ListSessionsRequest {}))
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<&str> = listed
        .sessions
        .iter()
        .map(|s| s.session_id.as_str())
        .collect();
    assert_eq!(ids, [a.session_id.as_str()]);
    let all = c
        .list_sessions(with(ADMIN, pb::ListSessionsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.sessions.len(), 2);
    // No reply but CreateSession's carries a token.
    assert!(all.sessions.iter().all(|s| s.session_token.is_empty()));

    // A session token makes no sessions and touches no environments.
    let made = c
        .create_session(with(&a.session_token, pb::CreateSessionRequest::default()))
        .await;
    assert_eq!(reason(&made.unwrap_err()), "NOT_PERMITTED");
    let envs = c
        .list_environments(with(&a.session_token, pb::ListEnvironmentsRequest {}))
        .await;
    assert_eq!(reason(&envs.unwrap_err()), "NOT_PERMITTED");
    let gone = c
        .delete_environment(with(
            &a.session_token,
            pb::DeleteEnvironmentRequest { name: "x".into() },
        ))
        .await;
    assert_eq!(reason(&gone.unwrap_err()), "NOT_PERMITTED");
    let built = c
        .build_environment(with(
            &a.session_token,
            pb::BuildEnvironmentRequest {
                name: "x".into(),
                setup_script: "true".into(),
                ..Default::default()
            },
        ))
        .await;
    assert_eq!(reason(&built.unwrap_err()), "NOT_PERMITTED");
    // Each refusal is journaled in the session, as its other refusals are.
    let report = c
        .get_session_report(with(
            ADMIN,
            pb::GetSessionReportRequest {
                session_id: a.session_id.clone(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    for tool in ["ListEnvironments", "DeleteEnvironment", "BuildEnvironment"] {
        assert!(
            report
                .journal
                .iter()
                .any(|e| e.tool == tool && e.outcome == "NOT_PERMITTED"),
            "{tool} refused and journaled: {:?}",
            report.journal
        );
    }
    assert_eq!(
        srv.registry
            .list(&sandboxd::session::Caller::Admin)
            .await
            .len(),
        2
    );

    // The operator's token reads, runs in and closes B.
    let on_b = every_session_call(&mut c, ADMIN, &b.session_id).await;
    all_are(&on_b, "");
    let closed = c
        .close_session(with(
            ADMIN,
            pb::CloseSessionRequest {
                session_id: b.session_id.clone(),
            },
        ))
        .await;
    assert!(closed.is_ok());

    // A closed session's token admits nothing at all; A's own close works.
    let dead = c
        .list_sessions(with(&b.session_token, pb::ListSessionsRequest {}))
        .await;
    assert_eq!(reason(&dead.unwrap_err()), "UNAUTHENTICATED");
    c.close_session(with(
        &a.session_token,
        pb::CloseSessionRequest {
            session_id: a.session_id.clone(),
        },
    ))
    .await
    .unwrap();
    let dead = c
        .read_file(with(&a.session_token, read_req(&a.session_id, "a.txt")))
        .await;
    assert_eq!(reason(&dead.unwrap_err()), "UNAUTHENTICATED");
    srv.stop().await;
}

#[tokio::test]
async fn made_up_and_altered_session_tokens_are_unauthenticated() {
    let srv = TestServer::with_token(ADMIN).await;
    let mut c = raw(&srv).await;
    let s = create(&mut c).await;
    let t = &s.session_token;
    let mut flipped = t.clone().into_bytes();
    let last = flipped.len() - 1;
    flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
    let flipped = String::from_utf8(flipped).unwrap();
    for wrong in [
        format!("sbxs_{}", sandboxd::secret::random_hex()),
        flipped,
        t[..t.len() - 1].to_string(),
        format!("{t}0"),
        t.to_uppercase(),
        String::new(),
    ] {
        let err = c
            .read_file(with(&wrong, read_req(&s.session_id, "a.txt")))
            .await
            .unwrap_err();
        assert_eq!(reason(&err), "UNAUTHENTICATED", "{wrong}");
    }
    // Not as a bare header value either: it must be a bearer token.
    let mut req = tonic::Request::new(read_req(&s.session_id, "a.txt"));
    req.metadata_mut()
        .insert("authorization", t.parse().unwrap());
    assert_refused(c.read_file(req), "UNAUTHENTICATED").await;
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_keeps_the_session_token_beside_the_session_id() {
    let srv = server().await;
    let addr = format!("http://{}", srv.addr);
    let cli = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(common::SANDBOXD);
        cmd.args(["--addr", &addr]).args(args);
        for var in [
            "SANDBOXD_TOKEN",
            "SANDBOXD_SESSION",
            "SANDBOXD_SESSION_TOKEN",
        ] {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied());
        let out = tokio::task::block_in_place(|| cmd.output().unwrap());
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let exports = |stdout: &str| -> (String, String) {
        let var = |name: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .unwrap_or_else(|| panic!("no {name} in {stdout:?}"))
                .to_string()
        };
        (var("SANDBOXD_SESSION"), var("SANDBOXD_SESSION_TOKEN"))
    };
    let (code, out, err) = cli(
        &["session", "create", "--export"],
        &[("SANDBOXD_TOKEN", ADMIN)],
    );
    assert_eq!(code, Some(0), "{err}");
    let (a, a_token) = exports(&out);
    let (_, out, _) = cli(
        &["session", "create", "--export"],
        &[("SANDBOXD_TOKEN", ADMIN)],
    );
    let (b, _) = exports(&out);
    // With only the session's token: its own session runs and lists alone.
    let own = [
        ("SANDBOXD_SESSION", a.as_str()),
        ("SANDBOXD_SESSION_TOKEN", a_token.as_str()),
    ];
    let (code, out, err) = cli(&["run", "echo", "hello"], &own);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("hello"), "{out}");
    let (code, out, _) = cli(
        &["session", "list"],
        &[("SANDBOXD_TOKEN", a_token.as_str())],
    );
    assert_eq!(code, Some(0));
    assert!(out.contains(&a) && !out.contains(&b), "{out}");
    // Another session with it: not found.
    let theirs = [
        ("SANDBOXD_SESSION", b.as_str()),
        ("SANDBOXD_SESSION_TOKEN", a_token.as_str()),
    ];
    let (code, _, err) = cli(&["run", "true"], &theirs);
    assert_ne!(code, Some(0));
    assert!(err.contains("SESSION_NOT_FOUND"), "{err}");
    // A session token beside the service's: session calls carry the
    // session's, creating one still carries the service's.
    let both = [
        ("SANDBOXD_TOKEN", ADMIN),
        ("SANDBOXD_SESSION", b.as_str()),
        ("SANDBOXD_SESSION_TOKEN", a_token.as_str()),
    ];
    let (code, _, err) = cli(&["session", "close"], &both);
    assert_ne!(code, Some(0));
    assert!(err.contains("SESSION_NOT_FOUND"), "{err}");
    let (code, _, err) = cli(&["session", "create", "-q"], &both);
    assert_eq!(code, Some(0), "{err}");
    // The plain listing prints the token beside the id.
    let (code, out, _) = cli(&["session", "create"], &[("SANDBOXD_TOKEN", ADMIN)]);
    assert_eq!(code, Some(0));
    assert!(
        out.lines().any(|l| l.starts_with("token     sbxs_")),
        "{out}"
    );
    srv.stop().await;
}

/// Every RPC of the service is either checked above as a call on one
/// session, or is one of the calls a session token may not make (or
/// ListSessions / CloseSession, checked on their own), or is a call of
/// plans and approvals, placed in `approvals::tokens`: a new RPC must be
/// placed in one of them.
#[test]
fn every_rpc_is_placed_by_who_may_call_it() {
    let proto = include_str!("../../proto/sandboxd/v1/sandbox.proto");
    let rpcs: std::collections::BTreeSet<&str> = proto
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rpc "))
        .map(|l| l.split('(').next().unwrap().trim())
        .collect();
    let others = [
        "CreateSession",
        "ListSessions",
        "CloseSession",
        "ListEnvironments",
        "BuildEnvironment",
        "DeleteEnvironment",
        "SubmitPlan",
        "ListPendingApprovals",
        "Decide",
    ];
    let placed: std::collections::BTreeSet<&str> =
        ON_A_SESSION.iter().copied().chain(others).collect();
    assert_eq!(rpcs, placed);
}

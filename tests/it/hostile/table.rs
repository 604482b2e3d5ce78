//! The table: one row per hostile input, each naming the status code and
//! ErrorInfo reason it must get; afterwards the workspace and the directory
//! beside it are byte-for-byte unchanged, and the session still works.

use std::os::unix::fs::symlink;

use super::calls::{
    Row, close, create, find, limits, list, raw, raw_call, report, row, rpc, run_call, search,
};
use crate::common::{Mode, TestServer, edit, edit_req, read_req, run, run_req, snapshot};
use sandboxd::pb;
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

#[tokio::test]
async fn hostile_inputs_get_their_status_and_reason_and_change_nothing() {
    let server = TestServer::with_docker_mode_and(Mode::Supervisor, |c| {
        c.sandbox.allowed_images = vec!["no-such-image:1".into()];
    })
    .await;
    let c = server.client.clone();
    let channel = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    // A client willing to send more than the server accepts.
    let big = sandboxd::local::client(channel.clone(), Default::default())
        .max_encoding_message_size(64 << 20);

    let (id, ws) = server.session().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "TOP SECRET\n").unwrap();
    std::fs::write(ws.join("a.txt"), "one\ntwo\none\n").unwrap();
    std::fs::write(ws.join("bin.dat"), [0u8, 159, 146, 150, 0, 1]).unwrap();
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::fs::write(ws.join("sub/b.txt"), "bee\n").unwrap();
    symlink("/etc", ws.join("etc_link")).unwrap();
    symlink(outside.path(), ws.join("out_link")).unwrap();
    symlink(outside.path().join("secret.txt"), ws.join("secret_link")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(ws.join("pipe"))
        .status()
        .unwrap();
    assert!(fifo.success());
    let closed = server.session().await.0;
    c.clone().close_session(close(&closed)).await.unwrap();
    let ws_before = snapshot(&ws);
    let outside_before = snapshot(outside.path());
    let huge = "x".repeat(17 << 20);
    let stale = "0".repeat(64);

    use Code::{
        Aborted, AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, OutOfRange,
        PermissionDenied, ResourceExhausted, Unimplemented,
    };
    let s = || id.clone();
    let cl = || c.clone();
    let rows = vec![
        // Path tricks.
        row("read ../")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call(rpc!(cl(), read_file, read_req(&s(), "../outside.txt"))),
        row("read /etc/passwd")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call(rpc!(cl(), read_file, read_req(&s(), "/etc/passwd"))),
        row("read sub/../../x")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call(rpc!(cl(), read_file, read_req(&s(), "sub/../../x"))),
        row("read through a link to /etc")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call(rpc!(cl(), read_file, read_req(&s(), "etc_link/passwd"))),
        row("edit through a link to a file outside")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call(rpc!(
                cl(),
                edit_file,
                edit_req(&s(), "secret_link", vec![edit("TOP", "NO")])
            )),
        row("create ../escape")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call(rpc!(cl(), create_file, create(&s(), "../escape.txt", "x"))),
        row("create through a link to a directory outside")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call(rpc!(
                cl(),
                create_file,
                create(&s(), "out_link/planted.txt", "x")
            )),
        row("list ..")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call(rpc!(cl(), list_dir, list(&s(), ".."))),
        row("find under /")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call(rpc!(cl(), find_files, find(&s(), "*", "/"))),
        row("search under out_link")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call(rpc!(cl(), search_files, search(&s(), "SECRET", "out_link"))),
        row("create the root")
            .wants(InvalidArgument, "INVALID_PATH")
            .call(rpc!(cl(), create_file, create(&s(), "", "x"))),
        row("create .")
            .wants(InvalidArgument, "INVALID_PATH")
            .call(rpc!(cl(), create_file, create(&s(), ".", "x"))),
        row("create over an existing file")
            .wants(AlreadyExists, "FILE_EXISTS")
            .call(rpc!(cl(), create_file, create(&s(), "a.txt", "x"))),
        row("read a directory")
            .wants(FailedPrecondition, "NOT_A_FILE")
            .call(rpc!(cl(), read_file, read_req(&s(), "sub"))),
        row("read a fifo (must not hang)")
            .wants(FailedPrecondition, "NOT_A_FILE")
            .call(rpc!(cl(), read_file, read_req(&s(), "pipe"))),
        row("list a file")
            .wants(FailedPrecondition, "NOT_A_DIRECTORY")
            .call(rpc!(cl(), list_dir, list(&s(), "a.txt"))),
        row("path of 5000 characters")
            .wants(InvalidArgument, "INVALID_PATH")
            .call(rpc!(cl(), read_file, read_req(&s(), &"d/".repeat(2500)))),
        // NUL bytes.
        row("NUL in a read path")
            .wants(InvalidArgument, "INVALID_PATH")
            .call(rpc!(cl(), read_file, read_req(&s(), "a.txt\0.png"))),
        row("NUL in a create path")
            .wants(InvalidArgument, "INVALID_PATH")
            .call(rpc!(cl(), create_file, create(&s(), "new\0.txt", "x"))),
        row("NUL in a command")
            .wants(InvalidArgument, "INVALID_ARGUMENT")
            .call(run_call(cl(), run_req(&s(), "echo a\0b", 5000))),
        row("NUL in a command's env")
            .wants(InvalidArgument, "INVALID_ARGUMENT")
            .call({
                let mut r = run_req(&s(), "true", 5000);
                r.env.insert("A\0B".into(), "x".into());
                run_call(cl(), r)
            }),
        row("= in a session env name")
            .wants(InvalidArgument, "INVALID_ARGUMENT")
            .call({
                let mut r = pb::CreateSessionRequest::default();
                r.env.insert("A=B".into(), "x".into());
                rpc!(cl(), create_session, r)
            }),
        // Strings past the message limit, and past the file limit.
        row("17 MiB file content")
            .wants(ResourceExhausted, "MESSAGE_TOO_LARGE")
            .call(rpc!(
                big.clone(),
                create_file,
                create(&s(), "huge.txt", &huge)
            )),
        row("17 MiB old_string")
            .wants(ResourceExhausted, "MESSAGE_TOO_LARGE")
            .call(rpc!(
                big.clone(),
                edit_file,
                edit_req(&s(), "a.txt", vec![edit(&huge, "x")])
            )),
        row("17 MiB command")
            .wants(ResourceExhausted, "MESSAGE_TOO_LARGE")
            .call(run_call(big.clone(), run_req(&s(), &huge, 5000))),
        row("11 MiB file content")
            .wants(FailedPrecondition, "FILE_TOO_LARGE")
            .call(rpc!(
                big.clone(),
                create_file,
                create(&s(), "big.txt", &"y".repeat(11 << 20))
            )),
        // Invalid UTF-8 where the contract says string.
        row("invalid UTF-8 path")
            .wants(InvalidArgument, "MALFORMED_REQUEST")
            .call(raw_call(
                channel.clone(),
                "/sandboxd.v1.Sandbox/ReadFile",
                raw(&s(), b"a\xff\xfe.txt", b""),
            )),
        row("invalid UTF-8 content")
            .wants(InvalidArgument, "MALFORMED_REQUEST")
            .call(raw_call(
                channel.clone(),
                "/sandboxd.v1.Sandbox/CreateFile",
                raw(&s(), b"c.txt", b"\xc3\x28"),
            )),
        row("invalid UTF-8 command")
            .wants(InvalidArgument, "MALFORMED_REQUEST")
            .call(raw_call(
                channel.clone(),
                "/sandboxd.v1.Sandbox/RunCommand",
                raw(&s(), b"echo \xff", b""),
            )),
        row("an unknown method")
            .wants(Unimplemented, "UNIMPLEMENTED")
            .call(raw_call(
                channel.clone(),
                "/sandboxd.v1.Sandbox/DeleteEverything",
                raw(&s(), b"", b""),
            )),
        // The edit engine's refusals.
        row("edit a binary file")
            .wants(FailedPrecondition, "NOT_TEXT")
            .call(rpc!(
                cl(),
                edit_file,
                edit_req(&s(), "bin.dat", vec![edit("a", "b")])
            )),
        row("no edits")
            .wants(InvalidArgument, "NO_EDITS")
            .call(rpc!(cl(), edit_file, edit_req(&s(), "a.txt", vec![]))),
        row("the same old_string twice")
            .wants(InvalidArgument, "DUPLICATE_OLD_STRING")
            .call(rpc!(
                cl(),
                edit_file,
                edit_req(&s(), "a.txt", vec![edit("two", "2"), edit("two", "3")])
            )),
        row("a thousand edits in one call")
            .wants(ResourceExhausted, "LIMIT_EXCEEDED")
            .call({
                let edits = (0..1000).map(|i| edit(&format!("x{i}"), "y")).collect();
                rpc!(cl(), edit_file, edit_req(&s(), "a.txt", edits))
            }),
        row("empty old_string")
            .wants(InvalidArgument, "EMPTY_OLD_STRING")
            .call(rpc!(
                cl(),
                edit_file,
                edit_req(&s(), "a.txt", vec![edit("", "x")])
            )),
        row("old_string equals new_string")
            .wants(InvalidArgument, "NO_CHANGE")
            .call(rpc!(
                cl(),
                edit_file,
                edit_req(&s(), "a.txt", vec![edit("two", "two")])
            )),
        row("old_string absent")
            .wants(FailedPrecondition, "OLD_STRING_NOT_FOUND")
            .call(rpc!(
                cl(),
                edit_file,
                edit_req(&s(), "a.txt", vec![edit("three", "3")])
            )),
        row("old_string twice")
            .wants(FailedPrecondition, "OLD_STRING_AMBIGUOUS")
            .call(rpc!(
                cl(),
                edit_file,
                edit_req(&s(), "a.txt", vec![edit("one", "1")])
            )),
        row("overlapping edits")
            .wants(InvalidArgument, "EDITS_OVERLAP")
            .call(rpc!(
                cl(),
                edit_file,
                edit_req(
                    &s(),
                    "a.txt",
                    vec![edit("one\ntwo", "x"), edit("two\none", "y")],
                )
            )),
        row("stale expected_sha256")
            .wants(Aborted, "STALE_FILE")
            .call({
                let mut r = edit_req(&s(), "a.txt", vec![edit("two", "2")]);
                r.expected_sha256 = stale.clone();
                rpc!(cl(), edit_file, r)
            }),
        row("read past the last line")
            .wants(OutOfRange, "LINE_OUT_OF_RANGE")
            .call({
                let mut r = read_req(&s(), "a.txt");
                r.offset = u64::MAX;
                rpc!(cl(), read_file, r)
            }),
        row("a glob that does not parse")
            .wants(InvalidArgument, "INVALID_PATTERN")
            .call(rpc!(cl(), find_files, find(&s(), "src/[", ""))),
        row("a regex that does not parse")
            .wants(InvalidArgument, "INVALID_PATTERN")
            .call(rpc!(cl(), search_files, search(&s(), "(unclosed", ""))),
        // Empty and absurd commands, caps and timeouts.
        row("empty command")
            .wants(InvalidArgument, "INVALID_ARGUMENT")
            .call(run_call(cl(), run_req(&s(), "", 5000))),
        row("blank command")
            .wants(InvalidArgument, "INVALID_ARGUMENT")
            .call(run_call(cl(), run_req(&s(), " \t\n", 5000))),
        row("timeout of u64::MAX ms")
            .wants(ResourceExhausted, "LIMIT_EXCEEDED")
            .call(run_call(cl(), run_req(&s(), "true", u64::MAX))),
        row("timeout past the ceiling")
            .wants(ResourceExhausted, "LIMIT_EXCEEDED")
            .call(run_call(cl(), run_req(&s(), "true", 3_600_001))),
        row("stdout cap of u64::MAX")
            .wants(ResourceExhausted, "LIMIT_EXCEEDED")
            .call({
                let mut r = run_req(&s(), "true", 5000);
                r.stdout_cap = u64::MAX;
                run_call(cl(), r)
            }),
        row("stderr cap past the ceiling")
            .wants(ResourceExhausted, "LIMIT_EXCEEDED")
            .call({
                let mut r = run_req(&s(), "true", 5000);
                r.stderr_cap = 10_000_000;
                run_call(cl(), r)
            }),
        row("memory of u64::MAX")
            .wants(ResourceExhausted, "LIMIT_EXCEEDED")
            .call(rpc!(cl(), create_session, limits(u64::MAX, 0, 0))),
        row("a thousand CPUs")
            .wants(ResourceExhausted, "LIMIT_EXCEEDED")
            .call(rpc!(cl(), create_session, limits(0, 1_000_000_000_000, 0))),
        row("pids of u64::MAX")
            .wants(ResourceExhausted, "LIMIT_EXCEEDED")
            .call(rpc!(cl(), create_session, limits(0, 0, u64::MAX))),
        row("cwd above the workspace")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call({
                let mut r = run_req(&s(), "pwd", 5000);
                r.cwd = "../..".into();
                run_call(cl(), r)
            }),
        row("cwd through a link out")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call({
                let mut r = run_req(&s(), "pwd", 5000);
                r.cwd = "out_link".into();
                run_call(cl(), r)
            }),
        row("cwd is a file")
            .wants(FailedPrecondition, "NOT_A_DIRECTORY")
            .call({
                let mut r = run_req(&s(), "pwd", 5000);
                r.cwd = "a.txt".into();
                run_call(cl(), r)
            }),
        row("rm -rf / slip")
            .wants(PermissionDenied, "COMMAND_REFUSED")
            .call(run_call(cl(), run_req(&s(), "rm -rf /", 5000))),
        // Sessions that do not exist (any more), and bad session requests.
        row("unknown session")
            .wants(NotFound, "SESSION_NOT_FOUND")
            .call(rpc!(cl(), read_file, read_req("no-such-session", "a.txt"))),
        row("empty session id")
            .wants(NotFound, "SESSION_NOT_FOUND")
            .call(rpc!(cl(), read_file, read_req("", "a.txt"))),
        row("command in an unknown session")
            .wants(NotFound, "SESSION_NOT_FOUND")
            .call(run_call(cl(), run_req("nope", "true", 5000))),
        row("report of an unknown session")
            .wants(NotFound, "SESSION_NOT_FOUND")
            .call(rpc!(cl(), get_session_report, report("nope", &[]))),
        row("close an unknown session")
            .wants(NotFound, "SESSION_NOT_FOUND")
            .call(rpc!(cl(), close_session, close("nope"))),
        row("read in a closed session")
            .wants(NotFound, "SESSION_NOT_FOUND")
            .call(rpc!(cl(), read_file, read_req(&closed, "a.txt"))),
        row("command in a closed session")
            .wants(NotFound, "SESSION_NOT_FOUND")
            .call(run_call(cl(), run_req(&closed, "true", 5000))),
        row("close a closed session")
            .wants(NotFound, "SESSION_NOT_FOUND")
            .call(rpc!(cl(), close_session, close(&closed))),
        row("workspace outside the allowed roots")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call(rpc!(
                cl(),
                create_session,
                pb::CreateSessionRequest {
                    workspace_path: outside.path().display().to_string(),
                    ..Default::default()
                }
            )),
        row("relative workspace path")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call(rpc!(
                cl(),
                create_session,
                pb::CreateSessionRequest {
                    workspace_path: "../..".into(),
                    ..Default::default()
                }
            )),
        row("an allowed image that is not there")
            .wants(FailedPrecondition, "IMAGE_NOT_FOUND")
            .call(rpc!(
                cl(),
                create_session,
                pb::CreateSessionRequest {
                    image: "no-such-image:1".into(),
                    ..Default::default()
                }
            )),
        row("an image the operator did not allow")
            .wants(PermissionDenied, "IMAGE_NOT_ALLOWED")
            .call(rpc!(
                cl(),
                create_session,
                pb::CreateSessionRequest {
                    image: "busybox:latest".into(),
                    ..Default::default()
                }
            )),
        row("a deny glob climbing out")
            .wants(InvalidArgument, "INVALID_POLICY")
            .call(rpc!(
                cl(),
                create_session,
                pb::CreateSessionRequest {
                    policy: Some(pb::Policy {
                        deny_writes: vec!["../**".into()],
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            )),
        row("a planned file outside")
            .wants(PermissionDenied, "PATH_OUTSIDE_WORKSPACE")
            .call(rpc!(cl(), get_session_report, report(&s(), &["../x"]))),
    ];
    assert!(rows.len() >= 40, "only {} rows", rows.len());
    let mut failures = Vec::new();
    for Row {
        name,
        code,
        reason: want,
        call,
    } in rows
    {
        eprintln!("row: {name}");
        match call.await {
            Ok(()) => failures.push(format!("{name}: succeeded")),
            Err(status) => {
                let got = status
                    .get_details_error_info()
                    .map(|i| i.reason)
                    .unwrap_or_default();
                if status.code() != code || got != want {
                    failures.push(format!(
                        "{name}: got {:?} {got:?} ({}), want {code:?} {want:?}",
                        status.code(),
                        status.message()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        snapshot(&ws),
        ws_before,
        "a refused call changed the workspace"
    );
    assert_eq!(snapshot(outside.path()), outside_before);
    // The session is still fine.
    let ran = run(&server.client, &id, "cat a.txt", 20_000).await;
    assert_eq!(ran.stdout(), "one\ntwo\none\n");
    server.stop().await;
}

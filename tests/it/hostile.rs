//! A table of hostile inputs over gRPC against a real Docker-backed session:
//! path tricks, NUL bytes, strings past the message limit, invalid UTF-8,
//! empty and absurd caps and timeouts, unknown and closed sessions. Each row
//! names the status code and ErrorInfo reason it must get; afterwards the
//! workspace and the directory beside it are byte-for-byte unchanged. A
//! close racing a running command, and the session ceiling, follow.

use std::future::Future;
use std::os::unix::fs::symlink;
use std::pin::Pin;

use crate::common;
use crate::common::{TestServer, edit, edit_req, read_req, reason, run_req, snapshot};
use sandboxd::pb::{self, sandbox_client::SandboxClient};
use tonic::Code;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

type Call = Pin<Box<dyn Future<Output = Result<(), tonic::Status>> + Send>>;

struct Row {
    name: &'static str,
    code: Code,
    reason: &'static str,
    call: Call,
}

fn row(
    name: &'static str,
    code: Code,
    reason: &'static str,
    call: impl Future<Output = Result<(), tonic::Status>> + Send + 'static,
) -> Row {
    Row {
        name,
        code,
        reason,
        call: Box::pin(call),
    }
}

/// The same field numbers as the real requests, with bytes where the
/// contract says string: lets a test send invalid UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct RawPathRequest {
    #[prost(bytes = "vec", tag = "1")]
    session_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    path: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    content: Vec<u8>,
}

async fn raw_call(
    channel: Channel,
    method: &'static str,
    msg: RawPathRequest,
) -> Result<(), tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unknown(e.to_string()))?;
    let codec = tonic_prost::ProstCodec::<RawPathRequest, pb::ReadFileResponse>::default();
    grpc.unary(
        tonic::Request::new(msg),
        PathAndQuery::from_static(method),
        codec,
    )
    .await
    .map(drop)
}

fn raw(session: &str, path: &[u8], content: &[u8]) -> RawPathRequest {
    RawPathRequest {
        session_id: session.as_bytes().to_vec(),
        path: path.to_vec(),
        content: content.to_vec(),
    }
}

fn create(session: &str, path: &str, content: &str) -> pb::CreateFileRequest {
    pb::CreateFileRequest {
        session_id: session.into(),
        path: path.into(),
        content: content.into(),
    }
}

fn limits(memory_bytes: u64, nano_cpus: u64, pids: u64) -> pb::CreateSessionRequest {
    pb::CreateSessionRequest {
        limits: Some(pb::Limits {
            memory_bytes,
            nano_cpus,
            pids,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Drains a RunCommand call to its end.
async fn run_call(mut c: common::Client, req: pb::RunCommandRequest) -> Result<(), tonic::Status> {
    let mut events = c.run_command(req).await?.into_inner();
    while events.message().await?.is_some() {}
    Ok(())
}

#[tokio::test]
async fn hostile_inputs_get_their_status_and_reason_and_change_nothing() {
    let server = TestServer::with_docker_mode_and(common::Mode::Supervisor, |c| {
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
    let big = SandboxClient::new(channel.clone()).max_encoding_message_size(64 << 20);

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
    c.clone()
        .close_session(pb::CloseSessionRequest {
            session_id: closed.clone(),
        })
        .await
        .unwrap();
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
        row("read ../", PermissionDenied, "PATH_OUTSIDE_WORKSPACE", {
            let mut c = cl();
            let r = read_req(&s(), "../outside.txt");
            async move { c.read_file(r).await.map(drop) }
        }),
        row(
            "read /etc/passwd",
            PermissionDenied,
            "PATH_OUTSIDE_WORKSPACE",
            {
                let mut c = cl();
                let r = read_req(&s(), "/etc/passwd");
                async move { c.read_file(r).await.map(drop) }
            },
        ),
        row(
            "read sub/../../x",
            PermissionDenied,
            "PATH_OUTSIDE_WORKSPACE",
            {
                let mut c = cl();
                let r = read_req(&s(), "sub/../../x");
                async move { c.read_file(r).await.map(drop) }
            },
        ),
        row(
            "read through a link to /etc",
            PermissionDenied,
            "PATH_OUTSIDE_WORKSPACE",
            {
                let mut c = cl();
                let r = read_req(&s(), "etc_link/passwd");
                async move { c.read_file(r).await.map(drop) }
            },
        ),
        row(
            "edit through a link to a file outside",
            PermissionDenied,
            "PATH_OUTSIDE_WORKSPACE",
            {
                let mut c = cl();
                let r = edit_req(&s(), "secret_link", vec![edit("TOP", "NO")]);
                async move { c.edit_file(r).await.map(drop) }
            },
        ),
        row(
            "create ../escape",
            PermissionDenied,
            "PATH_OUTSIDE_WORKSPACE",
            {
                let mut c = cl();
                let r = create(&s(), "../escape.txt", "x");
                async move { c.create_file(r).await.map(drop) }
            },
        ),
        row(
            "create through a link to a directory outside",
            PermissionDenied,
            "PATH_OUTSIDE_WORKSPACE",
            {
                let mut c = cl();
                let r = create(&s(), "out_link/planted.txt", "x");
                async move { c.create_file(r).await.map(drop) }
            },
        ),
        row("list ..", PermissionDenied, "PATH_OUTSIDE_WORKSPACE", {
            let mut c = cl();
            let r = pb::ListDirRequest {
                session_id: s(),
                path: "..".into(),
            };
            async move { c.list_dir(r).await.map(drop) }
        }),
        row(
            "find under /",
            PermissionDenied,
            "PATH_OUTSIDE_WORKSPACE",
            {
                let mut c = cl();
                let r = pb::FindFilesRequest {
                    session_id: s(),
                    pattern: "*".into(),
                    path: "/".into(),
                    limit: 0,
                };
                async move { c.find_files(r).await.map(drop) }
            },
        ),
        row(
            "search under out_link",
            PermissionDenied,
            "PATH_OUTSIDE_WORKSPACE",
            {
                let mut c = cl();
                let r = pb::SearchFilesRequest {
                    session_id: s(),
                    pattern: "SECRET".into(),
                    path: "out_link".into(),
                    ..Default::default()
                };
                async move { c.search_files(r).await.map(drop) }
            },
        ),
        row("create the root", InvalidArgument, "INVALID_PATH", {
            let mut c = cl();
            let r = create(&s(), "", "x");
            async move { c.create_file(r).await.map(drop) }
        }),
        row("create .", InvalidArgument, "INVALID_PATH", {
            let mut c = cl();
            let r = create(&s(), ".", "x");
            async move { c.create_file(r).await.map(drop) }
        }),
        row(
            "create over an existing file",
            AlreadyExists,
            "FILE_EXISTS",
            {
                let mut c = cl();
                let r = create(&s(), "a.txt", "x");
                async move { c.create_file(r).await.map(drop) }
            },
        ),
        row("read a directory", FailedPrecondition, "NOT_A_FILE", {
            let mut c = cl();
            let r = read_req(&s(), "sub");
            async move { c.read_file(r).await.map(drop) }
        }),
        row(
            "read a fifo (must not hang)",
            FailedPrecondition,
            "NOT_A_FILE",
            {
                let mut c = cl();
                let r = read_req(&s(), "pipe");
                async move { c.read_file(r).await.map(drop) }
            },
        ),
        row("list a file", FailedPrecondition, "NOT_A_DIRECTORY", {
            let mut c = cl();
            let r = pb::ListDirRequest {
                session_id: s(),
                path: "a.txt".into(),
            };
            async move { c.list_dir(r).await.map(drop) }
        }),
        row(
            "path of 5000 characters",
            InvalidArgument,
            "INVALID_PATH",
            {
                let mut c = cl();
                let r = read_req(&s(), &"d/".repeat(2500));
                async move { c.read_file(r).await.map(drop) }
            },
        ),
        // NUL bytes.
        row("NUL in a read path", InvalidArgument, "INVALID_PATH", {
            let mut c = cl();
            let r = read_req(&s(), "a.txt\0.png");
            async move { c.read_file(r).await.map(drop) }
        }),
        row("NUL in a create path", InvalidArgument, "INVALID_PATH", {
            let mut c = cl();
            let r = create(&s(), "new\0.txt", "x");
            async move { c.create_file(r).await.map(drop) }
        }),
        row(
            "NUL in a command",
            InvalidArgument,
            "INVALID_ARGUMENT",
            run_call(cl(), run_req(&s(), "echo a\0b", 5000)),
        ),
        row(
            "NUL in a command's env",
            InvalidArgument,
            "INVALID_ARGUMENT",
            {
                let mut r = run_req(&s(), "true", 5000);
                r.env.insert("A\0B".into(), "x".into());
                run_call(cl(), r)
            },
        ),
        row(
            "= in a session env name",
            InvalidArgument,
            "INVALID_ARGUMENT",
            {
                let mut c = cl();
                let mut r = pb::CreateSessionRequest::default();
                r.env.insert("A=B".into(), "x".into());
                async move { c.create_session(r).await.map(drop) }
            },
        ),
        // Strings past the message limit, and past the file limit.
        row(
            "17 MiB file content",
            ResourceExhausted,
            "MESSAGE_TOO_LARGE",
            {
                let mut c = big.clone();
                let r = create(&s(), "huge.txt", &huge);
                async move { c.create_file(r).await.map(drop) }
            },
        ),
        row(
            "17 MiB old_string",
            ResourceExhausted,
            "MESSAGE_TOO_LARGE",
            {
                let mut c = big.clone();
                let r = edit_req(&s(), "a.txt", vec![edit(&huge, "x")]);
                async move { c.edit_file(r).await.map(drop) }
            },
        ),
        row(
            "17 MiB command",
            ResourceExhausted,
            "MESSAGE_TOO_LARGE",
            run_call(big.clone(), run_req(&s(), &huge, 5000)),
        ),
        row(
            "11 MiB file content",
            FailedPrecondition,
            "FILE_TOO_LARGE",
            {
                let mut c = big.clone();
                let r = create(&s(), "big.txt", &"y".repeat(11 << 20));
                async move { c.create_file(r).await.map(drop) }
            },
        ),
        // Invalid UTF-8 where the contract says string.
        row(
            "invalid UTF-8 path",
            InvalidArgument,
            "MALFORMED_REQUEST",
            raw_call(
                channel.clone(),
                "/sandboxd.v1.Sandbox/ReadFile",
                raw(&s(), b"a\xff\xfe.txt", b""),
            ),
        ),
        row(
            "invalid UTF-8 content",
            InvalidArgument,
            "MALFORMED_REQUEST",
            raw_call(
                channel.clone(),
                "/sandboxd.v1.Sandbox/CreateFile",
                raw(&s(), b"c.txt", b"\xc3\x28"),
            ),
        ),
        row(
            "invalid UTF-8 command",
            InvalidArgument,
            "MALFORMED_REQUEST",
            raw_call(
                channel.clone(),
                "/sandboxd.v1.Sandbox/RunCommand",
                raw(&s(), b"echo \xff", b""),
            ),
        ),
        row(
            "an unknown method",
            Unimplemented,
            "UNIMPLEMENTED",
            raw_call(
                channel.clone(),
                "/sandboxd.v1.Sandbox/DeleteEverything",
                raw(&s(), b"", b""),
            ),
        ),
        // The edit engine's refusals.
        row("edit a binary file", FailedPrecondition, "NOT_TEXT", {
            let mut c = cl();
            let r = edit_req(&s(), "bin.dat", vec![edit("a", "b")]);
            async move { c.edit_file(r).await.map(drop) }
        }),
        row("no edits", InvalidArgument, "NO_EDITS", {
            let mut c = cl();
            let r = edit_req(&s(), "a.txt", vec![]);
            async move { c.edit_file(r).await.map(drop) }
        }),
        row(
            "the same old_string twice",
            InvalidArgument,
            "DUPLICATE_OLD_STRING",
            {
                let mut c = cl();
                let r = edit_req(&s(), "a.txt", vec![edit("two", "2"), edit("two", "3")]);
                async move { c.edit_file(r).await.map(drop) }
            },
        ),
        row(
            "a thousand edits in one call",
            ResourceExhausted,
            "LIMIT_EXCEEDED",
            {
                let mut c = cl();
                let edits = (0..1000).map(|i| edit(&format!("x{i}"), "y")).collect();
                let r = edit_req(&s(), "a.txt", edits);
                async move { c.edit_file(r).await.map(drop) }
            },
        ),
        row("empty old_string", InvalidArgument, "EMPTY_OLD_STRING", {
            let mut c = cl();
            let r = edit_req(&s(), "a.txt", vec![edit("", "x")]);
            async move { c.edit_file(r).await.map(drop) }
        }),
        row(
            "old_string equals new_string",
            InvalidArgument,
            "NO_CHANGE",
            {
                let mut c = cl();
                let r = edit_req(&s(), "a.txt", vec![edit("two", "two")]);
                async move { c.edit_file(r).await.map(drop) }
            },
        ),
        row(
            "old_string absent",
            FailedPrecondition,
            "OLD_STRING_NOT_FOUND",
            {
                let mut c = cl();
                let r = edit_req(&s(), "a.txt", vec![edit("three", "3")]);
                async move { c.edit_file(r).await.map(drop) }
            },
        ),
        row(
            "old_string twice",
            FailedPrecondition,
            "OLD_STRING_AMBIGUOUS",
            {
                let mut c = cl();
                let r = edit_req(&s(), "a.txt", vec![edit("one", "1")]);
                async move { c.edit_file(r).await.map(drop) }
            },
        ),
        row("overlapping edits", InvalidArgument, "EDITS_OVERLAP", {
            let mut c = cl();
            let r = edit_req(
                &s(),
                "a.txt",
                vec![edit("one\ntwo", "x"), edit("two\none", "y")],
            );
            async move { c.edit_file(r).await.map(drop) }
        }),
        row("stale expected_sha256", Aborted, "STALE_FILE", {
            let mut c = cl();
            let mut r = edit_req(&s(), "a.txt", vec![edit("two", "2")]);
            r.expected_sha256 = stale.clone();
            async move { c.edit_file(r).await.map(drop) }
        }),
        row(
            "read past the last line",
            OutOfRange,
            "LINE_OUT_OF_RANGE",
            {
                let mut c = cl();
                let mut r = read_req(&s(), "a.txt");
                r.offset = u64::MAX;
                async move { c.read_file(r).await.map(drop) }
            },
        ),
        row(
            "a glob that does not parse",
            InvalidArgument,
            "INVALID_PATTERN",
            {
                let mut c = cl();
                let r = pb::FindFilesRequest {
                    session_id: s(),
                    pattern: "src/[".into(),
                    ..Default::default()
                };
                async move { c.find_files(r).await.map(drop) }
            },
        ),
        row(
            "a regex that does not parse",
            InvalidArgument,
            "INVALID_PATTERN",
            {
                let mut c = cl();
                let r = pb::SearchFilesRequest {
                    session_id: s(),
                    pattern: "(unclosed".into(),
                    ..Default::default()
                };
                async move { c.search_files(r).await.map(drop) }
            },
        ),
        // Empty and absurd commands, caps and timeouts.
        row(
            "empty command",
            InvalidArgument,
            "INVALID_ARGUMENT",
            run_call(cl(), run_req(&s(), "", 5000)),
        ),
        row(
            "blank command",
            InvalidArgument,
            "INVALID_ARGUMENT",
            run_call(cl(), run_req(&s(), " \t\n", 5000)),
        ),
        row(
            "timeout of u64::MAX ms",
            ResourceExhausted,
            "LIMIT_EXCEEDED",
            run_call(cl(), run_req(&s(), "true", u64::MAX)),
        ),
        row(
            "timeout past the ceiling",
            ResourceExhausted,
            "LIMIT_EXCEEDED",
            run_call(cl(), run_req(&s(), "true", 3_600_001)),
        ),
        row(
            "stdout cap of u64::MAX",
            ResourceExhausted,
            "LIMIT_EXCEEDED",
            {
                let mut r = run_req(&s(), "true", 5000);
                r.stdout_cap = u64::MAX;
                run_call(cl(), r)
            },
        ),
        row(
            "stderr cap past the ceiling",
            ResourceExhausted,
            "LIMIT_EXCEEDED",
            {
                let mut r = run_req(&s(), "true", 5000);
                r.stderr_cap = 10_000_000;
                run_call(cl(), r)
            },
        ),
        row("memory of u64::MAX", ResourceExhausted, "LIMIT_EXCEEDED", {
            let mut c = cl();
            async move { c.create_session(limits(u64::MAX, 0, 0)).await.map(drop) }
        }),
        row("a thousand CPUs", ResourceExhausted, "LIMIT_EXCEEDED", {
            let mut c = cl();
            async move {
                c.create_session(limits(0, 1_000_000_000_000, 0))
                    .await
                    .map(drop)
            }
        }),
        row("pids of u64::MAX", ResourceExhausted, "LIMIT_EXCEEDED", {
            let mut c = cl();
            async move { c.create_session(limits(0, 0, u64::MAX)).await.map(drop) }
        }),
        row(
            "cwd above the workspace",
            PermissionDenied,
            "PATH_OUTSIDE_WORKSPACE",
            {
                let mut r = run_req(&s(), "pwd", 5000);
                r.cwd = "../..".into();
                run_call(cl(), r)
            },
        ),
        row(
            "cwd through a link out",
            PermissionDenied,
            "PATH_OUTSIDE_WORKSPACE",
            {
                let mut r = run_req(&s(), "pwd", 5000);
                r.cwd = "out_link".into();
                run_call(cl(), r)
            },
        ),
        row("cwd is a file", FailedPrecondition, "NOT_A_DIRECTORY", {
            let mut r = run_req(&s(), "pwd", 5000);
            r.cwd = "a.txt".into();
            run_call(cl(), r)
        }),
        row(
            "rm -rf / slip",
            PermissionDenied,
            "COMMAND_REFUSED",
            run_call(cl(), run_req(&s(), "rm -rf /", 5000)),
        ),
        // Sessions that do not exist (any more), and bad session requests.
        row("unknown session", NotFound, "SESSION_NOT_FOUND", {
            let mut c = cl();
            let r = read_req("no-such-session", "a.txt");
            async move { c.read_file(r).await.map(drop) }
        }),
        row("empty session id", NotFound, "SESSION_NOT_FOUND", {
            let mut c = cl();
            let r = read_req("", "a.txt");
            async move { c.read_file(r).await.map(drop) }
        }),
        row(
            "command in an unknown session",
            NotFound,
            "SESSION_NOT_FOUND",
            run_call(cl(), run_req("nope", "true", 5000)),
        ),
        row(
            "report of an unknown session",
            NotFound,
            "SESSION_NOT_FOUND",
            {
                let mut c = cl();
                let r = pb::GetSessionReportRequest {
                    session_id: "nope".into(),
                    ..Default::default()
                };
                async move { c.get_session_report(r).await.map(drop) }
            },
        ),
        row("close an unknown session", NotFound, "SESSION_NOT_FOUND", {
            let mut c = cl();
            let r = pb::CloseSessionRequest {
                session_id: "nope".into(),
            };
            async move { c.close_session(r).await.map(drop) }
        }),
        row("read in a closed session", NotFound, "SESSION_NOT_FOUND", {
            let mut c = cl();
            let r = read_req(&closed, "a.txt");
            async move { c.read_file(r).await.map(drop) }
        }),
        row(
            "command in a closed session",
            NotFound,
            "SESSION_NOT_FOUND",
            run_call(cl(), run_req(&closed, "true", 5000)),
        ),
        row("close a closed session", NotFound, "SESSION_NOT_FOUND", {
            let mut c = cl();
            let r = pb::CloseSessionRequest {
                session_id: closed.clone(),
            };
            async move { c.close_session(r).await.map(drop) }
        }),
        row(
            "workspace outside the allowed roots",
            PermissionDenied,
            "PATH_OUTSIDE_WORKSPACE",
            {
                let mut c = cl();
                let r = pb::CreateSessionRequest {
                    workspace_path: outside.path().display().to_string(),
                    ..Default::default()
                };
                async move { c.create_session(r).await.map(drop) }
            },
        ),
        row(
            "relative workspace path",
            PermissionDenied,
            "PATH_OUTSIDE_WORKSPACE",
            {
                let mut c = cl();
                let r = pb::CreateSessionRequest {
                    workspace_path: "../..".into(),
                    ..Default::default()
                };
                async move { c.create_session(r).await.map(drop) }
            },
        ),
        row(
            "an allowed image that is not there",
            FailedPrecondition,
            "IMAGE_NOT_FOUND",
            {
                let mut c = cl();
                let r = pb::CreateSessionRequest {
                    image: "no-such-image:1".into(),
                    ..Default::default()
                };
                async move { c.create_session(r).await.map(drop) }
            },
        ),
        row(
            "an image the operator did not allow",
            PermissionDenied,
            "IMAGE_NOT_ALLOWED",
            {
                let mut c = cl();
                let r = pb::CreateSessionRequest {
                    image: "busybox:latest".into(),
                    ..Default::default()
                };
                async move { c.create_session(r).await.map(drop) }
            },
        ),
        row(
            "a deny glob climbing out",
            InvalidArgument,
            "INVALID_POLICY",
            {
                let mut c = cl();
                let r = pb::CreateSessionRequest {
                    policy: Some(pb::Policy {
                        deny_writes: vec!["../**".into()],
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                async move { c.create_session(r).await.map(drop) }
            },
        ),
        row(
            "a planned file outside",
            PermissionDenied,
            "PATH_OUTSIDE_WORKSPACE",
            {
                let mut c = cl();
                let r = pb::GetSessionReportRequest {
                    session_id: s(),
                    planned_files: vec!["../x".into()],
                    ..Default::default()
                };
                async move { c.get_session_report(r).await.map(drop) }
            },
        ),
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
    let ran = common::run(&server.client, &id, "cat a.txt", 20_000).await;
    assert_eq!(ran.stdout(), "one\ntwo\none\n");
    server.stop().await;
}

use tonic_types::StatusExt;

#[tokio::test]
async fn closing_a_session_during_a_command_ends_both_cleanly() {
    let server = TestServer::with_docker().await;
    let (id, ws) = server.session().await;
    let client = server.client.clone();
    let sid = id.clone();
    let running = tokio::spawn(async move {
        common::try_run(&client, run_req(&sid, "echo started; sleep 60", 120_000)).await
    });
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let closed = server
        .client
        .clone()
        .close_session(pb::CloseSessionRequest {
            session_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(closed.workspace_removed);
    // The command ends promptly: with a final result (its container is
    // gone) or, if the close won the race to the stream, a clear status.
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(30), running)
        .await
        .expect("the command did not end after its session closed")
        .unwrap();
    match outcome {
        Ok(ran) => assert_ne!(ran.exit.exit_code, 0, "{:?}", ran.exit),
        Err(status) => assert!(
            status.get_details_error_info().is_some(),
            "a status without a reason: {status:?}"
        ),
    }
    assert!(
        server.containers().is_empty(),
        "the container outlived its session"
    );
    assert!(!ws.exists());
    let err = server
        .client
        .clone()
        .read_file(read_req(&id, "x"))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "SESSION_NOT_FOUND");
    server.stop().await;
}

#[tokio::test]
async fn sessions_past_the_operator_ceiling_are_refused() {
    let server = TestServer::start_with(|c| c.max_sessions = 2).await;
    server.session().await;
    server.session().await;
    let err = server
        .client
        .clone()
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(reason(&err), "TOO_MANY_SESSIONS");
    server.stop().await;
}

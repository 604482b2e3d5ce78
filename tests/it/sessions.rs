//! Session lifecycle, existing-directory workspaces, idle expiry, and the
//! health and reflection services.

use std::time::Duration;

use crate::common::{TestServer, assert_refused, edit, edit_req, read_req, reason};
use sandboxd::pb;

#[tokio::test]
async fn fresh_session_lifecycle() {
    let srv = TestServer::start().await;
    let mut c = srv.client.clone();
    let s = c
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(s.owns_workspace);
    assert!(std::path::Path::new(&s.workspace_path).is_dir());
    let got = c
        .get_session(pb::GetSessionRequest {
            session_id: s.session_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.workspace_path, s.workspace_path);
    let listed = c
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.sessions.len(), 1);
    let closed = c
        .close_session(pb::CloseSessionRequest {
            session_id: s.session_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(closed.workspace_removed);
    assert!(crate::common::gone_soon(std::path::Path::new(&s.workspace_path)).await);
    // The id is gone for every call.
    let read = c.read_file(read_req(&s.session_id, "a"));
    let err = assert_refused(read, "SESSION_NOT_FOUND").await;
    assert_eq!(err.code(), tonic::Code::NotFound);
    let close = pb::CloseSessionRequest {
        session_id: s.session_id,
    };
    assert_refused(c.close_session(close), "SESSION_NOT_FOUND").await;
    srv.stop().await;
}

#[tokio::test]
async fn unknown_session_ids_are_refused_everywhere() {
    let srv = TestServer::start().await;
    let mut c = srv.client.clone();
    let sid = "nope".to_string();
    let get = pb::GetSessionRequest {
        session_id: sid.clone(),
    };
    assert_refused(c.get_session(get), "SESSION_NOT_FOUND").await;
    assert_refused(c.read_file(read_req(&sid, "a")), "SESSION_NOT_FOUND").await;
    let create = pb::CreateFileRequest {
        session_id: sid.clone(),
        path: "a".into(),
        content: "x".into(),
    };
    assert_refused(c.create_file(create), "SESSION_NOT_FOUND").await;
    let edit = edit_req(&sid, "a", vec![edit("a", "b")]);
    assert_refused(c.edit_file(edit), "SESSION_NOT_FOUND").await;
    let list = pb::ListDirRequest {
        session_id: sid.clone(),
        path: String::new(),
    };
    assert_refused(c.list_dir(list), "SESSION_NOT_FOUND").await;
    let find = pb::FindFilesRequest {
        session_id: sid.clone(),
        pattern: "*".into(),
        ..Default::default()
    };
    assert_refused(c.find_files(find), "SESSION_NOT_FOUND").await;
    let search = pb::SearchFilesRequest {
        session_id: sid.clone(),
        pattern: "x".into(),
        ..Default::default()
    };
    assert_refused(c.search_files(search), "SESSION_NOT_FOUND").await;
    srv.stop().await;
}

#[tokio::test]
async fn existing_directory_only_under_an_allowed_root_and_kept_on_close() {
    let srv = TestServer::start().await;
    let mut c = srv.client.clone();
    let project = srv.allowed_root.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("README"), "hi\n").unwrap();
    let s = c
        .create_session(pb::CreateSessionRequest {
            workspace_path: project.display().to_string(),
            ttl_seconds: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!s.owns_workspace);
    let read = c
        .read_file(read_req(&s.session_id, "README"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.content, "hi\n");
    let closed = c
        .close_session(pb::CloseSessionRequest {
            session_id: s.session_id,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!closed.workspace_removed);
    assert!(project.join("README").exists());

    let elsewhere = tempfile::tempdir().unwrap();
    // A symlink under the allowed root that points elsewhere does not help.
    std::os::unix::fs::symlink(elsewhere.path(), srv.allowed_root.path().join("sneaky")).unwrap();
    for path in [
        elsewhere.path().display().to_string(),
        "/".to_string(),
        "relative/dir".to_string(),
        format!("{}/..", srv.allowed_root.path().display()),
        srv.allowed_root.path().join("sneaky").display().to_string(),
        // What lies outside is never told: a missing path, a file, a path
        // through `..` are all refused alike, before being looked at.
        elsewhere.path().join("missing").display().to_string(),
        "/etc/passwd".to_string(),
        format!("{}/../missing", srv.allowed_root.path().display()),
        format!("{}/project/../../etc", srv.allowed_root.path().display()),
    ] {
        let req = pb::CreateSessionRequest {
            workspace_path: path.clone(),
            ttl_seconds: 0,
            ..Default::default()
        };
        assert_refused(c.create_session(req), "PATH_OUTSIDE_WORKSPACE").await;
    }
    let missing = pb::CreateSessionRequest {
        workspace_path: srv
            .allowed_root
            .path()
            .join("missing")
            .display()
            .to_string(),
        ttl_seconds: 0,
        ..Default::default()
    };
    assert_refused(c.create_session(missing), "INVALID_WORKSPACE").await;
    assert!(
        c.list_sessions(pb::ListSessionsRequest {})
            .await
            .unwrap()
            .into_inner()
            .sessions
            .is_empty()
    );
    srv.stop().await;
}

#[tokio::test]
async fn idle_sessions_expire_after_their_ttl() {
    let srv = TestServer::start().await;
    let mut c = srv.client.clone();
    let s = c
        .create_session(pb::CreateSessionRequest {
            workspace_path: String::new(),
            ttl_seconds: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(s.ttl_seconds, 1);
    // Generous: the reaper runs every 100 ms in tests; allow 10 s on a busy box.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = c
            .get_session(pb::GetSessionRequest {
                session_id: s.session_id.clone(),
            })
            .await;
        if let Err(err) = got {
            assert_eq!(reason(&err), "SESSION_NOT_FOUND");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "session did not expire"
        );
        // Polling with GetSession would keep it alive; wait past the TTL instead.
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    assert!(crate::common::gone_soon(std::path::Path::new(&s.workspace_path)).await);
    srv.stop().await;
}

#[tokio::test]
async fn session_ceiling_is_enforced() {
    let srv = TestServer::start_with(|c| c.max_sessions = 2).await;
    let mut c = srv.client.clone();
    for _ in 0..2 {
        c.create_session(pb::CreateSessionRequest::default())
            .await
            .unwrap();
    }
    let third = c.create_session(pb::CreateSessionRequest::default());
    let err = assert_refused(third, "TOO_MANY_SESSIONS").await;
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    srv.stop().await;
}

#[tokio::test]
async fn shutdown_removes_fresh_workspaces() {
    let srv = TestServer::start().await;
    let (_, ws) = srv.session().await;
    assert!(ws.exists());
    srv.stop().await;
    assert!(!ws.exists());
}

#[tokio::test]
async fn health_and_reflection_are_served() {
    let srv = TestServer::start().await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", srv.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "sandboxd.v1.Sandbox".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        status.status(),
        tonic_health::pb::health_check_response::ServingStatus::Serving
    );

    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let mut reflection = ServerReflectionClient::new(channel);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut replies = reflection
        .server_reflection_info(tokio_stream::iter([req]))
        .await
        .unwrap()
        .into_inner();
    let reply = replies.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = reply.message_response else {
        panic!("unexpected reflection reply {reply:?}");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"sandboxd.v1.Sandbox"), "{names:?}");
    assert!(names.contains(&"grpc.health.v1.Health"), "{names:?}");
    srv.stop().await;
}

/// CloseSession answers at once, and nothing of the session runs past the
/// answer: a process its command left writing into a lent directory has
/// stopped by then (the directory stays as it was left), while the
/// container goes right after.
#[tokio::test]
async fn closing_stops_everything_before_it_answers() {
    let srv = TestServer::with_docker().await;
    let mut c = srv.client.clone();
    let project = srv.allowed_root.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::os::unix::fs::chown(&project, Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(
        &project,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let s = c
        .create_session(pb::CreateSessionRequest {
            workspace_path: project.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let ran = crate::common::run(
        &c,
        &s.session_id,
        "(while :; do date +%s%N > tick.new && mv tick.new tick; sleep 0.01; done) \
         >/dev/null 2>&1 &",
        20_000,
    )
    .await;
    assert_eq!(ran.exit.exit_code, 0, "{ran:?}");
    let tick = project.join("tick");
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !tick.exists() {
        assert!(std::time::Instant::now() < until, "the writer never wrote");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    c.close_session(pb::CloseSessionRequest {
        session_id: s.session_id.clone(),
    })
    .await
    .unwrap();
    let last = std::fs::read_to_string(&tick).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        std::fs::read_to_string(&tick).unwrap(),
        last,
        "the session's process went on writing after the close answered"
    );
    assert!(srv.containers_gone_soon().await, "the container stayed");
    srv.stop().await;
}

//! The escapes a hostile command, a hostile client and another local user
//! tried, each with variants: a host directory mounted through a swapped
//! path, the supervisor killed, read, impersonated or flooded, a set-id
//! file left usable on the host, deep trees, a session wedged by a
//! background fork bomb, TTL mid-command, the disk filled, and images the
//! operator never allowed. Real Docker, real gRPC; one module per aim
//! of the attack.

mod limits;
mod local_user;
mod mounts;
mod supervisor;

use std::process::Command;

use crate::common;
use crate::common::TestServer;
use sandboxd::pb;

/// CreateSession.
async fn create(
    srv: &TestServer,
    req: pb::CreateSessionRequest,
) -> Result<pb::Session, tonic::Status> {
    srv.client
        .clone()
        .create_session(req)
        .await
        .map(|r| r.into_inner())
}

async fn reset(srv: &TestServer, sid: &str) -> pb::ResetSandboxResponse {
    srv.client
        .clone()
        .reset_sandbox(pb::ResetSandboxRequest {
            session_id: sid.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).output().unwrap()
}

/// The container of session `sid` (docker CLI).
fn container_of(sid: &str) -> String {
    common::containers_labelled(&format!("sandboxd.session={sid}"))
        .pop()
        .expect("the session has a container")
}

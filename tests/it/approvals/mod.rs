//! Plans and approvals over gRPC, with two clients: an agent holding its
//! session's token and an approver holding the approver token (or the
//! operator's). Each test starts its own service.

mod ask_rules;
mod cli;
mod plan_loop;
mod restart;
mod restore;
mod tokens;
mod waits;

use std::path::Path;
use std::time::Duration;

use sandboxd::pb;
use sandboxd::session::Config;
use tonic::transport::Channel;

use crate::common::{Client, TestServer};

pub const ADMIN: &str = "the-operators-token";
pub const APPROVER: &str = "the-approvers-token";

/// A client that carries `token` on every call.
pub struct As {
    client: Client,
}

impl As {
    pub async fn new(srv: &TestServer, token: &str) -> As {
        let channel = Channel::from_shared(format!("http://{}", srv.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let bearer = sandboxd::local::Bearer::new(Some(token)).unwrap();
        As {
            client: sandboxd::local::client(channel, bearer),
        }
    }

    /// The client.
    pub fn c(&self) -> Client {
        self.client.clone()
    }

    /// What waits now (marks the approver present).
    pub async fn pending(&self, wait_ms: u64) -> Result<Vec<pb::PendingApproval>, tonic::Status> {
        Ok(self
            .c()
            .list_pending_approvals(pb::ListPendingApprovalsRequest {
                wait_ms,
                ..Default::default()
            })
            .await?
            .into_inner()
            .pending)
    }

    /// Waits until exactly one thing waits, and returns it.
    pub async fn one_pending(&self) -> pb::PendingApproval {
        for _ in 0..40 {
            let mut pending = self.pending(5_000).await.unwrap();
            if pending.len() == 1 {
                return pending.remove(0);
            }
            assert!(pending.is_empty(), "more than one waits: {pending:?}");
        }
        panic!("nothing came to wait for a decision");
    }

    pub async fn decide(
        &self,
        id: &str,
        approve: bool,
        note: &str,
    ) -> Result<pb::DecideResponse, tonic::Status> {
        let verdict = if approve {
            pb::Verdict::Approve
        } else {
            pb::Verdict::Reject
        };
        Ok(self
            .c()
            .decide(pb::DecideRequest {
                approval_id: id.into(),
                verdict: verdict.into(),
                note: note.into(),
                decided_by: "alice".into(),
            })
            .await?
            .into_inner())
    }

    /// Submits `plan` for `session`: the event stream.
    pub async fn submit(
        &self,
        session: &str,
        plan: pb::Plan,
    ) -> Result<tonic::Streaming<pb::PlanEvent>, tonic::Status> {
        Ok(self
            .c()
            .submit_plan(pb::SubmitPlanRequest {
                session_id: session.into(),
                plan: Some(plan),
            })
            .await?
            .into_inner())
    }
}

/// The next event of a plan's stream (within a minute).
pub async fn next(events: &mut tonic::Streaming<pb::PlanEvent>) -> pb::plan_event::Event {
    tokio::time::timeout(Duration::from_secs(60), events.message())
        .await
        .expect("an event within a minute")
        .expect("the stream stays healthy")
        .expect("an event before the stream ends")
        .event
        .expect("the event is set")
}

/// A plan over `files` verified by `verification`.
pub fn plan(files: &[&str], verification: &str) -> pb::Plan {
    pb::Plan {
        goal: "make add() add".into(),
        steps: vec![pb::PlanStep {
            description: "fix the operator in add()".into(),
            files: files.iter().map(|f| f.to_string()).collect(),
        }],
        verification: verification.into(),
        risks: vec!["none: one line changes".into()],
    }
}

/// A field of the refusal's ErrorInfo.
pub fn meta(status: &tonic::Status, key: &str) -> String {
    use tonic_types::StatusExt;
    let info = status.get_details_error_info().expect("an ErrorInfo");
    info.metadata.get(key).cloned().unwrap_or_default()
}

/// A service without Docker (file tools only) reached with the operator's
/// and the approver's token, configured by `tweak`.
pub async fn files_server(tweak: impl FnOnce(&mut Config)) -> TestServer {
    TestServer::with_access(access(), tweak).await
}

/// A service over Docker reached with the operator's and the approver's
/// token, configured by `tweak`.
pub async fn docker_server(tweak: impl FnOnce(&mut Config)) -> TestServer {
    TestServer::with_docker_access(access(), tweak).await
}

fn access() -> sandboxd::server::Access {
    sandboxd::server::Access {
        token: Some(ADMIN.into()),
        approver_token: Some(APPROVER.into()),
        ..Default::default()
    }
}

/// Opens a session (as the operator) with `req`; its id and token.
pub async fn open(admin: &As, req: pb::CreateSessionRequest) -> (String, String) {
    let s = admin.c().create_session(req).await.unwrap().into_inner();
    (s.session_id, s.session_token)
}

/// Makes the checkout the plan tests work on under `root`: a function
/// with a bug and its test.
pub fn checkout(root: &Path) -> std::path::PathBuf {
    let dir = root.join("calc");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(
        dir.join("src/calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("tests/test_calc.py"),
        "import sys\nsys.path.insert(0, 'src')\nfrom calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n",
    )
    .unwrap();
    dir
}

//! The calls a hostile client makes, as rows of the table: any unary RPC
//! ([`rpc!`]), a RunCommand drained to its end, and requests carrying
//! invalid UTF-8 where the contract says string; with the builders of the
//! requests they send.

use std::future::Future;
use std::pin::Pin;

use crate::common::Client;
use sandboxd::pb;
use tonic::Code;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

/// A row's call, its reply dropped.
pub(super) type Call = Pin<Box<dyn Future<Output = Result<(), tonic::Status>> + Send>>;

/// One row of the table: a call, and the status it must get.
pub(super) struct Row {
    pub(super) name: &'static str,
    pub(super) code: Code,
    pub(super) reason: &'static str,
    pub(super) call: Call,
}

/// A unary RPC as a row's call: `$method` of `$client` with `$req`, its
/// reply dropped.
macro_rules! rpc {
    ($client:expr, $method:ident, $req:expr) => {{
        let (mut client, req) = ($client, $req);
        async move { client.$method(req).await.map(drop) }
    }};
}
pub(super) use rpc;

/// A row named `name`: [`Named::wants`] and [`Wanted::call`] complete it.
pub(super) fn row(name: &'static str) -> Named {
    Named(name)
}

/// A row's name.
pub(super) struct Named(&'static str);

/// A row's name and the status it must get.
pub(super) struct Wanted {
    name: &'static str,
    code: Code,
    reason: &'static str,
}

impl Named {
    /// The status code and ErrorInfo reason the row's call must get.
    pub(super) fn wants(self, code: Code, reason: &'static str) -> Wanted {
        Wanted {
            name: self.0,
            code,
            reason,
        }
    }
}

impl Wanted {
    /// The call that must be refused.
    pub(super) fn call(
        self,
        call: impl Future<Output = Result<(), tonic::Status>> + Send + 'static,
    ) -> Row {
        Row {
            name: self.name,
            code: self.code,
            reason: self.reason,
            call: Box::pin(call),
        }
    }
}

/// The same field numbers as the real requests, with bytes where the
/// contract says string: lets a test send invalid UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RawPathRequest {
    #[prost(bytes = "vec", tag = "1")]
    session_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    path: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    content: Vec<u8>,
}

pub(super) async fn raw_call(
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

pub(super) fn raw(session: &str, path: &[u8], content: &[u8]) -> RawPathRequest {
    RawPathRequest {
        session_id: session.as_bytes().to_vec(),
        path: path.to_vec(),
        content: content.to_vec(),
    }
}

pub(super) fn create(session: &str, path: &str, content: &str) -> pb::CreateFileRequest {
    pb::CreateFileRequest {
        session_id: session.into(),
        path: path.into(),
        content: content.into(),
    }
}

pub(super) fn limits(memory_bytes: u64, nano_cpus: u64, pids: u64) -> pb::CreateSessionRequest {
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

pub(super) fn list(session: &str, path: &str) -> pb::ListDirRequest {
    pb::ListDirRequest {
        session_id: session.into(),
        path: path.into(),
    }
}

pub(super) fn find(session: &str, pattern: &str, path: &str) -> pb::FindFilesRequest {
    pb::FindFilesRequest {
        session_id: session.into(),
        pattern: pattern.into(),
        path: path.into(),
        limit: 0,
    }
}

pub(super) fn search(session: &str, pattern: &str, path: &str) -> pb::SearchFilesRequest {
    pb::SearchFilesRequest {
        session_id: session.into(),
        pattern: pattern.into(),
        path: path.into(),
        ..Default::default()
    }
}

pub(super) fn close(session: &str) -> pb::CloseSessionRequest {
    pb::CloseSessionRequest {
        session_id: session.into(),
    }
}

pub(super) fn report(session: &str, planned: &[&str]) -> pb::GetSessionReportRequest {
    pb::GetSessionReportRequest {
        session_id: session.into(),
        planned_files: planned.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    }
}

/// Drains a RunCommand call to its end.
pub(super) async fn run_call(
    mut c: Client,
    req: pb::RunCommandRequest,
) -> Result<(), tonic::Status> {
    let mut events = c.run_command(req).await?.into_inner();
    while events.message().await?.is_some() {}
    Ok(())
}

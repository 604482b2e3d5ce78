//! The tonic adapter: each handler unpacks the request, calls the domain,
//! lets `error` map a failure, and packs the reply. No logic lives here.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::pb::{self, sandbox_server::Sandbox};
use crate::session::{Caller, Gated, Registry, Scope};

/// The `sandboxd.v1.Sandbox` service over a session registry.
#[derive(Debug, Clone)]
pub struct SandboxService {
    registry: Arc<Registry>,
}

impl SandboxService {
    /// A service answering from `registry`.
    pub fn new(registry: Arc<Registry>) -> Self {
        SandboxService { registry }
    }
}

type Reply<T> = Result<Response<T>, Status>;

/// Marks a call the server vouches for as allowed to build and delete
/// environments (it carried the operator's build token).
#[derive(Debug, Clone, Copy)]
pub struct MayBuild;

/// Who the server authenticated the call as. A call it did not mark (which
/// the server never lets through) may use no session and no admin call.
fn caller<T>(req: &Request<T>) -> Caller {
    req.extensions()
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(|| Caller::Session(String::new()))
}

/// Events of one BuildEnvironment call.
pub type BuildStream =
    Pin<Box<dyn Stream<Item = Result<pb::BuildEnvironmentEvent, Status>> + Send>>;

/// Messages of one DownloadArchive call.
pub type DownloadStream =
    Pin<Box<dyn Stream<Item = Result<pb::DownloadArchiveResponse, Status>> + Send>>;

/// Events of one SubmitPlan call.
pub type PlanStream = Pin<Box<dyn Stream<Item = Result<pb::PlanEvent, Status>> + Send>>;

/// Messages of one ReadProcessOutput call.
pub type ProcessOutputStream =
    Pin<Box<dyn Stream<Item = Result<pb::ProcessOutput, Status>> + Send>>;

/// Events of one RunCommand call.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RunCommandEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Sandbox for SandboxService {
    async fn create_session(&self, req: Request<pb::CreateSessionRequest>) -> Reply<pb::Session> {
        Registry::admin_only(&caller(&req), "create sessions")?;
        let info = self.registry.create(req.into_inner().into()).await?;
        Ok(Response::new(info.into()))
    }

    async fn get_session(&self, req: Request<pb::GetSessionRequest>) -> Reply<pb::Session> {
        let caller = caller(&req);
        let session = self.registry.get(&caller, &req.into_inner().session_id)?;
        Ok(Response::new(session.get_info().await.into()))
    }

    async fn list_sessions(
        &self,
        req: Request<pb::ListSessionsRequest>,
    ) -> Reply<pb::ListSessionsResponse> {
        let sessions = self
            .registry
            .list(&caller(&req))
            .await
            .into_iter()
            .map(Into::into)
            .collect();
        Ok(Response::new(pb::ListSessionsResponse { sessions }))
    }

    async fn close_session(
        &self,
        req: Request<pb::CloseSessionRequest>,
    ) -> Reply<pb::CloseSessionResponse> {
        let caller = caller(&req);
        let closed = self
            .registry
            .close(&caller, &req.into_inner().session_id)
            .await?;
        Ok(Response::new(closed.into()))
    }

    async fn reset_sandbox(
        &self,
        req: Request<pb::ResetSandboxRequest>,
    ) -> Reply<pb::ResetSandboxResponse> {
        let caller = caller(&req);
        let session = self.registry.get(&caller, &req.into_inner().session_id)?;
        let reset = session.reset_sandbox().await?;
        Ok(Response::new(reset.into()))
    }

    async fn read_file(&self, req: Request<pb::ReadFileRequest>) -> Reply<pb::ReadFileResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let (out, held) = session.read_file_reply(&r.path, r.offset, r.limit).await?;
        let mut reply = Response::new(out.into());
        // Given back once the transport sent or dropped the reply.
        reply.extensions_mut().insert(held);
        Ok(reply)
    }

    async fn create_file(
        &self,
        req: Request<pb::CreateFileRequest>,
    ) -> Reply<pb::CreateFileResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let out = session.create_file(&r.path, r.content).await?;
        Ok(Response::new(out.into()))
    }

    async fn edit_file(&self, req: Request<pb::EditFileRequest>) -> Reply<pb::EditFileResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let edits = r.edits.into_iter().map(Into::into).collect();
        let expected = (!r.expected_sha256.is_empty()).then_some(r.expected_sha256);
        let out = session.edit_file(&r.path, edits, expected).await?;
        Ok(Response::new(out.into()))
    }

    async fn apply_patch(
        &self,
        req: Request<pb::ApplyPatchRequest>,
    ) -> Reply<pb::ApplyPatchResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let files = session.apply_patch(&r.patch).await?;
        Ok(Response::new(files.into()))
    }

    async fn list_dir(&self, req: Request<pb::ListDirRequest>) -> Reply<pb::ListDirResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let out = session.list_dir(&r.path).await?;
        Ok(Response::new(out.into()))
    }

    async fn find_files(&self, req: Request<pb::FindFilesRequest>) -> Reply<pb::FindFilesResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let out = session.find(&r.pattern, &r.path, r.limit).await?;
        Ok(Response::new(out.into()))
    }

    async fn search_files(
        &self,
        req: Request<pb::SearchFilesRequest>,
    ) -> Reply<pb::SearchFilesResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let out = session.search(r.into()).await?;
        Ok(Response::new(out.into()))
    }

    type RunCommandStream = EventStream;

    async fn run_command(&self, req: Request<pb::RunCommandRequest>) -> Reply<EventStream> {
        crate::profile::mark("service: call received");
        let caller = caller(&req);
        let r = req.into_inner();
        let Ok(output) = pb::OutputMode::try_from(r.output) else {
            return Err(crate::session::Error::InvalidArgument {
                field: "output",
                why: "give OUTPUT_MODE_BOTH, OUTPUT_MODE_CHUNKS or OUTPUT_MODE_RESULT".into(),
            }
            .into());
        };
        let session = self.registry.get(&caller, &r.session_id)?;
        let stream: EventStream = match session.run_command(r.into()).await? {
            Gated::Done(events) => Box::pin(
                ReceiverStream::new(events)
                    .filter_map(move |e| std::future::ready(output.shape(e).map(Ok))),
            ),
            Gated::Rejected(r) => Box::pin(futures_util::stream::once(async move {
                Ok(pb::RunCommandEvent::from(r))
            })),
        };
        Ok(Response::new(stream))
    }

    async fn get_session_report(
        &self,
        req: Request<pb::GetSessionReportRequest>,
    ) -> Reply<pb::SessionReport> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let verify = (!r.verification_command.trim().is_empty()).then_some(r.verification_command);
        let report = session.report(&r.planned_files, verify.as_deref()).await?;
        Ok(Response::new((r.session_id, report).into()))
    }

    type BuildEnvironmentStream = BuildStream;

    async fn build_environment(
        &self,
        req: Request<pb::BuildEnvironmentRequest>,
    ) -> Reply<BuildStream> {
        self.registry
            .operator_only(&caller(&req), "BuildEnvironment", "build environments")?;
        let may_build = req.extensions().get::<MayBuild>().is_some();
        let new = req
            .into_inner()
            .try_into()
            .map_err(crate::error::Error::from)?;
        let events = self.registry.build_environment(new, may_build).await?;
        let stream = ReceiverStream::new(events).map(|e| match e {
            Ok(p) => Ok(pb::BuildEnvironmentEvent::from(p)),
            Err(e) => Err(Status::from(e)),
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_environments(
        &self,
        req: Request<pb::ListEnvironmentsRequest>,
    ) -> Reply<pb::ListEnvironmentsResponse> {
        self.registry
            .operator_only(&caller(&req), "ListEnvironments", "list environments")?;
        let environments = self
            .registry
            .list_environments()
            .await?
            .into_iter()
            .map(Into::into)
            .collect();
        Ok(Response::new(pb::ListEnvironmentsResponse { environments }))
    }

    async fn delete_environment(
        &self,
        req: Request<pb::DeleteEnvironmentRequest>,
    ) -> Reply<pb::DeleteEnvironmentResponse> {
        self.registry
            .operator_only(&caller(&req), "DeleteEnvironment", "delete environments")?;
        let may_build = req.extensions().get::<MayBuild>().is_some();
        let name = req.into_inner().name;
        let env = self.registry.delete_environment(&name, may_build).await?;
        let message = format!("deleted environment {name} ({})", env.image);
        Ok(Response::new(pb::DeleteEnvironmentResponse {
            environment: Some(env.into()),
            message,
        }))
    }

    async fn get_changes(
        &self,
        req: Request<pb::GetChangesRequest>,
    ) -> Reply<pb::GetChangesResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let out = session
            .changes(&r.since_checkpoint, r.max_patch_bytes)
            .await?;
        Ok(Response::new(out.into()))
    }

    async fn create_checkpoint(
        &self,
        req: Request<pb::CreateCheckpointRequest>,
    ) -> Reply<pb::CreateCheckpointResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let out = session.create_checkpoint(r.label).await?;
        Ok(Response::new(out.into()))
    }

    async fn list_checkpoints(
        &self,
        req: Request<pb::ListCheckpointsRequest>,
    ) -> Reply<pb::ListCheckpointsResponse> {
        let caller = caller(&req);
        let session = self.registry.get(&caller, &req.into_inner().session_id)?;
        let checkpoints = session
            .list_checkpoints()
            .await
            .into_iter()
            .map(Into::into)
            .collect();
        Ok(Response::new(pb::ListCheckpointsResponse { checkpoints }))
    }

    async fn restore_checkpoint(
        &self,
        req: Request<pb::RestoreCheckpointRequest>,
    ) -> Reply<pb::RestoreCheckpointResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let out = session
            .restore_checkpoint(&r.checkpoint_id, r.stop_commands)
            .await?;
        Ok(Response::new(out.into()))
    }

    async fn delete_checkpoint(
        &self,
        req: Request<pb::DeleteCheckpointRequest>,
    ) -> Reply<pb::DeleteCheckpointResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let gone = session.delete_checkpoint(&r.checkpoint_id).await?;
        let message = format!(
            "deleted checkpoint {}; {} bytes of contents only it held were freed",
            gone.id, gone.own_bytes
        );
        Ok(Response::new(pb::DeleteCheckpointResponse {
            checkpoint: Some(gone.into()),
            message,
        }))
    }

    async fn upload_archive(
        &self,
        req: Request<tonic::Streaming<pb::UploadArchiveRequest>>,
    ) -> Reply<pb::UploadArchiveResponse> {
        let caller = caller(&req);
        let mut stream = req.into_inner();
        let header = match stream.message().await? {
            Some(pb::UploadArchiveRequest {
                part: Some(pb::upload_archive_request::Part::Header(h)),
            }) => h,
            _ => {
                return Err(crate::error::Error::from(crate::session::Error::InvalidArgument {
                    field: "header",
                    why: "the first message of UploadArchive must be the header (session_id, destination)"
                        .into(),
                })
                .into());
            }
        };
        let session = self.registry.get(&caller, &header.session_id)?;
        let turn = self.registry.upload_turn().await;
        // Two chunks in flight at most: the stream is read as fast as the
        // extraction takes it.
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        // Forwards the chunks; stops when the extraction stops reading.
        tokio::spawn(async move {
            loop {
                let next = match stream.message().await {
                    Ok(Some(pb::UploadArchiveRequest {
                        part: Some(pb::upload_archive_request::Part::Chunk(c)),
                    })) => Ok(c),
                    Ok(Some(_)) => Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "a second header came after the first",
                    )),
                    Ok(None) => break,
                    Err(status) => Err(std::io::Error::other(status.message().to_string())),
                };
                let failed = next.is_err();
                if tx.send(next).await.is_err() || failed {
                    break;
                }
            }
        });
        let out = session.upload_archive(header.destination, rx, turn).await?;
        Ok(Response::new(out.into()))
    }

    type DownloadArchiveStream = DownloadStream;

    async fn download_archive(
        &self,
        req: Request<pb::DownloadArchiveRequest>,
    ) -> Reply<DownloadStream> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let events = session
            .download_archive(r.path, r.gitignore, r.gzip, r.max_bytes)
            .await?;
        let stream = ReceiverStream::new(events).map(|e| match e {
            Ok(e) => Ok(pb::DownloadArchiveResponse::from(e)),
            Err(e) => Err(Status::from(e)),
        });
        Ok(Response::new(Box::pin(stream)))
    }

    type SubmitPlanStream = PlanStream;

    async fn submit_plan(&self, req: Request<pb::SubmitPlanRequest>) -> Reply<PlanStream> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let events = session
            .submit_plan(r.plan.unwrap_or_default().into())
            .await?;
        let stream = ReceiverStream::new(events).map(|e| Ok(pb::PlanEvent::from(e)));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_pending_approvals(
        &self,
        req: Request<pb::ListPendingApprovalsRequest>,
    ) -> Reply<pb::ListPendingApprovalsResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let wait = std::time::Duration::from_millis(r.wait_ms);
        let scope = match r.session_id {
            id if id.is_empty() => Scope::All,
            id => Scope::Session(id),
        };
        let pending = self
            .registry
            .pending_approvals(&caller, &scope, wait)
            .await?;
        Ok(Response::new(pb::ListPendingApprovalsResponse {
            pending: pending.into_iter().map(Into::into).collect(),
        }))
    }

    async fn decide(&self, req: Request<pb::DecideRequest>) -> Reply<pb::DecideResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let approve = match pb::Verdict::try_from(r.verdict) {
            Ok(pb::Verdict::Approve) => true,
            Ok(pb::Verdict::Reject) => false,
            _ => {
                return Err(crate::session::Error::InvalidArgument {
                    field: "verdict",
                    why: "give VERDICT_APPROVE or VERDICT_REJECT".into(),
                }
                .into());
            }
        };
        let decided =
            self.registry
                .decide(&caller, &r.approval_id, approve, &r.decided_by, &r.note)?;
        let outcome = if approve { "approved" } else { "rejected" };
        Ok(Response::new(pb::DecideResponse {
            message: format!(
                "{} {outcome}; session {} was told",
                decided.asked.brief(),
                decided.session
            ),
            approval_id: decided.id,
            session_id: decided.session,
            outcome: outcome.to_string(),
        }))
    }

    async fn start_process(
        &self,
        req: Request<pb::StartProcessRequest>,
    ) -> Reply<pb::StartProcessResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let started = session.start_process(r.into()).await?;
        Ok(Response::new(started.into()))
    }

    async fn list_processes(
        &self,
        req: Request<pb::ListProcessesRequest>,
    ) -> Reply<pb::ListProcessesResponse> {
        let caller = caller(&req);
        let session = self.registry.get(&caller, &req.into_inner().session_id)?;
        let processes = session
            .list_processes()
            .into_iter()
            .map(Into::into)
            .collect();
        Ok(Response::new(pb::ListProcessesResponse { processes }))
    }

    type ReadProcessOutputStream = ProcessOutputStream;

    async fn read_process_output(
        &self,
        req: Request<pb::ReadProcessOutputRequest>,
    ) -> Reply<ProcessOutputStream> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let pieces = session.read_process_output(
            &r.process_id,
            [r.stdout_offset, r.stderr_offset],
            r.follow,
        )?;
        Ok(Response::new(Box::pin(pieces.map(|p| {
            p.map(pb::ProcessOutput::from).map_err(Status::from)
        }))))
    }

    async fn write_process_input(
        &self,
        req: Request<pb::WriteProcessInputRequest>,
    ) -> Reply<pb::WriteProcessInputResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let ack = session
            .write_process_input(&r.process_id, r.data, r.close)
            .await?;
        Ok(Response::new(pb::WriteProcessInputResponse {
            written: ack.written,
            closed: ack.closed,
        }))
    }

    async fn resize_process(
        &self,
        req: Request<pb::ResizeProcessRequest>,
    ) -> Reply<pb::ResizeProcessResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        session
            .resize_process(&r.process_id, r.rows, r.cols)
            .await?;
        Ok(Response::new(pb::ResizeProcessResponse {}))
    }

    async fn signal_process(
        &self,
        req: Request<pb::SignalProcessRequest>,
    ) -> Reply<pb::SignalProcessResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let named = pb::ProcessSignal::try_from(r.signal)
            .ok()
            .and_then(|s| crate::sandbox::ProcessSignal::try_from(s).ok());
        let Some(signal) = named else {
            return Err(crate::session::Error::InvalidArgument {
                field: "signal",
                why: "give PROCESS_SIGNAL_INT, PROCESS_SIGNAL_TERM or PROCESS_SIGNAL_KILL".into(),
            }
            .into());
        };
        let process = session.signal_process(&r.process_id, signal).await?;
        Ok(Response::new(pb::SignalProcessResponse {
            process: Some(process.into()),
        }))
    }

    async fn stop_process(
        &self,
        req: Request<pb::StopProcessRequest>,
    ) -> Reply<pb::StopProcessResponse> {
        let caller = caller(&req);
        let r = req.into_inner();
        let session = self.registry.get(&caller, &r.session_id)?;
        let process = session.stop_process(&r.process_id).await?;
        Ok(Response::new(pb::StopProcessResponse {
            process: Some(process.into()),
        }))
    }
}

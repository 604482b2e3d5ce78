//! Long-running processes against the real Docker daemon: a server and a
//! client in one session, interactive programs on a pipe and on a
//! terminal, hostile processes, and a restart of the service.

mod cli;
mod hostile;
mod interactive;
mod restart;
mod server;

use sandboxd::pb;

use crate::common::Client;

/// A StartProcess request for `command` in `session`.
pub fn start_req(session: &str, command: &str) -> pb::StartProcessRequest {
    pb::StartProcessRequest {
        session_id: session.into(),
        command: command.into(),
        ..Default::default()
    }
}

/// Starts a process; panics on a refusal.
pub async fn start(client: &Client, req: pb::StartProcessRequest) -> pb::StartProcessResponse {
    client
        .clone()
        .start_process(req)
        .await
        .unwrap_or_else(|e| panic!("StartProcess refused: {e:?}"))
        .into_inner()
}

/// What one ReadProcessOutput returned.
#[derive(Debug, Default)]
pub struct Output {
    /// Stdout bytes, in order (gaps dropped).
    pub stdout: Vec<u8>,
    /// Stderr bytes.
    pub stderr: Vec<u8>,
    /// Bytes skipped in each stream.
    pub skipped: [u64; 2],
    /// The chunks, as they came.
    pub chunks: Vec<pb::ProcessOutputChunk>,
    /// The last message.
    pub end: pb::ProcessOutputEnd,
}

impl Output {
    /// Stdout as text.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// Reads a process's output from `from` (stdout, stderr offsets).
pub async fn read(
    client: &Client,
    session: &str,
    process: &str,
    from: [u64; 2],
    follow: bool,
) -> Output {
    use pb::process_output::Kind;
    let mut stream = client
        .clone()
        .read_process_output(pb::ReadProcessOutputRequest {
            session_id: session.into(),
            process_id: process.into(),
            stdout_offset: from[0],
            stderr_offset: from[1],
            follow,
        })
        .await
        .unwrap()
        .into_inner();
    let mut out = Output::default();
    while let Some(msg) = stream.message().await.unwrap() {
        match msg.kind.expect("a kind") {
            Kind::Chunk(c) => {
                let stderr = c.stream == pb::ProcessStream::Stderr as i32;
                out.skipped[usize::from(stderr)] += c.skipped;
                if stderr {
                    out.stderr.extend_from_slice(&c.data);
                } else {
                    out.stdout.extend_from_slice(&c.data);
                }
                out.chunks.push(c);
            }
            Kind::End(end) => {
                assert!(
                    stream.message().await.unwrap().is_none(),
                    "messages after the end"
                );
                out.end = end;
                return out;
            }
        }
    }
    panic!("the output stream ended without its end");
}

/// Stops a process and returns it as it ended.
pub async fn stop(client: &Client, session: &str, process: &str) -> pb::Process {
    client
        .clone()
        .stop_process(pb::StopProcessRequest {
            session_id: session.into(),
            process_id: process.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .process
        .unwrap()
}

/// Every process of the session.
pub async fn list(client: &Client, session: &str) -> Vec<pb::Process> {
    client
        .clone()
        .list_processes(pb::ListProcessesRequest {
            session_id: session.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .processes
}

/// Writes `data` to a process's input.
pub async fn write(
    client: &Client,
    session: &str,
    process: &str,
    data: &[u8],
    close: bool,
) -> Result<pb::WriteProcessInputResponse, tonic::Status> {
    client
        .clone()
        .write_process_input(pb::WriteProcessInputRequest {
            session_id: session.into(),
            process_id: process.into(),
            data: data.to_vec(),
            close,
        })
        .await
        .map(|r| r.into_inner())
}

/// Follows a process's stdout until it holds `needle` (or 20 s pass).
pub async fn wait_for_output(
    client: &Client,
    session: &str,
    process: &str,
    needle: &str,
) -> String {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = read(client, session, process, [0, 0], false).await;
        let text = out.stdout();
        if text.contains(needle) || std::time::Instant::now() > until {
            return text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

//! In-process server on 127.0.0.1:0 and helpers shared by the gRPC tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandboxd::pb::{self, sandbox_client::SandboxClient};
use sandboxd::session::{Config, Registry};
use tempfile::TempDir;
use tokio::sync::oneshot;
use tonic::transport::Channel;
use tonic_types::StatusExt;

pub type Client = SandboxClient<Channel>;

/// A running server with its own workspace directory and one allowed root.
pub struct TestServer {
    pub client: Client,
    pub addr: std::net::SocketAddr,
    /// Operators allow existing directories under this root.
    pub allowed_root: TempDir,
    workspaces: TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> TestServer {
        let workspaces = tempfile::tempdir().unwrap();
        let allowed_root = tempfile::tempdir().unwrap();
        let mut config = Config::new(workspaces.path().to_path_buf());
        config.allowed_roots = vec![allowed_root.path().to_path_buf()];
        tweak(&mut config);
        let registry = Arc::new(Registry::new(config).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            sandboxd::server::serve(listener, registry, Duration::from_millis(100), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let client = SandboxClient::new(channel)
            .max_decoding_message_size(sandboxd::server::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(sandboxd::server::MAX_MESSAGE_BYTES);
        TestServer {
            client,
            addr,
            allowed_root,
            workspaces,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Opens a session over a fresh workspace; returns (id, host path).
    pub async fn session(&self) -> (String, PathBuf) {
        let s = self
            .client
            .clone()
            .create_session(pb::CreateSessionRequest::default())
            .await
            .unwrap()
            .into_inner();
        (s.session_id, PathBuf::from(s.workspace_path))
    }

    /// Stops the server and waits for it to close every session.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
    }
}

/// The ErrorInfo reason of a refusal.
pub fn reason(status: &tonic::Status) -> String {
    status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("status without ErrorInfo: {status:?}"))
        .reason
}

/// Every regular file and symlink under `root` with its bytes (symlinks as
/// their target), to prove a refusal changed nothing.
pub fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                out.insert(
                    format!("{rel}@"),
                    std::fs::read_link(&path)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                );
            } else if ft.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(root, &path, out);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    walk(root, root, &mut out);
    out
}

pub fn edit(old: &str, new: &str) -> pb::Edit {
    pb::Edit {
        old_string: old.into(),
        new_string: new.into(),
        replace_all: false,
    }
}

pub fn edit_req(session: &str, path: &str, edits: Vec<pb::Edit>) -> pb::EditFileRequest {
    pb::EditFileRequest {
        session_id: session.into(),
        path: path.into(),
        edits,
        expected_sha256: String::new(),
    }
}

pub fn read_req(session: &str, path: &str) -> pb::ReadFileRequest {
    pb::ReadFileRequest {
        session_id: session.into(),
        path: path.into(),
        offset: 0,
        limit: 0,
    }
}

//! Stand-ins for the client's tests: a service that answers CreateSession
//! and RunCommand with what the test gives it, over the generated types
//! (every other call is UNIMPLEMENTED), and a listener run by another user
//! (uid 65534) that counts what it is sent.

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use sandboxd::pb;
use tonic::codegen::{Body, BoxFuture, StdError, http};

/// What the fake service answers.
#[derive(Clone, Default)]
pub struct Fake {
    /// CreateSession's reply.
    pub session: pb::Session,
    /// RunCommand's events.
    pub events: Vec<pb::RunCommandEvent>,
    /// How many calls it got.
    pub calls: Arc<AtomicUsize>,
}

struct Create(pb::Session);

impl tonic::server::UnaryService<pb::CreateSessionRequest> for Create {
    type Response = pb::Session;
    type Future = BoxFuture<tonic::Response<pb::Session>, tonic::Status>;
    fn call(&mut self, _: tonic::Request<pb::CreateSessionRequest>) -> Self::Future {
        let session = self.0.clone();
        Box::pin(async move { Ok(tonic::Response::new(session)) })
    }
}

struct Run(Vec<pb::RunCommandEvent>);

type Events = tokio_stream::Iter<std::vec::IntoIter<Result<pb::RunCommandEvent, tonic::Status>>>;

impl tonic::server::ServerStreamingService<pb::RunCommandRequest> for Run {
    type Response = pb::RunCommandEvent;
    type ResponseStream = Events;
    type Future = BoxFuture<tonic::Response<Events>, tonic::Status>;
    fn call(&mut self, _: tonic::Request<pb::RunCommandRequest>) -> Self::Future {
        let events: Vec<_> = self.0.iter().cloned().map(Ok).collect();
        Box::pin(async move { Ok(tonic::Response::new(tokio_stream::iter(events))) })
    }
}

impl<B> tonic::codegen::Service<http::Request<B>> for Fake
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let fake = self.clone();
        Box::pin(async move {
            Ok(match req.uri().path() {
                "/sandboxd.v1.Sandbox/CreateSession" => {
                    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                    grpc.unary(Create(fake.session), req).await
                }
                "/sandboxd.v1.Sandbox/RunCommand" => {
                    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                    grpc.server_streaming(Run(fake.events), req).await
                }
                _ => tonic::Status::unimplemented("not in the fake").into_http(),
            })
        })
    }
}

impl tonic::server::NamedService for Fake {
    const NAME: &'static str = "sandboxd.v1.Sandbox";
}

/// A running fake service; [`Serving::stop`] ends it and its connections.
pub struct Serving {
    pub addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Serving {
    /// Serves `fake` on `addr` (port 0: any).
    pub async fn start(fake: Fake, addr: &str) -> Serving {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(fake)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async {
                        let _ = stopped.await;
                    },
                )
                .await
                .unwrap();
        });
        Serving { addr, stop, task }
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops listening and closes every connection.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), self.task).await;
    }
}

/// The uid the stranger runs as.
pub const STRANGER: u32 = 65534;

/// What the stranger's listener does: listen on the port given (0: any),
/// print it, accept and read every connection until its stdin ends, then
/// print how many connections and bytes it had.
const LISTENER: &str = r#"
import select, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
print(s.getsockname()[1], flush=True)
conns, seen, total, stopping = [], 0, 0, False
while True:
    waiting = [s] + conns + ([] if stopping else [sys.stdin])
    r, _, _ = select.select(waiting, [], [], 0.3 if stopping else 60)
    if not r:
        break
    if sys.stdin in r:
        # Stop, after reading what is already on its way.
        stopping = True
    for x in r:
        if x is s:
            c, _ = s.accept()
            conns.append(c)
            seen += 1
        elif x is not sys.stdin:
            try:
                d = x.recv(65536)
            except OSError:
                d = b""
            total += len(d)
            if not d:
                conns.remove(x)
                x.close()
print(seen, total, flush=True)
"#;

/// A listener of another local user (uid 65534) on 127.0.0.1.
pub struct Stranger {
    pub port: u16,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Stranger {
    /// Listens on `port` (0: any) as uid 65534.
    pub fn listen(port: u16) -> Stranger {
        let mut child = Command::new("setpriv")
            .args([
                &format!("--reuid={STRANGER}"),
                &format!("--regid={STRANGER}"),
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
                LISTENER,
                &port.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect(
                "setpriv and /usr/bin/python3 run a listener as another user (tests run as root)",
            );
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let port = line
            .trim()
            .parse()
            .expect("the stranger's listener prints its port");
        Stranger {
            port,
            child,
            stdin,
            stdout,
        }
    }

    /// Stops listening: (connections it accepted, bytes it received).
    pub fn received(mut self) -> (usize, usize) {
        drop(self.stdin.take());
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let _ = self.child.wait();
        let mut counts = line.split_whitespace().map(|n| n.parse().unwrap());
        (counts.next().unwrap(), counts.next().unwrap())
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"stop\n");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

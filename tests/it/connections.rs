//! Connections a stranger can hold: any local user reaches a loopback
//! port. Idle connections, slow handshakes and a session's token opening
//! many connections never keep a legitimate client out, and the
//! strangers' connections are closed at the handshake deadline.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd::local::Local;
use sandboxd::pb;
use sandboxd::pb::sandbox_client::SandboxClient;
use sandboxd::server::{Access, ConnectionLimits};
use sandboxd::session::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::NO_DOCKER;

/// A file-tools service (no engine) demanding its own token, with
/// `limits` on its connections.
async fn service(limits: ConnectionLimits, tweak: impl FnOnce(&mut Config)) -> Local {
    let name = format!(
        "sandboxd-test-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    Local::builder(&name)
        .unwrap()
        .docker(Arc::new(sandboxd::sandbox::docker::DockerRuntime::new(
            Some(NO_DOCKER.into()),
        )))
        .build_image(false)
        .configure(tweak)
        .access(Access {
            connections: limits,
            ..Default::default()
        })
        .private()
        .start()
        .await
        .unwrap()
}

/// `n` idle TCP connections to `addr`, opened as fast as they go.
async fn idle(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(TcpStream::connect(addr).await.unwrap());
    }
    conns
}

/// How many of `conns` the service has closed: a read ends (EOF or reset)
/// within `wait` (the reads run together).
async fn closed(conns: Vec<TcpStream>, wait: Duration) -> usize {
    let reads = conns.into_iter().map(|mut c| {
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            // Whatever the server sent before closing (its SETTINGS) is
            // read past; the end is what counts.
            tokio::time::timeout(wait, async {
                loop {
                    match c.read(&mut buf).await {
                        Ok(0) | Err(_) => return true,
                        Ok(_) => continue,
                    }
                }
            })
            .await
            .unwrap_or(false)
        })
    });
    let mut n = 0;
    for r in reads.collect::<Vec<_>>() {
        n += usize::from(r.await.unwrap());
    }
    n
}

/// A fresh connection to `addr` that calls with `token`.
async fn fresh_client(addr: SocketAddr) -> SandboxClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::try_from(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    SandboxClient::new(channel)
}

fn with<T>(token: &str, msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    req
}

/// The finding: thousands of idle connections from a local user without a
/// token. A client already connected, and a new one, still get their
/// calls answered promptly; the idle ones are closed by the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_strangers_do_not_keep_a_legitimate_client_out() {
    let local = service(
        ConnectionLimits {
            max: 256,
            handshake: Duration::from_secs(3),
            per_session: 4,
        },
        |_| {},
    )
    .await;
    let token = local.token.clone().unwrap();
    let mut client = local.client.clone();
    let session = client
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    // 3,000 strangers, far past the table's 256.
    let strangers = idle(local.addr, 3000).await;
    let t = Instant::now();
    client
        .get_session(pb::GetSessionRequest {
            session_id: session.session_id.clone(),
        })
        .await
        .unwrap();
    let connected = t.elapsed();
    // A client that connects now, behind the strangers.
    let t = Instant::now();
    let mut newcomer = fresh_client(local.addr).await;
    newcomer
        .create_session(with(&token, pb::CreateSessionRequest::default()))
        .await
        .unwrap();
    let fresh = t.elapsed();
    eprintln!(
        "with 3000 idle strangers: GetSession {connected:?}, a new client's CreateSession {fresh:?}"
    );
    assert!(connected < Duration::from_secs(5), "{connected:?}");
    assert!(fresh < Duration::from_secs(5), "{fresh:?}");
    // Every stranger is closed: most at once, for a newer connection, the
    // last 256 at the deadline.
    let t = Instant::now();
    let n = closed(strangers, Duration::from_secs(15)).await;
    assert_eq!(n, 3000, "every idle stranger was closed");
    assert!(t.elapsed() < Duration::from_secs(15));
    // The vouched-for clients stay.
    tokio::time::sleep(Duration::from_secs(4)).await;
    client
        .get_session(pb::GetSessionRequest {
            session_id: session.session_id,
        })
        .await
        .unwrap();
    local.stop().await.unwrap();
}

/// Slow handshakes: the HTTP/2 preface a byte at a time, a whole HTTP/2
/// handshake with no call after it, and a call with a wrong token are all
/// closed at the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_unvouched_handshakes_are_closed_at_the_deadline() {
    let local = service(
        ConnectionLimits {
            max: 64,
            handshake: Duration::from_secs(2),
            per_session: 4,
        },
        |_| {},
    )
    .await;
    let addr = local.addr;
    // The slow loris: 24 bytes of preface, one every 300 ms (7 s), cut at 2 s.
    let loris = tokio::spawn(async move {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        let t = Instant::now();
        for b in b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" {
            if conn.write_all(&[*b]).await.is_err() {
                return t.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // Written whole: the close shows on the read side.
        let mut buf = [0u8; 1024];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return t.elapsed(),
                Ok(_) => {}
            }
        }
    });
    // A whole handshake (preface and SETTINGS), then nothing.
    let mut quiet = TcpStream::connect(addr).await.unwrap();
    quiet
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    // A gRPC call with a wrong token on a raw connection of its own: the
    // call is refused, and the connection is not vouched for.
    let wrong = tokio::spawn(async move {
        let mut c = fresh_client(addr).await;
        let refused = c
            .list_sessions(with("not-the-token", pb::ListSessionsRequest::default()))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    });
    let t = Instant::now();
    assert_eq!(closed(vec![quiet], Duration::from_secs(10)).await, 1);
    let quiet_after = t.elapsed();
    let loris_after = loris.await.unwrap();
    wrong.await.unwrap();
    eprintln!("closed after: handshake and silence {quiet_after:?}, slow loris {loris_after:?}");
    assert!(
        quiet_after >= Duration::from_millis(1500),
        "{quiet_after:?}"
    );
    assert!(quiet_after < Duration::from_secs(8), "{quiet_after:?}");
    assert!(loris_after < Duration::from_secs(6), "{loris_after:?}");
    // The service still answers.
    local
        .client
        .clone()
        .list_sessions(pb::ListSessionsRequest::default())
        .await
        .unwrap();
    local.stop().await.unwrap();
}

/// A session's token vouches for a few connections only: a session that
/// opens as many connections as the table holds, each with a call, does
/// not keep the operator (or another session) out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_opening_many_connections_keeps_no_one_out() {
    let local = service(
        ConnectionLimits {
            max: 12,
            handshake: Duration::from_secs(30),
            per_session: 2,
        },
        |_| {},
    )
    .await;
    let mut admin = local.client.clone();
    let hog = admin
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut hogs = Vec::new();
    for _ in 0..12 {
        let mut c = fresh_client(local.addr).await;
        c.get_session(with(
            &hog.session_token,
            pb::GetSessionRequest {
                session_id: hog.session_id.clone(),
            },
        ))
        .await
        .unwrap();
        hogs.push(c);
    }
    // Without the share, all 12 would be vouched for and a newcomer closed
    // at once.
    let token = local.token.clone().unwrap();
    let t = Instant::now();
    let mut newcomer = fresh_client(local.addr).await;
    newcomer
        .list_sessions(with(&token, pb::ListSessionsRequest::default()))
        .await
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    drop(hogs);
    local.stop().await.unwrap();
}

/// The review's lockout, scaled down: four sessions' holders open four
/// connections each, with a call on each, and keep them open (HTTP/2 pings
/// would keep them alive for ever); then the sessions are closed. Their
/// vouchers die with their tokens: the operator gets in at once, lists,
/// creates and closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_of_closed_sessions_keep_no_one_out() {
    let local = service(
        ConnectionLimits {
            max: 13,
            handshake: Duration::from_secs(60),
            per_session: 4,
        },
        |_| {},
    )
    .await;
    let token = local.token.clone().unwrap();
    let mut admin = local.client.clone();
    let mut held = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..4 {
        let s = admin
            .create_session(pb::CreateSessionRequest::default())
            .await
            .unwrap()
            .into_inner();
        for _ in 0..4 {
            let Ok(channel) =
                tonic::transport::Endpoint::try_from(format!("http://{}", local.addr))
                    .unwrap()
                    .connect()
                    .await
            else {
                continue;
            };
            let mut c = SandboxClient::new(channel);
            // Past the table, a connection is refused: that is the point.
            let _ = c
                .get_session(with(
                    &s.session_token,
                    pb::GetSessionRequest {
                        session_id: s.session_id.clone(),
                    },
                ))
                .await;
            held.push(c);
        }
        ids.push(s.session_id);
    }
    for id in &ids {
        admin
            .close_session(pb::CloseSessionRequest {
                session_id: id.clone(),
            })
            .await
            .unwrap();
    }
    let t = Instant::now();
    let mut operator = fresh_client(local.addr).await;
    operator
        .list_sessions(with(&token, pb::ListSessionsRequest::default()))
        .await
        .unwrap();
    let listed = t.elapsed();
    let made = operator
        .create_session(with(&token, pb::CreateSessionRequest::default()))
        .await
        .unwrap()
        .into_inner();
    operator
        .close_session(with(
            &token,
            pb::CloseSessionRequest {
                session_id: made.session_id,
            },
        ))
        .await
        .unwrap();
    eprintln!("after four sessions filled the table and closed: the operator listed in {listed:?}");
    assert!(listed < Duration::from_secs(1), "{listed:?}");
    drop(held);
    local.stop().await.unwrap();
}

/// `n` health Watch streams on `channel` (with `token`, if any), opened
/// at once and never read: how many were answered, and how many refused
/// with TOO_MANY_STREAMS (the streams are returned, held open).
async fn watches(
    channel: &tonic::transport::Channel,
    token: Option<&str>,
    n: usize,
) -> (
    Vec<tonic::Streaming<tonic_health::pb::HealthCheckResponse>>,
    usize,
) {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let calls = (0..n).map(|_| {
        let mut health = HealthClient::new(channel.clone());
        let req = match token {
            Some(t) => with(t, HealthCheckRequest::default()),
            None => tonic::Request::new(HealthCheckRequest::default()),
        };
        async move { health.watch(req).await }
    });
    let mut open = Vec::new();
    let mut refused = 0;
    for answer in futures_util::future::join_all(calls).await {
        match answer {
            Ok(stream) => open.push(stream.into_inner()),
            Err(e) => {
                assert_eq!(crate::common::reason(&e), "TOO_MANY_STREAMS", "{e:?}");
                refused += 1;
            }
        }
    }
    (open, refused)
}

/// The red team's finding: a caller with no token opened hundreds of
/// thousands of health Watch streams, never read. A connection nobody has
/// vouched for holds 4 calls at once; a session's connections hold 256
/// together; past them a call is refused at once, and a place comes back
/// when its call ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_calls_are_bounded_per_stranger_and_per_session() {
    let local = service(ConnectionLimits::default(), |_| {}).await;
    let url = format!("http://{}", local.addr);
    let connect = || async {
        tonic::transport::Endpoint::try_from(url.clone())
            .unwrap()
            .connect()
            .await
            .unwrap()
    };
    let stranger = connect().await;
    let (held, refused) = watches(&stranger, None, 100).await;
    assert_eq!((held.len(), refused), (4, 96));
    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (held, _) = watches(&stranger, None, 4).await;
    assert_eq!(held.len(), 4, "the places came back");
    drop(held);

    let s = local
        .client
        .clone()
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut conns = Vec::new();
    for _ in 0..3 {
        let channel = connect().await;
        SandboxClient::new(channel.clone())
            .get_session(with(
                &s.session_token,
                pb::GetSessionRequest {
                    session_id: s.session_id.clone(),
                },
            ))
            .await
            .unwrap();
        conns.push(channel);
    }
    let (a, refused_a) = watches(&conns[0], Some(&s.session_token), 120).await;
    let (b, refused_b) = watches(&conns[1], Some(&s.session_token), 120).await;
    assert_eq!((refused_a, refused_b), (0, 0));
    let (c, refused_c) = watches(&conns[2], Some(&s.session_token), 40).await;
    assert_eq!(
        (c.len(), refused_c),
        (16, 24),
        "256 over the session's connections"
    );
    // The operator is not held by a session's bound.
    let operator = connect().await;
    let (op, refused_op) = watches(&operator, local.token.as_deref(), 20).await;
    assert_eq!((op.len(), refused_op), (20, 0));
    drop((a, b, c, op));
    local.stop().await.unwrap();
}

/// The red team's second finding: a session's holder left thousands of
/// ReadFile replies unread (a zero flow-control window), and each was kept
/// whole. Unread replies spend the session's budget (32 MiB, 128 replies
/// of ReadFile's 256 KiB); past it, a read waits, then is refused
/// (REPLIES_UNREAD), and the budget comes back once the unread replies are
/// dropped with their connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_replies_spend_a_bounded_budget() {
    let local = service(ConnectionLimits::default(), |_| {}).await;
    let url = format!("http://{}", local.addr);
    let mut admin = local.client.clone();
    let s = admin
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    // Lines of 1 KiB: a read returns 256 KiB of them.
    let line = format!("{}\n", "x".repeat(1023));
    admin
        .create_file(pb::CreateFileRequest {
            session_id: s.session_id.clone(),
            path: "big.txt".into(),
            content: line.repeat(1024),
        })
        .await
        .unwrap();
    let read = || {
        with(
            &s.session_token,
            pb::ReadFileRequest {
                session_id: s.session_id.clone(),
                path: "big.txt".into(),
                limit: 1024,
                ..Default::default()
            },
        )
    };
    // Two connections that never read a reply, 70 reads each.
    let mut deaf = Vec::new();
    let mut unread = Vec::new();
    for _ in 0..2 {
        let channel = tonic::transport::Endpoint::try_from(url.clone())
            .unwrap()
            .initial_stream_window_size(0)
            .connect()
            .await
            .unwrap();
        for _ in 0..70 {
            let mut c = SandboxClient::new(channel.clone());
            let req = read();
            unread.push(tokio::spawn(async move { c.read_file(req).await.is_ok() }));
        }
        deaf.push(channel);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut reader = fresh_client(local.addr).await;
    let t = Instant::now();
    match reader.read_file(read()).await {
        Ok(_) => panic!("a read past the budget was answered"),
        Err(e) => assert_eq!(
            crate::common::reason(&e),
            "REPLIES_UNREAD",
            "{}",
            e.message()
        ),
    }
    assert!(
        t.elapsed() >= Duration::from_secs(5),
        "it waited first: {:?}",
        t.elapsed()
    );
    // The unread replies go with their connections; the budget comes back.
    for call in unread {
        call.abort();
    }
    drop(deaf);
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match reader.read_file(read()).await {
            Ok(r) => {
                assert_eq!(r.into_inner().content.len(), 256 << 10);
                break;
            }
            Err(e) if Instant::now() < until => {
                assert_eq!(
                    crate::common::reason(&e),
                    "REPLIES_UNREAD",
                    "{}",
                    e.message()
                );
            }
            Err(e) => panic!("the budget did not come back: {}", e.message()),
        }
    }
    local.stop().await.unwrap();
}

/// The metrics listener: idle strangers and a slow request do not keep a
/// scrape out, and are closed at its read deadline (5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_to_the_metrics_endpoint_do_not_keep_a_scrape_out() {
    let local = service(ConnectionLimits::default(), |c| {
        c.metrics = Some(Arc::new(sandboxd::metrics::Metrics::new()));
    })
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let endpoint = tokio::spawn(sandboxd::server::serve_metrics(
        listener,
        Arc::clone(&local.registry),
    ));
    let strangers = idle(addr, 1000).await;
    let slow = tokio::spawn(async move {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        let t = Instant::now();
        for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" {
            if conn.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        let mut reply = Vec::new();
        let _ = conn.read_to_end(&mut reply).await;
        (t.elapsed(), reply)
    });
    let t = Instant::now();
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_string(&mut reply))
        .await
        .expect("the scrape is answered")
        .unwrap();
    let scraped = t.elapsed();
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    assert!(scraped < Duration::from_secs(5), "{scraped:?}");
    assert_eq!(closed(strangers, Duration::from_secs(15)).await, 1000);
    let (after, reply) = slow.await.unwrap();
    assert!(reply.is_empty(), "a request sent too slowly gets no answer");
    assert!(after < Duration::from_secs(10), "{after:?}");
    endpoint.abort();
    local.stop().await.unwrap();
}

/// Under TLS the deadline covers the TLS handshake too: a client that
/// starts a ClientHello and stops is closed at the deadline (2 s here),
/// well before the TLS layer's own 10 s; a client that completes it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_tls_handshake_is_closed_at_the_deadline() {
    use rcgen::{CertificateParams, KeyPair};
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    // Served directly: a local service's own client speaks plain text.
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path().join("state"));
    config.sandbox = sandboxd::session::SandboxConfig::new(&format!(
        "sandboxd-test-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    ));
    let engine = Arc::new(sandboxd::sandbox::docker::DockerRuntime::new(Some(
        NO_DOCKER.into(),
    )));
    let registry = Arc::new(sandboxd::session::Registry::new(config, engine).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(sandboxd::server::serve(
        listener,
        registry,
        Duration::from_secs(5),
        Access {
            token: Some("tls-token".into()),
            tls: Some(sandboxd::server::TlsIdentity {
                cert_pem: cert.pem().into_bytes(),
                key_pem: key.serialize_pem().into_bytes(),
            }),
            connections: ConnectionLimits {
                max: 64,
                handshake: Duration::from_secs(2),
                per_session: 4,
            },
            ..Default::default()
        },
        async {
            let _ = stopped.await;
        },
    ));
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    // A TLS record header announcing a ClientHello, and nothing more.
    stalled
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00])
        .await
        .unwrap();
    let t = Instant::now();
    assert_eq!(closed(vec![stalled], Duration::from_secs(15)).await, 1);
    let after = t.elapsed();
    assert!(after < Duration::from_secs(7), "closed after {after:?}");
    let channel = Endpoint::from_shared(format!("https://localhost:{}", addr.port()))
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(cert.pem()))
                .domain_name("localhost"),
        )
        .unwrap()
        .connect()
        .await
        .unwrap();
    SandboxClient::new(channel)
        .list_sessions(with("tls-token", pb::ListSessionsRequest::default()))
        .await
        .unwrap();
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

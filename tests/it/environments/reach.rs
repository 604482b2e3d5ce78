//! Where a build reaches on the caller's behalf: never this host. The
//! engine would fetch an `ADD` URL from its own network namespace (the
//! host's, where loopback-only services answer), so remote sources are
//! refused before the engine sees the recipe; `RUN` steps run on a bridge
//! the host refuses traffic from; images read by `COPY --from` are local
//! ones, part of the environment's key.

use std::io::Read as _;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A "secret" only this host serves: a listener on `addr` that answers
/// every connection with `secret` and counts them (bounded: it stops when
/// the returned guard is dropped).
struct Secret {
    port: u16,
    connections: Arc<AtomicUsize>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Secret {
    fn serve(addr: &str, secret: &str) -> Secret {
        let listener = TcpListener::bind(addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (count, stopped, body) = (
            Arc::clone(&connections),
            Arc::clone(&stop),
            format!(
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{secret}",
                secret.len()
            ),
        );
        std::thread::spawn(move || {
            // At most ten minutes, whatever happens.
            for _ in 0..60_000 {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                match listener.accept() {
                    Ok((mut s, _)) => {
                        count.fetch_add(1, Ordering::Relaxed);
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                        let mut buf = [0u8; 1024];
                        let _ = s.read(&mut buf);
                        let _ = std::io::Write::write_all(&mut s, body.as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Secret {
            port,
            connections,
            stop,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// This host's own addresses (IPv4 and IPv6, loopback included), as `ip`
/// lists them.
fn host_addresses() -> Vec<String> {
    let out = Command::new("ip")
        .args(["-o", "addr", "show"])
        .output()
        .expect("ip (iproute2) lists the host's addresses");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut addrs: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace().skip(2);
            let family = w.next()?;
            let addr = w.next()?.split('/').next()?.to_string();
            match family {
                "inet" => Some(addr),
                "inet6" if !addr.starts_with("fe80") => Some(format!("[{addr}]")),
                _ => None,
            }
        })
        .collect();
    addrs.sort();
    addrs.dedup();
    addrs
}

/// Every spelling of this host in an `ADD` (and its neighbours: `COPY`,
/// `ONBUILD`, JSON form, flags, continuations, variables, git) is refused
/// before the engine is asked anything: the secret's listener never sees a
/// connection, and nothing is built.
#[tokio::test]
async fn remote_sources_are_refused_before_the_engine_fetches_anything() {
    let srv = builder_server(|_| {}).await;
    let secret = Secret::serve("127.0.0.1:0", "loopback-only-secret");
    let p = secret.port;
    let name = unique("reach");
    let _cleanup = Cleanup(vec![name.clone()]);
    let hostname = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let mut urls: Vec<String> = [
        "127.0.0.1",
        "localhost",
        hostname.as_str(),
        "127.1",
        "127.0.0.2",
        "0x7f000001",
        "2130706433",
        "0177.0.0.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "172.17.0.1",
    ]
    .iter()
    .map(|h| format!("http://{h}:{p}/secret"))
    .collect();
    urls.extend(
        host_addresses()
            .iter()
            .map(|a| format!("http://{a}:{p}/secret")),
    );
    // Every name /etc/hosts gives this host.
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    for line in hosts.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let mut words = line.split_whitespace();
        if let Some(addr) = words.next()
            && (addr.starts_with("127.") || addr == "::1")
        {
            urls.extend(words.map(|n| format!("http://{n}:{p}/secret")));
        }
    }
    // An address that is not this host's is refused as well: it could
    // redirect to one that is.
    urls.push("https://deb.debian.org/debian/README".into());
    let base = "FROM sandboxd-default:latest";
    let mut recipes: Vec<String> = Vec::new();
    for url in &urls {
        recipes.push(format!("{base}\nADD {url} /s\n"));
    }
    let url = &urls[0];
    for form in [
        format!("add --chown=0:0 {url} /s"),
        format!("ADD --checksum=sha256:0000 {url} /s"),
        format!("ADD [\"{url}\", \"/s\"]"),
        format!("ADD --chown=0:0 [\"{url}\", \"/s\"]"),
        format!("ADD \\\n    {url} \\\n    /s"),
        format!("ADD \"{url}\" /s"),
        format!("ARG U={url}\nADD ${{U}} /s"),
        format!("ENV U={url}\nADD $U /s"),
        format!("COPY {url} /s"),
        format!("ONBUILD ADD {url} /s"),
        "ADD git@127.0.0.1:repo.git /r".to_string(),
        format!("ADD git://127.0.0.1:{p}/repo.git /r"),
    ] {
        recipes.push(format!("{base}\n{form}\n"));
    }
    recipes.push(format!("{base} AS one\nRUN true\nFROM one\nADD {url} /s\n"));
    recipes.push(format!("# escape=`\n{base}\nADD `\n    {url} /s\n"));
    recipes.push(format!(
        "#Escape = `\n{base}\nRUN true `\n  && true\nADD {url} /s\n"
    ));
    for recipe in &recipes {
        let (e, _) = build(&srv, dockerfile(&name, recipe)).await.unwrap_err();
        assert_eq!(reason(&e), "INVALID_RECIPE", "{recipe:?}: {e:?}");
        let m = e.message();
        assert!(m.contains("No environment was created or changed"), "{m}");
        if recipe.contains("://") && !recipe.contains('$') && !recipe.contains('"') {
            assert!(m.contains("RUN curl"), "{recipe:?}: {m}");
        }
    }
    // Directives the engine reads and sandboxd does not: refused.
    for recipe in [
        format!("# syntax=docker/dockerfile:1\n{base}\n"),
        format!("# escape=`\n# escape=\\\n{base}\n"),
        format!("# escape=`x\n{base}\n"),
    ] {
        let (e, _) = build(&srv, dockerfile(&name, &recipe)).await.unwrap_err();
        assert_eq!(reason(&e), "INVALID_RECIPE", "{recipe:?}: {e:?}");
    }
    assert_eq!(secret.connections(), 0, "the secret was fetched");
    assert!(!image_exists(&format!("sandboxd-env/{name}:latest")));
    srv.stop().await;
}

/// A `RUN` step has the network beyond the host, never the host: not at
/// docker0's address, not at its own bridge's gateway, not at the host's
/// other addresses (IPv4 or IPv6), and its own loopback is not the host's.
/// A service listening on every address of the host is never reached.
#[tokio::test]
async fn build_steps_never_reach_this_host() {
    let srv = builder_server(|_| {}).await;
    // Every address of the host, IPv4 and IPv6 alike.
    let secret = Secret::serve("[::]:0", "host-only-secret");
    let p = secret.port;
    let name = unique("fenced");
    let _cleanup = Cleanup(vec![name.clone()]);
    let mut targets = vec![
        "127.0.0.1".to_string(),
        "172.17.0.1".to_string(),
        "GATEWAY".to_string(),
    ];
    targets.extend(host_addresses());
    // The step tries each address with a short timeout and prints what it
    // got; the build itself succeeds either way.
    let probe = format!(
        "import socket, sys\n\
         gw = None\n\
         for line in open('/proc/net/route').read().splitlines()[1:]:\n\
         \x20   f = line.split()\n\
         \x20   if f[1] == '00000000':\n\
         \x20       gw = socket.inet_ntoa(bytes.fromhex(f[2])[::-1])\n\
         for t in sys.argv[1:]:\n\
         \x20   t = gw if t == 'GATEWAY' else t\n\
         \x20   host = t.strip('[]')\n\
         \x20   fam = socket.AF_INET6 if ':' in host else socket.AF_INET\n\
         \x20   try:\n\
         \x20       s = socket.socket(fam, socket.SOCK_STREAM)\n\
         \x20       s.settimeout(3)\n\
         \x20       s.connect((host, {p}))\n\
         \x20       s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n\
         \x20       print('PROBE', t, 'REACHED', s.recv(200))\n\
         \x20   except Exception as e:\n\
         \x20       print('PROBE', t, 'blocked', type(e).__name__)\n"
    );
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(probe.len() as u64);
    header.set_mode(0o644);
    tar.append_data(&mut header, "probe.py", probe.as_bytes())
        .unwrap();
    let recipe = format!(
        "FROM sandboxd-default:latest\nCOPY probe.py /probe.py\nRUN python3 /probe.py {}\n",
        targets.join(" ")
    );
    let built = build(
        &srv,
        pb::BuildEnvironmentRequest {
            context: tar.into_inner().unwrap(),
            ..dockerfile(&name, &recipe)
        },
    )
    .await
    .unwrap_or_else(|(e, b)| panic!("{e:?}\n{}", b.output));
    let probed: Vec<&str> = built
        .output
        .lines()
        .filter(|l| l.starts_with("PROBE "))
        .collect();
    assert_eq!(probed.len(), targets.len(), "{}", built.output);
    assert!(
        probed.iter().all(|l| l.contains(" blocked ")),
        "a build step reached this host: {probed:#?}"
    );
    assert!(!built.output.contains("host-only-secret"));
    assert_eq!(secret.connections(), 0);
    delete(&srv, &name).await.unwrap();
    srv.stop().await;
}

/// `COPY --from=IMAGE` reads a local image like a base: one that is not
/// present is refused by name, and the image's id is part of the key, so
/// a rebuilt image gives a new environment, never the cached one.
#[tokio::test]
async fn copy_from_an_image_is_a_base_whose_id_is_in_the_key() {
    let srv = builder_server(|_| {}).await;
    let (source, user) = (unique("source"), unique("user"));
    let _cleanup = Cleanup(vec![source.clone(), user.clone()]);
    let source_recipe =
        |word: &str| format!("FROM sandboxd-default:latest\nRUN echo {word} > /f\n");
    build(&srv, dockerfile(&source, &source_recipe("one")))
        .await
        .unwrap();
    let recipe =
        format!("FROM sandboxd-default:latest\nCOPY --from=sandboxd-env/{source}:latest /f /f\n");
    let first = build(&srv, dockerfile(&user, &recipe)).await.unwrap();
    assert!(!first.done().cached);
    let again = build(&srv, dockerfile(&user, &recipe)).await.unwrap();
    assert!(again.done().cached);
    build(&srv, dockerfile(&source, &source_recipe("two")))
        .await
        .unwrap();
    let rebuilt = build(&srv, dockerfile(&user, &recipe)).await.unwrap();
    assert!(!rebuilt.done().cached, "the cached build of the old image");
    assert_ne!(rebuilt.environment().image_id, first.environment().image_id);
    let out = Command::new("docker")
        .args(["run", "--rm", "--network", "none", "--entrypoint", "cat"])
        .arg(&rebuilt.environment().image_id)
        .arg("/f")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "two\n");

    let (missing, _) = build(
        &srv,
        dockerfile(
            &user,
            "FROM sandboxd-default:latest\nCOPY --from=no-such-image:1 /f /f\n",
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(reason(&missing), "IMAGE_NOT_FOUND", "{missing:?}");
    assert!(missing.message().contains("no-such-image:1"));
    let mount = "FROM sandboxd-default:latest\n\
                 RUN --mount=type=bind,from=no-such-image:2,target=/t true\n";
    let (mounted, _) = build(&srv, dockerfile(&user, mount)).await.unwrap_err();
    assert_eq!(reason(&mounted), "IMAGE_NOT_FOUND", "{mounted:?}");
    assert!(mounted.message().contains("no-such-image:2"));
    for bad in [
        "FROM sandboxd-default:latest\nARG I=x\nCOPY --from=$I /f /f\n",
        "FROM sandboxd-default:latest\nRUN --network=host true\n",
    ] {
        let (e, _) = build(&srv, dockerfile(&user, bad)).await.unwrap_err();
        assert_eq!(reason(&e), "INVALID_RECIPE", "{bad:?}: {e:?}");
    }
    delete(&srv, &user).await.unwrap();
    delete(&srv, &source).await.unwrap();
    srv.stop().await;
}

/// A base image's own `ONBUILD` triggers run in a build FROM it: one that
/// would fetch from this host is refused like the recipe's own `ADD`, and
/// nothing is fetched.
#[tokio::test]
async fn a_bases_onbuild_triggers_are_checked_like_the_recipe() {
    let srv = builder_server(|_| {}).await;
    let secret = Secret::serve("127.0.0.1:0", "loopback-only-secret");
    let name = unique("trigger");
    let _cleanup = Cleanup(vec![name.clone()]);
    // An image made outside sandboxd, carrying the trigger (the engine
    // only stores it: triggers run in the builds of its children).
    let base = format!("sandboxd-test-trigger:{name}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        format!(
            "FROM sandboxd-default:latest\nONBUILD ADD http://127.0.0.1:{}/secret /s\n",
            secret.port
        ),
    )
    .unwrap();
    let made = Command::new("docker")
        .args(["build", "-q", "-t", &base])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    struct Rmi(String);
    impl Drop for Rmi {
        fn drop(&mut self) {
            let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
        }
    }
    let _rmi = Rmi(base.clone());
    let (e, _) = build(&srv, dockerfile(&name, &format!("FROM {base}\nRUN true\n")))
        .await
        .unwrap_err();
    assert_eq!(reason(&e), "INVALID_RECIPE", "{e:?}");
    assert!(e.message().contains("ONBUILD trigger"), "{}", e.message());
    assert!(e.message().contains("RUN curl"), "{}", e.message());
    assert_eq!(secret.connections(), 0, "the trigger fetched the secret");
    assert!(!image_exists(&format!("sandboxd-env/{name}:latest")));
    srv.stop().await;
}

//! Who sees what: no route answers a stranger with anything of a
//! session; the operator's token sees every session and the health page;
//! a session's token sees its own session alone; the approver's token and
//! made-up tokens are refused at the login; a logged-out cookie is dead.

use super::{ADMIN, APPROVER, Served};

/// Every route of the view, with `{a}` for a session id.
const ROUTES: [&str; 9] = [
    "/",
    "/parts/builds",
    "/health",
    "/environments",
    "/sessions/{a}",
    "/sessions/{a}/changes",
    "/sessions/{a}/plan",
    "/parts/sessions",
    "/parts/sessions/{a}/timeline",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_shows_anything_without_a_token_and_each_token_sees_its_own() {
    let served = Served::start(false).await;
    let (a, a_token) = served.session();
    let (b, _) = served.session();
    let route = |r: &str, id: &str| r.replace("{a}", id);

    // A stranger: sent to the login form, or refused, and told nothing.
    for r in ROUTES {
        let reply = served.get(&route(r, &a), None);
        assert!(
            matches!(reply.status, 303 | 401),
            "{r} answered a stranger: {reply:?}"
        );
        assert!(
            !reply.body.contains(&a) && !reply.body.contains(&b),
            "{r}: {reply:?}"
        );
        if reply.status == 303 {
            assert_eq!(reply.header("location"), Some("/login"), "{r}");
        }
    }
    let form = served.get("/login", None);
    assert_eq!(form.status, 200);
    assert!(form.body.contains("type=\"password\""), "{}", form.body);

    // Tokens that are not a viewer's.
    for (token, says) in [
        ("made-up", "not one of this service"),
        (APPROVER, "approver"),
    ] {
        let reply = served.post("/login", &format!("token={token}"), None);
        assert_eq!(reply.status, 401, "{reply:?}");
        assert!(reply.header("set-cookie").is_none(), "{reply:?}");
        assert!(reply.body.contains(says), "{}", reply.body);
    }
    // A made-up cookie is a stranger's.
    let forged = served.get("/", Some("sandboxd_view=00ff00ff"));
    assert_eq!(forged.status, 303);

    // The operator sees both sessions, everywhere.
    let admin = served.login(ADMIN);
    for r in ROUTES {
        let reply = served.get(&route(r, &a), Some(&admin));
        assert_eq!(reply.status, 200, "{r}: {reply:?}");
    }
    let list = served.get("/", Some(&admin)).body;
    assert!(list.contains(&a) && list.contains(&b), "{list}");
    // Without an engine, the health page says so.
    let health = served.get("/health", Some(&admin)).body;
    assert!(health.contains("does not answer"), "{health}");
    assert!(health.contains("Sessions open</dt><dd>2<"), "{health}");
    assert_eq!(
        served.get(&format!("/sessions/{b}"), Some(&admin)).status,
        200
    );

    // A session's token sees that session alone.
    let own = served.login(&a_token);
    let list = served.get("/", Some(&own)).body;
    assert!(list.contains(&a) && !list.contains(&b), "{list}");
    let part = served.get("/parts/sessions", Some(&own)).body;
    assert!(part.contains(&a) && !part.contains(&b), "{part}");
    assert_eq!(
        served.get(&format!("/sessions/{a}"), Some(&own)).status,
        200
    );
    for r in [
        "/sessions/{a}",
        "/sessions/{a}/changes",
        "/sessions/{a}/plan",
        "/parts/sessions/{a}/timeline",
        "/health",
        "/environments",
        "/parts/builds",
    ] {
        let reply = served.get(&route(r, &b), Some(&own));
        assert_eq!(reply.status, 404, "{r}: {reply:?}");
        assert!(!reply.body.contains(&b), "{r}: {}", reply.body);
    }

    // Logged out, the cookie no longer works.
    let out = served.post("/logout", "", Some(&own));
    assert_eq!(out.status, 303);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(served.get("/", Some(&own)).status, 303);
    // The operator's view is another cookie, still valid.
    assert_eq!(served.get("/", Some(&admin)).status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_forbids_foreign_scripts_framing_and_caching() {
    let served = Served::start(false).await;
    let admin = served.login(ADMIN);
    for path in ["/login", "/", "/health", "/assets/live.js", "/nothing"] {
        let reply = served.get(path, Some(&admin));
        let csp = reply.header("content-security-policy").unwrap_or_default();
        assert!(
            csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{path}: {csp}"
        );
        assert_eq!(reply.header("x-frame-options"), Some("DENY"), "{path}");
        assert_eq!(reply.header("cache-control"), Some("no-store"), "{path}");
    }
}

/// A web view that anyone on the network could reach, of a service with
/// no token its viewers could log in with, is refused at start.
#[test]
fn a_tokenless_service_serves_its_view_on_loopback_only() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(crate::common::SANDBOXD)
        .args(["serve", "--listen", "127.0.0.1:0", "--no-token"])
        .args(["--web-listen", "0.0.0.0:0", "--pool-size", "0"])
        .args(["--docker-host", crate::common::NO_DOCKER])
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env_remove("SANDBOXD_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--web-listen") && err.contains("loopback"),
        "{err}"
    );
}

/// One token's logins push out its own oldest cookie only: a session's
/// holder logging in again and again never logs the operator out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_logins_never_log_the_operator_out() {
    let served = Served::start(false).await;
    let (_, token) = served.session();
    let admin = served.login(ADMIN);
    let first = served.login(&token);
    for _ in 0..40 {
        served.login(&token);
    }
    assert_eq!(
        served.get("/", Some(&admin)).status,
        200,
        "the operator was logged out"
    );
    assert_eq!(
        served.get("/", Some(&first)).status,
        303,
        "its own oldest stays"
    );
}

/// A session's viewer cookie dies with its session, as its token does:
/// after CloseSession the cookie opens nothing, and the operator's stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_cookie_dies_with_its_session() {
    let served = Served::start(false).await;
    let (id, token) = served.session();
    let admin = served.login(ADMIN);
    let viewer = served.login(&token);
    let page = format!("/sessions/{id}");
    assert_eq!(served.get(&page, Some(&viewer)).status, 200);
    let (code, out) = served.cli(None, &["session", "close", &id]);
    assert_eq!(code, 0, "{out}");
    for path in ["/", page.as_str()] {
        let reply = served.get(path, Some(&viewer));
        assert_eq!(
            reply.status, 303,
            "{path} with a dead session's cookie: {reply:?}"
        );
    }
    assert_eq!(served.get("/", Some(&admin)).status, 200);
}

/// A view on loopback answers to its loopback name only, token or not: a
/// form whose `Host` and `Origin` both name another site (a name rebound
/// to 127.0.0.1) is refused, and so is a page asked for by that name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_on_loopback_answers_to_loopback_names_only() {
    let served = Served::start(false).await;
    let form = format!("token={ADMIN}");
    let port = served.web.rsplit_once(':').unwrap().1.to_string();
    let forged = format!(
        "POST /login HTTP/1.1\r\nHost: evil.example:{port}\r\nOrigin: http://evil.example:{port}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
        form.len()
    );
    let reply = served.raw(&forged);
    assert!(reply.starts_with("HTTP/1.1 421"), "{reply}");
    assert!(
        !reply.to_ascii_lowercase().contains("set-cookie"),
        "{reply}"
    );
    let page = served.raw(&format!(
        "GET /login HTTP/1.1\r\nHost: evil.example:{port}\r\nConnection: close\r\n\r\n"
    ));
    assert!(page.starts_with("HTTP/1.1 421"), "{page}");
    // Its own names still work.
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let page = served.raw(&format!(
            "GET /login HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        ));
        assert!(page.starts_with("HTTP/1.1 200"), "{host}: {page}");
    }
}

/// Forms are taken from the view's own pages only, and small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_from_other_sites_and_large_bodies_are_refused() {
    let served = Served::start(false).await;
    let form = format!("token={ADMIN}");
    for extra in [
        "Origin: http://evil.example\r\n",
        "Sec-Fetch-Site: cross-site\r\n",
    ] {
        let reply = served.raw(&format!(
            "POST /login HTTP/1.1\r\nHost: {}\r\n{extra}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
            served.web,
            form.len()
        ));
        assert!(reply.starts_with("HTTP/1.1 403"), "{extra}: {reply}");
        assert!(
            !reply.contains("Set-Cookie") && !reply.contains("set-cookie"),
            "{reply}"
        );
    }
    let same = served.raw(&format!(
        "POST /login HTTP/1.1\r\nHost: {0}\r\nOrigin: http://{0}\r\nSec-Fetch-Site: same-origin\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {1}\r\nConnection: close\r\n\r\n{form}",
        served.web,
        form.len()
    ));
    assert!(same.starts_with("HTTP/1.1 303"), "{same}");
    let big = format!("token={}", "x".repeat(100_000));
    let reply = served.raw(&format!(
        "POST /login HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{big}",
        served.web,
        big.len()
    ));
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
}

/// Without a token, the view answers only to its loopback name (a page
/// of another site cannot reach it through a name rebound to 127.0.0.1),
/// and a service private to its user (a Unix socket) serves no view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokenless_view_answers_to_loopback_only_and_never_widens_a_private_service() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(crate::common::SANDBOXD)
        .args(["serve", "--pool-size", "0"])
        .arg("--listen")
        .arg(format!("unix:{}", dir.path().join("s.sock").display()))
        .args(["--web-listen", "127.0.0.1:0"])
        .args(["--docker-host", crate::common::NO_DOCKER])
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env_remove("SANDBOXD_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--web-listen") && err.contains("Unix socket"),
        "{err}"
    );

    let served = Served::start_open().await;
    let ok = served.raw(&format!(
        "GET / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        served.web
    ));
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let rebound =
        served.raw("GET / HTTP/1.1\r\nHost: attacker.example:80\r\nConnection: close\r\n\r\n");
    assert!(rebound.starts_with("HTTP/1.1 421"), "{rebound}");
}

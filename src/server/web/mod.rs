//! The read-only web view (`serve --web-listen`): the sessions, each
//! session's timeline of calls with its refusals, and the service's
//! health, for the people responsible for what agents do. Nothing here
//! changes a session: sessions are looked up without touching their idle
//! clock, and no handler calls a tool.
//!
//! Its listener goes through a [`Gate`] like the gRPC one: a connection is
//! closed at the handshake deadline unless a request carrying a valid
//! viewer cookie vouches for it, so a stranger's connections cost a
//! bounded amount; a session's viewer vouches for at most its share.
//! Every answer forbids framing, caching and every script but the
//! service's own.

mod auth;
mod command_page;
mod commands;
mod pages;
mod tabs;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::Markup;
use tokio::net::TcpListener;

use super::listener::{Admission, ConnectionLimits, Gate, incoming};
use super::{Access, BearerAuth};
use crate::session::{Caller, Registry};
pub use auth::COOKIE;
use auth::Viewers;

/// Connections the web listener keeps open at once.
const CONNECTIONS: usize = 256;
/// Connections one session's viewer keeps vouched for at once.
const PER_SESSION: usize = 8;
/// Largest request body (a login form).
const BODY_BYTES: usize = 4096;

struct Web {
    registry: Arc<Registry>,
    viewers: Viewers,
    lives: commands::Lives,
    /// The view listens on a loopback address: it answers to a loopback
    /// `Host` only.
    loopback: bool,
    /// Paces wrong tokens given to the login form.
    throttle: super::throttle::Throttle,
}

type Shared = State<Arc<Web>>;

/// Serves the web view on `listener` until the task is dropped. Without a
/// service token in `access`, every viewer is the operator: the caller
/// allows that on a loopback address only.
pub async fn serve_web(listener: TcpListener, registry: Arc<Registry>, access: &Access) {
    let open = access.token.is_none();
    let loopback = listener.local_addr().map_or(open, |a| a.ip().is_loopback());
    let web = Arc::new(Web {
        loopback,
        throttle: super::throttle::Throttle::new(registry.metrics()),
        viewers: Viewers::new(BearerAuth::new(access, Arc::clone(&registry)), open),
        registry,
        lives: commands::Lives::default(),
    });
    let live = super::session_liveness(&web.registry);
    let router = router(web);
    let gate = Gate::watching(
        ConnectionLimits {
            max: CONNECTIONS,
            handshake: access.connections.handshake,
            per_session: PER_SESSION,
        },
        live,
    );
    let mut conns = incoming(listener, gate);
    while let Some(conn) = conns.next().await {
        let admission = conn.admission().clone();
        let service = router.clone().layer(axum::Extension(admission));
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(conn);
            let service = hyper_util::service::TowerToHyperService::new(service);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

fn router(web: Arc<Web>) -> Router {
    Router::new()
        .route("/", get(sessions_page))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/health", get(health_page))
        .route("/environments", get(environments_page))
        .route("/parts/builds", get(builds_part))
        .route("/sessions/{id}", get(session_page))
        .route("/sessions/{id}/changes", get(tabs::changes))
        .route("/sessions/{id}/plan", get(tabs::plan))
        .route("/sessions/{id}/commands/{seq}", get(commands::command))
        .route("/sessions/{id}/commands/{seq}/live", get(commands::live))
        .route("/parts/sessions", get(sessions_part))
        .route("/parts/sessions/{id}/timeline", get(timeline_part))
        .route("/assets/style.css", get(style))
        .route("/assets/live.js", get(script))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&web),
            guard,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(BODY_BYTES))
        .layer(axum::middleware::map_response(harden))
        .with_state(web)
}

/// Refuses what no page of the view should take: a form posted from
/// another site (a login or logout it did not choose), and, when the view
/// listens on loopback (always, when every viewer is the operator), a
/// `Host` that is not this machine's loopback (a page of another site
/// reaching it through a name it rebound to 127.0.0.1, its `Origin`
/// matching that name).
async fn guard(
    State(web): Shared,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let headers = request.headers();
    let header = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if request.method() == axum::http::Method::POST {
        let site = header("sec-fetch-site");
        let cross = matches!(site, Some(site) if site != "same-origin" && site != "none");
        let host = header("host").unwrap_or_default();
        // A browser that hides the origin says "null"; then its own word
        // that the form is this site's (Sec-Fetch-Site) is needed.
        let foreign_origin = header("origin").is_some_and(|origin| match origin {
            "null" => site != Some("same-origin"),
            origin => origin
                .split_once("://")
                .is_none_or(|(_, rest)| rest != host),
        });
        if cross || foreign_origin {
            return (
                StatusCode::FORBIDDEN,
                "forms are taken from this view's own pages only\n",
            )
                .into_response();
        }
    }
    if web.loopback || web.viewers.open() {
        let host = header("host").unwrap_or_default();
        let name = match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        };
        if !matches!(name, "127.0.0.1" | "localhost" | "[::1]") {
            return (
                StatusCode::MISDIRECTED_REQUEST,
                "this view answers to its loopback address only\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// Headers every answer carries.
async fn harden(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// A request without a valid viewer cookie.
struct Stranger;

impl IntoResponse for Stranger {
    /// A page sends a stranger to the login form.
    fn into_response(self) -> Response {
        Redirect::to("/login").into_response()
    }
}

/// Why a page of a session is not shown.
enum Away {
    /// No valid viewer cookie: to the login form.
    Stranger,
    /// No such session, or not the viewer's.
    NotFound,
}

impl IntoResponse for Away {
    fn into_response(self) -> Response {
        match self {
            Away::Stranger => Stranger.into_response(),
            Away::NotFound => not_found_page(),
        }
    }
}

/// Session `id`, for the viewer of a request (vouching for its
/// connection), looked at without being touched.
fn viewed(
    web: &Web,
    headers: &HeaderMap,
    admission: &Admission,
    id: &str,
) -> Result<Arc<crate::session::Session>, Away> {
    let caller = viewer(web, headers, admission).map_err(|Stranger| Away::Stranger)?;
    web.registry
        .observe(&caller, id)
        .map_err(|_| Away::NotFound)
}

/// The viewer of a request, vouching for its connection.
fn viewer(web: &Web, headers: &HeaderMap, admission: &Admission) -> Result<Caller, Stranger> {
    let Some(caller) = web.viewers.viewer(headers) else {
        return Err(Stranger);
    };
    // Without a token every viewer is the operator: they vouch for a
    // share of connections, like one session, so none can hold them all.
    let session = match &caller {
        Caller::Session(id) => Some(id.as_str()),
        Caller::Admin if web.viewers.open() => Some("(no token)"),
        Caller::Admin | Caller::Approver => None,
    };
    admission.vouch(session);
    Ok(caller)
}

fn html(markup: Markup) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

fn not_found_page() -> Response {
    (
        StatusCode::NOT_FOUND,
        html(pages::page(
            "Not found",
            true,
            maud::html! { h1 { "Not found" } p { "Nothing here, or nothing you may see." } },
        )),
    )
        .into_response()
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found\n").into_response()
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/style.css"),
    )
        .into_response()
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/live.js"),
    )
        .into_response()
}

async fn login_page(State(web): Shared) -> Response {
    if web.viewers.open() {
        return Redirect::to("/").into_response();
    }
    html(pages::login(None))
}

#[derive(serde::Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(State(web): Shared, Form(form): Form<LoginForm>) -> Response {
    match web.viewers.login(&form.token) {
        Ok(cookie) => (
            [(header::SET_COOKIE, auth::set_cookie(&cookie))],
            Redirect::to("/"),
        )
            .into_response(),
        Err(why) => {
            let message = match why {
                auth::Refused::Unknown => {
                    web.throttle.failed().await;
                    "That token is not one of this service's."
                }
                auth::Refused::Approver => {
                    "The approver's token decides what waits for a person, and sees no session here."
                }
            };
            (StatusCode::UNAUTHORIZED, html(pages::login(Some(message)))).into_response()
        }
    }
}

async fn logout(State(web): Shared, headers: HeaderMap) -> Response {
    web.viewers.logout(&headers);
    (
        [(header::SET_COOKIE, auth::clear_cookie())],
        Redirect::to("/login"),
    )
        .into_response()
}

async fn rows(web: &Web, caller: &Caller) -> Vec<pages::Row> {
    let mut rows = Vec::new();
    for info in web.registry.list(caller).await {
        if let Ok(session) = web.registry.observe(caller, &info.id) {
            rows.push(pages::Row {
                tally: session.journal.tally(),
                info,
            });
        }
    }
    rows
}

async fn sessions_page(
    State(web): Shared,
    headers: HeaderMap,
    axum::Extension(admission): axum::Extension<Admission>,
) -> Response {
    match viewer(&web, &headers, &admission) {
        Ok(caller) => html(pages::sessions(&rows(&web, &caller).await)),
        Err(away) => away.into_response(),
    }
}

async fn sessions_part(
    State(web): Shared,
    headers: HeaderMap,
    axum::Extension(admission): axum::Extension<Admission>,
) -> Response {
    match viewer(&web, &headers, &admission) {
        Ok(caller) => html(pages::session_rows(&rows(&web, &caller).await)),
        Err(_) => StatusCode::UNAUTHORIZED.into_response(),
    }
}

async fn session_page(
    State(web): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    axum::Extension(admission): axum::Extension<Admission>,
) -> Response {
    let session = match viewed(&web, &headers, &admission, &id) {
        Ok(session) => session,
        Err(away) => return away.into_response(),
    };
    let info = session.info().await;
    let report = session.journal.report(None, None);
    let watched = pages::Watched {
        running: session.watch.running(),
        kept: session.watch.kept(),
        processes: session.process_list(),
    };
    html(pages::session(
        &info,
        &session.journal.tally(),
        &report,
        &watched,
    ))
}

async fn timeline_part(
    State(web): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    axum::Extension(admission): axum::Extension<Admission>,
) -> Response {
    let Ok(caller) = viewer(&web, &headers, &admission) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    match web.registry.observe(&caller, &id) {
        Ok(session) => html(pages::timeline(
            &id,
            &session.journal.report(None, None),
            &session.watch.kept(),
        )),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn health_page(
    State(web): Shared,
    headers: HeaderMap,
    axum::Extension(admission): axum::Extension<Admission>,
) -> Response {
    let caller = match viewer(&web, &headers, &admission) {
        Ok(caller) => caller,
        Err(away) => return away.into_response(),
    };
    if caller != Caller::Admin {
        return not_found_page();
    }
    let rows = rows(&web, &caller).await;
    let metrics = web.registry.encode_metrics();
    html(pages::health(&pages::Health {
        engine: web.registry.engine_reachable().await,
        sessions: rows.len(),
        running: rows.iter().map(|r| r.tally.running).sum(),
        pool: (web.registry.pool_ready(), web.registry.pool_size()),
        metrics: metrics.as_deref(),
    }))
}

async fn environments_page(
    State(web): Shared,
    headers: HeaderMap,
    axum::Extension(admission): axum::Extension<Admission>,
) -> Response {
    let caller = match viewer(&web, &headers, &admission) {
        Ok(caller) => caller,
        Err(away) => return away.into_response(),
    };
    if caller != Caller::Admin {
        return not_found_page();
    }
    let list = web
        .registry
        .list_environments()
        .await
        .map_err(|e| crate::session::failure::describe(&e).message);
    html(pages::environments(&list, &web.registry.builds_shown()))
}

async fn builds_part(
    State(web): Shared,
    headers: HeaderMap,
    axum::Extension(admission): axum::Extension<Admission>,
) -> Response {
    match viewer(&web, &headers, &admission) {
        Ok(Caller::Admin) => html(pages::build_list(&web.registry.builds_shown())),
        Ok(_) => StatusCode::NOT_FOUND.into_response(),
        Err(_) => StatusCode::UNAUTHORIZED.into_response(),
    }
}

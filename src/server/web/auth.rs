//! Who is looking: a token is entered once in the login form (never in a
//! URL) and exchanged for a random viewer cookie, `HttpOnly` and
//! `SameSite=Strict`, that names its holder to the service alone. The
//! operator's token sees every session; a session's token sees that
//! session only; the approver's token sees nothing here. A service run
//! without a token lets every viewer in as the operator, which the web
//! listener allows on loopback only.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;

use crate::server::BearerAuth;
use crate::session::Caller;

/// The viewer cookie's name.
pub const COOKIE: &str = "sandboxd_view";

/// Most viewer cookies alive at once; past it, the oldest of a session's
/// viewers is forgotten (the operator's last).
const MAX_VIEWERS: usize = 1024;
/// Most viewer cookies one token keeps; past it, its own oldest goes.
const PER_VIEWER: usize = 8;

/// How long a viewer cookie lasts.
const VIEWER_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// The viewers the service knows, by the sha256 of their cookie.
pub struct Viewers {
    auth: BearerAuth,
    /// No token is demanded anywhere: every viewer is the operator.
    open: bool,
    cookies: Mutex<HashMap<[u8; 32], (Caller, Instant)>>,
}

/// Why a login was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// No token of this service.
    Unknown,
    /// The approver's token: it decides, and sees nothing here.
    Approver,
}

impl Viewers {
    pub(super) fn new(auth: BearerAuth, open: bool) -> Viewers {
        Viewers {
            auth,
            open,
            cookies: Mutex::new(HashMap::new()),
        }
    }

    /// Whether no login is needed.
    pub fn open(&self) -> bool {
        self.open
    }

    /// Exchanges `token` for a fresh viewer cookie value.
    pub fn login(&self, token: &str) -> Result<String, Refused> {
        let given = format!("Bearer {}", token.trim());
        let caller = match self.auth.caller(given.as_bytes()) {
            Some((Caller::Approver, _)) => return Err(Refused::Approver),
            Some((caller, _)) => caller,
            None => return Err(Refused::Unknown),
        };
        let cookie = crate::secret::random_hex();
        let mut cookies = self.cookies.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        cookies.retain(|_, (caller, at)| {
            now.duration_since(*at) < VIEWER_LIFETIME && self.holds(caller)
        });
        // One token's logins push out its own oldest cookie, never
        // another's: a session's holder cannot log the operator out.
        let oldest = |cookies: &HashMap<[u8; 32], (Caller, Instant)>,
                      of: &dyn Fn(&Caller) -> bool| {
            cookies
                .iter()
                .filter(|(_, (c, _))| of(c))
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| *k)
        };
        let same = |c: &Caller| *c == caller;
        if cookies.values().filter(|(c, _)| same(c)).count() >= PER_VIEWER
            && let Some(k) = oldest(&cookies, &same)
        {
            cookies.remove(&k);
        }
        if cookies.len() >= MAX_VIEWERS {
            let not_operator = |c: &Caller| *c != Caller::Admin;
            if let Some(k) = oldest(&cookies, &not_operator).or_else(|| oldest(&cookies, &|_| true))
            {
                cookies.remove(&k);
            }
        }
        cookies.insert(crate::secret::sha256(cookie.as_bytes()), (caller, now));
        Ok(cookie)
    }

    /// Forgets the viewer cookie in `headers`, if any.
    pub fn logout(&self, headers: &HeaderMap) {
        if let Some(cookie) = cookie(headers) {
            self.cookies
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&crate::secret::sha256(cookie.as_bytes()));
        }
    }

    /// Who the request's viewer cookie names (the operator, when the
    /// service demands no token); `None` for a stranger.
    pub fn viewer(&self, headers: &HeaderMap) -> Option<Caller> {
        if self.open {
            return Some(Caller::Admin);
        }
        let cookie = cookie(headers)?;
        let cookies = self.cookies.lock().unwrap_or_else(|e| e.into_inner());
        let (caller, at) = cookies.get(&crate::secret::sha256(cookie.as_bytes()))?;
        (at.elapsed() < VIEWER_LIFETIME && self.holds(caller)).then(|| caller.clone())
    }

    /// Whether a cookie of `caller` still names someone: a session's
    /// cookie dies with its session (closed, expired), as its token does.
    fn holds(&self, caller: &Caller) -> bool {
        match caller {
            Caller::Session(id) => self.auth.registry.is_open(id),
            Caller::Admin | Caller::Approver => true,
        }
    }
}

/// The viewer cookie's value in `headers`.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// The `Set-Cookie` value that hands `value` to the browser.
pub fn set_cookie(value: &str) -> String {
    format!(
        "{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        VIEWER_LIFETIME.as_secs()
    )
}

/// The `Set-Cookie` value that makes the browser drop it.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

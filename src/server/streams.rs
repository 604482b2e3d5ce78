//! How many calls (HTTP/2 streams) a caller may hold open at once. Every
//! call holds memory in the service until it ends (its request, its
//! handler, its queued replies), and a caller that never reads its
//! replies keeps them all. The transport advertises [`PER_CONNECTION`]
//! streams per connection; this layer bounds, below that, the calls
//! without a valid token on each connection ([`STRANGER_STREAMS`]) and the
//! calls of each session's token on all connections together
//! ([`SESSION_STREAMS`]); the operator's calls only by the transport. It
//! answers TOO_MANY_STREAMS past them at
//! once, before any handler runs. A call's place comes back when its reply
//! ends or is dropped (the caller reset it or its connection closed).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;

use super::BearerAuth;
use super::listener::Admission;
use super::throttle::Throttle;
use crate::session::Caller;
use crate::session::ReplyBytes;

/// Streams one connection may open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`).
pub const PER_CONNECTION: u32 = 128;
/// Calls without a valid token one connection may have open at once (its
/// first call carrying a token needs one; a probe, one).
pub const STRANGER_STREAMS: usize = 4;
/// Calls carrying one session's token open at once, on all connections.
pub const SESSION_STREAMS: usize = 256;

/// What an open call is counted against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    /// The calls without a valid token on the connection of this number.
    Connection(u64),
    /// The calls carrying this session's token.
    Session(String),
}

/// The calls open now, by what they are counted against (a key leaves
/// when its last call ends).
#[derive(Debug, Default)]
struct Places(Mutex<HashMap<Key, usize>>);

impl Places {
    /// A place under `key` if fewer than `max` calls hold one.
    fn take(self: &Arc<Self>, key: Key, max: usize) -> Option<Place> {
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(key.clone()).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Place {
            places: Arc::clone(self),
            key,
        })
    }
}

/// One open call's place, given back when dropped.
#[derive(Debug)]
struct Place {
    places: Arc<Places>,
    key: Key,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self.places.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// The layer that bounds open calls. A call carrying a valid token
/// vouches for its connection here, before it is counted: a client's
/// first calls, sent together on a new connection, are never counted as
/// a stranger's.
/// A call carrying a wrong token is answered only when `throttle` says.
#[derive(Clone)]
pub struct StreamBudgetLayer {
    auth: BearerAuth,
    throttle: Arc<Throttle>,
    places: Arc<Places>,
}

impl StreamBudgetLayer {
    /// The layer, with `auth` telling valid tokens and `throttle` pacing
    /// wrong ones.
    pub fn new(auth: BearerAuth, throttle: Arc<Throttle>) -> StreamBudgetLayer {
        StreamBudgetLayer {
            auth,
            throttle,
            places: Arc::default(),
        }
    }
}

impl<S> tower::Layer<S> for StreamBudgetLayer {
    type Service = StreamBudget<S>;

    fn layer(&self, inner: S) -> StreamBudget<S> {
        StreamBudget {
            inner,
            auth: self.auth.clone(),
            throttle: Arc::clone(&self.throttle),
            places: Arc::clone(&self.places),
        }
    }
}

/// A service whose calls each hold a place while open.
#[derive(Clone)]
pub struct StreamBudget<S> {
    inner: S,
    auth: BearerAuth,
    throttle: Arc<Throttle>,
    places: Arc<Places>,
}

type Answer<E> = Pin<Box<dyn Future<Output = Result<http::Response<Body>, E>> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for StreamBudget<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Answer<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Answer<S::Error> {
        let admission = req.extensions().get::<Admission>();
        let given = req
            .headers()
            .get("authorization")
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        let caller = admission.and_then(|_| self.auth.caller(given));
        // A token was given and it is no token of this service.
        let wrong = admission.is_some() && caller.is_none() && !given.is_empty();
        if let (Some(admission), Some((caller, _))) = (admission, &caller)
            && !admission.vouched()
        {
            super::vouch_for(admission, caller);
        }
        // Charged to whoever the call's token names, whatever connection
        // it comes on.
        let wanted = admission.and_then(|a| match &caller {
            None => Some((
                Key::Connection(a.id()),
                STRANGER_STREAMS,
                "connection for calls without a valid token",
            )),
            Some((Caller::Session(id), _)) => {
                Some((Key::Session(id.clone()), SESSION_STREAMS, "session"))
            }
            Some((Caller::Admin | Caller::Approver, _)) => None,
        });
        let place = match wanted {
            None => None,
            Some((key, max, whose)) => match self.places.take(key, max) {
                Some(place) => Some(place),
                None => {
                    let refused =
                        tonic::Status::from(crate::error::Error::TooManyStreams { max, whose });
                    return Box::pin(std::future::ready(Ok(refused.into_http())));
                }
            },
        };
        let answer = self.inner.call(req);
        let throttle = wrong.then(|| Arc::clone(&self.throttle));
        Box::pin(async move {
            if let Some(throttle) = throttle {
                throttle.failed().await;
            }
            let mut res = answer.await?;
            // A reply's reservation of its session's budget, put there by
            // its handler, is held with the body too.
            let bytes = res.extensions_mut().remove::<ReplyBytes>();
            Ok(match place {
                None if bytes.is_none() => res,
                place => res.map(|body| {
                    Body::new(Held {
                        body,
                        _place: place,
                        _bytes: bytes,
                    })
                }),
            })
        })
    }
}

/// A reply body that holds its call's place (and its reservation of
/// unread reply bytes) until it ends or is dropped.
struct Held {
    body: Body,
    _place: Option<Place>,
    _bytes: Option<ReplyBytes>,
}

impl http_body::Body for Held {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

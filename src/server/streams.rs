//! How many calls (HTTP/2 streams) a caller may hold open at once. Every
//! call holds memory in the service until it ends (its request, its
//! handler, its queued replies), and a caller that never reads its
//! replies keeps them all. The transport advertises [`PER_CONNECTION`]
//! streams per connection; this layer bounds, below that, the calls
//! without a valid token on each connection and the calls of each
//! session's token on all connections (see [`Admission::open_stream`]),
//! answering TOO_MANY_STREAMS past them at
//! once, before any handler runs. A call's place comes back when its reply
//! ends or is dropped (the caller reset it or its connection closed).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;

use super::BearerAuth;
use super::listener::{Admission, Calling, StreamPlace};
use super::throttle::Throttle;
use crate::session::Caller;
use crate::session::ReplyBytes;

/// Streams one connection may open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`).
pub const PER_CONNECTION: u32 = 128;

/// The layer that bounds open calls. A call carrying a valid token
/// vouches for its connection here, before it is counted: a client's
/// first calls, sent together on a new connection, are never counted as
/// a stranger's.
/// A call carrying a wrong token is answered only when `throttle` says.
#[derive(Clone)]
pub struct StreamBudgetLayer {
    auth: BearerAuth,
    throttle: Arc<Throttle>,
}

impl StreamBudgetLayer {
    /// The layer, with `auth` telling valid tokens and `throttle` pacing
    /// wrong ones.
    pub fn new(auth: BearerAuth, throttle: Arc<Throttle>) -> StreamBudgetLayer {
        StreamBudgetLayer { auth, throttle }
    }
}

impl<S> tower::Layer<S> for StreamBudgetLayer {
    type Service = StreamBudget<S>;

    fn layer(&self, inner: S) -> StreamBudget<S> {
        StreamBudget {
            inner,
            auth: self.auth.clone(),
            throttle: Arc::clone(&self.throttle),
        }
    }
}

/// A service whose calls each hold a place while open.
#[derive(Clone)]
pub struct StreamBudget<S> {
    inner: S,
    auth: BearerAuth,
    throttle: Arc<Throttle>,
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
        let calling = match &caller {
            None => Calling::Stranger,
            Some((Caller::Session(id), _)) => Calling::Session(id),
            Some((Caller::Admin | Caller::Approver, _)) => Calling::Operator,
        };
        let place = match admission.map(|a| a.open_stream(calling)) {
            None => None,
            Some(Ok(place)) => Some(place),
            Some(Err((max, whose))) => {
                let refused =
                    tonic::Status::from(crate::error::Error::TooManyStreams { max, whose });
                return Box::pin(std::future::ready(Ok(refused.into_http())));
            }
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
    _place: Option<StreamPlace>,
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

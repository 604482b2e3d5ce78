//! What gRPC callers are told: every domain error as a `tonic::Status`
//! carrying a `google.rpc.ErrorInfo`, whose `reason` is stable (clients and
//! models branch on it) and whose message is written for a model. The words
//! come from the domain's one table ([`describe`]); this module puts them on
//! the wire, answers calls without a valid token, and gives the statuses
//! the transport makes itself the same shape.

use std::collections::HashMap;

use tonic::codegen::http;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::session;
pub use crate::session::failure::{Described, Error, describe, reason};
use crate::workspace;

/// `ErrorInfo.domain` of every sandboxd error.
pub const DOMAIN: &str = "sandboxd";

impl From<Described> for Status {
    fn from(d: Described) -> Status {
        let metadata: HashMap<String, String> = d
            .meta
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        Status::with_error_details(
            d.code,
            d.message,
            ErrorDetails::with_error_info(d.reason, DOMAIN, metadata),
        )
    }
}

impl From<Error> for Status {
    fn from(err: Error) -> Status {
        describe(&err).into()
    }
}

/// Gives an ErrorInfo to a status the transport made itself (it carries
/// none), so every refusal a client sees has a stable reason. Applied to
/// every response of the server; a response with details passes unchanged.
pub fn describe_transport_refusal<B>(mut res: http::Response<B>) -> http::Response<B> {
    const DETAILS: &str = "grpc-status-details-bin";
    let headers = res.headers_mut();
    if headers.contains_key(DETAILS) {
        return res;
    }
    let Some(told) = Status::from_header_map(headers) else {
        return res;
    };
    if told.code() == Code::Ok {
        return res;
    }
    let error = Error::Transport {
        code: told.code(),
        message: told.message().to_string(),
    };
    let status: Status = describe(&error).into();
    if status.add_header(headers).is_err() {
        tracing::debug!("cannot rewrite a transport status");
    }
    res
}

impl From<workspace::Error> for Status {
    fn from(err: workspace::Error) -> Status {
        Error::from(err).into()
    }
}

impl From<session::Error> for Status {
    fn from(err: session::Error) -> Status {
        Error::from(err).into()
    }
}

//! sandboxd: a gRPC service that lets coding agents work on a codebase
//! safely. It applies exact-match edits to a workspace directory and (in the
//! sandbox layer) runs commands in throwaway, no-network containers.
//!
//! Layers, top to bottom; each module uses only modules in layers below its
//! own, so the dependencies go one way (the `layers` test checks the code
//! against this list):
//!
//! 0. `local`: a private service started in process (a registry and the
//!    server on a loopback port, with a client), which `demo`, `bench` and
//!    the integration tests drive over real gRPC.
//! 1. `server`: the gRPC server: listeners, TLS, bearer tokens, the idle
//!    reaper, shutdown.
//! 2. `service`, `convert`: the tonic adapter (unpack the request, call the
//!    domain, pack the reply) and every conversion between generated `pb`
//!    types and domain types.
//! 3. `error`: what gRPC callers are told: domain errors as statuses with a
//!    stable reason.
//! 4. `session`: the top of the domain: the registry, each session's tools
//!    (every call journaled), and the one table of what a caller is told
//!    about each domain error.
//! 5. `environment`: named, cached images for sessions, built with network
//!    and run without.
//! 6. `journal`, `volume`: a session's audit journal; where its workspace
//!    lives on the host (its own quota'd filesystem, or a pin of a lent
//!    directory).
//! 7. `workspace`: the host-side file tools, confined to the workspace.
//! 8. `policy`: the one place deciding what a session may write and run.
//! 9. `sandbox`: containers, and the commands run in them.
//! 10. `state`, `provision`, `secret`, `metrics`, `profile`, `text`, `pb`:
//!     the service's private state directory, touched through directory
//!     fds; the host programs it needs, installed when missing; making and
//!     comparing secrets; the counters an operator graphs; the marks that
//!     show where a command's time goes; text made to show what it holds,
//!     for every surface a person reads; the generated wire types, which
//!     only layers 1 and 2 use.

#![warn(missing_docs)]

pub mod convert;
pub mod environment;
pub mod error;
pub mod journal;
#[cfg(test)]
mod layers;
pub mod local;
pub mod metrics;
pub mod pb;
pub mod policy;
pub mod profile;
pub mod provision;
pub mod sandbox;
pub mod secret;
pub mod server;
pub mod service;
pub mod session;
pub mod state;
pub mod text;
pub mod volume;
pub mod workspace;

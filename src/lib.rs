//! sandboxd: a gRPC service that lets coding agents work on a codebase
//! safely. It applies exact-match edits to a workspace directory and (in the
//! sandbox layer) runs commands in throwaway, no-network containers.
//!
//! Layers, one way: `service` (wire) -> `session` -> `workspace` (host files)
//! and `sandbox` (containers). `session` holds each session's `policy` (the
//! one place deciding what it may write and run), its audit `journal`, and
//! its `volume`: where its workspace lives on the host (its own quota'd
//! filesystem, or a pin of a lent directory), inside the service's private
//! `state` directory.
//! Only `service` and `convert` see generated `pb` types; `error` holds the
//! one mapping from domain errors to gRPC statuses.

#![warn(missing_docs)]

pub mod convert;
pub mod error;
pub mod journal;
pub mod pb;
pub mod policy;
pub mod sandbox;
pub mod secret;
pub mod server;
pub mod service;
pub mod session;
pub mod state;
pub mod volume;
pub mod workspace;

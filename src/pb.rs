//! Generated gRPC types for `sandboxd.v1`. Only the service layer and
//! `convert` use them.

#![allow(clippy::all, missing_docs)]

tonic::include_proto!("sandboxd.v1");

/// Encoded descriptor set of the contract, served by gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("sandboxd_descriptor");

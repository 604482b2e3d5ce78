//! Processes that fight back.

//! The tests that need no container runtime, in one binary: the command line, the file and URL
//! sources, `atoll validate`, the demo script and the test API server. They share nothing
//! global, so they run concurrently.

#[path = "../apiserver/mod.rs"]
mod apiserver;
#[path = "../common/mod.rs"]
mod common;

mod certificates;
mod cli;
mod demo;
mod file_source;
mod http_source;
mod mirror_api;
mod validate_cli;

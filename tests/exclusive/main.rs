//! The end-to-end tests that disturb the runtime for everyone, on a test bed of their own:
//! containerd restarted and stopped, images removed and collected, orphans swept, images
//! swapped under running pods. The files take turns (`common::room`).

#[path = "../common/mod.rs"]
mod common;

mod cri_client;
mod cri_restart;
mod engine_orphans;
mod image_custody;
mod image_gc;
mod updates;

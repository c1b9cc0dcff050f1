//! The end-to-end tests that disturb the runtime for everyone, on a test bed of their own:
//! containerd restarted and stopped, images removed and imported, orphans swept, images
//! swapped under running pods. One test at a time (`common::alone`). Image garbage collection,
//! which takes every image it may, has a test binary (and test bed) of its own: `image_gc`.

#[path = "../common/mod.rs"]
mod common;

mod cri_client;
mod cri_restart;
mod engine_orphans;
mod image_custody;
mod updates;

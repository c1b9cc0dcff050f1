//! Spawning on smol's executor with every future boxed to one type, so the executor's task
//! machinery (async-task's raw task: its run, wake, clone and drop functions) is compiled once
//! per output type instead of once per future: each of two dozen spawn sites paid for its own
//! copy (13 KB on aarch64). The blocking pool's `smol::unblock` is left as it is: its closures
//! return many types, and boxing them cost more than it saved.

use std::future::Future;
use std::pin::Pin;

/// Any future, boxed.
pub type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// `smol::spawn`, through one task type per output.
pub fn spawn<T: Send + 'static>(f: impl Future<Output = T> + Send + 'static) -> smol::Task<T> {
    smol::spawn(Box::pin(f) as Boxed<T>)
}

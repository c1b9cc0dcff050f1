//! Spawning on smol's executor, and running blocking work on its thread pool, with every
//! future and every closure boxed to one type, so the task machinery (async-task's raw task:
//! its run, wake, clone and drop functions, and `Task`'s poll and drop) is compiled once
//! instead of once per call site. Each of two dozen spawn sites paid for its own copy (13 KB
//! on aarch64); so did each of two dozen `smol::unblock` sites (about 600 bytes each).

use std::any::Any;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Any future, boxed.
pub type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// `smol::spawn`, through one task type per output.
pub fn spawn<T: Send + 'static>(f: impl Future<Output = T> + Send + 'static) -> smol::Task<T> {
    smol::spawn(Box::pin(f) as Boxed<T>)
}

/// A job for the blocking pool: any closure, its result boxed.
type Job = Box<dyn FnOnce() -> Box<dyn Any + Send> + Send>;

/// `smol::unblock`: runs `f` on the blocking pool, through the one task type of [`Job`].
/// Dropping the future before `f` has begun cancels it, as smol's does.
pub fn unblock<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Unblocked<T> {
    Unblocked { task: smol::unblock(Box::new(move || Box::new(f()) as Box<dyn Any + Send>) as Job), out: PhantomData }
}

/// What [`unblock`] returns: `f`'s result, once the pool has run it.
pub struct Unblocked<T> {
    task: smol::Task<Box<dyn Any + Send>>,
    out: PhantomData<fn() -> T>,
}

impl<T: 'static> Future for Unblocked<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match Pin::new(&mut self.task).poll(cx) {
            // The only box the job makes holds a T (`unblock`), so the downcast holds.
            Poll::Ready(out) => match out.downcast::<T>() {
                Ok(out) => Poll::Ready(*out),
                Err(_) => unreachable!("a blocking job's result is the type its closure returns"),
            },
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unblock_hands_back_what_the_closure_returned_off_the_calling_thread() {
        let caller = std::thread::current().id();
        let (on, out) = smol::block_on(unblock(move || (std::thread::current().id(), vec!["a".to_string()])));
        assert_ne!(on, caller, "run on the blocking pool");
        assert_eq!(out, ["a"]);
        let both = smol::block_on(smol::future::zip(unblock(|| 7u8), unblock(|| Ok::<_, String>(()))));
        assert_eq!(both, (7, Ok(())));
    }
}

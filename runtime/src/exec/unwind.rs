//! A future that turns a panic of the future it wraps into an error, so that the executor can
//! end a panicking adapter's run as `failed` instead of leaving it `running`. (In the same task,
//! not a task of its own: the simulator schedules exactly the tasks it did before.)

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Wraps a future; resolves to `Err(message)` if polling it panicked.
pub struct CatchUnwind<F> {
    inner: Pin<Box<F>>,
}

impl<F: Future> CatchUnwind<F> {
    pub fn new(inner: F) -> Self {
        CatchUnwind {
            inner: Box::pin(inner),
        }
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Why unwind-safe: after a panic the inner future is never polled again (the run ends).
        let inner = self.inner.as_mut();
        match catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(panic) => Poll::Ready(Err(panic_message(panic.as_ref()))),
        }
    }
}

/// The text a panic carried (`panic!` gives a `&str` or a `String`).
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => format!("it panicked: {text}"),
        (_, Some(text)) => format!("it panicked: {text}"),
        _ => "it panicked".to_string(),
    }
}

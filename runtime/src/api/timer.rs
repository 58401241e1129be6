//! hyper's timer over `tokio::time`, so the server's connection timeouts run on whatever time
//! the runtime runs on: the OS clock in production, virtual time under the simulator.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A `hyper::rt::Timer` backed by `tokio::time::sleep` (madsim's under `--cfg madsim`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioTimer;

struct TokioSleep(Pin<Box<tokio::time::Sleep>>);

impl Future for TokioSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for TokioSleep {}

impl hyper::rt::Timer for TokioTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(TokioSleep(Box::pin(tokio::time::sleep(duration))))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep(deadline.saturating_duration_since(self.now()))
    }
}

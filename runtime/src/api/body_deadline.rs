//! Request bodies must arrive promptly. hyper's header-read timeout ends a connection that is
//! slow to send its request head, but nothing bounds the body after it: a client (with any
//! valid token) could send a byte every few seconds and hold one of the `CONNECTIONS_MAX`
//! slots forever. Every request body is wrapped here with two timers on `tokio::time` (virtual
//! time under the simulator): the whole body within `BODY_READ_TIMEOUT_MS`, and never a pause
//! of `BODY_STALL_TIMEOUT_MS` between two pieces. Together they set a minimum rate. A body that
//! misses either is answered 408 `body_timeout` and the connection is closed, freeing its slot.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::BoxError;
use hyper::body::Frame;

use super::error::ApiError;

/// The whole request body must arrive within this long of the request head, in milliseconds.
pub const BODY_READ_TIMEOUT_MS: u64 = 10_000;
/// Longest pause between two pieces of a request body, in milliseconds. With
/// `BODY_READ_TIMEOUT_MS` this is the minimum rate: a body keeps coming, and comes whole in time.
pub const BODY_STALL_TIMEOUT_MS: u64 = 2_000;

/// Why a body was cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyTimeout {
    #[error("the request body did not arrive within {BODY_READ_TIMEOUT_MS} ms")]
    Deadline,
    #[error("the request body paused for {BODY_STALL_TIMEOUT_MS} ms")]
    Stalled,
}

/// Middleware: gives the request's body the two timers, and answers 408 when one fired (the
/// handler's own answer, a 400 about an unreadable body, is replaced).
pub async fn enforce(request: Request, next: Next) -> Response {
    let tripped = Arc::new(Latch::default());
    let request = request.map(|body| Body::new(TimedBody::new(body, tripped.clone())));
    let response = next.run(request).await;
    match tripped.get() {
        None => response,
        Some(timeout) => timed_out(timeout),
    }
}

/// The 408, closing the connection: the rest of the body is never read.
fn timed_out(timeout: BodyTimeout) -> Response {
    let mut response = ApiError {
        status: StatusCode::REQUEST_TIMEOUT,
        code: "body_timeout",
        message: format!(
            "{timeout}; send the whole body within {BODY_READ_TIMEOUT_MS} ms, without pausing \
             for {BODY_STALL_TIMEOUT_MS} ms"
        ),
        field: None,
        retry_after_s: None,
    }
    .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Which timer fired, once one has.
#[derive(Debug, Default)]
struct Latch {
    stalled: AtomicBool,
    deadline: AtomicBool,
}

impl Latch {
    fn set(&self, timeout: BodyTimeout) {
        match timeout {
            BodyTimeout::Deadline => self.deadline.store(true, Ordering::Relaxed),
            BodyTimeout::Stalled => self.stalled.store(true, Ordering::Relaxed),
        }
    }

    fn get(&self) -> Option<BodyTimeout> {
        if self.deadline.load(Ordering::Relaxed) {
            Some(BodyTimeout::Deadline)
        } else if self.stalled.load(Ordering::Relaxed) {
            Some(BodyTimeout::Stalled)
        } else {
            None
        }
    }
}

/// A body that fails once either timer fires before it ends.
struct TimedBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    stall: Pin<Box<tokio::time::Sleep>>,
    tripped: Arc<Latch>,
}

impl TimedBody {
    fn new(inner: Body, tripped: Arc<Latch>) -> Self {
        TimedBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(Duration::from_millis(BODY_READ_TIMEOUT_MS))),
            stall: Box::pin(tokio::time::sleep(Duration::from_millis(BODY_STALL_TIMEOUT_MS))),
            tripped,
        }
    }

    /// The timer that fired, if one has (registering both for a wake-up otherwise).
    fn poll_timers(&mut self, cx: &mut Context<'_>) -> Option<BodyTimeout> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            return Some(BodyTimeout::Deadline);
        }
        if self.stall.as_mut().poll(cx).is_ready() {
            return Some(BodyTimeout::Stalled);
        }
        None
    }
}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let next_stall = tokio::time::Instant::now()
                    + Duration::from_millis(BODY_STALL_TIMEOUT_MS);
                this.stall.as_mut().reset(next_stall);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match this.poll_timers(cx) {
                None => Poll::Pending,
                Some(timeout) => {
                    this.tripped.set(timeout);
                    Poll::Ready(Some(Err(Box::new(timeout))))
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body fed by hand: each `send` is one piece.
    fn channel_body() -> (tokio::sync::mpsc::Sender<Bytes>, Body) {
        let (sender, mut receiver) = tokio::sync::mpsc::channel::<Bytes>(4);
        (sender, Body::new(PollBody(move |cx: &mut Context<'_>| receiver.poll_recv(cx))))
    }

    /// A body whose frames come from a closure.
    struct PollBody<F>(F);

    impl<F> HttpBody for PollBody<F>
    where
        F: FnMut(&mut Context<'_>) -> Poll<Option<Bytes>> + Send + Unpin + 'static,
    {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            (self.0)(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_paused_for_the_stall_timeout_is_cut() {
        let (sender, body) = channel_body();
        let latch = Arc::new(Latch::default());
        let timed = TimedBody::new(body, latch.clone());
        let reader = tokio::spawn(timed.collect());
        // Pieces just inside the stall timeout keep it alive…
        for _ in 0..3 {
            tokio::time::sleep(ms(BODY_STALL_TIMEOUT_MS - 1)).await;
            sender.send(Bytes::from_static(b"x")).await.unwrap();
        }
        assert!(latch.get().is_none());
        // …a pause of exactly the timeout ends it.
        tokio::time::sleep(ms(BODY_STALL_TIMEOUT_MS)).await;
        assert!(reader.await.unwrap().is_err());
        assert_eq!(latch.get(), Some(BodyTimeout::Stalled));
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_trickle_is_cut_at_the_deadline() {
        let (sender, body) = channel_body();
        let latch = Arc::new(Latch::default());
        let reader = tokio::spawn(TimedBody::new(body, latch.clone()).collect());
        let step = BODY_STALL_TIMEOUT_MS / 2;
        let mut elapsed = 0;
        while elapsed + step < BODY_READ_TIMEOUT_MS {
            tokio::time::sleep(ms(step)).await;
            elapsed += step;
            sender.send(Bytes::from_static(b"x")).await.unwrap();
        }
        assert!(latch.get().is_none(), "still inside the deadline at {elapsed} ms");
        tokio::time::sleep(ms(BODY_READ_TIMEOUT_MS - elapsed)).await;
        assert!(reader.await.unwrap().is_err());
        assert_eq!(latch.get(), Some(BodyTimeout::Deadline));
    }

    #[tokio::test(start_paused = true)]
    async fn a_prompt_body_passes() {
        let (sender, body) = channel_body();
        let latch = Arc::new(Latch::default());
        let reader = tokio::spawn(TimedBody::new(body, latch.clone()).collect());
        sender.send(Bytes::from_static(b"{}")).await.unwrap();
        drop(sender);
        let bytes = reader.await.unwrap().unwrap().to_bytes();
        assert_eq!(&bytes[..], b"{}");
        assert!(latch.get().is_none());
    }
}

//! A byte stream whose flush reaches the socket only when something was written since the last
//! one.
//!
//! Why: hyper flushes its connection's stream on every poll, idle or not. On a real socket a
//! flush of nothing costs nothing. Under madsim every flush sends a network message, even an
//! empty one, and that message wakes the peer's connection task, which polls, flushes and wakes
//! this side back: two idle HTTP endpoints kept each other busy for as long as a connection
//! stayed open, a message per round trip of simulated latency. It made a `tool_loop` seed 4 to 8
//! times slower (docs/simulation.md, "How long it takes"). Every HTTP connection the
//! runtime and the simulator's own HTTP parts open or accept goes through this, in every build,
//! so the simulated code is the shipped code; what a flush delivers is unchanged.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `S`, with flushes of nothing answered here. Reads and writes pass straight through.
#[derive(Debug)]
pub struct WrittenFlush<S> {
    inner: S,
    /// Bytes were written since the last flush that reached `inner`.
    unflushed: bool,
}

impl<S> WrittenFlush<S> {
    pub fn new(inner: S) -> Self {
        WrittenFlush {
            inner,
            unflushed: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WrittenFlush<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WrittenFlush<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.unflushed = true;
        }
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.unflushed = true;
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.unflushed {
            return Poll::Ready(Ok(()));
        }
        let flushed = Pin::new(&mut self.inner).poll_flush(cx);
        if matches!(flushed, Poll::Ready(Ok(()))) {
            self.unflushed = false;
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the flushes that reach it.
    #[derive(Default)]
    struct Counting {
        written: Vec<u8>,
        flushes: usize,
    }

    impl AsyncWrite for Counting {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.written.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn only_a_flush_after_a_write_reaches_the_stream() {
        use tokio::io::AsyncWriteExt;
        let mut stream = WrittenFlush::new(Counting::default());
        stream.flush().await.unwrap();
        assert_eq!(stream.inner.flushes, 0, "nothing written, nothing flushed");
        stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        stream.flush().await.unwrap();
        stream.flush().await.unwrap();
        assert_eq!(stream.inner.flushes, 1, "one flush for one write");
        stream.write_all(b"\r\n").await.unwrap();
        stream.write_all(b"").await.unwrap();
        stream.flush().await.unwrap();
        assert_eq!(stream.inner.flushes, 2);
        assert_eq!(stream.inner.written, b"GET / HTTP/1.1\r\n\r\n");
    }
}

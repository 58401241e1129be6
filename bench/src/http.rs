//! One keep-alive HTTP/1.1 connection to a node, timed request by request.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A request with no answer after this long fails the benchmark: it measures a node that
/// answers, not one that hangs.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection, reused for every request of one client.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
}

/// An answer and how long it took, send to last byte.
pub struct Timed {
    pub status: StatusCode,
    pub body: Bytes,
    pub took: Duration,
    /// `Retry-After`, on a 503 or 429.
    pub retry_after_s: Option<u64>,
}

impl Connection {
    pub async fn open(addr: SocketAddr) -> anyhow::Result<Connection> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .context("HTTP/1 handshake")?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Connection { sender })
    }

    /// Sends one request on this connection and reads the whole answer; `token` as a bearer
    /// token unless empty.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<&serde_json::Value>,
    ) -> anyhow::Result<Timed> {
        let bytes = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        self.send_bytes(method, path, token, bytes).await
    }

    /// [`Connection::send`] with a body already encoded: a benchmark that sends the same body
    /// over and over encodes it once, so the load generator, on the same cores as the node,
    /// spends less of them.
    pub async fn send_bytes(
        &mut self,
        method: Method,
        path: &str,
        token: &str,
        bytes: Bytes,
    ) -> anyhow::Result<Timed> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", "application/json");
        if !token.is_empty() {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request.body(Full::new(bytes))?;
        let started = Instant::now();
        let exchange = async {
            self.sender.ready().await?;
            let answer = self.sender.send_request(request).await?;
            let status = answer.status();
            let retry_after_s = answer
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok());
            let body = answer.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, retry_after_s, body))
        };
        let Ok(answered) = tokio::time::timeout(REQUEST_TIMEOUT, exchange).await else {
            bail!("no answer to {path} within {REQUEST_TIMEOUT:?}");
        };
        let (status, retry_after_s, body) =
            answered.with_context(|| format!("requesting {path}"))?;
        Ok(Timed {
            status,
            body,
            took: started.elapsed(),
            retry_after_s,
        })
    }
}

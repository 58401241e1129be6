//! A small HTTP/1 client for Vigil's API, over `tokio::net` and hyper, so it crosses the
//! simulated network under `--cfg madsim` exactly as it crosses the real one in production.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::net::WrittenFlush;

/// A request that takes longer than this (connect, send, full answer) fails with `Timeout`.
pub const REQUEST_TIMEOUT_MS: u64 = 10_000;

/// Most idle connections a [`ApiClient::keeping_connections`] client keeps open for its next
/// requests; a connection that comes back when this many wait is closed.
pub const IDLE_CONNECTIONS_MAX: usize = 8;

/// Connections a keep-alive client holds between requests, shared by its clones.
type Idle = std::sync::Arc<std::sync::Mutex<Vec<SendRequest<Full<Bytes>>>>>;

/// Why a request got no HTTP answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("could not connect to {addr}: {source}; is `vigil serve` running there?")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP error talking to {addr}: {source}")]
    Http {
        addr: SocketAddr,
        #[source]
        source: hyper::Error,
    },
    #[error("no answer from {addr} within {timeout_ms} ms")]
    Timeout { addr: SocketAddr, timeout_ms: u64 },
}

/// An HTTP answer: status and whole body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::from_slice(&self.body)
    }
}

/// Talks to one Vigil node. One connection per request unless made with
/// [`ApiClient::keeping_connections`]: simple, and a crashed server never leaves a half-used
/// connection behind.
#[derive(Debug, Clone)]
pub struct ApiClient {
    addr: SocketAddr,
    /// Sent as `Authorization: Bearer <token>` when set.
    token: Option<String>,
    /// The whole exchange (connect, send, full answer) is bounded by this.
    timeout_ms: u64,
    /// Open connections waiting for a request, when the client keeps them.
    idle: Option<Idle>,
}

impl ApiClient {
    /// A client for the node at `addr` that sends no token.
    pub fn new(addr: SocketAddr) -> Self {
        ApiClient {
            addr,
            token: None,
            timeout_ms: REQUEST_TIMEOUT_MS,
            idle: None,
        }
    }

    /// The same client, keeping a connection open after an answer for a later request (HTTP/1.1
    /// keep-alive, at most [`IDLE_CONNECTIONS_MAX`] at once, shared by its clones), as a
    /// long-lived client such as a host's pulse sender does. A connection the server closed is
    /// seen closed and left; one it closes while a request is on the way fails that request
    /// (`Http`), as a dropped connection would.
    pub fn keeping_connections(mut self) -> Self {
        self.idle = Some(Idle::default());
        self
    }

    /// The same client with another bound on each exchange.
    pub fn with_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = timeout_ms;
        self
    }

    /// The node's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A client for the node at `addr` that authenticates with `token`.
    pub fn with_token(addr: SocketAddr, token: impl Into<String>) -> Self {
        ApiClient {
            addr,
            token: Some(token.into()),
            timeout_ms: REQUEST_TIMEOUT_MS,
            idle: None,
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Answer, ClientError> {
        self.request(Method::GET, path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<Answer, ClientError> {
        self.request(Method::POST, path, Some(body.to_string().into_bytes()))
            .await
    }

    /// Any request; the whole exchange is bounded by the client's timeout
    /// (`REQUEST_TIMEOUT_MS` unless set).
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, ClientError> {
        let exchange = self.exchange(method, path, body);
        match tokio::time::timeout(Duration::from_millis(self.timeout_ms), exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(ClientError::Timeout {
                addr: self.addr,
                timeout_ms: self.timeout_ms,
            }),
        }
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, ClientError> {
        let addr = self.addr;
        let http = |source| ClientError::Http { addr, source };
        // A kept connection the server has since closed fails `ready`; a new one replaces it.
        let kept = match self.idle_connection() {
            Some(mut sender) => sender.ready().await.ok().map(|()| sender),
            None => None,
        };
        let (mut sender, driver) = match kept {
            Some(sender) => (sender, None),
            None => {
                let (sender, driver) = self.connect().await?;
                (sender, Some(driver))
            }
        };
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, addr.to_string());
        if body.is_some() {
            builder = builder.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        if let Some(token) = &self.token {
            builder = builder.header(hyper::header::AUTHORIZATION, bearer(token));
        }
        let request = builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .expect("method, path and headers are valid");
        let answer = async {
            let response = sender.send_request(request).await.map_err(http)?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(http)?
                .to_bytes();
            Ok(Answer {
                status,
                headers,
                body,
            })
        }
        .await;
        match &self.idle {
            // Back to the pool only after a whole answer, ready for the next request; the
            // driver runs on until the connection is dropped or the server closes it.
            Some(idle) if answer.is_ok() => {
                let mut idle = idle.lock().expect("idle connections lock");
                if idle.len() < IDLE_CONNECTIONS_MAX && !sender.is_closed() {
                    idle.push(sender);
                }
            }
            Some(_) => {}
            None => {
                if let Some(driver) = driver {
                    driver.abort();
                }
            }
        }
        answer
    }

    /// The most recently used idle connection not yet seen closed, if the client keeps them.
    fn idle_connection(&self) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle.as_ref()?.lock().expect("idle connections lock");
        while let Some(sender) = idle.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    /// A new connection and the task that drives it.
    async fn connect(
        &self,
    ) -> Result<(SendRequest<Full<Bytes>>, tokio::task::JoinHandle<()>), ClientError> {
        let addr = self.addr;
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| ClientError::Connect { addr, source })?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(WrittenFlush::new(stream)))
                .await
                .map_err(|source| ClientError::Http { addr, source })?;
        let driver = tokio::spawn(async move {
            // Errors surface through `send_request`; the driver only has to run.
            let _ = connection.await;
        });
        Ok((sender, driver))
    }

    /// How many connections wait for a request now.
    #[cfg(test)]
    fn idle_connections(&self) -> usize {
        self.idle
            .as_ref()
            .map_or(0, |idle| idle.lock().expect("idle connections lock").len())
    }
}

/// `Authorization`'s value for `token`, built in one allocation (every request sends it).
fn bearer(token: &str) -> String {
    let mut value = String::with_capacity("Bearer ".len() + token.len());
    value.push_str("Bearer ");
    value.push_str(token);
    value
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use hyper::service::service_fn;
    use hyper::Response;
    use tokio::net::TcpListener;
    use tokio::sync::Barrier;

    use super::*;

    /// A local HTTP/1.1 server that counts the connections it accepted. Each request waits at
    /// `barrier` (when set) before its answer; a request to `/close` is answered with
    /// `Connection: close`.
    async fn server(barrier: Option<Arc<Barrier>>) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.expect("accept");
                counter.fetch_add(1, Ordering::SeqCst);
                let barrier = barrier.clone();
                let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                    let barrier = barrier.clone();
                    async move {
                        if let Some(barrier) = barrier {
                            barrier.wait().await;
                        }
                        let mut answer = Response::new(Full::new(Bytes::from_static(b"{}")));
                        if request.uri().path() == "/close" {
                            answer.headers_mut().insert(
                                hyper::header::CONNECTION,
                                hyper::header::HeaderValue::from_static("close"),
                            );
                        }
                        Ok::<_, Infallible>(answer)
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        (addr, accepted)
    }

    #[tokio::test]
    async fn a_keeping_client_sends_later_requests_on_one_connection_and_a_plain_one_does_not() {
        let (addr, accepted) = server(None).await;
        let keeping = ApiClient::new(addr).keeping_connections();
        for _ in 0..3 {
            assert!(keeping.get("/").await.expect("answer").status.is_success());
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        assert_eq!(keeping.idle_connections(), 1);
        let plain = ApiClient::new(addr);
        for _ in 0..3 {
            assert!(plain.get("/").await.expect("answer").status.is_success());
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn a_connection_the_server_closes_is_not_kept_and_the_next_request_opens_another() {
        let (addr, accepted) = server(None).await;
        let keeping = ApiClient::new(addr).keeping_connections();
        assert!(keeping.get("/close").await.expect("answer").status.is_success());
        assert!(keeping.get("/").await.expect("answer").status.is_success());
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert!(keeping.get("/").await.expect("answer").status.is_success());
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    /// `IDLE_CONNECTIONS_MAX + 1` requests at once need as many connections; afterwards exactly
    /// `IDLE_CONNECTIONS_MAX` wait, so the same burst again opens exactly one more.
    #[tokio::test]
    async fn at_most_idle_connections_max_are_kept() {
        let burst = IDLE_CONNECTIONS_MAX + 1;
        let (addr, accepted) = server(Some(Arc::new(Barrier::new(burst)))).await;
        let keeping = ApiClient::new(addr).keeping_connections();
        let send_burst = || async {
            let requests: Vec<_> = (0..burst)
                .map(|_| {
                    let client = keeping.clone();
                    tokio::spawn(async move { client.get("/").await.expect("answer").status })
                })
                .collect();
            for request in requests {
                assert!(request.await.expect("request task").is_success());
            }
        };
        send_burst().await;
        assert_eq!(accepted.load(Ordering::SeqCst), burst);
        assert_eq!(keeping.idle_connections(), IDLE_CONNECTIONS_MAX);
        send_burst().await;
        assert_eq!(accepted.load(Ordering::SeqCst), burst + 1);
        assert_eq!(keeping.idle_connections(), IDLE_CONNECTIONS_MAX);
    }
}

//! A small HTTP/1 client for Vigil's API, over `tokio::net` and hyper, so it crosses the
//! simulated network under `--cfg madsim` exactly as it crosses the real one in production.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::net::WrittenFlush;

/// A request that takes longer than this (connect, send, full answer) fails with `Timeout`.
pub const REQUEST_TIMEOUT_MS: u64 = 10_000;

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

/// Talks to one Vigil node. One connection per request: simple, and a crashed server never
/// leaves a half-used connection behind.
#[derive(Debug, Clone)]
pub struct ApiClient {
    addr: SocketAddr,
    /// Sent as `Authorization: Bearer <token>` when set.
    token: Option<String>,
    /// The whole exchange (connect, send, full answer) is bounded by this.
    timeout_ms: u64,
}

impl ApiClient {
    /// A client for the node at `addr` that sends no token.
    pub fn new(addr: SocketAddr) -> Self {
        ApiClient {
            addr,
            token: None,
            timeout_ms: REQUEST_TIMEOUT_MS,
        }
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
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| ClientError::Connect { addr, source })?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(WrittenFlush::new(stream)))
                .await
                .map_err(http)?;
        let driver = tokio::spawn(async move {
            // Errors surface through `send_request`; the driver only has to run.
            let _ = connection.await;
        });
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, addr.to_string());
        if body.is_some() {
            builder = builder.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        if let Some(token) = &self.token {
            builder = builder.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
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
        driver.abort();
        answer
    }
}

//! `OutboundClient`: one POST of JSON to an `Endpoint`, over plain TCP or TLS, by host name or IP
//! literal, with one connection per request. Resolution, the address policy, connect, TLS, send
//! and the capped read all sit under one timeout.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::endpoint::{check_path, Endpoint, Host, Scheme};
use super::request::{OutboundAnswer, OutboundError, OutboundHeader, OutboundRequest};
use super::tls::{client_config, TlsOptions, TlsSetupError};
use super::written_flush::WrittenFlush;

/// At most this many resolved (and allowed) addresses are tried, in the resolver's order, before
/// the last connect error is returned: `localhost` often resolves to `::1` before `127.0.0.1`.
pub const CONNECT_ADDRESSES_MAX: usize = 4;

/// Headers the client sets itself; a caller's header of one of these names is refused.
const MANAGED_HEADERS: [HeaderName; 5] = [
    hyper::header::HOST,
    hyper::header::CONTENT_TYPE,
    hyper::header::CONTENT_LENGTH,
    hyper::header::TRANSFER_ENCODING,
    hyper::header::CONNECTION,
];

/// Asked about every resolved address before the client connects to it: `Ok(())` allows it,
/// `Err(reason)` refuses it. The address checked is the address connected to, so a name that
/// resolves differently a moment later (DNS rebinding) cannot slip past. The SSRF guard plugs in
/// here; the default allows everything.
pub type AddressPolicy = Arc<dyn Fn(&str, SocketAddr) -> Result<(), String> + Send + Sync>;

/// The policy that allows every address.
pub fn allow_every_address() -> AddressPolicy {
    Arc::new(|_host, _addr| Ok(()))
}

/// The client LLM providers and HTTP tools are reached through. Cheap to clone (an `Arc`);
/// holds the TLS roots and the address policy, no connection.
#[derive(Clone)]
pub struct OutboundClient {
    inner: Arc<Inner>,
}

struct Inner {
    tls: Arc<rustls::ClientConfig>,
    policy: AddressPolicy,
}

impl fmt::Debug for OutboundClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboundClient").finish_non_exhaustive()
    }
}

/// Aborts the task driving a connection when the exchange ends or is dropped (on timeout).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl OutboundClient {
    /// A client trusting Mozilla's roots and the extra CA file's certificates, allowing every
    /// address.
    ///
    /// Blocking: reads the extra CA file with `std::fs`. Call it once at start-up, outside any
    /// request path; from async code, accept one short blocking read or use `spawn_blocking`.
    pub fn new(options: &TlsOptions) -> Result<OutboundClient, TlsSetupError> {
        Ok(OutboundClient {
            inner: Arc::new(Inner {
                tls: client_config(options)?,
                policy: allow_every_address(),
            }),
        })
    }

    /// The same client (same TLS roots) asking `policy` about each resolved address.
    pub fn with_address_policy(self, policy: AddressPolicy) -> OutboundClient {
        OutboundClient {
            inner: Arc::new(Inner {
                tls: self.inner.tls.clone(),
                policy,
            }),
        }
    }

    /// POSTs `request.body` as JSON to the endpoint's base path + `request.path` and reads the
    /// whole answer, whatever its status. The whole exchange (resolve, connect, TLS, send, read)
    /// is bounded by `request.timeout_ms`; a body past `request.response_bytes_max` is refused.
    pub async fn post_json(
        &self,
        request: OutboundRequest<'_>,
    ) -> Result<OutboundAnswer, OutboundError> {
        let http_request = build_request(&request)?;
        // Boxed: the exchange's state (a TLS stream, hyper's connection) is kilobytes, and
        // held inline it was copied whole at every await and box above it, about 2 % of a
        // simulated fleet-day; one allocation moves a pointer instead.
        let exchange = Box::pin(self.exchange(
            request.endpoint,
            http_request,
            request.response_bytes_max,
        ));
        let timeout = Duration::from_millis(request.timeout_ms);
        match tokio::time::timeout(timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(OutboundError::Timeout {
                timeout_ms: request.timeout_ms,
            }),
        }
    }

    /// GETs the endpoint (its base path is the path, with its query), answer read whole,
    /// bounded like [`OutboundClient::post_json`].
    pub async fn get(
        &self,
        endpoint: &Endpoint,
        headers: &[OutboundHeader<'_>],
        timeout_ms: u64,
        response_bytes_max: usize,
    ) -> Result<OutboundAnswer, OutboundError> {
        let path = join_path(endpoint.base_path(), "")?;
        let mut builder = Request::builder()
            .method(Method::GET)
            .uri(path.as_str())
            .header(hyper::header::HOST, endpoint.authority())
            .header(hyper::header::ACCEPT, "application/json");
        for header in headers {
            let (name, value) = header_pair(header)?;
            builder = builder.header(name, value);
        }
        let request = builder
            .body(Full::new(Bytes::new()))
            .map_err(|error| request_error(format!("the path `{path}` is not valid: {error}")))?;
        // Boxed for the reason `post_json` gives.
        let exchange = Box::pin(self.exchange(endpoint, request, response_bytes_max));
        match tokio::time::timeout(Duration::from_millis(timeout_ms), exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(OutboundError::Timeout { timeout_ms }),
        }
    }

    async fn exchange(
        &self,
        endpoint: &Endpoint,
        request: Request<Full<Bytes>>,
        bytes_max: usize,
    ) -> Result<OutboundAnswer, OutboundError> {
        let tcp = self.connect(endpoint).await?;
        match endpoint.scheme() {
            Scheme::Http => send_over(tcp, request, bytes_max).await,
            Scheme::Https => {
                let tls = self.tls_handshake(endpoint, tcp).await?;
                send_over(tls, request, bytes_max).await
            }
        }
    }

    /// Resolves once, asks the policy about each address, connects to the first allowed one
    /// that answers.
    async fn connect(&self, endpoint: &Endpoint) -> Result<WrittenFlush<TcpStream>, OutboundError> {
        let host = endpoint.host().bare();
        let resolved = resolve(endpoint.host(), endpoint.port()).await?;
        let allowed = self.allowed(&host, &resolved)?;
        let mut last_error = None;
        for addr in allowed.into_iter().take(CONNECT_ADDRESSES_MAX) {
            match TcpStream::connect(addr).await {
                Ok(stream) => return Ok(WrittenFlush::new(stream)),
                Err(source) => last_error = Some(OutboundError::Connect { addr, source }),
            }
        }
        Err(last_error.expect("allowed() returns at least one address"))
    }

    /// The resolved addresses the policy allows, in order; `AddressRefused` (the first refusal)
    /// when it allows none.
    fn allowed(
        &self,
        host: &str,
        resolved: &[SocketAddr],
    ) -> Result<Vec<SocketAddr>, OutboundError> {
        let mut allowed = Vec::new();
        let mut first_refusal = None;
        for &addr in resolved {
            match (self.inner.policy)(host, addr) {
                Ok(()) => allowed.push(addr),
                Err(reason) => {
                    first_refusal.get_or_insert(OutboundError::AddressRefused {
                        host: host.to_string(),
                        addr,
                        reason,
                    });
                }
            }
        }
        match first_refusal {
            Some(refusal) if allowed.is_empty() => Err(refusal),
            _ => Ok(allowed),
        }
    }

    async fn tls_handshake(
        &self,
        endpoint: &Endpoint,
        tcp: WrittenFlush<TcpStream>,
    ) -> Result<tokio_rustls::client::TlsStream<WrittenFlush<TcpStream>>, OutboundError> {
        let host = endpoint.host().bare();
        let tls_error = |detail: String| OutboundError::Tls {
            host: host.clone(),
            detail,
        };
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|error| tls_error(error.to_string()))?;
        tokio_rustls::TlsConnector::from(self.inner.tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|error| tls_error(error.to_string()))
    }
}

/// The endpoint's addresses: the literal itself, or what `tokio::net::lookup_host` answers for
/// the name (the OS resolver in production, madsim's DNS table under `--cfg madsim`).
async fn resolve(host: &Host, port: u16) -> Result<Vec<SocketAddr>, OutboundError> {
    let name = match host {
        Host::V4(ip) => return Ok(vec![SocketAddr::from((*ip, port))]),
        Host::V6(ip) => return Ok(vec![SocketAddr::from((*ip, port))]),
        Host::Name(name) => name,
    };
    let resolve_error = |detail: String| OutboundError::Resolve {
        host: name.clone(),
        detail,
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), port))
        .await
        .map_err(|error| resolve_error(error.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(resolve_error("the name has no address".to_string()));
    }
    Ok(addrs)
}

/// One HTTP/1 exchange over an established stream (TCP or TLS).
async fn send_over<S>(
    stream: S,
    request: Request<Full<Bytes>>,
    bytes_max: usize,
) -> Result<OutboundAnswer, OutboundError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(http_error)?;
    // Errors surface through `send_request` and the body; the driver only has to run.
    let _driver = AbortOnDrop(tokio::spawn(async move {
        let _ = connection.await;
    }));
    let response = sender.send_request(request).await.map_err(http_error)?;
    let status = response.status();
    let retry_after_ms = response
        .headers()
        .get(hyper::header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(retry_after_ms);
    if content_length(response.headers()).is_some_and(|length| length > bytes_max as u64) {
        return Err(OutboundError::TooLarge {
            limit_bytes: bytes_max,
        });
    }
    let body = read_capped(response.into_body(), bytes_max).await?;
    Ok(OutboundAnswer {
        status,
        retry_after_ms,
        body,
    })
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(hyper::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Reads the body frame by frame; fails as soon as the next frame would take it past `bytes_max`,
/// so no more than `bytes_max` bytes are ever kept.
async fn read_capped(mut body: Incoming, bytes_max: usize) -> Result<Bytes, OutboundError> {
    let mut buffer = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(http_error)?.into_data() else {
            continue; // trailers
        };
        if data.len() > bytes_max - buffer.len() {
            return Err(OutboundError::TooLarge {
                limit_bytes: bytes_max,
            });
        }
        buffer.extend_from_slice(&data);
    }
    Ok(buffer.freeze())
}

/// `retry-after` as a number of seconds (RFC 9110 `delay-seconds`), in milliseconds, saturating.
/// The HTTP-date form gives `None`: reading it would need the wall clock, and providers send
/// seconds.
pub fn retry_after_ms(value: &str) -> Option<u64> {
    let seconds = value.trim();
    if seconds.is_empty() || !seconds.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds: u64 = seconds.parse().unwrap_or(u64::MAX); // only digits: too many digits overflowed
    Some(seconds.saturating_mul(1_000))
}

fn http_error(error: hyper::Error) -> OutboundError {
    let mut detail = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        detail.push_str(": ");
        detail.push_str(&cause.to_string());
        source = cause.source();
    }
    OutboundError::Http { detail }
}

fn request_error(detail: String) -> OutboundError {
    OutboundError::Request { detail }
}

/// The HTTP request: the joined path, `host`, `content-type`, the caller's headers (sensitive
/// ones marked), and the JSON body (hyper adds `content-length`).
fn build_request(request: &OutboundRequest<'_>) -> Result<Request<Full<Bytes>>, OutboundError> {
    let path = join_path(request.endpoint.base_path(), request.path)?;
    let mut builder = Request::builder()
        .method(Method::POST)
        .uri(path.as_str())
        .header(hyper::header::HOST, request.endpoint.authority())
        .header(hyper::header::CONTENT_TYPE, "application/json");
    for header in request.headers {
        let (name, value) = header_pair(header)?;
        builder = builder.header(name, value);
    }
    builder.body(Full::new(request.body.bytes().clone())).map_err(|error| {
        request_error(format!(
            "the path `{path}` or a header is not valid: {error}"
        ))
    })
}

/// A caller's header as hyper takes it; errors name the header, never its value.
fn header_pair(header: &OutboundHeader<'_>) -> Result<(HeaderName, HeaderValue), OutboundError> {
    let name = HeaderName::from_bytes(header.name.as_bytes())
        .map_err(|_| request_error(format!("`{}` is not a valid header name", header.name)))?;
    if MANAGED_HEADERS.contains(&name) {
        return Err(request_error(format!(
            "the header `{name}` is set by the client itself; leave it out"
        )));
    }
    let mut value = HeaderValue::from_str(header.value).map_err(|_| {
        request_error(format!(
            "the value of the header `{name}` is not valid (it holds a control or non-ASCII character)"
        ))
    })?;
    value.set_sensitive(header.sensitive);
    Ok((name, value))
}

/// The endpoint's base path + the request path (`/v1` + `/chat/completions`); `/` when both are
/// empty. The request path is empty or starts with `/`, and may end in `?query`.
pub(crate) fn join_path(base: &str, path: &str) -> Result<String, OutboundError> {
    let bad =
        |reason: &str| request_error(format!("the request path `{path}` is not valid: {reason}"));
    let (segments, query) = match path.split_once('?') {
        Some((segments, query)) => (segments, Some(query)),
        None => (path, None),
    };
    if !segments.is_empty() && segments != "/" {
        check_path(segments).map_err(bad)?;
    }
    if let Some(query) = query {
        check_query(query).map_err(bad)?;
    }
    let mut joined = format!("{base}{segments}");
    if joined.is_empty() {
        joined.push('/');
    }
    if let Some(query) = query {
        joined.push('?');
        joined.push_str(query);
    }
    Ok(joined)
}

/// A query holds what a path segment may, plus `/` and `?` (RFC 3986).
fn check_query(query: &str) -> Result<(), &'static str> {
    query
        .split(['/', '?'])
        .try_for_each(super::endpoint::check_segment)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_onto_the_base_path() {
        assert_eq!(join_path("", "").unwrap(), "/");
        assert_eq!(join_path("", "/").unwrap(), "/");
        assert_eq!(join_path("/v1", "").unwrap(), "/v1");
        assert_eq!(join_path("/v1", "/").unwrap(), "/v1/");
        assert_eq!(join_path("", "/v1/messages").unwrap(), "/v1/messages");
        assert_eq!(
            join_path("/v1", "/chat/completions").unwrap(),
            "/v1/chat/completions"
        );
        assert_eq!(
            join_path("/a", "/b?x=1&y=%20/z").unwrap(),
            "/a/b?x=1&y=%20/z"
        );
        assert_eq!(join_path("/a", "?x=1").unwrap(), "/a?x=1");
        assert_eq!(join_path("", "?x=1").unwrap(), "/?x=1");
    }

    #[test]
    fn bad_request_paths_are_refused() {
        for path in [
            "chat", "/a//b", "/../etc", "/a b", "/a?x=<y>", "/a%2", "/a#f",
        ] {
            let error = join_path("/v1", path).unwrap_err();
            assert!(
                matches!(error, OutboundError::Request { .. }),
                "{path}: {error:?}"
            );
        }
    }

    #[test]
    fn retry_after_is_read_in_seconds() {
        assert_eq!(retry_after_ms("0"), Some(0));
        assert_eq!(retry_after_ms("7"), Some(7_000));
        assert_eq!(retry_after_ms(" 120 "), Some(120_000));
        assert_eq!(retry_after_ms("99999999999999999999999"), Some(u64::MAX));
        for ignored in ["", "-1", "+5", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT"] {
            assert_eq!(retry_after_ms(ignored), None, "{ignored}");
        }
    }

    #[test]
    fn header_errors_name_the_header_and_never_the_value() {
        let secret = "sk-secret\nvalue";
        let error = header_pair(&OutboundHeader::sensitive("x-api-key", secret)).unwrap_err();
        let shown = format!("{error} {error:?}");
        assert!(
            shown.contains("x-api-key") && !shown.contains("sk-secret"),
            "{shown}"
        );
        let (_, value) = header_pair(&OutboundHeader::sensitive("x-api-key", "sk-ok")).unwrap();
        assert!(value.is_sensitive());
        let (_, value) = header_pair(&OutboundHeader::plain("x-trace", "1")).unwrap();
        assert!(!value.is_sensitive());
        for managed in [
            "Host",
            "content-length",
            "Content-Type",
            "transfer-encoding",
            "connection",
        ] {
            assert!(
                header_pair(&OutboundHeader::plain(managed, "x")).is_err(),
                "{managed}"
            );
        }
        assert!(header_pair(&OutboundHeader::plain("bad name", "x")).is_err());
    }

    #[test]
    fn a_sensitive_header_is_redacted_in_debug_output() {
        let header = OutboundHeader::sensitive("authorization", "Bearer sk-secret");
        let shown = format!("{header:?}");
        assert!(
            !shown.contains("sk-secret") && shown.contains("authorization"),
            "{shown}"
        );
        let plain = format!(
            "{:?}",
            OutboundHeader::plain("anthropic-version", "2023-06-01")
        );
        assert!(plain.contains("2023-06-01"), "{plain}");
    }
}

/// The simulator's side: a name in madsim's DNS table reaches a server on another simulated
/// node over simulated TCP, and the policy sees the simulated address. Runs only in a
/// `--cfg madsim` build: `RUSTFLAGS="--cfg madsim" cargo test -p vigil --lib net`.
#[cfg(all(test, madsim))]
mod sim_tests {
    use std::net::{IpAddr, Ipv4Addr};

    use tokio::madsim::net::NetSim;
    use tokio::madsim::runtime::Handle;

    use super::*;

    const SERVER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 9, 0, 2));
    const SERVER_PORT: u16 = 8080;

    /// Answers every request with its own path.
    async fn echo_path_server() {
        let listener = tokio::net::TcpListener::bind((SERVER_IP, SERVER_PORT))
            .await
            .unwrap();
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
                    let path = request.uri().to_string();
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from(
                        path,
                    ))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    }

    async fn post_by_name(client: &OutboundClient) -> Result<OutboundAnswer, OutboundError> {
        let endpoint = Endpoint::parse("http://provider.sim:8080/v1").unwrap();
        let body = crate::net::JsonBody::from(&serde_json::json!({}));
        client
            .post_json(OutboundRequest::new(&endpoint, "/chat/completions", &body))
            .await
    }

    #[tokio::test]
    async fn a_simulated_provider_is_reached_by_name() {
        let handle = Handle::current();
        let server = handle.create_node().name("provider").ip(SERVER_IP).build();
        server.spawn(echo_path_server());
        NetSim::current().add_dns_record("provider.sim", SERVER_IP);
        let client_node = handle
            .create_node()
            .name("runtime")
            .ip([10, 9, 0, 1].into())
            .build();
        client_node
            .spawn(async move {
                tokio::time::sleep(Duration::from_millis(10)).await; // the server binds first
                let client = OutboundClient::new(&TlsOptions::default()).unwrap();
                let answer = post_by_name(&client).await.unwrap();
                assert_eq!(answer.body.as_ref(), b"/v1/chat/completions");
                let refusing = client.with_address_policy(Arc::new(|_, addr| {
                    Err(format!("{addr} is simulated"))
                }));
                let error = post_by_name(&refusing).await.unwrap_err();
                let expected = SocketAddr::new(SERVER_IP, SERVER_PORT);
                assert!(
                    matches!(&error, OutboundError::AddressRefused { addr, .. } if *addr == expected),
                    "{error:?}"
                );
            })
            .await
            .unwrap();
    }
}

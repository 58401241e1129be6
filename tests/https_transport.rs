//! The outbound transport (`vigil::net`) against real servers on loopback (real tokio): HTTPS
//! by host name with a throwaway CA made by rcgen, plain HTTP, timeouts, the body cap at its
//! boundary, `retry-after`, secrets kept out of errors, the address policy, and the extra CA
//! file's refusals.

#[path = "support/test_ca.rs"]
mod test_ca;

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use test_ca::{acceptor_for, make_ca as make_test_ca, TestCa};
use tokio_rustls::TlsAcceptor;
use vigil::net::{
    Endpoint, JsonBody, OutboundAnswer, OutboundClient, OutboundError, OutboundHeader, OutboundRequest,
    TlsOptions, TlsSetupError, CA_FILE_BYTES_MAX,
};

const SECRET: &str = "sk-test-5ecret-never-printed";
/// Long enough for a loopback exchange on a loaded 2-core machine.
const TIMEOUT_MS: u64 = 10_000;

fn test_dir(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("https_transport")
        .join(test);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn make_ca(test: &str) -> TestCa {
    make_test_ca(&test_dir(test))
}

/// What the server answers: a status, headers, and a body sent with `content-length`, or in
/// chunks without it.
#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    chunks: Vec<Bytes>,
    chunked: bool,
}

impl Reply {
    fn ok(body: &str) -> Reply {
        Reply {
            status: 200,
            headers: Vec::new(),
            chunks: vec![Bytes::from(body.to_string())],
            chunked: false,
        }
    }
}

/// What the server saw of one request.
#[derive(Debug)]
struct Seen {
    path: String,
    headers: BTreeMap<String, String>,
    body: serde_json::Value,
}

/// A body of chunks with no size hint, so hyper sends it `transfer-encoding: chunked`.
struct Chunks(VecDeque<Bytes>);

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }
}

type AnyBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn response(reply: &Reply) -> Response<AnyBody> {
    let body = if reply.chunked {
        Chunks(reply.chunks.iter().cloned().collect()).boxed()
    } else {
        Full::new(Bytes::from(reply.chunks.concat())).boxed()
    };
    let mut builder = Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        builder = builder.header(*name, value);
    }
    builder.body(body).unwrap()
}

async fn serve_connection<S>(stream: S, reply: Reply, seen: mpsc::UnboundedSender<Seen>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let (reply, seen) = (reply.clone(), seen.clone());
        async move {
            let path = request.uri().to_string();
            let headers = request
                .headers()
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_string()))
                .collect();
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let body = serde_json::from_slice(&body).unwrap();
            let _ = seen.send(Seen {
                path,
                headers,
                body,
            });
            Ok::<_, Infallible>(response(&reply))
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// Serves `reply` to every request on 127.0.0.1, over TLS when an acceptor is given.
async fn serve(
    tls: Option<TlsAcceptor>,
    reply: Reply,
) -> (SocketAddr, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (seen_tx, seen_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let (tls, reply, seen) = (tls.clone(), reply.clone(), seen_tx.clone());
            tokio::spawn(async move {
                match tls {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(tcp).await {
                            serve_connection(stream, reply, seen).await;
                        }
                    }
                    None => serve_connection(tcp, reply, seen).await,
                }
            });
        }
    });
    (addr, seen_rx)
}

fn client_trusting(ca: Option<&TestCa>) -> OutboundClient {
    OutboundClient::new(&TlsOptions {
        extra_ca_file: ca.map(|ca| ca.pem_file.clone()),
    })
    .unwrap()
}

async fn post(
    client: &OutboundClient,
    url: &str,
    path: &str,
    response_bytes_max: usize,
) -> Result<OutboundAnswer, OutboundError> {
    post_with(client, url, path, response_bytes_max, TIMEOUT_MS).await
}

async fn post_with(
    client: &OutboundClient,
    url: &str,
    path: &str,
    response_bytes_max: usize,
    timeout_ms: u64,
) -> Result<OutboundAnswer, OutboundError> {
    let endpoint = Endpoint::parse(url).unwrap();
    let body = JsonBody::from(&json!({ "model": "test", "messages": [] }));
    let headers = [
        OutboundHeader::plain("anthropic-version", "2023-06-01"),
        OutboundHeader::sensitive("x-api-key", SECRET),
    ];
    let request = OutboundRequest {
        headers: &headers,
        timeout_ms,
        response_bytes_max,
        ..OutboundRequest::new(&endpoint, path, &body)
    };
    let shown = format!("{request:?}");
    assert!(
        !shown.contains(SECRET),
        "the request's Debug shows the secret: {shown}"
    );
    client.post_json(request).await
}

fn assert_secret_hidden(error: &OutboundError) {
    let shown = format!("{error} / {error:?}");
    assert!(
        !shown.contains(SECRET),
        "an error shows the secret: {shown}"
    );
}

#[tokio::test]
async fn https_by_host_name_with_the_extra_ca_joins_the_path_and_sends_the_headers() {
    let ca = make_ca("https_ok");
    let (addr, mut seen) = serve(
        Some(acceptor_for(&ca, "localhost")),
        Reply::ok(r#"{"ok":true}"#),
    )
    .await;
    let url = format!("https://localhost:{}/base", addr.port());
    let answer = post(&client_trusting(Some(&ca)), &url, "/v1/messages", 1024)
        .await
        .unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, Bytes::from_static(br#"{"ok":true}"#));
    assert_eq!(answer.retry_after_ms, None);
    let seen = seen.recv().await.unwrap();
    assert_eq!(seen.path, "/base/v1/messages");
    assert_eq!(
        seen.headers["x-api-key"], SECRET,
        "the sensitive header arrives as it was"
    );
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");
    assert_eq!(seen.headers["host"], format!("localhost:{}", addr.port()));
    assert_eq!(seen.headers["content-type"], "application/json");
    assert_eq!(seen.body, json!({ "model": "test", "messages": [] }));
}

#[tokio::test]
async fn https_without_the_extra_ca_fails_with_tls() {
    let ca = make_ca("https_no_ca");
    let (addr, _seen) = serve(Some(acceptor_for(&ca, "localhost")), Reply::ok("{}")).await;
    let url = format!("https://localhost:{}", addr.port());
    let error = post(&client_trusting(None), &url, "/v1", 1024)
        .await
        .unwrap_err();
    match &error {
        OutboundError::Tls { host, detail } => {
            assert_eq!(host, "localhost");
            assert!(detail.contains("UnknownIssuer"), "{detail}");
        }
        other => panic!("expected Tls, got {other:?}"),
    }
    assert!(error.to_string().contains("extra CA file"), "{error}");
    assert_secret_hidden(&error);
}

#[tokio::test]
async fn https_with_a_certificate_for_another_name_fails_with_tls() {
    let ca = make_ca("https_wrong_name");
    let (addr, _seen) = serve(Some(acceptor_for(&ca, "provider.example")), Reply::ok("{}")).await;
    let url = format!("https://localhost:{}", addr.port());
    let error = post(&client_trusting(Some(&ca)), &url, "/v1", 1024)
        .await
        .unwrap_err();
    match &error {
        OutboundError::Tls { detail, .. } => {
            assert!(detail.contains("not valid for name"), "{detail}")
        }
        other => panic!("expected Tls, got {other:?}"),
    }
    assert_secret_hidden(&error);
}

#[tokio::test]
async fn plain_http_by_host_name_works() {
    let (addr, mut seen) = serve(None, Reply::ok("plain")).await;
    let url = format!("http://localhost:{}/v1/", addr.port());
    let answer = post(&client_trusting(None), &url, "/chat/completions", 1024)
        .await
        .unwrap();
    assert_eq!(
        (answer.status.as_u16(), answer.body.as_ref()),
        (200, &b"plain"[..])
    );
    assert_eq!(seen.recv().await.unwrap().path, "/v1/chat/completions");
}

#[tokio::test]
async fn plain_http_to_an_ip_literal_with_an_empty_path_posts_to_the_root() {
    let (addr, mut seen) = serve(None, Reply::ok("root")).await;
    let url = format!("http://{addr}");
    let answer = post(&client_trusting(None), &url, "", 1024).await.unwrap();
    assert_eq!(answer.body.as_ref(), b"root");
    let seen = seen.recv().await.unwrap();
    assert_eq!(
        (seen.path.as_str(), seen.headers["host"].as_str()),
        ("/", addr.to_string().as_str())
    );
}

/// Accepts connections and holds them without reading or answering.
async fn silent_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            held.push(listener.accept().await.unwrap().0);
        }
    });
    addr
}

#[tokio::test]
async fn a_server_that_never_answers_gives_timeout() {
    let addr = silent_server().await;
    for scheme in ["http", "https"] {
        let url = format!("{scheme}://localhost:{}", addr.port());
        let started = std::time::Instant::now();
        let error = post_with(&client_trusting(None), &url, "/v1", 1024, 300)
            .await
            .unwrap_err();
        assert!(
            matches!(error, OutboundError::Timeout { timeout_ms: 300 }),
            "{scheme}: {error:?}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(TIMEOUT_MS),
            "{scheme}"
        );
        assert_secret_hidden(&error);
    }
}

const CAP_BYTES: usize = 1_000;

async fn answer_of(len: usize, chunked: bool) -> Result<OutboundAnswer, OutboundError> {
    // Three chunks, so the chunked reply crosses the cap inside a later frame.
    let body = vec![b'x'; len];
    let third = len / 3;
    let chunks = [&body[..third], &body[third..2 * third], &body[2 * third..]]
        .map(Bytes::copy_from_slice)
        .to_vec();
    let reply = Reply {
        status: 200,
        headers: Vec::new(),
        chunks,
        chunked,
    };
    let (addr, _seen) = serve(None, reply).await;
    post(
        &client_trusting(None),
        &format!("http://localhost:{}", addr.port()),
        "/",
        CAP_BYTES,
    )
    .await
}

#[tokio::test]
async fn a_body_of_exactly_the_cap_passes_and_one_byte_more_is_too_large() {
    for chunked in [false, true] {
        let answer = answer_of(CAP_BYTES, chunked).await.unwrap();
        assert_eq!(answer.body.len(), CAP_BYTES, "chunked: {chunked}");
        let error = answer_of(CAP_BYTES + 1, chunked).await.unwrap_err();
        assert!(
            matches!(
                error,
                OutboundError::TooLarge {
                    limit_bytes: CAP_BYTES
                }
            ),
            "chunked: {chunked}: {error:?}"
        );
        assert_secret_hidden(&error);
    }
}

async fn retry_after_of(value: Option<&str>) -> Option<u64> {
    let reply = Reply {
        status: 429,
        headers: value
            .map(|v| ("retry-after", v.to_string()))
            .into_iter()
            .collect(),
        ..Reply::ok("{}")
    };
    let (addr, _seen) = serve(None, reply).await;
    let answer = post(
        &client_trusting(None),
        &format!("http://localhost:{}", addr.port()),
        "/",
        64,
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 429);
    answer.retry_after_ms
}

#[tokio::test]
async fn retry_after_in_seconds_is_read_as_milliseconds() {
    assert_eq!(retry_after_of(Some("30")).await, Some(30_000));
    assert_eq!(retry_after_of(Some("0")).await, Some(0));
    assert_eq!(
        retry_after_of(Some("Wed, 21 Oct 2015 07:28:00 GMT")).await,
        None
    );
    assert_eq!(retry_after_of(None).await, None);
}

/// Answers every connection with bytes that are not HTTP.
async fn garbage_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let _ = tcp.write_all(b"this is not HTTP\r\n\r\n").await;
        }
    });
    addr
}

/// A port nothing listens on (bound, then released).
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_sensitive_header_value_appears_in_no_error() {
    let ca = make_ca("secret_hidden");
    let (tls_addr, _seen) = serve(Some(acceptor_for(&ca, "localhost")), Reply::ok("{}")).await;
    let garbage = garbage_server().await;
    let closed = closed_port().await;
    let client = client_trusting(None);
    let cases = [
        (format!("http://127.0.0.1:{closed}"), "Connect"),
        (format!("https://localhost:{}", tls_addr.port()), "Tls"),
        (format!("http://localhost:{}", garbage.port()), "Http"),
        ("http://no-such-host.invalid".to_string(), "Resolve"),
    ];
    for (url, kind) in cases {
        let error = post(&client, &url, "/v1", 1024).await.unwrap_err();
        assert!(
            format!("{error:?}").starts_with(kind),
            "{url}: expected {kind}, got {error:?}"
        );
        assert_secret_hidden(&error);
    }
    assert!(!format!("{client:?}").contains(SECRET));
}

#[tokio::test]
async fn the_address_policy_refusing_the_resolved_address_makes_no_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let recorder = asked.clone();
    let client = client_trusting(None).with_address_policy(Arc::new(move |host, addr| {
        recorder.lock().unwrap().push((host.to_string(), addr));
        Err("loopback is not allowed".to_string())
    }));
    let url = format!("http://localhost:{port}");
    let error = post(&client, &url, "/v1", 1024).await.unwrap_err();
    match &error {
        OutboundError::AddressRefused { host, addr, reason } => {
            assert_eq!(
                (host.as_str(), reason.as_str()),
                ("localhost", "loopback is not allowed")
            );
            assert_eq!(addr.port(), port);
        }
        other => panic!("expected AddressRefused, got {other:?}"),
    }
    let expected = (
        "localhost".to_string(),
        SocketAddr::from(([127, 0, 0, 1], port)),
    );
    assert!(
        asked.lock().unwrap().contains(&expected),
        "{:?}",
        asked.lock().unwrap()
    );
    assert_secret_hidden(&error);
    // A connection made would be waiting in the backlog.
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(
        accepted.is_err(),
        "the client connected although the policy refused"
    );
}

#[tokio::test]
async fn the_address_policy_is_asked_about_the_address_connected_to() {
    let (addr, _seen) = serve(None, Reply::ok("allowed")).await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let recorder = asked.clone();
    // Allows only the address the server listens on; anything else `localhost` resolves to
    // (`::1`) is refused and skipped.
    let client = client_trusting(None).with_address_policy(Arc::new(move |_host, candidate| {
        recorder.lock().unwrap().push(candidate);
        if candidate == addr {
            Ok(())
        } else {
            Err("not the test server".to_string())
        }
    }));
    let answer = post(
        &client,
        &format!("http://localhost:{}", addr.port()),
        "/",
        64,
    )
    .await
    .unwrap();
    assert_eq!(answer.body.as_ref(), b"allowed");
    assert!(asked.lock().unwrap().contains(&addr));
}

#[test]
fn extra_ca_file_refusals_are_typed_and_name_the_file() {
    let dir = test_dir("ca_refusals");
    let missing = dir.join("missing.pem");
    let _ = std::fs::remove_file(&missing);
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let empty = write("empty.pem", "");
    let no_pem = write("text.pem", "not a certificate at all\n");
    let bad_base64 = write(
        "bad.pem",
        "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
    );
    let not_der = write(
        "junk.pem",
        "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n",
    );
    let build = |path: &PathBuf| {
        OutboundClient::new(&TlsOptions {
            extra_ca_file: Some(path.clone()),
        })
        .unwrap_err()
    };
    type Expected = fn(&TlsSetupError) -> bool;
    let cases: [(&PathBuf, Expected); 5] = [
        (&missing, |e| matches!(e, TlsSetupError::CaFileRead { .. })),
        (&empty, |e| matches!(e, TlsSetupError::CaFileEmpty { .. })),
        (&no_pem, |e| matches!(e, TlsSetupError::CaFileEmpty { .. })),
        (&bad_base64, |e| {
            matches!(e, TlsSetupError::CaFileInvalid { .. })
        }),
        (&not_der, |e| {
            matches!(e, TlsSetupError::CaCertificateRejected { .. })
        }),
    ];
    for (path, expected) in cases {
        let error = build(path);
        assert!(expected(&error), "{}: {error:?}", path.display());
        assert!(
            error.to_string().contains(&path.display().to_string()),
            "{error}"
        );
    }
}

#[test]
fn a_good_extra_ca_file_and_no_file_both_build_a_client() {
    let ca = make_ca("ca_good");
    client_trusting(Some(&ca));
    client_trusting(None);
}

#[test]
fn the_extra_ca_file_size_limit_holds_at_its_boundary() {
    let ca = make_ca("ca_size");
    let pem = ca.certificate.pem();
    // Text outside PEM sections is skipped, so padding keeps the file valid.
    let padded = |bytes: usize| format!("{pem}{}", " ".repeat(bytes - pem.len()));
    let fits = ca.pem_file.with_file_name("fits.pem");
    std::fs::write(&fits, padded(CA_FILE_BYTES_MAX as usize)).unwrap();
    OutboundClient::new(&TlsOptions {
        extra_ca_file: Some(fits),
    })
    .unwrap();
    let over = ca.pem_file.with_file_name("over.pem");
    std::fs::write(&over, padded(CA_FILE_BYTES_MAX as usize + 1)).unwrap();
    let error = OutboundClient::new(&TlsOptions {
        extra_ca_file: Some(over),
    })
    .unwrap_err();
    assert!(
        matches!(error, TlsSetupError::CaFileTooLarge { .. }),
        "{error:?}"
    );
}

//! `vigil serve` against a hostile client, on loopback only: a slow request body, one token
//! taking the event streams, control sequences aimed at the operator's terminal, outbound calls
//! to loopback and link-local addresses, secrets on the command line and in world-readable
//! files, a sloppy `Authorization` header, a huge echoed value, and one token flooding
//! requests. Each test is bounded in count and time, and fails on a node without the matching
//! defence.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vigil::api::client::ApiClient;
use vigil::api::{
    BODY_READ_TIMEOUT_MS, BODY_STALL_TIMEOUT_MS, ERROR_FIELD_CHARS_MAX, ERROR_MESSAGE_CHARS_MAX,
    SSE_RETRY_AFTER_S, SSE_STREAMS_PER_TENANT_MAX, SSE_STREAMS_PER_TOKEN_MAX,
    SSE_STREAMS_TENANT_OPERATOR_RESERVE, REQUESTS_PER_SECOND_PER_TOKEN, REQUEST_BURST_PER_TOKEN,
    REQUESTS_IN_FLIGHT_PER_AGENT_TOKEN_MAX,
};
use vigil::engine::spec_error::ECHOED_VALUE_CHARS_MAX;
use vigil::io::clock::{Clock, SharedClock, SystemClock};
use vigil::io::entropy::SeededEntropy;
use vigil::io::storage::StorageLocation;
use vigil::net::OutboundPolicy;
use vigil::node::{Node, NodeConfig, TenantToken};

const DEFAULT_OP: &str = "default-operator-token-0001";
const ACME_OP: &str = "acme-operator-token-00000001";
/// Longest a test waits for one answer or one run; a bound on waiting, never a timing goal.
const WAIT_MS_MAX: u64 = 15_000;
/// What an attacker puts in a reason: OSC (set the window title), BEL, CSI (clear the screen),
/// CR (overwrite the line), a C1 CSI and a bidi override.
const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\rfake line\u{9b}31m\u{202e}x";

// ---- an in-process node -------------------------------------------------------------------

struct Fixture {
    node: Node,
    dir: PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn fresh_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vigil-hostile-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A ready node with tenants `default` and `acme`, its outbound calls under `policy`.
async fn start(test: &str, policy: OutboundPolicy) -> Fixture {
    start_clocked(test, policy, SystemClock::shared()).await
}

/// Like [`start`], with the node's time from `clock`.
async fn start_clocked(test: &str, policy: OutboundPolicy, clock: SharedClock) -> Fixture {
    let dir = fresh_dir(test);
    let mut services = vigil::exec::host::RunServices::guarded(
        &vigil::net::TlsOptions::default(),
        Default::default(),
        policy,
    )
    .unwrap();
    services.secrets = Arc::new(|_: &str| None);
    let config = NodeConfig {
        listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        storage: StorageLocation::File(dir.join("vigil.redb")),
        clock,
        entropy: SeededEntropy::shared(11),
        tenants: vec![
            TenantToken {
                tenant: "default".into(),
                token: DEFAULT_OP.into(),
            },
            TenantToken {
                tenant: "acme".into(),
                token: ACME_OP.into(),
            },
        ],
        on_commit: None,
        on_replayed: None,
        adapters: vigil::exec::adapter::BuiltinAdapters::shared(),
        run_services: services,
        transcripts: Arc::new(vigil::transcript::MemoryTranscripts::new()),
        alert_sinks: Vec::new(),
        snapshots: Default::default(),
        heartbeat_test_seam: false,
    };
    let mut node = Node::start(config).await.expect("node starts");
    node.ready().await.expect("node recovers");
    Fixture { node, dir }
}

impl Fixture {
    fn addr(&self) -> SocketAddr {
        self.node.local_addr()
    }

    fn api(&self, token: &str) -> ApiClient {
        ApiClient::with_token(self.addr(), token)
    }

    /// Creates an agent as `operator`; its id and token.
    async fn agent(&self, operator: &str, spec: Value) -> (u64, String) {
        let answer = self.api(operator).post_json("/v1/agents", &spec).await.unwrap();
        let body = answer.json().unwrap();
        assert_eq!(answer.status.as_u16(), 201, "create: {body}");
        (
            body["agent"]["id"].as_u64().unwrap(),
            body["token"].as_str().unwrap().to_string(),
        )
    }

    /// Wakes agent `id` on demand; the run it queued.
    async fn wake(&self, token: &str, id: u64, reason: &str) -> u64 {
        let body = json!({"source": "on_demand", "reason": reason});
        let answer = self
            .api(token)
            .post_json(&format!("/v1/agents/{id}/wakeup"), &body)
            .await
            .unwrap();
        let body = answer.json().unwrap();
        body["run"].as_u64().unwrap_or_else(|| panic!("wakeup: {body}"))
    }

    /// The run once it has ended, waiting at most `WAIT_MS_MAX`.
    async fn finished(&self, token: &str, run: u64) -> Value {
        let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
        loop {
            let run = self.api(token).get(&format!("/v1/runs/{run}")).await.unwrap();
            let run = run.json().unwrap();
            if run["finished_at_ms"].as_u64().is_some() {
                return run;
            }
            assert!(Instant::now() < deadline, "the run never ended: {run}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn scripted(name: &str) -> Value {
    json!({
        "name": name,
        "heartbeat": {"sources": ["on_demand"]},
        "adapter": {"type": "scripted", "steps": [{"duration_ms": 10, "outcome": "succeeded"}]},
    })
}

fn llm(name: &str, base_url: &str) -> Value {
    json!({
        "name": name,
        "heartbeat": {"sources": ["on_demand"]},
        "limits": {"run_timeout_ms": 10_000},
        "adapter": {"type": "llm", "api": "openai", "base_url": base_url, "model": "m",
                    "request_timeout_ms": 2_000},
    })
}

// ---- raw HTTP -----------------------------------------------------------------------------

/// An answer read off a raw socket: status, head (lower-cased), body.
struct Raw {
    status: u16,
    head: String,
    body: String,
}

/// Reads one answer; `None` if the connection ended (or nothing came) first.
async fn read_answer(stream: &mut TcpStream, wait: Duration) -> Option<Raw> {
    let mut bytes = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            if let Some(end) = find(&bytes, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&bytes[..end]).to_lowercase();
                let length = header(&head, "content-length").and_then(|v| v.parse().ok());
                let have = bytes.len() - end - 4;
                // A stream's head is enough; an error's body is read in full.
                if length.is_none_or(|l: usize| have >= l) {
                    return Some((end, head));
                }
            }
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
            }
        }
    };
    let (end, head) = tokio::time::timeout(wait, read).await.ok()??;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let body = String::from_utf8_lossy(&bytes[end + 4..]).into_owned();
    Some(Raw { status, head, body })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .map(str::trim)
}

/// Opens a live event stream as `token`: its answer and the socket (kept open by the caller).
async fn open_stream(addr: SocketAddr, token: &str) -> (Raw, TcpStream) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /v1/events HTTP/1.1\r\nHost: vigil\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = read_answer(&mut stream, Duration::from_millis(WAIT_MS_MAX))
        .await
        .expect("the stream request is answered");
    (answer, stream)
}

/// Sends a wakeup's head promising a 100-byte body, as `token`.
async fn body_promised(addr: SocketAddr, token: &str, agent: u64) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/agents/{agent}/wakeup HTTP/1.1\r\nHost: vigil\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// After a 408 the server closes the connection: the next read sees its end.
async fn assert_closed(stream: &mut TcpStream) {
    let mut rest = Vec::new();
    let end = tokio::time::timeout(Duration::from_millis(WAIT_MS_MAX), stream.read_to_end(&mut rest));
    assert!(end.await.is_ok(), "the connection stays open after the 408");
}

// ---- slow bodies --------------------------------------------------------------------------

#[tokio::test]
async fn a_body_that_stalls_is_answered_408_and_its_connection_closed() {
    let node = start("stall", OutboundPolicy::default()).await;
    let (id, token) = node.agent(DEFAULT_OP, scripted("slow")).await;
    let mut stream = body_promised(node.addr(), &token, id).await;
    let sent = Instant::now();
    stream.write_all(b"{").await.unwrap();
    let answer = read_answer(&mut stream, Duration::from_millis(WAIT_MS_MAX))
        .await
        .expect("a stalled body is answered, not held");
    let waited = sent.elapsed();
    assert_eq!(answer.status, 408, "{}", answer.body);
    assert!(answer.body.contains("body_timeout"), "{}", answer.body);
    assert_eq!(header(&answer.head, "connection"), Some("close"));
    assert!(
        waited >= Duration::from_millis(BODY_STALL_TIMEOUT_MS - 100)
            && waited < Duration::from_millis(BODY_READ_TIMEOUT_MS),
        "answered after {waited:?}"
    );
    assert_closed(&mut stream).await;
}

#[tokio::test]
async fn a_body_trickling_in_is_cut_off_at_the_read_timeout() {
    let node = start("trickle", OutboundPolicy::default()).await;
    let (id, token) = node.agent(DEFAULT_OP, scripted("slow")).await;
    let stream = body_promised(node.addr(), &token, id).await;
    let started = Instant::now();
    let (mut reader, mut writer) = stream.into_split();
    // One byte every half stall timeout: never stalled, far slower than the deadline allows.
    let trickle = tokio::spawn(async move {
        for _ in 0..100 {
            if writer.write_all(b" ").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(BODY_STALL_TIMEOUT_MS / 2)).await;
        }
    });
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        Duration::from_millis(BODY_READ_TIMEOUT_MS + WAIT_MS_MAX),
        reader.read_to_end(&mut answer),
    )
    .await;
    trickle.abort();
    assert!(read.is_ok(), "a trickling body holds its connection");
    let waited = started.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(waited >= Duration::from_millis(BODY_READ_TIMEOUT_MS - 100), "cut after {waited:?}");
}

// ---- stream slots -------------------------------------------------------------------------

fn assert_refused(answer: &Raw, code: &str) {
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert!(answer.body.contains(code), "{}", answer.body);
    assert_eq!(
        header(&answer.head, "retry-after"),
        Some(SSE_RETRY_AFTER_S.to_string().as_str())
    );
}

#[tokio::test]
async fn one_agent_token_cannot_take_the_streams_of_others() {
    let node = start("streams-token", OutboundPolicy::default()).await;
    let (_, token) = node.agent(ACME_OP, scripted("greedy")).await;
    let mut held = Vec::new();
    for i in 0..SSE_STREAMS_PER_TOKEN_MAX {
        let (answer, stream) = open_stream(node.addr(), &token).await;
        assert_eq!(answer.status, 200, "stream {i}: {}", answer.body);
        held.push(stream);
    }
    let (refused, _) = open_stream(node.addr(), &token).await;
    assert_refused(&refused, "too_many_streams_for_token");
    // The operator of the agent's tenant, and of another, still get theirs.
    for operator in [ACME_OP, DEFAULT_OP] {
        let (answer, stream) = open_stream(node.addr(), operator).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        held.push(stream);
    }
    // A closed stream gives its slot back.
    drop(held.remove(0));
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        let (answer, stream) = open_stream(node.addr(), &token).await;
        if answer.status == 200 {
            held.push(stream);
            break;
        }
        assert!(Instant::now() < deadline, "the slot never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_tenant_s_agents_leave_its_operator_the_reserve() {
    let node = start("streams-tenant", OutboundPolicy::default()).await;
    let agents_cap = SSE_STREAMS_PER_TENANT_MAX - SSE_STREAMS_TENANT_OPERATOR_RESERVE;
    let mut held = Vec::new();
    let mut tokens = Vec::new();
    while held.len() < agents_cap {
        if held.len() % SSE_STREAMS_PER_TOKEN_MAX == 0 {
            let name = format!("a{}", tokens.len());
            tokens.push(node.agent(ACME_OP, scripted(&name)).await.1);
        }
        let (answer, stream) = open_stream(node.addr(), tokens.last().unwrap()).await;
        assert_eq!(answer.status, 200, "stream {}: {}", held.len(), answer.body);
        held.push(stream);
    }
    let (_, fresh) = node.agent(ACME_OP, scripted("late")).await;
    let (refused, _) = open_stream(node.addr(), &fresh).await;
    assert_refused(&refused, "too_many_streams_for_tenant");
    for i in 0..SSE_STREAMS_TENANT_OPERATOR_RESERVE {
        let (answer, stream) = open_stream(node.addr(), ACME_OP).await;
        assert_eq!(answer.status, 200, "operator stream {i}: {}", answer.body);
        held.push(stream);
    }
    let (refused, _) = open_stream(node.addr(), ACME_OP).await;
    assert_refused(&refused, "too_many_streams_for_tenant");
    // Another tenant's agents are not held back by acme's.
    let (_, other) = node.agent(DEFAULT_OP, scripted("other")).await;
    let (answer, _stream) = open_stream(node.addr(), &other).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}

// ---- request rate --------------------------------------------------------------------------

/// Real wall time, and a monotonic time that moves only when the test says: the rate limit's
/// buckets refill on the monotonic clock, so the flood's boundary is exact whatever the speed.
#[derive(Debug, Default)]
struct SteppedMono(AtomicU64);

impl Clock for SteppedMono {
    fn wall_now_ms(&self) -> u64 {
        SystemClock::new().wall_now_ms()
    }
    fn mono_now(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::SeqCst))
    }
}

/// `GET path` as `token` on a raw socket, to read `Retry-After`.
async fn get_raw(addr: SocketAddr, token: &str, path: &str) -> Raw {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: vigil\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    read_answer(&mut stream, Duration::from_millis(WAIT_MS_MAX))
        .await
        .unwrap()
}

#[tokio::test]
async fn one_agent_token_s_flood_is_refused_429_while_the_operator_is_served() {
    let mono = Arc::new(SteppedMono::default());
    let node = start_clocked("rate", OutboundPolicy::default(), mono.clone()).await;
    let (id, token) = node.agent(ACME_OP, scripted("flood")).await;
    let own = format!("/v1/agents/{id}");
    let agent = node.api(&token);
    for i in 0..REQUEST_BURST_PER_TOKEN {
        let answer = agent.get(&own).await.unwrap();
        assert_eq!(answer.status.as_u16(), 200, "request {i} of the burst");
    }
    let refused = get_raw(node.addr(), &token, &own).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(refused.body.contains("rate_limited"), "{}", refused.body);
    assert_eq!(header(&refused.head, "retry-after"), Some("1"));
    // The operators (of the agent's tenant and another) spend their own buckets.
    for operator in [ACME_OP, DEFAULT_OP] {
        let answer = node.api(operator).get("/v1/agents").await.unwrap();
        assert_eq!(answer.status.as_u16(), 200, "{operator}");
    }
    // One request's worth of time later, exactly one more request passes.
    let one_request_ms = 1_000 / REQUESTS_PER_SECOND_PER_TOKEN;
    mono.0.fetch_add(one_request_ms, Ordering::SeqCst);
    assert_eq!(agent.get(&own).await.unwrap().status.as_u16(), 200);
    assert_eq!(agent.get(&own).await.unwrap().status.as_u16(), 429);
    // Unauthenticated requests and health checks are not charged, so not refused.
    let stranger = node.api("not-a-token").get(&own).await.unwrap();
    assert_eq!(stranger.status.as_u16(), 401);
    let health = ApiClient::new(node.addr()).get("/v1/health").await.unwrap();
    assert_eq!(health.status.as_u16(), 200);
}

// ---- requests in flight -------------------------------------------------------------------

/// Polls `GET path` as `token` until `wanted(answer)` holds (bounded).
async fn poll_raw(addr: SocketAddr, token: &str, path: &str, wanted: impl Fn(&Raw) -> bool) -> Raw {
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        let answer = get_raw(addr, token, path).await;
        if wanted(&answer) {
            return answer;
        }
        assert!(Instant::now() < deadline, "never: {} {}", answer.status, answer.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn one_agent_token_s_slow_bodies_hold_only_its_own_request_slots() {
    let node = start("in-flight", OutboundPolicy::default()).await;
    let (id, token) = node.agent(ACME_OP, scripted("dribbler")).await;
    let own = format!("/v1/agents/{id}");
    // Exactly the cap of requests whose bodies never come: each holds a slot once its head is
    // authenticated, so a request of the same token beside them is refused.
    let mut held = Vec::new();
    for _ in 0..REQUESTS_IN_FLIGHT_PER_AGENT_TOKEN_MAX {
        held.push(body_promised(node.addr(), &token, id).await);
    }
    let refused = poll_raw(node.addr(), &token, &own, |a| a.status == 503).await;
    assert!(refused.body.contains("too_many_requests_in_flight_for_token"), "{}", refused.body);
    assert_eq!(header(&refused.head, "retry-after"), Some("1"));
    // A refused keep-alive connection is closed, not left idle to hoard a connection slot.
    let mut keep_alive = TcpStream::connect(node.addr()).await.unwrap();
    let request = format!("GET {own} HTTP/1.1\r\nHost: vigil\r\nAuthorization: Bearer {token}\r\n\r\n");
    keep_alive.write_all(request.as_bytes()).await.unwrap();
    let again = read_answer(&mut keep_alive, Duration::from_millis(WAIT_MS_MAX)).await.unwrap();
    assert_eq!(again.status, 503, "{}", again.body);
    assert_eq!(header(&again.head, "connection"), Some("close"));
    assert_closed(&mut keep_alive).await;
    // One fewer would have passed: with one of them gone, the token is served again.
    drop(held.pop());
    poll_raw(node.addr(), &token, &own, |a| a.status == 200).await;
    // Meanwhile the operators (of the agent's tenant and another) and another agent are served.
    for operator in [ACME_OP, DEFAULT_OP] {
        assert_eq!(get_raw(node.addr(), operator, "/v1/agents").await.status, 200);
    }
    let (other, other_token) = node.agent(ACME_OP, scripted("neighbour")).await;
    assert_eq!(get_raw(node.addr(), &other_token, &format!("/v1/agents/{other}")).await.status, 200);
    // Clients that go away give their slots back.
    held.clear();
    for _ in 0..REQUESTS_IN_FLIGHT_PER_AGENT_TOKEN_MAX {
        held.push(body_promised(node.addr(), &token, id).await);
    }
    poll_raw(node.addr(), &token, &own, |a| a.status == 503).await;
}

// ---- small ones ---------------------------------------------------------------------------

#[tokio::test]
async fn the_authorization_header_takes_exactly_one_space() {
    let node = start("bearer", OutboundPolicy::default()).await;
    let addr = node.addr();
    let ask = |header: String| async move {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "GET /v1/agents HTTP/1.1\r\nHost: vigil\r\nAuthorization: {header}\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        read_answer(&mut stream, Duration::from_millis(WAIT_MS_MAX)).await.unwrap()
    };
    assert_eq!(ask(format!("Bearer {DEFAULT_OP}")).await.status, 200);
    for sloppy in [
        format!("Bearer  {DEFAULT_OP}"),
        format!("Bearer {DEFAULT_OP} x"),
        format!("Bearer\t{DEFAULT_OP}"),
    ] {
        let answer = ask(sloppy.clone()).await;
        assert_eq!(answer.status, 401, "{sloppy:?}: {}", answer.body);
        assert!(answer.body.contains("exactly one space"), "{}", answer.body);
    }
}

#[tokio::test]
async fn a_huge_bad_value_is_not_echoed_whole() {
    let node = start("echo", OutboundPolicy::default()).await;
    let api = node.api(DEFAULT_OP);
    let long_name = "n".repeat(10_000) + "!";
    let answer = api.post_json("/v1/agents", &json!({"name": long_name})).await.unwrap();
    let body = answer.json().unwrap();
    assert_eq!(answer.status.as_u16(), 400);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("(10001 characters)"), "{message}");
    assert!(message.chars().count() < ECHOED_VALUE_CHARS_MAX + 200, "{message}");
    // Serde quotes an unknown field itself; the answer's backstop bounds it.
    let unknown = format!("{{\"name\":\"a\",\"{}\":1}}", "f".repeat(10_000));
    let answer = api
        .request(hyper::Method::POST, "/v1/agents", Some(unknown.into_bytes()))
        .await
        .unwrap();
    let body = answer.json().unwrap();
    assert_eq!(answer.status.as_u16(), 400);
    let message = body["error"]["message"].as_str().unwrap();
    let field = body["error"]["field"].as_str().unwrap();
    assert!(message.chars().count() <= ERROR_MESSAGE_CHARS_MAX + 1, "{}", message.len());
    assert!(field.chars().count() <= ERROR_FIELD_CHARS_MAX + 1, "{}", field.len());
    // A path id too.
    let path = format!("/v1/runs/{}", "9x".repeat(2_000));
    let body = api.get(&path).await.unwrap().json().unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.chars().count() < ECHOED_VALUE_CHARS_MAX + 200, "{message}");
}

// ---- outbound address policy --------------------------------------------------------------

/// A loopback listener counting the connections it accepts (and closing them at once).
async fn counting_stub() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    (addr, accepted)
}

/// Runs one wakeup of an `llm` agent of `operator`'s tenant calling `base_url`; the ended run.
async fn call_out(node: &Fixture, operator: &str, name: &str, base_url: &str) -> Value {
    let (id, _) = node.agent(operator, llm(name, base_url)).await;
    let run = node.wake(operator, id, "call out").await;
    node.finished(operator, run).await
}

fn assert_policy_refused(run: &Value, what: &str) {
    assert_eq!(run["status"], "failed", "{run}");
    let detail = run["detail"].as_str().unwrap();
    assert!(detail.contains("address policy refused"), "{detail}");
    assert!(detail.contains(what) && detail.contains("[outbound]"), "{detail}");
    if let Some(reason) = run.get("stop_reason") {
        assert_eq!(reason, "llm_error", "{run}");
    }
}

#[tokio::test]
async fn a_tenant_cannot_make_the_node_call_its_own_loopback() {
    let node = start("ssrf-loopback", OutboundPolicy::default()).await;
    let (stub, accepted) = counting_stub().await;
    let url = format!("http://{stub}");
    let refused = call_out(&node, ACME_OP, "prober", &url).await;
    assert_policy_refused(&refused, "loopback");
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "a refused address was connected to");
    // The node owner's own tenant may.
    let allowed = call_out(&node, DEFAULT_OP, "own", &url).await;
    assert!(!allowed["detail"].as_str().unwrap().contains("address policy"), "{allowed}");
    assert!(accepted.load(Ordering::SeqCst) >= 1);
}

#[tokio::test]
async fn an_allow_listed_range_is_reachable_for_every_tenant() {
    let policy = OutboundPolicy {
        allow: vec!["127.0.0.1/32".parse().unwrap()],
    };
    let node = start("ssrf-allow", policy).await;
    let (stub, accepted) = counting_stub().await;
    let allowed = call_out(&node, ACME_OP, "allowed", &format!("http://{stub}")).await;
    assert!(!allowed["detail"].as_str().unwrap().contains("address policy"), "{allowed}");
    assert!(accepted.load(Ordering::SeqCst) >= 1);
    // The allow-list names one range; its neighbour stays refused.
    let other = format!("http://127.0.0.2:{}", stub.port());
    assert_policy_refused(&call_out(&node, ACME_OP, "beside", &other).await, "loopback");
}

#[tokio::test]
async fn the_metadata_address_is_refused_without_a_connection_attempt() {
    let node = start("ssrf-metadata", OutboundPolicy::default()).await;
    let started = Instant::now();
    let run = call_out(&node, ACME_OP, "metadata", "http://169.254.169.254/latest").await;
    assert_policy_refused(&run, "link-local");
    assert!(run["detail"].as_str().unwrap().contains("\"169.254.169.254/32\""), "{run}");
    // A connect to a dead address would hang until the request timeout (2 s); the policy
    // answers before any connect.
    assert!(started.elapsed() < Duration::from_millis(1_500), "{:?}", started.elapsed());
}

// ---- the real binary: files, the token, the terminal ----------------------------------------

/// A `vigil serve` child, killed when dropped.
struct Serve {
    child: Child,
    url: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(data_dir: &Path, args: &[&str]) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(args)
        .env("VIGIL_LOG", "warn")
        .env_remove("VIGIL_OPERATOR_TOKEN")
        .env_remove("VIGIL_OPERATOR_TOKEN_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vigil serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line
        .strip_prefix("vigil listening on http://")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_string();
    Serve {
        child,
        url: format!("http://{addr}"),
    }
}

impl Serve {
    /// Stops the server; everything it wrote to stderr.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let mut stderr = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        stderr
    }

    fn vigil(&self, token: &str, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_vigil"))
            .args(args)
            .args(["--server", &self.url, "--token", token])
            .output()
            .unwrap()
    }
}

/// Waits until `path` exists (the server writes some files after it listens).
fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[cfg(unix)]
#[test]
fn the_node_s_files_are_the_owner_s_only() {
    let dir = fresh_dir("modes");
    let data = dir.join("data");
    let server = serve(&data, &[]);
    wait_for_file(&data.join("operator-token"));
    let stderr = server.stop();
    assert_eq!(mode(&data), 0o700, "data directory");
    assert_eq!(mode(&data.join("vigil.redb")), 0o600, "database");
    assert_eq!(mode(&data.join("vigil.redb-wal")), 0o600, "its write-ahead file");
    assert_eq!(mode(&data.join("operator-token")), 0o600, "operator token");
    assert_eq!(mode(&data.join("vigil.pid")), 0o600, "the data directory lock");
    assert!(!stderr.contains("visible to every local user"), "{stderr}");
    // A database left world-readable by an older version is tightened on the next start.
    std::fs::set_permissions(
        data.join("vigil.redb"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let again = serve(&data, &[]);
    let token = std::fs::read_to_string(data.join("operator-token")).unwrap();
    wait_until_ok(&again, token.trim(), &["agent", "list"]);
    again.stop();
    assert_eq!(mode(&data.join("vigil.redb")), 0o600, "database after a restart");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_operator_token_comes_from_a_file_and_the_command_line_warns() {
    let dir = fresh_dir("token-file");
    let token = "file-operator-token-0000001";
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let from_file = serve(&dir.join("a"), &["--operator-token-file", token_file.to_str().unwrap()]);
    let listed = wait_until_ok(&from_file, token, &["agent", "list"]);
    assert!(listed.status.success());
    let stderr = from_file.stop();
    assert!(!stderr.contains("visible to every local user"), "{stderr}");
    let on_line = serve(&dir.join("b"), &["--operator-token", token]);
    wait_until_ok(&on_line, token, &["agent", "list"]);
    let stderr = on_line.stop();
    assert_eq!(stderr.matches("visible to every local user").count(), 1, "{stderr}");
    assert!(!stderr.contains(token), "the warning repeats the token: {stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs the CLI until it succeeds (the node answers 503 while it recovers).
fn wait_until_ok(server: &Serve, token: &str, args: &[&str]) -> Output {
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        let output = server.vigil(token, args);
        if output.status.success() {
            return output;
        }
        assert!(
            Instant::now() < deadline,
            "{args:?} never succeeded: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a terminal must never receive raw: C0 controls but newline, DEL, C1, bidi overrides.
fn assert_inert(what: &str, text: &str) {
    let raw = text.chars().find(|c| {
        (c.is_control() && *c != '\n') || ('\u{202a}'..='\u{202e}').contains(c)
    });
    assert!(raw.is_none(), "{what} printed {raw:?} raw: {text:?}");
}

#[tokio::test]
async fn a_reason_from_an_agent_reaches_the_operator_s_terminal_escaped() {
    let dir = fresh_dir("terminal");
    let token_file = dir.join("token");
    std::fs::write(&token_file, DEFAULT_OP).unwrap();
    let server = serve(&dir.join("data"), &["--operator-token-file", token_file.to_str().unwrap()]);
    wait_until_ok(&server, DEFAULT_OP, &["agent", "list"]);
    let addr: SocketAddr = server.url.trim_start_matches("http://").parse().unwrap();
    let operator = ApiClient::with_token(addr, DEFAULT_OP);
    let created = operator.post_json("/v1/agents", &scripted("mallory")).await.unwrap();
    let created = created.json().unwrap();
    let (id, agent_token) = (created["agent"]["id"].as_u64().unwrap(), created["token"].as_str().unwrap());
    // The agent wakes itself with a reason aimed at the operator's terminal.
    let agent = ApiClient::with_token(addr, agent_token);
    let body = json!({"source": "on_demand", "reason": HOSTILE, "payload": {"note": HOSTILE}});
    let woken = agent.post_json(&format!("/v1/agents/{id}/wakeup"), &body).await.unwrap();
    let run = woken.json().unwrap()["run"].as_u64().unwrap().to_string();
    let commands: [&[&str]; 4] = [
        &["events", "tail"],
        &["runs", "show", &run],
        &["runs", "list"],
        &["agent", "show", "mallory"],
    ];
    for args in commands {
        let human = server.vigil(DEFAULT_OP, args);
        let stdout = String::from_utf8_lossy(&human.stdout);
        assert!(human.status.success(), "{args:?}: {}", String::from_utf8_lossy(&human.stderr));
        assert_inert(&format!("{args:?}"), &stdout);
        let json = server.vigil(DEFAULT_OP, &[args, &["--json"]].concat());
        assert_inert(&format!("{args:?} --json"), &String::from_utf8_lossy(&json.stdout));
        for line in String::from_utf8_lossy(&json.stdout).lines() {
            serde_json::from_str::<Value>(line).expect("--json prints JSON lines");
        }
    }
    let tail = server.vigil(DEFAULT_OP, &["events", "tail"]);
    assert!(String::from_utf8_lossy(&tail.stdout).contains("\\x1b]0;owned\\x07"));
    let show = server.vigil(DEFAULT_OP, &["runs", "show", &run]);
    assert!(String::from_utf8_lossy(&show.stdout).contains("\\x1b[2J\\rfake line\\u{9b}31m"));
    let json = server.vigil(DEFAULT_OP, &["runs", "show", &run, "--json"]);
    let shown: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(shown["reason"], HOSTILE, "--json keeps the value, escaped");
    server.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stand-in node that answers every CLI read with `HOSTILE` in each string it can: what a
/// compromised or impersonated server could send. The CLI must not rely on the real server's
/// validation (names, statuses) to keep the terminal safe.
fn hostile_server() -> (String, std::thread::JoinHandle<()>, Arc<std::sync::atomic::AtomicBool>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = stop.clone();
    let thread = std::thread::spawn(move || {
        while !stopping.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((stream, _)) => answer_hostile(stream),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    (url, thread, stop)
}

fn hostile_agent() -> Value {
    json!({"id": 1, "tenant": HOSTILE, "name": HOSTILE,
      "spec": {"name": HOSTILE, "adapter": {"type": "scripted", "steps": [{"duration_ms": 1000, "outcome": HOSTILE}]},
        "heartbeat": {"interval_ms": 60000, "sources": [HOSTILE], "while_paused": "allow_on_demand"},
        "time_zone": HOSTILE, "limits": {"run_timeout_ms": 600000, "queued_runs_max": 16, "daily_cap": null},
        "breaker": {"failures_to_open": 3, "cooldown_ms": 900000, "cooldown_ms_max": 7200000}},
      "status": "active", "created_at_ms": 1795356921345_u64, "next_fire_at_ms": null, "timer_fires": 0,
      "last_due_at_ms": null, "runs_started": 0, "paused_until_ms": null, "paused_by": null,
      "day_count": {"day": null, "started": 0}, "breaker": {"state": "closed", "llm_failures": 0, "tool_failures": 0}})
}

fn answer_hostile(mut stream: std::net::TcpStream) {
    stream.set_nonblocking(false).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while find(&head, b"\r\n\r\n").is_none() && stream.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split_whitespace().nth(1).unwrap_or("/");
    let run = json!({"id": 1, "agent": 1, "status": HOSTILE, "source": HOSTILE, "detail": HOSTILE,
        "reason": HOSTILE, "payload": {"x": HOSTILE}, "queued_at_ms": 0, "started_at_ms": null,
        "finished_at_ms": null});
    let body = match path.split('?').next().unwrap() {
        // `top` asks for the running runs; none keeps its typed rows simple.
        "/v1/runs" if path.contains("status=running") => json!({"runs": []}),
        "/v1/health" => json!({"status": "ok", "head_seq": 1}),
        "/v1/agents" => json!({"now_ms": 1795356921345_u64, "agents": [hostile_agent()]}),
        "/v1/agents/1" => hostile_agent(),
        "/v1/runs" => json!({"runs": [run]}),
        "/v1/runs/1" => run,
        _ => json!({"events": [], "head_seq": 1, "next_after": 1}),
    };
    let body = body.to_string();
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes());
}

#[test]
fn every_view_escapes_what_a_server_sends() {
    let (url, thread, stop) = hostile_server();
    let commands: [&[&str]; 6] = [
        &["agent", "list"],
        &["agent", "show", "1"],
        &["runs", "list"],
        &["runs", "show", "1"],
        &["top", "--once"],
        &["top", "--once", "--json"],
    ];
    for args in commands {
        let output = Command::new(env!("CARGO_BIN_EXE_vigil"))
            .args(args)
            .args(["--server", &url, "--token", "t"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{args:?}: {stderr}");
        assert_inert(&format!("{args:?}"), &stdout);
        assert_inert(&format!("{args:?} (stderr)"), &stderr);
        assert!(stdout.contains("]0;owned"), "{args:?} hides the value: {stdout}");
    }
    stop.store(true, Ordering::SeqCst);
    thread.join().unwrap();
}

//! HTTP tools over real TCP (real tokio, loopback only): a `ToolHttp` built on the API client
//! against a small local axum server. Checks what is posted, a 500 answer, a slow server hitting
//! the tool's `timeout_ms`, and a large answer cut at `response_bytes_max`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use vigil::api::client::{ApiClient, ClientError};
use vigil::engine::agent::AgentId;
use vigil::engine::run::RunId;
use vigil::engine::tool_spec::HttpToolSpec;
use vigil::exec::tools::{
    ToolCall, ToolContext, ToolHttp, ToolHttpAnswer, ToolHttpError, ToolHttpFuture, Toolbox,
};

/// How long the slow route waits before answering: well past the tool's timeout, so the test
/// can only pass by timing out.
const SLOW_ANSWER_MS: u64 = 5_000;
/// The slow tool's timeout.
const SLOW_TOOL_TIMEOUT_MS: u64 = 200;
/// Size of the large answer, and the cap the tool puts on it.
const LARGE_ANSWER_BYTES: usize = 100_000;
const LARGE_TOOL_CAP_BYTES: u64 = 1_000;

/// `ToolHttp` over the API client: plain `http://IP:PORT/path` only.
struct ClientHttp;

fn split_url(url: &str) -> Result<(SocketAddr, String), ToolHttpError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| ToolHttpError::Transport(format!("not http://IP:PORT/path: {url}")))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let addr = authority
        .parse()
        .map_err(|_| ToolHttpError::Transport(format!("not IP:PORT: {authority}")))?;
    Ok((
        addr,
        if path.is_empty() {
            "/".into()
        } else {
            path.into()
        },
    ))
}

impl ToolHttp for ClientHttp {
    fn post(&self, url: &str, body: Value, timeout_ms: u64, _cap: u64) -> ToolHttpFuture {
        let target = split_url(url);
        Box::pin(async move {
            let (addr, path) = target?;
            let client = ApiClient::new(addr).with_timeout_ms(timeout_ms);
            match client.post_json(&path, &body).await {
                Ok(answer) => Ok(ToolHttpAnswer {
                    status: answer.status.as_u16(),
                    body: answer.body,
                }),
                Err(ClientError::Timeout { timeout_ms, .. }) => {
                    Err(ToolHttpError::Timeout { timeout_ms })
                }
                Err(error) => Err(ToolHttpError::Transport(error.to_string())),
            }
        })
    }
}

/// A local tool server; `received` holds every body posted to `/echo`.
async fn tool_server() -> (SocketAddr, Arc<Mutex<Vec<Value>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let seen = received.clone();
    let router = Router::new()
        .route(
            "/echo",
            post(move |body: Bytes| {
                let seen = seen.clone();
                async move {
                    seen.lock()
                        .unwrap()
                        .push(serde_json::from_slice(&body).unwrap());
                    "echoed"
                }
            }),
        )
        .route(
            "/fail",
            post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "database down") }),
        )
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_millis(SLOW_ANSWER_MS)).await;
                "too late"
            }),
        )
        .route("/large", post(|| async { "L".repeat(LARGE_ANSWER_BYTES) }));
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(vigil::api::serve(listener, router));
    (addr, received)
}

fn tool(name: &str, url: String) -> HttpToolSpec {
    HttpToolSpec {
        name: name.into(),
        description: format!("the {name} route"),
        parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
        url,
        timeout_ms: 10_000,
        response_bytes_max: 64 * 1024,
    }
}

fn toolbox(addr: SocketAddr) -> Toolbox {
    let url = |path: &str| format!("http://{addr}{path}");
    let mut slow = tool("slow", url("/slow"));
    slow.timeout_ms = SLOW_TOOL_TIMEOUT_MS;
    let mut large = tool("large", url("/large"));
    large.response_bytes_max = LARGE_TOOL_CAP_BYTES;
    let specs = [
        tool("echo", url("/echo")),
        tool("fail", url("/fail")),
        slow,
        large,
    ];
    Toolbox::new(&specs, Arc::new(ClientHttp)).unwrap()
}

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: format!("call-{name}"),
        name: name.into(),
        arguments,
    }
}

fn context() -> ToolContext {
    ToolContext {
        agent_id: AgentId(5),
        agent_name: "scout".into(),
        run_id: RunId(9),
    }
}

#[tokio::test]
async fn http_tools_over_real_tcp() {
    let (addr, received) = tool_server().await;
    let tools = toolbox(addr);

    // What is posted: the tool, the parsed arguments, the agent and the run.
    let echoed = tools
        .call(&call("echo", json!("{\"q\": \"hello\"}")), &context())
        .await;
    assert!(!echoed.is_error, "{}", echoed.output);
    assert_eq!(echoed.output, "echoed");
    assert_eq!(
        received.lock().unwrap().as_slice(),
        [json!({
            "tool": "echo", "call_id": "call-echo", "arguments": {"q": "hello"},
            "agent": {"id": 5, "name": "scout"}, "run": {"id": 9},
        })]
    );

    // Bad arguments never reach the server.
    let refused = tools.call(&call("echo", json!({"q": 1})), &context()).await;
    assert!(refused.is_error);
    assert_eq!(received.lock().unwrap().len(), 1);

    // A 500 is an error for the model, with the server's text.
    let failed = tools
        .call(&call("fail", json!({"q": "x"})), &context())
        .await;
    assert!(failed.is_error);
    assert!(
        failed.output.contains("HTTP 500: database down"),
        "{}",
        failed.output
    );

    // A slow server: the call ends at the tool's timeout, long before the answer would come.
    let started = std::time::Instant::now();
    let slow = tools
        .call(&call("slow", json!({"q": "x"})), &context())
        .await;
    assert!(slow.is_error);
    assert!(
        slow.output.contains("did not answer within"),
        "{}",
        slow.output
    );
    assert!(
        started.elapsed() < Duration::from_millis(SLOW_ANSWER_MS),
        "took {:?}",
        started.elapsed()
    );

    // A large answer is cut at response_bytes_max.
    let large = tools
        .call(&call("large", json!({"q": "x"})), &context())
        .await;
    assert!(!large.is_error);
    let cap = usize::try_from(LARGE_TOOL_CAP_BYTES).unwrap();
    assert_eq!(large.output[..cap], "L".repeat(cap));
    assert!(
        large.output[cap..].starts_with(&format!(
            "\n[cut: the answer was {LARGE_ANSWER_BYTES} bytes"
        )),
        "{}",
        &large.output[cap..]
    );
}

#[tokio::test]
async fn an_unreachable_tool_is_an_error_for_the_model() {
    // Bind and drop a listener: nothing listens on that port any more.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let tools = Toolbox::new(
        &[tool("gone", format!("http://{addr}/x"))],
        Arc::new(ClientHttp),
    )
    .unwrap();
    let result = tools
        .call(&call("gone", json!({"q": "x"})), &context())
        .await;
    assert!(result.is_error);
    assert!(
        result.output.contains("could not reach tool gone"),
        "{}",
        result.output
    );
}

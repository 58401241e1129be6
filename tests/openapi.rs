//! `GET /v1/openapi.json` against the router that serves it and against docs/api.md's route
//! table. axum cannot list its routes, so the test asks a real node: every (method, path) the
//! document lists is served (not the "no such route" fallback, not 405); every other usual
//! method on those paths is refused 405; paths the document lacks get the fallback; and the
//! table in docs/api.md lists exactly the document's routes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::Value;
use vigil::api::client::ApiClient;
use vigil::io::clock::SystemClock;
use vigil::io::entropy::SeededEntropy;
use vigil::io::storage::StorageLocation;
use vigil::node::{Node, NodeConfig, TenantToken};

/// The route table under test.
const API_DOC: &str = include_str!("../docs/api.md");
const OPERATOR: &str = "acme-operator-token";
/// The methods probed on every documented path (HEAD follows GET in axum; OPTIONS and TRACE
/// are not routed at all).
const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// A ready node on an in-memory database with one tenant, `acme`.
async fn start() -> Node {
    let config = NodeConfig {
        listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        storage: StorageLocation::in_memory(),
        clock: SystemClock::shared(),
        entropy: SeededEntropy::shared(7),
        tenants: vec![TenantToken {
            tenant: "acme".into(),
            token: OPERATOR.into(),
        }],
        on_commit: None,
        on_replayed: None,
        adapters: vigil::exec::adapter::BuiltinAdapters::shared(),
        run_services: vigil::exec::host::RunServices::guarded(
            &vigil::net::TlsOptions::default(),
            Default::default(),
            vigil::net::OutboundPolicy::default(),
        )
        .unwrap(),
        transcripts: Arc::new(vigil::transcript::MemoryTranscripts::new()),
        alert_sinks: Vec::new(),
        snapshots: Default::default(),
        heartbeat_test_seam: false,
    };
    let mut node = Node::start(config).await.expect("node starts");
    node.ready().await.expect("node recovers");
    node
}

/// The document as the node serves it, to a caller without a token.
async fn served_document(node: &Node) -> Value {
    let answer = ApiClient::new(node.local_addr())
        .get("/v1/openapi.json")
        .await
        .unwrap();
    assert_eq!(answer.status.as_u16(), 200);
    assert_eq!(answer.headers["content-type"], "application/json");
    let document = answer.json().expect("the document is JSON");
    let version = document["openapi"].as_str().expect("an openapi version");
    assert!(version.starts_with("3.1."), "{version}");
    document
}

/// Every (method, path) the document describes.
fn documented(document: &Value) -> BTreeSet<(String, String)> {
    let paths = document["paths"].as_object().expect("paths");
    let mut routes = BTreeSet::new();
    for (path, item) in paths {
        for method in item.as_object().expect("a path item").keys() {
            if method != "parameters" {
                routes.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    routes
}

/// The rows of docs/api.md's route table: `| GET | [`/v1/agents`](#…) | …`.
fn doc_table() -> BTreeSet<(String, String)> {
    let table = API_DOC
        .split("## Endpoints")
        .nth(1)
        .expect("docs/api.md has an Endpoints section");
    let mut routes = BTreeSet::new();
    for line in table.lines().skip_while(|l| !l.starts_with('|')) {
        let Some(row) = line.strip_prefix('|') else {
            break;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        if METHODS.contains(&cells[0]) {
            let path = cells[1].split('`').nth(1).expect("a path in backticks");
            routes.insert((cells[0].to_string(), path.to_string()));
        }
    }
    routes
}

/// `path` with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{id}", "1").replace("{task_key}", "t")
}

/// Status and body of `method path` with the operator's token and no body.
async fn ask(client: &ApiClient, method: &str, path: &str) -> (u16, Value) {
    let method = hyper::Method::from_bytes(method.as_bytes()).unwrap();
    let answer = client.request(method, path, None).await.unwrap();
    let body = answer.json().unwrap_or(Value::Null);
    (answer.status.as_u16(), body)
}

/// Whether an answer is the router's own 404 for a path it does not route.
fn no_such_route(answer: &(u16, Value)) -> bool {
    let message = answer.1["error"]["message"].as_str().unwrap_or("");
    answer.0 == 404 && message.starts_with("no such route")
}

#[tokio::test]
async fn the_document_lists_exactly_the_routes_the_node_serves_and_the_docs_table() {
    let node = start().await;
    let document = served_document(&node).await;
    let routes = documented(&document);
    let table = doc_table();
    assert_eq!(
        routes,
        table,
        "the document and docs/api.md's route table differ: only in the document {:?}, only in \
         the table {:?}",
        routes.difference(&table).collect::<Vec<_>>(),
        table.difference(&routes).collect::<Vec<_>>(),
    );
    let mut client = ApiClient::with_token(node.local_addr(), OPERATOR);
    let paths: BTreeSet<&String> = routes.iter().map(|(_, path)| path).collect();
    for path in paths {
        for method in METHODS {
            let answer = ask(&client, method, &concrete(path)).await;
            // The probe of `POST /v1/operator/token` rotates the operator's token: go on with
            // the new one, so the probes after it are still authenticated.
            if let Some(token) = answer.1["token"]
                .as_str()
                .filter(|_| path == "/v1/operator/token")
            {
                client = ApiClient::with_token(node.local_addr(), token);
            }
            if routes.contains(&(method.to_string(), path.clone())) {
                assert!(
                    !no_such_route(&answer) && answer.0 != 405,
                    "{method} {path} is documented but not served: {answer:?}"
                );
            } else {
                assert_eq!(
                    (answer.0, &answer.1["error"]["code"]),
                    (405, &Value::from("method_not_allowed")),
                    "{method} {path} is served but not documented"
                );
            }
        }
    }
    node.stop();
}

#[tokio::test]
async fn paths_the_document_lacks_get_the_fallback() {
    let node = start().await;
    let routes = documented(&served_document(&node).await);
    let client = ApiClient::with_token(node.local_addr(), OPERATOR);
    let strays = [
        "/v1",
        "/v1/agent",
        "/v1/agents/1/nope",
        "/v1/agents/1/sessions/t",
        "/v1/runs/1/result/x",
        "/v1/openapi.yaml",
        "/v2/agents",
        "/index.html",
        "/dashboard",
        "/dashboard/",
        "/dashboard/nope.js",
    ];
    for path in strays {
        assert!(!routes.iter().any(|(_, p)| concrete(p) == path), "{path}");
        for method in ["GET", "POST"] {
            let answer = ask(&client, method, path).await;
            assert!(no_such_route(&answer), "{method} {path}: {answer:?}");
        }
    }
    node.stop();
}

/// The dashboard's files (docs/dashboard.md), restated: served to anyone, outside the document,
/// read-only, with the page's security headers.
const DASHBOARD_FILES: [(&str, &str); 9] = [
    ("/", "text/html; charset=utf-8"),
    ("/dashboard/app.js", "text/javascript; charset=utf-8"),
    ("/dashboard/state.js", "text/javascript; charset=utf-8"),
    ("/dashboard/api.js", "text/javascript; charset=utf-8"),
    ("/dashboard/fleet.js", "text/javascript; charset=utf-8"),
    ("/dashboard/live.js", "text/javascript; charset=utf-8"),
    ("/dashboard/agent.js", "text/javascript; charset=utf-8"),
    ("/dashboard/app.css", "text/css; charset=utf-8"),
    ("/dashboard/icon.svg", "image/svg+xml"),
];

#[tokio::test]
async fn the_dashboards_files_are_served_without_a_token_and_are_not_api_routes() {
    let node = start().await;
    let routes = documented(&served_document(&node).await);
    let anyone = ApiClient::new(node.local_addr());
    for (path, content_type) in DASHBOARD_FILES {
        assert!(!routes.iter().any(|(_, p)| p == path), "{path} is in the document");
        let answer = anyone.get(path).await.unwrap();
        assert_eq!(answer.status.as_u16(), 200, "{path}");
        assert_eq!(answer.headers["content-type"], content_type, "{path}");
        assert_eq!(answer.headers["cache-control"], "no-cache", "{path}");
        let policy = answer.headers["content-security-policy"].to_str().unwrap();
        assert!(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"));
        assert!(!answer.body.is_empty(), "{path}");
        let head = anyone.request(hyper::Method::HEAD, path, None).await.unwrap();
        assert_eq!(head.status.as_u16(), 200, "HEAD {path}");
        assert!(head.body.is_empty(), "HEAD {path}");
        let length = answer.body.len().to_string();
        assert_eq!(head.headers["content-length"], length.as_str(), "HEAD {path}");
        let refused = ask(&anyone, "POST", path).await;
        assert_eq!((refused.0, &refused.1["error"]["code"]), (405, &Value::from("method_not_allowed")));
    }
    node.stop();
}

/// Every `$ref` string anywhere in `value`.
fn refs(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                match (key.as_str(), inner) {
                    ("$ref", Value::String(target)) => found.push(target.clone()),
                    _ => refs(inner, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| refs(item, found)),
        _ => {}
    }
}

#[tokio::test]
async fn every_reference_and_security_scheme_resolves_and_operation_ids_are_unique() {
    let node = start().await;
    let document = served_document(&node).await;
    let mut found = Vec::new();
    refs(&document, &mut found);
    assert!(!found.is_empty());
    for target in found {
        let name = target
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("{target} is not a component schema"));
        assert!(
            document["components"]["schemas"].get(name).is_some(),
            "{target} is not defined"
        );
    }
    let schemes = &document["components"]["securitySchemes"];
    let mut operation_ids = BTreeSet::new();
    for (method, path) in documented(&document) {
        let operation = &document["paths"][&path][method.to_lowercase()];
        let id = operation["operationId"].as_str().expect("an operationId");
        assert!(
            operation_ids.insert(id.to_string()),
            "operationId {id} twice"
        );
        let security = operation["security"].as_array().expect("security");
        let names: Vec<&String> = security
            .iter()
            .flat_map(|s| s.as_object().expect("a requirement").keys())
            .collect();
        for name in &names {
            assert_eq!(schemes[name]["scheme"], "bearer", "{method} {path}: {name}");
        }
        // Only readiness, this document and the capabilities are open to anyone.
        let open = ["/v1/health", "/v1/openapi.json", "/v1/capabilities"].contains(&path.as_str());
        assert_eq!(names.is_empty(), open, "{method} {path}: {names:?}");
    }
    node.stop();
}

/// The router's source, where `routes()` registers every route.
const ROUTER_SOURCE: &str = include_str!("../runtime/src/api/mod.rs");

/// A brand-new path added with plain axum calls would be in neither the document nor the table,
/// and no probe above could guess it: so the router module may not call them at all.
#[test]
fn the_router_adds_no_route_outside_the_registration() {
    for call in [
        ".route(",
        ".route_service(",
        ".nest(",
        ".nest_service(",
        ".merge(",
    ] {
        assert!(
            !ROUTER_SOURCE.contains(call),
            "api/mod.rs calls {call}: register the route with `routes!` (ADR 0017)"
        );
    }
    assert!(ROUTER_SOURCE.contains(".routes(routes!("));
}

/// The query parameters the document gives each GET operation, by path.
fn documented_queries(document: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let mut queries = BTreeMap::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        let parameters = item["get"]["parameters"].as_array().into_iter().flatten();
        let names: BTreeSet<String> = parameters
            .filter(|p| p["in"] == "query")
            .map(|p| p["name"].as_str().expect("a parameter name").to_string())
            .collect();
        if !names.is_empty() {
            queries.insert(path.clone(), names);
        }
    }
    queries
}

/// The query parameters a GET on `path` accepts, as the node says when given an unknown one
/// (`unknown query parameter …; accepted: a, b`); empty when it takes none.
async fn accepted_queries(client: &ApiClient, path: &str) -> BTreeSet<String> {
    let answer = ask(client, "GET", &format!("{}?zz_unknown=1", concrete(path))).await;
    let message = answer.1["error"]["message"].as_str().unwrap_or("");
    match message.split_once("; accepted: ") {
        Some((_, list)) => list
            .split(", ")
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect(),
        None => BTreeSet::new(),
    }
}

/// The document's query parameters are exactly the ones each handler parses (`api::query`),
/// read from what a real node answers to an unknown one.
#[tokio::test]
async fn documented_query_parameters_are_exactly_the_accepted_ones() {
    let node = start().await;
    let document = served_document(&node).await;
    let documented = documented_queries(&document);
    assert!(documented.contains_key("/v1/events"), "{documented:?}");
    let client = ApiClient::with_token(node.local_addr(), OPERATOR);
    let mut compared = 0;
    for (method, path) in documented_routes_of(&document, "GET") {
        let accepted = accepted_queries(&client, &path).await;
        let described = documented.get(&path).cloned().unwrap_or_default();
        assert_eq!(
            accepted, described,
            "{method} {path}: accepted vs documented query parameters"
        );
        compared += usize::from(!accepted.is_empty());
    }
    // Every route that documents parameters was really asked (none answered before parsing).
    assert_eq!(compared, documented.len(), "{documented:?}");
    node.stop();
}

fn documented_routes_of(document: &Value, method: &str) -> Vec<(String, String)> {
    documented(document)
        .into_iter()
        .filter(|(m, path)| m == method && path.starts_with("/v1/") && path != "/v1/openapi.json")
        .collect()
}

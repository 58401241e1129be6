//! The API's OpenAPI 3.1 document, served at `GET /v1/openapi.json` (ADR 0017).
//!
//! Each handler carries its own `#[utoipa::path]`, and `api::routes` registers it once with
//! `utoipa_axum`'s `routes!`, which builds both the router and the document: a route cannot be
//! served without being described. This module holds what the handlers share: the document's
//! head, the three bearer schemes, the error answers, the path and query parameters, and thin
//! schemas for the engine's large types (described as objects, with a link to the docs).

use std::borrow::Cow;
use std::sync::OnceLock;

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, ObjectBuilder, Ref, RefOr, ResponseBuilder, Schema};
use utoipa::{IntoParams, Modify, OpenApi, PartialSchema, ToSchema};

use super::auth::Gate;
use super::error::ApiError;

/// The document's head; `api::routes` adds every path to it.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Vigil",
        description = "The HTTP API of a Vigil node: a heartbeat runtime for LLM agents. \
            docs/api.md is the reference; this document is generated from the router."
    ),
    modifiers(&BearerSchemes),
    components(schemas(super::error::ErrorBody)),
    tags(
        (name = "node", description = "Readiness, metrics and this document"),
        (name = "agents", description = "Register, read, control and wake agents"),
        (name = "pulses", description = "Liveness pulses and user input"),
        (name = "runs", description = "Runs, their transcripts, and webhook results"),
        (name = "history", description = "The event log and the wakeup history"),
        (name = "heartbeats", description = "Predicate heartbeats (RFC 0060): checks that wake an agent only on a state change"),
    )
)]
pub(super) struct ApiDoc;

/// The security scheme names a handler's `security(...)` lists (the macro takes literals only).
const OPERATOR_TOKEN: &str = "operator_token";
const AGENT_TOKEN: &str = "agent_token";
const RUN_TOKEN: &str = "run_token";

/// Three bearer schemes, one per kind of token, so each route says which tokens it takes.
struct BearerSchemes;

impl Modify for BearerSchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let schemes = [
            (
                OPERATOR_TOKEN,
                "A tenant's operator token (`vgl_op_…`): its tenant's everything.",
            ),
            (
                AGENT_TOKEN,
                "An agent's token (`vgl_agent_…`): its own agent only.",
            ),
            (
                RUN_TOKEN,
                "A run's report token (`vgl_run_…`), handed to an async webhook.",
            ),
        ];
        for (name, description) in schemes {
            let scheme = HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(description))
                .build();
            components.add_security_scheme(name, SecurityScheme::Http(scheme));
        }
    }
}

/// The error answers every route may give: the one error shape (`api::error`), by status class.
/// Which codes a route gives is in docs/api.md, "Errors".
pub(super) struct ErrorAnswers;

impl utoipa::IntoResponses for ErrorAnswers {
    fn responses() -> std::collections::BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        let answer = |description: &str| {
            let content = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build();
            ResponseBuilder::new()
                .description(description)
                .content("application/json", content)
                .build()
                .into()
        };
        [
            (
                "4XX",
                answer("Refused: bad input, token, scope, state or rate (docs/api.md, Errors)"),
            ),
            (
                "5XX",
                answer("The node cannot answer now; every 503 carries `Retry-After`"),
            ),
        ]
        .into_iter()
        .map(|(status, response)| (status.to_string(), response))
        .collect()
    }
}

/// `{id}`: an agent's id.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Why: describes the path; the handlers parse it with `parse_id`.
pub(super) struct AgentPath {
    /// The agent's id.
    id: u64,
}

/// `{id}`: a run's id.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Why: describes the path; the handlers parse it with `parse_id`.
pub(super) struct RunPath {
    /// The run's id.
    id: u64,
}

/// `{id}` and `{task_key}` of a session reset.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Why: describes the path; the handler parses it.
pub(super) struct SessionPath {
    /// The agent's id.
    id: u64,
    /// The task whose session to forget (1 to `KEY_CHARS_MAX` characters).
    task_key: String,
}

/// An object whose full schema lives in the docs, not in engine derives: the engine's large
/// types (specs, runs, events) would otherwise carry schema annotations on every nested field.
macro_rules! described_object {
    ($type:ty, $name:literal, $description:literal) => {
        impl PartialSchema for $type {
            fn schema() -> RefOr<Schema> {
                ObjectBuilder::new().description(Some($description)).into()
            }
        }

        impl ToSchema for $type {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
        }
    };
}

described_object!(
    crate::engine::agent::AgentSpec,
    "AgentSpec",
    "An agent's spec: name, adapter, heartbeat, limits, breaker, time zone. Every field, its \
     default and its limits: docs/api.md, `POST /v1/agents`; adapters: docs/agents.md."
);
described_object!(
    crate::engine::agent::Agent,
    "Agent",
    "An agent: id, tenant, name, spec, state, liveness, breaker and usage. Example and fields: \
     docs/api.md, `GET /v1/agents/{id}`."
);
described_object!(
    crate::engine::run::Run,
    "Run",
    "A run: id, agent, status, its wakeups, timestamps, outcome and usage. Example and \
     fields: docs/api.md, `GET /v1/runs/{id}`."
);
described_object!(
    crate::engine::event::Event,
    "Event",
    "One event of the durable log: `seq`, `at_ms`, `tenant`, `type` and the fields of its \
     type. Every type: docs/api.md, Events."
);
described_object!(
    crate::engine::wakeup::WakeupRecord,
    "WakeupRecord",
    "A wakeup as the node recorded it: its id, outcome (queued, coalesced or refused with a \
     reason) and its run. docs/api.md, `POST /v1/agents/{id}/wakeup`."
);
described_object!(
    crate::transcript::TranscriptEntry,
    "TranscriptEntry",
    "One entry of a run's transcript (model call, tool call, output). docs/api.md, \
     `GET /v1/runs/{id}/log`."
);
described_object!(
    crate::engine::history::HistoryMessage,
    "HistoryMessage",
    "One message of an agent's conversation history (role and content). docs/agents.md."
);
described_object!(
    crate::engine::session::TaskSession,
    "TaskSession",
    "A coding CLI's session for one task key. docs/api.md, `GET /v1/agents/{id}/sessions`."
);

/// `GET /v1/health`'s answer.
#[derive(ToSchema)]
#[allow(dead_code)] // Why: describes the answer `api::health` builds with `json!`.
pub(super) struct Health {
    /// `ok` (200), or `recovering` / `draining` (503, with `Retry-After`).
    status: HealthStatus,
    /// The log's head; absent while recovering.
    head_seq: Option<u64>,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // Why: describes the answer only.
enum HealthStatus {
    Ok,
    Recovering,
    Draining,
}

/// The answer to an accepted run report.
#[derive(ToSchema)]
#[allow(dead_code)] // Why: describes the answer `run_result::report` builds with `json!`.
pub(super) struct ReportAccepted {
    run: crate::engine::run::RunId,
    /// Always true.
    accepted: bool,
}

/// The document as JSON, built once: it is the same for every node of this build.
fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let (_, document) = super::routes().split_for_parts();
        document.to_pretty_json().expect("the document serializes")
    })
}

/// `GET /v1/openapi.json`: this API's OpenAPI 3.1 document. No token: it describes routes, not
/// any tenant's data, and a client needs it before it has a token. Behind the readiness gate
/// like every route but `/v1/health`.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "node",
    security(()),
    responses(
        (status = 200, description = "This document", content_type = "application/json"),
        ErrorAnswers,
    )
)]
pub(super) async fn openapi_json(State(gate): State<Gate>) -> Result<Response, ApiError> {
    gate.shell()?;
    let content_type = HeaderValue::from_static("application/json");
    Ok(([(header::CONTENT_TYPE, content_type)], document()).into_response())
}

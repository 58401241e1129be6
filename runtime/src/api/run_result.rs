//! `POST /v1/runs/{id}/result`: an asynchronous webhook reports its run's result with the run's
//! own token (`Authorization: Bearer <report_token>`), not an operator's or agent's: the route
//! sits behind the readiness gate and the body limits like every other, and the token is checked
//! by the node's run-token registry (`crate::exec::run_tokens`). docs/adapters/http.md.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use super::json::Json;
use serde_json::{json, Value};

use super::auth::{bearer_token, parse_id, Gate};
use super::body::parse_json;
use super::error::ApiError;
use crate::engine::run::RunId;
use crate::engine::tenant::TokenHash;
use crate::exec::run_tokens::{ReportOrBody, ReportRefusal, WebhookResult};

/// Takes one report: `{status: "succeeded"|"failed", output?, usage?}`.
#[utoipa::path(
    post,
    path = "/v1/runs/{id}/result",
    tag = "runs",
    params(super::openapi::RunPath),
    request_body = WebhookResult,
    security(("run_token" = [])),
    responses(
        (status = 202, description = "The report is taken", body = super::openapi::ReportAccepted),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn report(
    State(gate): State<Gate>,
    Path(id): Path<String>,
    parts: Parts,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), Response> {
    let shell = gate.shell().map_err(IntoResponse::into_response)?;
    let run = RunId(parse_id("id", &id).map_err(IntoResponse::into_response)?);
    let token =
        bearer_token(&parts).map_err(|_| refusal(ReportRefusal::NoToken).into_response())?;
    // A known run token is charged like any bearer token; an unknown one is refused below,
    // before it could take a bucket.
    if shell.executor.run_tokens().knows(token) {
        gate.charge(&shell, &TokenHash::of(token))
            .map_err(IntoResponse::into_response)?;
    }
    let result = parse_json::<WebhookResult>(body).and_then(|result| match result.status {
        Some(_) => Ok(result),
        None => Err(ApiError::invalid_field(
            "status",
            "a report needs status: \"succeeded\" or \"failed\"",
        )),
    });
    let run_over = shell
        .engine()
        .run(run)
        .is_some_and(|r| r.status.is_terminal());
    let delivered = shell
        .executor
        .run_tokens()
        .report(run, Some(token), run_over, result);
    match delivered {
        Ok(()) => Ok((
            StatusCode::ACCEPTED,
            Json(json!({ "run": run, "accepted": true })),
        )),
        Err(ReportOrBody::Body(error)) => Err(error.into_response()),
        Err(ReportOrBody::Refused(why)) => Err(refusal(why).into_response()),
    }
}

/// The answer to a refused report: who may not report (401, 403), or when (409).
fn refusal(why: ReportRefusal) -> ApiError {
    let (status, code) = match &why {
        ReportRefusal::NoToken | ReportRefusal::UnknownToken => {
            (StatusCode::UNAUTHORIZED, "unauthenticated")
        }
        ReportRefusal::WrongRun(_) => (StatusCode::FORBIDDEN, "forbidden"),
        ReportRefusal::AlreadyReported(_) => (StatusCode::CONFLICT, "already_reported"),
        ReportRefusal::RunEnded(_) => (StatusCode::CONFLICT, "report_too_late"),
        ReportRefusal::TooManyWaiting | ReportRefusal::NoReportAddress => {
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        }
    };
    ApiError {
        status,
        code,
        message: why.to_string(),
        field: None,
        retry_after_s: None,
    }
}

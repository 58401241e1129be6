//! The API's one error shape: `{"error":{"code":…,"message":…,"field":…}}` with a 4xx/5xx status.
//! Every 503 carries `Retry-After`: the wait the refusal knows, or [`RETRY_AFTER_DEFAULT_S`].

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::json::Json;
use crate::engine::Refusal;
use crate::shell::ExecuteError;
use crate::store::StoreError;
use crate::transcript::TranscriptError;

/// An error answer. `field` names the request field at fault, when one is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
    /// `Retry-After` in whole seconds, when the refusal knows how long to wait. A 503 without
    /// one still gets a header: [`RETRY_AFTER_DEFAULT_S`].
    pub retry_after_s: Option<u64>,
}

/// `Retry-After` of a 503 whose cause does not know its end (recovering, storage trouble):
/// soon enough that a client retrying by the header does not wait long after the node is back.
pub const RETRY_AFTER_DEFAULT_S: u64 = 1;

/// The body of every error answer (and its schema in the OpenAPI document).
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct ErrorDetail<'a> {
    /// Stable and machine-readable: `invalid_field`, `unauthenticated`, `forbidden`,
    /// `not_found`, `rate_limited`, `busy`, … (docs/api.md, Errors).
    code: &'a str,
    /// For humans; it may change between versions.
    message: &'a str,
    /// The request field at fault, when one is (`agents[2].status`).
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
}

impl ApiError {
    /// A 400 about one field.
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_field",
            message: message.into(),
            field: Some(field.into()),
            retry_after_s: None,
        }
    }

    /// A 401: no token, or an unknown one.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthenticated",
            message: message.into(),
            field: None,
            retry_after_s: None,
        }
    }

    /// A 403: a known caller asking for something outside its reach.
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::FORBIDDEN,
            code: "forbidden",
            message: message.into(),
            field: None,
            retry_after_s: None,
        }
    }

    /// A 404 for a resource or route.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: message.into(),
            field: None,
            retry_after_s: None,
        }
    }
}

impl ApiError {
    /// A 410: events the caller asked to read after were compacted away (docs/api.md, "The
    /// event feed").
    pub fn compacted(oldest_seq: u64) -> Self {
        ApiError {
            status: StatusCode::GONE,
            code: "compacted",
            message: format!(
                "events before seq {oldest_seq} are no longer kept (a snapshot holds them and \
                 they are past the retention window); the oldest kept is seq {oldest_seq}: read \
                 on with after={}",
                oldest_seq - 1
            ),
            field: Some("after".into()),
            retry_after_s: None,
        }
    }
}

impl ApiError {
    /// The `Retry-After` this answer carries: its own wait, or the default for any 503.
    pub fn retry_after(&self) -> Option<u64> {
        match self.retry_after_s {
            Some(seconds) => Some(seconds),
            None if self.status == StatusCode::SERVICE_UNAVAILABLE => Some(RETRY_AFTER_DEFAULT_S),
            None => None,
        }
    }
}

/// Most characters of an error's `message` sent back, and of its `field`. Why: messages quote
/// what the caller sent (serde names an unknown field, a path id is echoed); values the code
/// quotes are already cut (`engine::spec_error::ECHOED_VALUE_CHARS_MAX`), this bounds the rest.
pub const ERROR_MESSAGE_CHARS_MAX: usize = 1_024;
pub const ERROR_FIELD_CHARS_MAX: usize = 256;

/// `text` cut after `chars_max` characters, ending in `…` when cut.
fn bounded(text: &str, chars_max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(chars_max) {
        None => std::borrow::Cow::Borrowed(text),
        Some((end, _)) => std::borrow::Cow::Owned(format!("{}…", &text[..end])),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let message = bounded(&self.message, ERROR_MESSAGE_CHARS_MAX);
        let field = self
            .field
            .as_deref()
            .map(|f| bounded(f, ERROR_FIELD_CHARS_MAX));
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: &message,
                field: field.as_deref(),
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        tracing::error!(%error, "storage error answering a request");
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "storage_unavailable",
            message: format!("{error}; nothing was changed, retry later"),
            field: None,
            retry_after_s: None,
        }
    }
}

impl From<TranscriptError> for ApiError {
    fn from(error: TranscriptError) -> Self {
        tracing::error!(%error, "transcript error answering a request");
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "transcript_unavailable",
            message: format!("{error}; retry later"),
            field: None,
            retry_after_s: None,
        }
    }
}

impl From<ExecuteError> for ApiError {
    fn from(error: ExecuteError) -> Self {
        match error {
            ExecuteError::Store(error) => error.into(),
            ExecuteError::Refused(refusal) => refusal.into(),
            // The writer's queue is full (ADR 0012): nothing was queued, so a retry is safe.
            ExecuteError::Busy => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "busy",
                message: format!("{error}; nothing was changed"),
                field: None,
                retry_after_s: Some(RETRY_AFTER_DEFAULT_S),
            },
            ExecuteError::Stopped => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "stopping",
                message: format!(
                    "{error}; the request may or may not have taken effect: read before retrying, or retry with the same idempotency key"
                ),
                field: None,
                retry_after_s: Some(RETRY_AFTER_DEFAULT_S),
            },
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        let message = refusal.to_string();
        let retry_after_s = match &refusal {
            Refusal::TooManyIdempotencyKeysOnNode { retry_after_s, .. } => {
                Some((*retry_after_s).max(1))
            }
            _ => None,
        };
        let (status, code, field) = match &refusal {
            Refusal::InvalidField(e) => {
                return ApiError::invalid_field(e.field.clone(), e.message.clone())
            }
            Refusal::NameTaken(_) => (StatusCode::CONFLICT, "name_taken", Some("name")),
            Refusal::TooManyAgents | Refusal::TooManyTenants => {
                (StatusCode::UNPROCESSABLE_ENTITY, "limit_reached", None)
            }
            Refusal::TooManyIdempotencyKeys(_) => (
                StatusCode::TOO_MANY_REQUESTS,
                "limit_reached",
                Some("idempotency_key"),
            ),
            // The node's capacity, not this caller's rate: 503, `Retry-After` when the oldest key
            // held expires.
            Refusal::TooManyIdempotencyKeysOnNode { .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "node_limit_reached",
                Some("idempotency_key"),
            ),
            Refusal::UnknownTenant(_) | Refusal::UnknownAgent(_) | Refusal::UnknownRun(_) => {
                (StatusCode::NOT_FOUND, "not_found", None)
            }
            Refusal::RunNotRunning(_) | Refusal::RunAlreadyFinished(..) => {
                (StatusCode::CONFLICT, "run_finished", None)
            }
            Refusal::AgentTerminated(_) => (StatusCode::CONFLICT, "agent_terminated", None),
            Refusal::TokenInUse => (StatusCode::CONFLICT, "token_in_use", None),
            Refusal::UnknownHeartbeat(_) => (StatusCode::NOT_FOUND, "not_found", None),
            Refusal::HeartbeatIdTaken(_) => (StatusCode::CONFLICT, "id_taken", Some("id")),
            Refusal::TooManyHeartbeats(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "limit_reached", Some("agent"))
            }
        };
        ApiError {
            status,
            code,
            message,
            field: field.map(str::to_string),
            retry_after_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_at_the_limit() {
        let exact = "a".repeat(ERROR_FIELD_CHARS_MAX);
        assert_eq!(bounded(&exact, ERROR_FIELD_CHARS_MAX), exact);
        let long = "é".repeat(ERROR_FIELD_CHARS_MAX + 1);
        let cut = bounded(&long, ERROR_FIELD_CHARS_MAX);
        assert_eq!(cut.chars().count(), ERROR_FIELD_CHARS_MAX + 1);
        assert!(cut.ends_with('…'));
    }

    fn retry_after_header(error: ApiError) -> Option<String> {
        let response = error.into_response();
        response
            .headers()
            .get(header::RETRY_AFTER)
            .map(|value| value.to_str().expect("ascii").to_string())
    }

    #[test]
    fn the_node_key_cap_tells_when_to_retry() {
        let refusal = |retry_after_s| Refusal::TooManyIdempotencyKeysOnNode {
            limit: 3,
            retry_after_s,
        };
        assert_eq!(
            retry_after_header(refusal(86_397).into()).as_deref(),
            Some("86397")
        );
        // A key expiring within the second still asks for a whole second: `0` invites a spin.
        assert_eq!(retry_after_header(refusal(0).into()).as_deref(), Some("1"));
    }

    #[test]
    fn every_503_carries_retry_after_and_other_errors_none() {
        let storage = ApiError::from(StoreError::OutOfOrder { head: 2, first: 1 });
        assert_eq!(storage.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            retry_after_header(storage),
            Some(RETRY_AFTER_DEFAULT_S.to_string())
        );
        assert_eq!(retry_after_header(ApiError::not_found("gone")), None);
        assert_eq!(
            retry_after_header(ApiError::from(Refusal::TooManyAgents)),
            None
        );
    }
}

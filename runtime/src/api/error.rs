//! The API's one error shape: `{"error":{"code":…,"message":…,"field":…}}` with a 4xx/5xx status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

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
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: &'a str,
    message: &'a str,
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
        }
    }

    /// A 401: no token, or an unknown one.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthenticated",
            message: message.into(),
            field: None,
        }
    }

    /// A 403: a known caller asking for something outside its reach.
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::FORBIDDEN,
            code: "forbidden",
            message: message.into(),
            field: None,
        }
    }

    /// A 404 for a resource or route.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: message.into(),
            field: None,
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
        let body = Body {
            error: Inner {
                code: self.code,
                message: &message,
                field: field.as_deref(),
            },
        };
        (self.status, axum::Json(body)).into_response()
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
        }
    }
}

impl From<ExecuteError> for ApiError {
    fn from(error: ExecuteError) -> Self {
        match error {
            ExecuteError::Store(error) => error.into(),
            ExecuteError::Refused(refusal) => refusal.into(),
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        let message = refusal.to_string();
        let (status, code, field) = match &refusal {
            Refusal::InvalidField(e) => return ApiError::invalid_field(e.field.clone(), e.message.clone()),
            Refusal::NameTaken(_) => (StatusCode::CONFLICT, "name_taken", Some("name")),
            Refusal::TooManyAgents | Refusal::TooManyTenants => {
                (StatusCode::UNPROCESSABLE_ENTITY, "limit_reached", None)
            }
            Refusal::TooManyIdempotencyKeys(_) => (
                StatusCode::TOO_MANY_REQUESTS,
                "limit_reached",
                Some("idempotency_key"),
            ),
            // The node's capacity, not this caller's rate: 503 (the message says when to retry).
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
        };
        ApiError {
            status,
            code,
            message,
            field: field.map(str::to_string),
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
}

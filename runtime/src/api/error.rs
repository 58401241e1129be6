//! The API's one error shape: `{"error":{"code":…,"message":…,"field":…}}` with a 4xx/5xx status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::engine::Refusal;
use crate::shell::ExecuteError;
use crate::store::StoreError;

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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body {
            error: Inner {
                code: self.code,
                message: &self.message,
                field: self.field.as_deref(),
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

impl From<ExecuteError> for ApiError {
    fn from(error: ExecuteError) -> Self {
        match error {
            ExecuteError::Store(error) => error.into(),
            ExecuteError::Refused(refusal) => {
                let message = refusal.to_string();
                match refusal {
                    Refusal::InvalidField(e) => ApiError::invalid_field(e.field, e.message),
                    Refusal::NameTaken(_) => ApiError {
                        status: StatusCode::CONFLICT,
                        code: "name_taken",
                        message,
                        field: Some("name".into()),
                    },
                    Refusal::TooManyAgents => ApiError {
                        status: StatusCode::UNPROCESSABLE_ENTITY,
                        code: "limit_reached",
                        message,
                        field: None,
                    },
                }
            }
        }
    }
}

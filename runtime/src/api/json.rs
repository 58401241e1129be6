//! JSON answers. Every handler answers through this `Json` instead of axum's: the same bytes
//! and `Content-Type`, written into a `Vec` that becomes the body without a copy. axum's writes
//! into a 128-byte `BytesMut` through `bytes`' generic writer, which grows it step by step; on
//! the node's busiest answers (pulse batches, agent pages) that was a tenth of the work.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// Room a typical answer fits in without growing (a pulse batch's answer is about 1 KiB).
const ANSWER_BYTES_INITIAL: usize = 1_024;

/// A value answered as `application/json`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

/// A 200 answer of JSON text already written (`bytes` must be one JSON value).
pub fn written(bytes: Vec<u8>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        let mut bytes = Vec::with_capacity(ANSWER_BYTES_INITIAL);
        match serde_json::to_writer(&mut bytes, &self.0) {
            Ok(()) => written(bytes),
            // What axum answers too: a value that cannot be written is the server's fault.
            Err(error) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; charset=utf-8"),
                )],
                error.to_string(),
            )
                .into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(response: Response) -> (StatusCode, Option<HeaderValue>, Vec<u8>) {
        let status = response.status();
        let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        (status, content_type, bytes.to_vec())
    }

    #[tokio::test]
    async fn answers_the_same_bytes_and_headers_as_axum() {
        let value = serde_json::json!({
            "agents": [{ "id": 1, "name": "a \"quoted\" name", "tags": ["x", "ü"] }],
            "big": "y".repeat(3 * ANSWER_BYTES_INITIAL),
            "seq": 42,
        });
        let ours = body_of(Json(&value).into_response()).await;
        let axums = body_of(axum::Json(&value).into_response()).await;
        assert_eq!(ours, axums);
        assert_eq!(ours.0, StatusCode::OK);
    }

    /// A map with a non-string key cannot be written as JSON.
    #[tokio::test]
    async fn a_value_that_cannot_be_written_is_a_500_as_in_axum() {
        let value = std::collections::BTreeMap::from([((1, 2), 3)]);
        let ours = body_of(Json(&value).into_response()).await;
        let axums = body_of(axum::Json(&value).into_response()).await;
        assert_eq!(ours, axums);
        assert_eq!(ours.0, StatusCode::INTERNAL_SERVER_ERROR);
    }
}

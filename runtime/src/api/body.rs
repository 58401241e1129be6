//! Request-body parsing with errors that name the field, instead of axum's plain-text rejections.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// Largest request body accepted, in bytes.
pub const BODY_BYTES_MAX: usize = 64 * 1024;

/// Decodes a JSON body into `T`, mapping every failure to an `ApiError` naming the field.
pub fn parse_json<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|rejection| ApiError {
        status: if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            StatusCode::PAYLOAD_TOO_LARGE
        } else {
            StatusCode::BAD_REQUEST
        },
        code: if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            "body_too_large"
        } else {
            "unreadable_body"
        },
        message: format!("{rejection} (limit {BODY_BYTES_MAX} bytes)"),
        field: None,
        retry_after_s: None,
    })?;
    // Why twice for a bad body: tracking the path of every value costs as much as the parse
    // itself, and only an error needs it; a body that parses is parsed once, plainly.
    if let Ok(value) = serde_json::from_slice(&bytes) {
        return Ok(value);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(&bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        // Syntax errors are about the document, not a field; data errors name one. Why the
        // second look at a syntax error: serde_json reports a value of the wrong kind where an
        // enum's name belongs (`{"status": 1}`) as one, though the document is sound JSON; then
        // it is about the field at `path`.
        let field = match inner.classify() {
            serde_json::error::Category::Data => field_of(&path, &inner.to_string()),
            serde_json::error::Category::Syntax
                if serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_ok() =>
            {
                field_of(&path, &inner.to_string())
            }
            _ => None,
        };
        // Inside an agent's adapter, serde names only `adapter`: find the field itself.
        let field = field.map(|field| match serde_json::from_slice(&bytes) {
            Ok(spec) => crate::engine::agent_update::refine_adapter_field(field, &spec),
            Err(_) => field,
        });
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: if field.is_some() {
                "invalid_field"
            } else {
                "invalid_json"
            },
            message: inner.to_string(),
            field,
            retry_after_s: None,
        }
    })?;
    deserializer.end().map_err(|error| ApiError {
        status: StatusCode::BAD_REQUEST,
        code: "invalid_json",
        message: format!("trailing data after the JSON body: {error}"),
        field: None,
        retry_after_s: None,
    })?;
    Ok(value)
}

/// The field an error is about: serde's path when it has one, else the name serde quotes in
/// "unknown field `x`" / "missing field `x`".
fn field_of(path: &str, message: &str) -> Option<String> {
    if !path.is_empty() && path != "." && path != "?" {
        return Some(path.to_string());
    }
    let quoted = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("missing field `"))?;
    quoted.split('`').next().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::agent::AgentSpec;

    fn parse(json: &str) -> Result<AgentSpec, ApiError> {
        parse_json(Ok(Bytes::copy_from_slice(json.as_bytes())))
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(parse(r#"{}"#).unwrap_err().field.as_deref(), Some("name"));
        let unknown = parse(r#"{"name":"a","colour":1}"#).unwrap_err();
        assert_eq!(unknown.field.as_deref(), Some("colour"));
        let wrong_type = parse(r#"{"name":"a","heartbeat":{"interval_ms":"soon"}}"#).unwrap_err();
        assert_eq!(wrong_type.field.as_deref(), Some("heartbeat.interval_ms"));
        let nested_unknown = parse(r#"{"name":"a","limits":{"colour":1}}"#).unwrap_err();
        assert_eq!(nested_unknown.field.as_deref(), Some("limits.colour"));
        assert_eq!(parse("{").unwrap_err().code, "invalid_json");
        // An enum's name of the wrong kind: serde_json calls it a syntax error.
        let not_a_name = parse(r#"{"name":"a","heartbeat":{"while_paused":1}}"#).unwrap_err();
        assert_eq!(
            (not_a_name.code, not_a_name.field.as_deref()),
            ("invalid_field", Some("heartbeat.while_paused"))
        );
        assert!(parse(r#"{"name":"a","heartbeat":{"interval_ms":1000}}"#).is_ok());
    }

    #[test]
    fn errors_inside_the_adapter_name_the_adapter_field() {
        let field = |adapter: &str| {
            let json = format!(r#"{{"name":"a","adapter":{adapter}}}"#);
            parse(&json).unwrap_err().field
        };
        let cases = [
            (r#"{"type":"http","url":"https://h/x","secret_env":"K","report_wait_sec":1.5}"#, "adapter.report_wait_sec"),
            (r#"{"type":"llm","base_url":"https://h","model":"m","max_iterations":"5"}"#, "adapter.max_iterations"),
            (r#"{"type":"claude_local","colour":3}"#, "adapter.colour"),
            (r#"{"type":"llm","model":"m"}"#, "adapter.base_url"),
            (r#"{"type":"scripted","steps":[{"duration_ms":-1,"outcome":"succeeded"}]}"#, "adapter.steps[0].duration_ms"),
            (r#"{"type":"warp"}"#, "adapter.type"),
            (r#"{"type":"process","command":"x","timeout_sec":-1}"#, "adapter.timeout_sec"),
            (r#"{"type":"codex_local","grace_sec":"5"}"#, "adapter.grace_sec"),
        ];
        for (adapter, want) in cases {
            assert_eq!(field(adapter).as_deref(), Some(want), "{adapter}");
        }
    }
}

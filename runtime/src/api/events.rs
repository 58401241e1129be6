//! `/v1/events`: pages of the durable event log, resumable from any sequence number.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde::Serialize;

use super::error::ApiError;
use crate::engine::event::Event;
use crate::shell::Shell;
use crate::store::EVENTS_PAGE_MAX;

/// Page size when `limit` is not given.
pub const EVENTS_PAGE_DEFAULT: usize = 100;

/// A page of events after `after`, with the log head when it was read.
#[derive(Debug, Serialize)]
pub struct Page {
    pub events: Vec<Event>,
    pub head_seq: u64,
}

pub async fn list(
    State(shell): State<Arc<Shell>>,
    RawQuery(query): RawQuery,
) -> Result<Json<Page>, ApiError> {
    let (after, limit) = parse_query(query.as_deref().unwrap_or(""))?;
    let (events, head_seq) = shell.events_after(after, limit)?;
    Ok(Json(Page { events, head_seq }))
}

/// `after` (default 0) and `limit` (default 100, 1..=1000); any other key is an error.
fn parse_query(query: &str) -> Result<(u64, usize), ApiError> {
    let mut after = 0;
    let mut limit = EVENTS_PAGE_DEFAULT;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "after" => {
                after = value.parse().map_err(|_| {
                    ApiError::invalid_field(
                        "after",
                        format!("after must be a sequence number, got {value:?}"),
                    )
                })?
            }
            "limit" => {
                limit = value
                    .parse()
                    .ok()
                    .filter(|l| (1..=EVENTS_PAGE_MAX).contains(l))
                    .ok_or_else(|| {
                        ApiError::invalid_field(
                            "limit",
                            format!("limit must be between 1 and {EVENTS_PAGE_MAX}, got {value:?}"),
                        )
                    })?
            }
            other => {
                return Err(ApiError::invalid_field(
                    other,
                    format!("unknown query parameter {other:?}; accepted: after, limit"),
                ))
            }
        }
    }
    Ok((after, limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_defaults_limits_and_unknown_keys() {
        assert_eq!(parse_query("").unwrap(), (0, EVENTS_PAGE_DEFAULT));
        assert_eq!(parse_query("after=7&limit=1000").unwrap(), (7, 1000));
        assert_eq!(
            parse_query("limit=0").unwrap_err().field.as_deref(),
            Some("limit")
        );
        assert_eq!(
            parse_query("limit=1001").unwrap_err().field.as_deref(),
            Some("limit")
        );
        assert_eq!(
            parse_query("after=-1").unwrap_err().field.as_deref(),
            Some("after")
        );
        assert_eq!(
            parse_query("since=3").unwrap_err().field.as_deref(),
            Some("since")
        );
    }
}

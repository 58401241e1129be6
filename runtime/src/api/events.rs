//! `/v1/events`: the durable event log, as JSON pages or as a live Server-Sent Events stream,
//! resumable from any sequence number (`?after=N` or the `Last-Event-ID` header).
//!
//! Callers see their own slice of the one log: an operator its tenant's events, an agent the
//! events about itself. Sequence numbers are the log's, so a slice has gaps, but a stream resumed
//! after N yields exactly the caller's events after N (invariant 11).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::RawQuery;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use super::json::Json;
use serde::Serialize;

use super::auth::Caller;
use super::error::ApiError;
use super::query::Query;
use super::streams::StreamRefusal;
use crate::engine::event::Event;
use crate::engine::tenant::Principal;
use crate::store::EVENTS_PAGE_MAX;

/// Page size when `limit` is not given.
pub const EVENTS_PAGE_DEFAULT: usize = 100;
/// Most log pages one request scans looking for the caller's events, so a tenant with few
/// events in a busy log still gets a prompt answer (`next_after` says where to go on).
pub const EVENTS_SCAN_PAGES_MAX: usize = 16;
/// A quiet stream sends a comment this often, so proxies and clients know it is alive.
pub const SSE_KEEPALIVE_MS: u64 = 15_000;
/// Frames buffered per stream before the writer waits for the client.
const SSE_BUFFER_FRAMES: usize = 64;

/// A page of the caller's events after `after`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = EventPage)]
pub struct Page {
    pub events: Vec<Event>,
    /// The log's head when the page was read.
    pub head_seq: u64,
    /// Where the next page starts: pass it back as `after`. It may pass events of other
    /// tenants that this caller does not see.
    pub next_after: u64,
}

/// The query of `GET /v1/events`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // Why: describes the query only.
pub struct EventsQuery {
    /// Events after this sequence number (a stream: `Last-Event-ID` wins over it).
    after: Option<u64>,
    /// Page size, 1 to `EVENTS_PAGE_MAX` (default `EVENTS_PAGE_DEFAULT`); pages only.
    limit: Option<u64>,
}

/// `GET /v1/events`: JSON pages, or SSE when the client sends `Accept: text/event-stream`.
#[utoipa::path(
    get,
    path = "/v1/events",
    operation_id = "list_events",
    tag = "history",
    params(EventsQuery),
    security(("operator_token" = []), ("agent_token" = [])),
    responses(
        (status = 200, description = "A page of the caller's events, or with \
            `Accept: text/event-stream` a live stream of them (docs/api.md, SSE framing)",
            content(
                (Page = "application/json"),
                (String = "text/event-stream"),
            )),
        super::openapi::ErrorAnswers,
    )
)]
pub async fn list(
    caller: Caller,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let mut query = Query::parse(query.as_deref(), &["after", "limit"])?;
    let after = query.number("after")?;
    let limit = match query.number("limit")? {
        None => EVENTS_PAGE_DEFAULT,
        Some(l) => usize::try_from(l)
            .ok()
            .filter(|l| (1..=EVENTS_PAGE_MAX).contains(l))
            .ok_or_else(|| {
                ApiError::invalid_field(
                    "limit",
                    format!("limit must be between 1 and {EVENTS_PAGE_MAX}, got {l:?}"),
                )
            })?,
    };
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if !wants_stream {
        if let Some(after) = after {
            still_kept(&caller, after)?;
        }
        let (events, next_after, head_seq) = visible_page(&caller, after.unwrap_or(0), limit)?;
        return Ok(Json(Page {
            events,
            head_seq,
            next_after,
        })
        .into_response());
    }
    let last_event_id = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    ApiError::invalid_field(
                        "Last-Event-ID",
                        "Last-Event-ID must be a sequence number",
                    )
                })?,
        ),
    };
    // The header is what a reconnecting EventSource sends; it wins over the query.
    let resume = last_event_id.or(after);
    if let Some(after) = resume {
        still_kept(&caller, after)?;
    }
    let after = resume.unwrap_or(0);
    let permit = match caller.streams.try_acquire(&caller.principal) {
        Ok(permit) => permit,
        Err(refusal) => return Ok(stream_refused(refusal)),
    };
    let (sender, receiver) = tokio::sync::mpsc::channel(SSE_BUFFER_FRAMES);
    let mut caller = caller;
    caller.end_request();
    tokio::spawn(async move {
        stream(caller, after, sender).await;
        drop(permit);
    });
    let mut response = Body::new(SseBody(receiver)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// Refuses a read after `after` when events right after it were compacted away: the caller
/// would miss them without knowing. Reading without `after` starts at the oldest kept.
fn still_kept(caller: &Caller, after: u64) -> Result<(), ApiError> {
    let oldest = caller.shell.oldest_seq()?;
    if after.saturating_add(1) < oldest {
        return Err(ApiError::compacted(oldest));
    }
    Ok(())
}

/// A 503 naming the stream cap that refused, with `Retry-After`.
fn stream_refused(refusal: StreamRefusal) -> Response {
    refusal.stream_error().into_response()
}

/// The caller's events after `after`: (events, next_after, head).
fn visible_page(
    caller: &Caller,
    after: u64,
    limit: usize,
) -> Result<(Vec<Event>, u64, u64), ApiError> {
    scan_visible(caller, after, limit, Some)
}

/// Scans the log after `after` for the caller's events, keeping what `pick` makes of them,
/// until `limit` are kept or `EVENTS_SCAN_PAGES_MAX` log pages are read. Returns what was
/// kept, the cursor to go on from, and the log's head when it was read.
pub(super) fn scan_visible<T>(
    caller: &Caller,
    after: u64,
    limit: usize,
    mut pick: impl FnMut(Event) -> Option<T>,
) -> Result<(Vec<T>, u64, u64), ApiError> {
    let mut kept = Vec::new();
    let mut cursor = after;
    let mut head = 0;
    for _ in 0..EVENTS_SCAN_PAGES_MAX {
        let (page, page_head) = caller.shell.events_after(cursor, EVENTS_PAGE_MAX)?;
        head = page_head;
        let Some(last) = page.last().map(|e| e.seq) else {
            break;
        };
        for event in page {
            cursor = event.seq;
            if !sees(&caller.principal, &event) {
                continue;
            }
            if let Some(item) = pick(event) {
                kept.push(item);
                if kept.len() == limit {
                    return Ok((kept, cursor, head));
                }
            }
        }
        debug_assert_eq!(cursor, last);
    }
    Ok((kept, cursor, head))
}

/// Whether `principal` may see `event`.
fn sees(principal: &Principal, event: &Event) -> bool {
    match principal {
        Principal::Operator { tenant } => *event.tenant == **tenant,
        Principal::Agent { tenant, agent } => {
            *event.tenant == **tenant && event.kind.agent() == Some(*agent)
        }
    }
}

/// Writes the caller's events after `after` as SSE frames until the client goes away.
async fn stream(caller: Caller, mut after: u64, frames: tokio::sync::mpsc::Sender<Bytes>) {
    let keepalive = Duration::from_millis(SSE_KEEPALIVE_MS);
    // Measured from the last frame the client got, so that a busy log of events this caller
    // does not see never starves the keepalive.
    let mut keepalive_at = tokio::time::Instant::now() + keepalive;
    loop {
        match visible_page(&caller, after, EVENTS_PAGE_MAX) {
            Ok((events, next_after, _)) => {
                for event in &events {
                    if frames.send(frame(event)).await.is_err() {
                        return;
                    }
                    keepalive_at = tokio::time::Instant::now() + keepalive;
                }
                after = next_after;
                if !events.is_empty() || caller.shell.head_seq() > after {
                    continue;
                }
            }
            Err(error) => {
                let message = format!("event: error\ndata: {}\n\n", error.message);
                let _ = frames.send(Bytes::from(message)).await;
                return;
            }
        }
        // Registered before the head is read, so a commit in between still wakes this reader.
        let moved = caller.shell.head_moved().notified();
        tokio::pin!(moved);
        moved.as_mut().enable();
        if caller.shell.head_seq() > after {
            continue;
        }
        tokio::select! {
            biased;
            _ = moved => {}
            _ = tokio::time::sleep_until(keepalive_at) => {
                if frames.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                    return;
                }
                keepalive_at = tokio::time::Instant::now() + keepalive;
            }
        }
    }
}

/// One event as an SSE frame: its seq as the id, its type as the event name, JSON as data.
fn frame(event: &Event) -> Bytes {
    let json = serde_json::to_string(event).expect("events always serialize");
    Bytes::from(format!(
        "id: {}\nevent: {}\ndata: {json}\n\n",
        event.seq,
        event.kind.type_name()
    ))
}

/// A response body fed by a channel of frames; it ends when the writer does.
struct SseBody(tokio::sync::mpsc::Receiver<Bytes>);

impl HttpBody for SseBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|frame| frame.map(|bytes| Ok(hyper::body::Frame::data(bytes))))
    }
}

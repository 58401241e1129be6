//! `vigil events tail`: the tenant's event log, one line per event. Without `--follow` it pages
//! through JSON until it reaches the head it saw first; with `--follow` it reads the live SSE
//! stream and, when the stream drops, reconnects with `Last-Event-ID` so nothing is missed or
//! repeated (invariant 11). The paging and the live feed hand over events as JSON, so that
//! `vigil top` reads the same feed.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Empty};
use hyper::{header, Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use crate::net::WrittenFlush;

use super::format::{escape_controls, event_line, safe_json_line};
use super::{answer_json, CliError, Printed, Session};
use crate::api::client::REQUEST_TIMEOUT_MS;
use crate::api::SSE_KEEPALIVE_MS;

/// Events asked for per page when catching up without `--follow`.
const EVENTS_PAGE: u64 = 1_000;
/// Most pages one catch-up reads: far more than any log a tail is meant for, but a bound.
const EVENTS_PAGES_MAX: u64 = 100_000;
/// Consecutive failed reconnects after which `--follow` gives up.
pub const EVENTS_RECONNECTS_MAX: u32 = 60;
/// Pause between reconnects.
const RECONNECT_DELAY_MS: u64 = 1_000;
/// A stream silent for this long (no event, no keepalive) is taken for dead and reopened.
const STREAM_SILENCE_MS: u64 = 2 * SSE_KEEPALIVE_MS + 5_000;
/// Largest SSE frame accepted; a larger one means the stream is not Vigil's.
const SSE_FRAME_BYTES_MAX: usize = 4 * 1024 * 1024;

/// What the event feed hands its reader: `vigil events tail` prints it, `vigil top` folds it
/// into its view.
#[derive(Debug)]
pub(super) enum FeedItem {
    /// One event, as the server sent it.
    Event(Value),
    /// An SSE `data` that is not JSON, passed on as is.
    Unparsed(String),
    /// News about the stream itself (a drop, a retry), not an event.
    Note(String),
}

impl Session {
    /// Pages through the events after `after` up to the head seen on the first page.
    /// Returns the seq to resume from.
    pub async fn events_catch_up(
        &self,
        after: u64,
        emit: &mut dyn FnMut(Printed),
    ) -> Result<u64, CliError> {
        self.event_pages(after, &mut |event| {
            emit(Printed::out(self.event_text(&event)))
        })
        .await
    }

    /// Follows the live stream from `after` until the process is stopped (see `event_feed`).
    pub async fn events_follow(
        &self,
        after: u64,
        emit: &mut dyn FnMut(Printed),
    ) -> Result<(), CliError> {
        self.event_feed(after, &mut |item| {
            emit(match item {
                FeedItem::Event(event) => Printed::out(self.event_text(&event)),
                FeedItem::Unparsed(data) => Printed::out(format!("{}\n", escape_controls(&data))),
                FeedItem::Note(text) => Printed {
                    stdout: String::new(),
                    stderr: format!("note: {}\n", escape_controls(&text)),
                },
            })
        })
        .await
    }

    /// Hands over, in order, the events after `after` up to the head seen on the first page.
    /// Returns the seq to resume from.
    pub(super) async fn event_pages(
        &self,
        after: u64,
        on_event: &mut dyn FnMut(Value),
    ) -> Result<u64, CliError> {
        let mut after = after;
        let mut target = None;
        for _ in 0..EVENTS_PAGES_MAX {
            let page = self
                .get(&format!("/v1/events?after={after}&limit={EVENTS_PAGE}"))
                .await?;
            let head = page["head_seq"].as_u64().unwrap_or(0);
            let target = *target.get_or_insert(head);
            if let Some(Value::Array(events)) = page.get("events") {
                events.iter().cloned().for_each(&mut *on_event);
            }
            let next = page["next_after"].as_u64().unwrap_or(after);
            if next >= target || next <= after {
                return Ok(next.max(after));
            }
            after = next;
        }
        Ok(after)
    }

    /// Follows the live stream from `after` until the process is stopped, reconnecting with
    /// `Last-Event-ID` after a drop. Gives up after `EVENTS_RECONNECTS_MAX` failed attempts in a
    /// row; a refusal by the server (bad token, …) other than a 503 ends it at once.
    pub(super) async fn event_feed(
        &self,
        after: u64,
        on_item: &mut dyn FnMut(FeedItem),
    ) -> Result<(), CliError> {
        let mut last_seq = after;
        let mut failures = 0;
        let mut connected_once = false;
        loop {
            match self.stream_once(last_seq, &mut last_seq, on_item).await {
                Ok(why) => {
                    connected_once = true;
                    failures = 0;
                    on_item(FeedItem::Note(format!(
                        "stream dropped ({why}); reconnecting after seq {last_seq}"
                    )));
                }
                // 503 (recovering after a restart, too many streams) passes; other refusals do not.
                Err(error @ CliError::Server { status, .. }) if status != 503 => return Err(error),
                Err(error @ CliError::Unauthenticated { .. }) => return Err(error),
                Err(error) if !connected_once => return Err(error),
                Err(error) => {
                    failures += 1;
                    if failures >= EVENTS_RECONNECTS_MAX {
                        return Err(error);
                    }
                    on_item(FeedItem::Note(format!(
                        "{error}; retrying ({failures}/{EVENTS_RECONNECTS_MAX})"
                    )));
                }
            }
            tokio::time::sleep(Duration::from_millis(RECONNECT_DELAY_MS)).await;
        }
    }

    /// One SSE connection: hands over its events and moves `last_seq` along. Answers why the
    /// connection ended (closed by the server, silent, broken) once it was open.
    async fn stream_once(
        &self,
        after: u64,
        last_seq: &mut u64,
        on_item: &mut dyn FnMut(FeedItem),
    ) -> Result<String, CliError> {
        let url = self.url.clone();
        let http = |e: hyper::Error| CliError::Http {
            url: url.clone(),
            detail: e.to_string(),
        };
        let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
        let stream = tokio::time::timeout(timeout, TcpStream::connect(self.addr))
            .await
            .map_err(|_| CliError::Timeout { url: url.clone() })?
            .map_err(|source| CliError::Unreachable {
                url: url.clone(),
                reason: source.to_string(),
            })?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(WrittenFlush::new(stream)))
                .await
                .map_err(http)?;
        let driver = tokio::spawn(async move {
            // Errors surface through the response body; the driver only has to run.
            let _ = connection.await;
        });
        let mut request = Request::builder()
            .method(Method::GET)
            .uri(format!("/v1/events?after={after}"))
            .header(header::HOST, self.addr.to_string())
            .header(header::ACCEPT, "text/event-stream")
            .header(
                header::AUTHORIZATION,
                format!("Bearer {}", self.token.secret),
            );
        if after > 0 {
            request = request.header("last-event-id", after.to_string());
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .expect("method, path and headers are valid");
        let result = async {
            let response = tokio::time::timeout(timeout, sender.send_request(request))
                .await
                .map_err(|_| CliError::Timeout { url: url.clone() })?
                .map_err(http)?;
            let status = response.status().as_u16();
            let mut body = response.into_body();
            if status != 200 {
                let bytes = body.collect().await.map_err(http)?.to_bytes();
                answer_json(status, &bytes).map_err(|e| self.refused(e))?;
                return Err(CliError::UnexpectedAnswer {
                    status,
                    body: "an event stream was expected".into(),
                });
            }
            let mut buffer = BytesMut::new();
            loop {
                let silence = Duration::from_millis(STREAM_SILENCE_MS);
                let frame = match tokio::time::timeout(silence, body.frame()).await {
                    Err(_) => return Ok(format!("silent for {STREAM_SILENCE_MS} ms")),
                    Ok(None) => return Ok("closed by the server".into()),
                    Ok(Some(Err(error))) => return Ok(error.to_string()),
                    Ok(Some(Ok(frame))) => frame,
                };
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                buffer.extend_from_slice(&data);
                while let Some(end) = find_frame_end(&buffer) {
                    let block = buffer.split_to(end + 2);
                    let text = String::from_utf8_lossy(&block[..end]).into_owned();
                    match parse_frame(&text) {
                        SseFrame::Event { id, data } => {
                            on_item(match serde_json::from_str::<Value>(&data) {
                                Ok(event) => FeedItem::Event(event),
                                Err(_) => FeedItem::Unparsed(data),
                            });
                            if let Some(id) = id {
                                *last_seq = id;
                            }
                        }
                        SseFrame::Error(message) => return Ok(format!("server: {message}")),
                        SseFrame::Comment => {}
                    }
                }
                if buffer.len() > SSE_FRAME_BYTES_MAX {
                    return Ok(format!("a frame passed {SSE_FRAME_BYTES_MAX} bytes"));
                }
            }
        }
        .await;
        driver.abort();
        result
    }

    /// An event as printed: one line, human or JSON.
    fn event_text(&self, event: &Value) -> String {
        if self.json() {
            format!("{}\n", safe_json_line(event))
        } else {
            format!("{}\n", event_line(event))
        }
    }
}

/// Index of the blank line ending the first frame (`\n\n`), if a whole frame is buffered.
fn find_frame_end(buffer: &[u8]) -> Option<usize> {
    buffer.windows(2).position(|w| w == b"\n\n")
}

#[derive(Debug, PartialEq, Eq)]
enum SseFrame {
    Event {
        id: Option<u64>,
        data: String,
    },
    /// `event: error`: the server ends the stream.
    Error(String),
    /// Keepalives and anything without data.
    Comment,
}

/// One SSE frame (without its closing blank line).
fn parse_frame(text: &str) -> SseFrame {
    let (mut id, mut kind, mut data) = (None, None, Vec::new());
    for line in text.lines() {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => id = value.trim().parse().ok(),
            "event" => kind = Some(value.to_string()),
            "data" => data.push(value),
            _ => {}
        }
    }
    if data.is_empty() {
        return SseFrame::Comment;
    }
    let data = data.join("\n");
    if kind.as_deref() == Some("error") {
        SseFrame::Error(data)
    } else {
        SseFrame::Event { id, data }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_parse() {
        assert_eq!(
            parse_frame("id: 7\nevent: run_started\ndata: {\"seq\":7}"),
            SseFrame::Event {
                id: Some(7),
                data: "{\"seq\":7}".into()
            }
        );
        assert_eq!(parse_frame(": keepalive"), SseFrame::Comment);
        assert_eq!(
            parse_frame("event: error\ndata: disk full"),
            SseFrame::Error("disk full".into())
        );
        assert_eq!(find_frame_end(b"id: 1\ndata: x\n\nid: 2"), Some(13));
        assert_eq!(find_frame_end(b"id: 1\ndata: x\n"), None);
    }
}

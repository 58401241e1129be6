//! (madsim only) A client of the live event stream: `GET /v1/events` as Server-Sent Events with
//! the operator's token, dropped at seeded moments and resumed with `Last-Event-ID`, as a
//! browser's `EventSource` does after a network hiccup or a restart of the node. Every batch of
//! events it reads is recorded as a `stream_page` after the last id it had, so the oracle's
//! `stream_resume_exact` (invariant 11) judges the SSE path as it judges JSON pages: no gap, no
//! duplicate, each event as committed.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::TokioIo;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tokio::net::TcpStream;

use crate::harness::{elapsed_ms, SIM_OPERATOR_TOKEN};
use crate::recorder::Recorder;
use crate::sse_frames::take_events;
use crate::trace::{event_digest, TraceEvent};

/// A reader holds its stream for a while drawn in this range (virtual ms), then drops it. Why
/// short, with long pauses between: every commit wakes each live stream, which then reads the
/// log, so a reader connected all day would multiply a seed's cost many times; a reader that
/// comes and goes still drops and resumes the stream dozens of times a day.
const HOLD_MS_MIN: u64 = 1_000;
const HOLD_MS_MAX: u64 = 60_000;
/// Or until it has read this many events at most (drawn from 1), whichever comes first.
const EVENTS_BEFORE_DROP_MAX: u64 = 200;
/// Pause before reconnecting, drawn in this range (virtual ms).
const RECONNECT_MS_MIN: u64 = 100;
const RECONNECT_MS_MAX: u64 = 30 * 60_000;
/// The node name its records carry (JSON pages are the workload's).
pub const SSE_READER_NODE: &str = "sse-reader";
/// Longest wait for the stream's head.
const HEAD_WAIT_MS: u64 = 10_000;

/// Reads the stream of the node at `addr` until virtual `until_ms`, its drops and pauses drawn
/// from `rng` (its own stream: nothing else's draws move).
pub async fn run(
    addr: std::net::SocketAddr,
    recorder: Recorder,
    mut rng: ChaCha8Rng,
    until_ms: u64,
) {
    let mut last_id = 0;
    while elapsed_ms() < until_ms {
        let hold_ms = rng.gen_range(HOLD_MS_MIN..=HOLD_MS_MAX);
        let events_max = rng.gen_range(1..=EVENTS_BEFORE_DROP_MAX);
        let drop_at_ms = (elapsed_ms() + hold_ms).min(until_ms);
        last_id = hold(addr, &recorder, last_id, drop_at_ms, events_max).await;
        let pause_ms = rng.gen_range(RECONNECT_MS_MIN..=RECONNECT_MS_MAX);
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    }
}

/// One connection: asks for the events after `last_id`, records what comes until `drop_at_ms`
/// or `events_max` events, then drops it. Returns the last id read.
async fn hold(
    addr: std::net::SocketAddr,
    recorder: &Recorder,
    mut last_id: u64,
    drop_at_ms: u64,
    events_max: u64,
) -> u64 {
    let head = tokio::time::timeout(Duration::from_millis(HEAD_WAIT_MS), open(addr, last_id));
    let Ok(Some((mut body, connection))) = head.await else {
        return last_id;
    };
    let mut buffer = String::new();
    let mut read = 0;
    while read < events_max {
        let left_ms = drop_at_ms.saturating_sub(elapsed_ms());
        if left_ms == 0 {
            break;
        }
        let frame = tokio::time::timeout(Duration::from_millis(left_ms), body.frame()).await;
        let Ok(Some(Ok(frame))) = frame else {
            break;
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buffer.push_str(&String::from_utf8_lossy(&data));
        let events = take_events(&mut buffer);
        if events.is_empty() {
            continue;
        }
        read += events.len() as u64;
        recorder.record(
            SSE_READER_NODE,
            TraceEvent::StreamPage {
                after: last_id,
                events: events.iter().map(|e| (e.seq, event_digest(e))).collect(),
            },
        );
        last_id = events.last().map_or(last_id, |e| e.seq);
    }
    connection.abort();
    last_id
}

type Stream = (hyper::body::Incoming, madsim::task::JoinHandle<()>);

/// Connects and asks for the stream; `None` unless the node answers 200.
async fn open(addr: std::net::SocketAddr, last_id: u64) -> Option<Stream> {
    let tcp = TcpStream::connect(addr).await.ok()?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(vigil::net::WrittenFlush::new(tcp)))
            .await
            .ok()?;
    let connection = madsim::task::spawn_local(async move {
        let _ = connection.await;
    });
    let mut request = Request::get("/v1/events")
        .header("host", "vigil")
        .header("authorization", format!("Bearer {SIM_OPERATOR_TOKEN}"))
        .header("accept", "text/event-stream");
    if last_id > 0 {
        request = request.header("last-event-id", last_id.to_string());
    }
    let request = request.body(Empty::<Bytes>::new()).ok()?;
    let Ok(answer) = sender.send_request(request).await else {
        connection.abort();
        return None;
    };
    if answer.status() != hyper::StatusCode::OK {
        connection.abort();
        return None;
    }
    Some((answer.into_body(), connection))
}

//! A simulated state server: what predicate heartbeats observe (docs/api.md, "Predicate
//! heartbeats"), on its own node of the simulated network (reachable by the host name
//! [`STATE_SERVER_HOST`] in madsim's DNS table). `GET /state/{heartbeat}` answers
//! `{"unread": N}`, or, for a few answers of the faulty phase, `{ "unread": N, "pad": "x…" }`:
//! a state padded so that its canonical JSON lies near the documented size limit, well below
//! it, just under or at it, or just over it ([`StateScript::pad_bytes`]). The padded answer is
//! written out of key order and with spaces, so only its canonical form has the size drawn.
//!
//! The truth N of each heartbeat is a pure function of the seed, the heartbeat's id and virtual
//! time ([`truth`]): a flap schedule that changes every [`FLAP_SEGMENT_MS_MIN`] to
//! [`FLAP_SEGMENT_MS_MAX`], sometimes back to the value before. It stops changing when the
//! scenario freezes it (the quiet phase), so the oracle can restate what every heartbeat must
//! end up recording (`transition_redetected`).
//!
//! How each answer comes (at once, slow within the heartbeat's budget, late past it, or never)
//! is drawn per (heartbeat, request number) from the stream `state/<heartbeat>/<request>`, so a
//! retry or a restart moves no other draw. Every check served is a typed trace record
//! ([`TraceEvent::CheckServed`]) and so is its end ([`TraceEvent::CheckEnded`]), for
//! `one_evaluation_at_a_time`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use rand::Rng;

use crate::check::STATE_BYTES_MAX;
use crate::trace::CheckAnswer;

/// Where the state server listens.
pub const STATE_SERVER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 5));
pub const STATE_SERVER_PORT: u16 = 9095;
/// Its host name in madsim's DNS table.
pub const STATE_SERVER_HOST: &str = "state.sim.internal";
/// The trace's node name for it.
pub const STATE_SERVER_NODE: &str = "state-server";

/// Shortest stretch the truth holds one value, in ms of virtual time.
pub const FLAP_SEGMENT_MS_MIN: u64 = 10_000;
/// Longest stretch, in ms.
pub const FLAP_SEGMENT_MS_MAX: u64 = 60_000;
/// Chance, per mille, that a change goes back to the value before it (a flap).
pub const FLAP_BACK_PERMILLE: u32 = 300;
/// Largest `unread` count the truth takes (from 0).
pub const UNREAD_MAX: u64 = 9;

/// How far from the documented state limit ([`STATE_BYTES_MAX`]) a state drawn "just under or
/// at" or "just over" it lies at most, in bytes of canonical JSON.
pub const NEAR_LIMIT_BYTES: usize = 4;
/// The byte of which a padded state's `pad` string is made (one byte in UTF-8, never escaped).
const PAD_CHAR: char = 'x';

/// The URL prefix of every heartbeat check this server answers.
pub fn state_url_prefix() -> String {
    format!("http://{STATE_SERVER_HOST}:{STATE_SERVER_PORT}/state/")
}

/// The URL heartbeat `heartbeat` checks.
pub fn state_url(heartbeat: &str) -> String {
    format!("{}{heartbeat}", state_url_prefix())
}

/// The state token the runtime records for `unread` (canonical JSON, as docs/api.md says).
pub fn state_token(unread: u64) -> String {
    format!(r#"{{"unread":{unread}}}"#)
}

/// The state an answer carries: `{"unread": N}`, with a `pad` string of `pad_bytes` bytes when
/// it was padded.
pub fn observed(unread: u64, pad_bytes: Option<u64>) -> serde_json::Value {
    match pad_bytes {
        None => serde_json::json!({ "unread": unread }),
        Some(pad) => serde_json::json!({ "unread": unread, "pad": pad_string(pad) }),
    }
}

/// The state token the runtime records for that answer: its canonical JSON, written out here
/// (keys in order, no whitespace), for the workload and the coverage counts; the oracle
/// computes its own.
pub fn served_token(unread: u64, pad_bytes: Option<u64>) -> String {
    match pad_bytes {
        None => state_token(unread),
        Some(pad) => format!(r#"{{"pad":"{}","unread":{unread}}}"#, pad_string(pad)),
    }
}

/// The body the server sends for that answer: the same JSON, but keys out of order and spaced,
/// so a runtime that measured or compared the body as it came would be seen.
#[cfg(any(madsim, test))]
fn served_body(unread: u64, pad_bytes: Option<u64>) -> String {
    match pad_bytes {
        None => serde_json::json!({ "unread": unread }).to_string(),
        Some(pad) => format!(r#"{{ "unread": {unread}, "pad": "{}" }}"#, pad_string(pad)),
    }
}

fn pad_string(pad_bytes: u64) -> String {
    std::iter::repeat(PAD_CHAR)
        .take(pad_bytes as usize)
        .collect()
}

/// Heartbeat `heartbeat`'s truth at virtual `t_ms`: the flap schedule drawn from the stream
/// `state/<heartbeat>/flap`. Its draws come in one fixed order, so the value at any instant is
/// the same however far the schedule is unrolled.
pub fn truth(seed: u64, heartbeat: &str, t_ms: u64) -> u64 {
    let mut rng = vigil_faults::stream(seed, &format!("state/{heartbeat}/flap"));
    let mut value = rng.gen_range(0..=UNREAD_MAX);
    let mut before = value;
    let mut changes_at_ms = 0;
    loop {
        changes_at_ms += rng.gen_range(FLAP_SEGMENT_MS_MIN..=FLAP_SEGMENT_MS_MAX);
        if changes_at_ms > t_ms {
            return value;
        }
        let next = if rng.gen_range(0..1_000) < FLAP_BACK_PERMILLE && before != value {
            before
        } else {
            // Any other value: a change always changes something.
            let other = rng.gen_range(0..UNREAD_MAX);
            if other >= value {
                other + 1
            } else {
                other
            }
        };
        before = value;
        value = next;
    }
}

/// How the server's answers come, per heartbeat (its `max_runtime_ms`) and per mille.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateScript {
    /// Each heartbeat's evaluation budget, ms: slow answers come within it, late ones past it.
    pub budgets_ms: BTreeMap<String, u64>,
    pub hang_permille: u32,
    pub late_permille: u32,
    pub slow_permille: u32,
    /// Answers padded near the state limit, per mille (drawn apart from how they come).
    pub padded_permille: u32,
}

/// How much later than the budget a late answer comes, at most, in ms.
pub const LATE_PAST_BUDGET_MS_MAX: u64 = 3_000;
/// How much later than the budget a late answer comes, at least, in ms: well past one network
/// hop, so the runtime really gives up first.
pub const LATE_PAST_BUDGET_MS_MIN: u64 = 200;
/// The budget of a heartbeat the script does not name (the runtime's default), ms.
const DEFAULT_BUDGET_MS: u64 = 5_000;

impl StateScript {
    /// How request `request` of heartbeat `heartbeat` is answered (drawn from the stream
    /// `state/<heartbeat>/<request>`).
    pub fn answer(&self, seed: u64, heartbeat: &str, request: u64) -> CheckAnswer {
        let budget_ms = self
            .budgets_ms
            .get(heartbeat)
            .copied()
            .unwrap_or(DEFAULT_BUDGET_MS);
        let mut rng = vigil_faults::stream(seed, &format!("state/{heartbeat}/{request}"));
        let roll = rng.gen_range(0..1_000);
        let late_from = self.hang_permille;
        let slow_from = late_from + self.late_permille;
        let quick_from = slow_from + self.slow_permille;
        if roll < late_from {
            CheckAnswer::Hang
        } else if roll < slow_from {
            let past = rng.gen_range(LATE_PAST_BUDGET_MS_MIN..=LATE_PAST_BUDGET_MS_MAX);
            CheckAnswer::Late {
                delay_ms: budget_ms + past,
            }
        } else if roll < quick_from {
            // Well inside the budget: a fifth to four fifths of it.
            CheckAnswer::Slow {
                delay_ms: rng.gen_range(budget_ms / 5..=budget_ms * 4 / 5),
            }
        } else {
            CheckAnswer::Quick
        }
    }

    /// Whether request `request` of `heartbeat` (whose truth is `unread`) is padded, and by how
    /// many bytes: drawn from the stream `state/<heartbeat>/<request>/size`, so no other draw
    /// moves. A third of the padded states are well below the limit (a quarter of it to
    /// fifteen sixteenths), a third just under or at it, a third just over it.
    pub fn pad_bytes(&self, seed: u64, heartbeat: &str, request: u64, unread: u64) -> Option<u64> {
        if self.padded_permille == 0 {
            return None;
        }
        let mut rng = vigil_faults::stream(seed, &format!("state/{heartbeat}/{request}/size"));
        if rng.gen_range(0..1_000) >= self.padded_permille {
            return None;
        }
        let target_bytes = match rng.gen_range(0..3) {
            0 => rng.gen_range(STATE_BYTES_MAX / 4..=STATE_BYTES_MAX * 15 / 16),
            1 => rng.gen_range(STATE_BYTES_MAX - NEAR_LIMIT_BYTES..=STATE_BYTES_MAX),
            _ => rng.gen_range(STATE_BYTES_MAX + 1..=STATE_BYTES_MAX + NEAR_LIMIT_BYTES),
        };
        let unpadded_bytes = served_token(unread, Some(0)).len();
        Some((target_bytes - unpadded_bytes) as u64)
    }
}

/// The server's script, the freeze of its truth, and each heartbeat's requests so far.
#[derive(Debug)]
pub struct StateServerState {
    pub script: StateScript,
    pub seed: u64,
    /// From this virtual instant on the truth holds still (the quiet phase).
    frozen_at_ms: Option<u64>,
    /// Slow, late and hanging answers are drawn only until the quiet phase heals them.
    healed: bool,
    requests: BTreeMap<String, u64>,
}

impl StateServerState {
    pub fn new(seed: u64, script: StateScript) -> Self {
        StateServerState {
            script,
            seed,
            frozen_at_ms: None,
            healed: false,
            requests: BTreeMap::new(),
        }
    }

    /// The quiet phase: the truth holds its value at `t_ms` from now on, and every answer is
    /// quick.
    pub fn freeze(&mut self, t_ms: u64) {
        self.frozen_at_ms.get_or_insert(t_ms);
        self.healed = true;
    }

    /// The next request of `heartbeat` at `t_ms`: its number, the truth, its padding, and how
    /// it is answered.
    pub fn next_request(&mut self, heartbeat: &str, t_ms: u64) -> Served {
        let request = self.requests.entry(heartbeat.to_string()).or_default();
        *request += 1;
        let request = *request;
        let at_ms = self.frozen_at_ms.map_or(t_ms, |frozen| t_ms.min(frozen));
        let value = truth(self.seed, heartbeat, at_ms);
        let (pad_bytes, answer) = if self.healed {
            (None, CheckAnswer::Quick)
        } else {
            (
                self.script.pad_bytes(self.seed, heartbeat, request, value),
                self.script.answer(self.seed, heartbeat, request),
            )
        };
        Served {
            request,
            value,
            pad_bytes,
            answer,
        }
    }
}

/// One request of a heartbeat's check, as the server serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub request: u64,
    /// The truth `unread`.
    pub value: u64,
    /// The `pad` string's length, when the state is padded.
    pub pad_bytes: Option<u64>,
    pub answer: CheckAnswer,
}

pub type SharedStateServer = std::sync::Arc<std::sync::Mutex<StateServerState>>;

#[cfg(madsim)]
pub use serving::serve;

#[cfg(madsim)]
mod serving {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::time::Duration;

    use axum::extract::Path;
    use axum::http::StatusCode;
    use axum::routing::get;

    use super::{served_body, Served, SharedStateServer, STATE_SERVER_NODE, STATE_SERVER_PORT};
    use crate::recorder::Recorder;
    use crate::trace::{CheckAnswer, TraceEvent};

    /// Records [`TraceEvent::CheckEnded`] when dropped: when the handler answers, or when the
    /// runtime drops the connection and the server drops the handler with it.
    struct CheckGuard {
        recorder: Recorder,
        heartbeat: String,
        request: u64,
    }

    impl Drop for CheckGuard {
        fn drop(&mut self) {
            self.recorder.record(
                STATE_SERVER_NODE,
                TraceEvent::CheckEnded {
                    heartbeat: std::mem::take(&mut self.heartbeat),
                    request: self.request,
                },
            );
        }
    }

    /// Serves `GET /state/{heartbeat}` on this node forever.
    pub async fn serve(state: SharedStateServer, recorder: Recorder) {
        let router = axum::Router::new().route(
            "/state/{heartbeat}",
            get(move |Path(heartbeat): Path<String>| {
                let (state, recorder) = (state.clone(), recorder.clone());
                async move { answer(&state, &recorder, heartbeat).await }
            }),
        );
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            STATE_SERVER_PORT,
        ))
        .await
        .expect("the state server's port is free on its own node");
        vigil::api::serve(listener, router).await;
    }

    async fn answer(
        state: &SharedStateServer,
        recorder: &Recorder,
        heartbeat: String,
    ) -> (StatusCode, String) {
        let now_ms = crate::harness::elapsed_ms();
        let Served {
            request,
            value,
            pad_bytes,
            answer,
        } = state
            .lock()
            .expect("state server lock")
            .next_request(&heartbeat, now_ms);
        recorder.record(
            STATE_SERVER_NODE,
            TraceEvent::CheckServed {
                heartbeat: heartbeat.clone(),
                request,
                value,
                pad_bytes,
                answer,
            },
        );
        let _in_flight = CheckGuard {
            recorder: recorder.clone(),
            heartbeat,
            request,
        };
        match answer {
            CheckAnswer::Quick => {}
            CheckAnswer::Slow { delay_ms } | CheckAnswer::Late { delay_ms } => {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            }
            // Never answered: the runtime's budget ends it (answering later would send bytes
            // to a socket the runtime already closed).
            CheckAnswer::Hang => std::future::pending().await,
        }
        (StatusCode::OK, served_body(value, pad_bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_truth_is_a_pure_function_that_changes_and_sometimes_flaps_back() {
        let values: Vec<u64> = (0..600).map(|s| truth(7, "inbox", s * 1_000)).collect();
        assert_eq!(
            values,
            (0..600)
                .map(|s| truth(7, "inbox", s * 1_000))
                .collect::<Vec<_>>()
        );
        let changes: Vec<(u64, u64)> = values
            .windows(2)
            .filter(|w| w[0] != w[1])
            .map(|w| (w[0], w[1]))
            .collect();
        // Ten minutes of segments of 10 to 60 s: between 9 and 60 changes.
        assert!((9..=60).contains(&changes.len()), "{changes:?}");
        let flaps_back = changes.windows(2).filter(|c| c[1].1 == c[0].0).count();
        assert!(flaps_back > 0, "{changes:?}");
        assert!(values.iter().all(|v| *v <= UNREAD_MAX));
        assert_ne!(
            values,
            (0..600)
                .map(|s| truth(7, "other", s * 1_000))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_frozen_server_serves_the_truth_at_the_freeze_and_answers_at_once() {
        let script = StateScript {
            budgets_ms: BTreeMap::from([("inbox".to_string(), 1_000)]),
            hang_permille: 1_000,
            late_permille: 0,
            slow_permille: 0,
            padded_permille: 1_000,
        };
        let mut server = StateServerState::new(3, script);
        let first = server.next_request("inbox", 5);
        assert_eq!(first.answer, CheckAnswer::Hang);
        assert!(first.pad_bytes.is_some());
        server.freeze(100_000);
        assert_eq!(
            server.next_request("inbox", 900_000),
            Served {
                request: 2,
                value: truth(3, "inbox", 100_000),
                pad_bytes: None,
                answer: CheckAnswer::Quick
            }
        );
    }

    #[test]
    fn answers_fall_within_and_past_the_budget_as_drawn() {
        let script = StateScript {
            budgets_ms: BTreeMap::from([("inbox".to_string(), 1_000)]),
            hang_permille: 100,
            late_permille: 100,
            slow_permille: 200,
            padded_permille: 0,
        };
        let answers: Vec<CheckAnswer> = (1..=400).map(|n| script.answer(1, "inbox", n)).collect();
        for answer in &answers {
            match answer {
                CheckAnswer::Slow { delay_ms } => assert!((200..=800).contains(delay_ms)),
                CheckAnswer::Late { delay_ms } => assert!((1_200..=4_000).contains(delay_ms)),
                _ => {}
            }
        }
        for kind in ["quick", "slow", "late", "hang"] {
            let seen = answers.iter().any(|a| match a {
                CheckAnswer::Quick => kind == "quick",
                CheckAnswer::Slow { .. } => kind == "slow",
                CheckAnswer::Late { .. } => kind == "late",
                CheckAnswer::Hang => kind == "hang",
            });
            assert!(seen, "no {kind} answer in 400 draws");
        }
    }

    #[test]
    fn padded_states_fall_below_at_and_just_over_the_limit_as_drawn() {
        let script = StateScript {
            budgets_ms: BTreeMap::new(),
            hang_permille: 0,
            late_permille: 0,
            slow_permille: 0,
            padded_permille: 500,
        };
        let sizes: Vec<usize> = (1..=600)
            .filter_map(|n| {
                let unread = n % (UNREAD_MAX + 1);
                let pad = script.pad_bytes(1, "inbox", n, unread)?;
                let token = served_token(unread, Some(pad));
                // The token is the body's canonical form: what serde_json reads, compacted.
                let body: serde_json::Value =
                    serde_json::from_str(&served_body(unread, Some(pad))).unwrap();
                assert_eq!(body, observed(unread, Some(pad)));
                assert_ne!(served_body(unread, Some(pad)).len(), token.len());
                Some(token.len())
            })
            .collect();
        assert!((200..400).contains(&sizes.len()), "{} padded", sizes.len());
        let below = STATE_BYTES_MAX / 4..=STATE_BYTES_MAX * 15 / 16;
        let near = STATE_BYTES_MAX - NEAR_LIMIT_BYTES..=STATE_BYTES_MAX;
        let over = STATE_BYTES_MAX + 1..=STATE_BYTES_MAX + NEAR_LIMIT_BYTES;
        assert!(sizes
            .iter()
            .all(|s| below.contains(s) || near.contains(s) || over.contains(s)));
        for (class, range) in [("below", below), ("near", near), ("over", over)] {
            assert!(sizes.iter().any(|s| range.contains(s)), "no {class} state");
        }
        assert!(
            sizes.contains(&STATE_BYTES_MAX),
            "none exactly at the limit"
        );
        // Unpadded scripts draw nothing.
        let plain = StateScript {
            padded_permille: 0,
            ..script
        };
        assert!((1..=600).all(|n| plain.pad_bytes(1, "inbox", n, 3).is_none()));
    }
}

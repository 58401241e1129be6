//! Invariant 18, `operator_answered` (docs/invariants.md): whatever other principals do to the
//! node (slow bodies, idle connections, stream floods, key floods, request floods: the `hostile`
//! scenario), every request of the honest operator gets a real answer within
//! `OPERATOR_ANSWER_BOUND_MS`, and never a refusal for a shared limit (429, or a 503 other than
//! `recovering`). Requests that meet a fault are excused: from the first fault record or crash
//! after the request was sent (or one in force when it was sent) until its answer, the node may
//! be down, cut off, slow or failing its disk, and then no answer, a late one or a 503 proves
//! nothing about other principals.
//!
//! Judged only in traces that record the operator's requests (sim/src/operator_client.rs).

use std::collections::{BTreeMap, BTreeSet};

use super::{violation, Violation};
use crate::trace::{FaultRecord, TraceEvent, TraceRecord};

/// Longest the operator may wait for any answer on an undisturbed node, in virtual ms.
///
/// Why this figure: an answer on the simulated network takes milliseconds (a few hops of
/// simulated latency, a commit on the simulated disk), so a healthy node answers far inside it.
/// It is below every hold a hostile client can put on a shared resource (a slow body up to
/// `BODY_READ_TIMEOUT_MS` = 10 s, an idle connection up to `HEADER_READ_TIMEOUT_MS` = 30 s, a
/// stream for as long as it likes), so an operator queued behind any of them breaks it; and below
/// the client's own timeout (`REQUEST_TIMEOUT_MS`, 10 s), so a late answer is seen as late, not
/// only as none.
pub const OPERATOR_ANSWER_BOUND_MS: u64 = 2_000;

/// The 503 code the operator may get for its own sake: the node is still recovering.
const RECOVERING_CODE: &str = "recovering";

/// A power cut is armed (its fault record) before it strikes at a storage operation, and the
/// node may fail requests in between; it counts as a window until the node's next crash.
const POWER_CUT: &str = "power_cut";

/// What the oracle knows of the operator's requests and of the faults around them.
#[derive(Debug, Default)]
pub struct OperatorOracle {
    /// Requests sent and not yet answered: number -> (virtual ms sent, method and path).
    pending: BTreeMap<u64, (u64, String)>,
    /// Window faults open now (`partition`, `net_delay`, …): how many of each kind (windows
    /// of one kind may overlap, each healed by its own record).
    open_windows: BTreeMap<String, u32>,
    /// Runtime nodes down now (crashed, or restarted and not yet recovered).
    down: BTreeSet<&'static str>,
    /// The last virtual ms at which a fault struck or was in force.
    last_disturbed_ms: Option<u64>,
}

impl OperatorOracle {
    /// Reads one record: faults and crashes (to excuse), the operator's requests and answers.
    pub fn observe(&mut self, record: &TraceRecord) -> Result<(), Violation> {
        let t_ms = record.t_ms;
        match &record.event {
            TraceEvent::Fault { fault } => self.fault(t_ms, fault),
            TraceEvent::Crashed { .. } | TraceEvent::Restarted => {
                self.open_windows.remove(POWER_CUT);
                self.down.insert(record.node);
                self.last_disturbed_ms = Some(t_ms);
            }
            TraceEvent::Recovered { .. } => {
                self.down.remove(record.node);
                self.last_disturbed_ms = Some(t_ms);
            }
            TraceEvent::OperatorAsked {
                request,
                method,
                path,
            } => {
                self.touch(t_ms);
                self.pending
                    .insert(*request, (t_ms, format!("{method} {path}")));
            }
            TraceEvent::OperatorAnswered {
                request,
                status,
                code,
            } => {
                self.touch(t_ms);
                return self.answered(t_ms, *request, *status, code.as_deref());
            }
            _ => {}
        }
        Ok(())
    }

    /// A fault record: a window opens (a fault with a duration, or an armed power cut) or
    /// heals, or a fault strikes at one instant (a crash's, a failed storage operation's, a
    /// clock jump's record).
    fn fault(&mut self, t_ms: u64, fault: &FaultRecord) {
        match fault {
            FaultRecord::Healed(healed) => {
                let kind = healed.kind();
                if let Some(open) = self.open_windows.get_mut(kind) {
                    *open -= 1;
                    if *open == 0 {
                        self.open_windows.remove(kind);
                    }
                }
            }
            FaultRecord::HealedAll => self.open_windows.clear(),
            FaultRecord::Struck(struck) if struck.duration_ms() > 0 || struck.kind() == POWER_CUT => {
                *self.open_windows.entry(struck.kind().to_string()).or_default() += 1;
            }
            _ => {}
        }
        self.last_disturbed_ms = Some(t_ms);
    }

    /// Notes that the world is disturbed at `t_ms` if a window is open or a node is down.
    fn touch(&mut self, t_ms: u64) {
        if !self.open_windows.is_empty() || !self.down.is_empty() {
            self.last_disturbed_ms = Some(t_ms);
        }
    }

    fn answered(
        &mut self,
        t_ms: u64,
        request: u64,
        status: Option<u16>,
        code: Option<&str>,
    ) -> Result<(), Violation> {
        let Some((asked_ms, what)) = self.pending.remove(&request) else {
            return violation(
                "operator_answered",
                format!("operator request {request} answered but never asked"),
            );
        };
        if self.last_disturbed_ms.is_some_and(|d| d >= asked_ms) {
            return Ok(());
        }
        let waited_ms = t_ms - asked_ms;
        let fault = match status {
            None => Some("got no answer".to_string()),
            Some(429) => Some(format!("was refused 429 {}", code.unwrap_or("?"))),
            Some(503) if code != Some(RECOVERING_CODE) => {
                Some(format!("was refused 503 {}", code.unwrap_or("?")))
            }
            _ if waited_ms > OPERATOR_ANSWER_BOUND_MS => Some(format!(
                "was answered {} after {waited_ms} ms, past {OPERATOR_ANSWER_BOUND_MS} ms",
                status.unwrap_or_default()
            )),
            _ => None,
        };
        match fault {
            None => Ok(()),
            Some(fault) => violation(
                "operator_answered",
                format!(
                    "the operator's request {request} ({what}), sent at {asked_ms} ms on an \
                     undisturbed node, {fault}"
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use vigil_faults::plan::Fault;

    use super::*;

    fn record(t_ms: u64, event: TraceEvent) -> TraceRecord {
        TraceRecord {
            t_ms,
            node: "vigil-1",
            event,
        }
    }

    fn asked(t_ms: u64, request: u64) -> TraceRecord {
        record(
            t_ms,
            TraceEvent::OperatorAsked {
                request,
                method: "GET".into(),
                path: "/v1/agents".into(),
            },
        )
    }

    fn answered(t_ms: u64, request: u64, status: Option<u16>, code: Option<&str>) -> TraceRecord {
        record(
            t_ms,
            TraceEvent::OperatorAnswered {
                request,
                status,
                code: code.map(str::to_string),
            },
        )
    }

    fn fault(t_ms: u64, fault: FaultRecord) -> TraceRecord {
        record(t_ms, TraceEvent::Fault { fault })
    }

    fn struck(fault: Fault) -> FaultRecord {
        FaultRecord::Struck(fault)
    }

    fn healed(fault: Fault) -> FaultRecord {
        FaultRecord::Healed(fault)
    }

    /// Feeds `records`; the first violation, if any.
    fn judge(records: &[TraceRecord]) -> Result<(), Violation> {
        let mut oracle = OperatorOracle::default();
        records.iter().try_for_each(|r| oracle.observe(r))
    }

    fn broken(records: &[TraceRecord]) -> String {
        let violation = judge(records).expect_err("a violation");
        assert_eq!(violation.invariant, "operator_answered");
        violation.detail
    }

    #[test]
    fn answers_within_the_bound_keep_the_rule() {
        let bound = OPERATOR_ANSWER_BOUND_MS;
        judge(&[
            asked(1_000, 1),
            asked(1_001, 2),
            answered(1_000 + bound, 1, Some(200), None),
            // A refusal of the operator's own mistake is an answer.
            answered(1_002, 2, Some(404), Some("not_found")),
            asked(5_000, 3),
            answered(5_010, 3, Some(503), Some(RECOVERING_CODE)),
        ])
        .expect("kept");
    }

    #[test]
    fn a_late_answer_past_the_bound_breaks_it() {
        let detail = broken(&[
            asked(1_000, 1),
            answered(1_001 + OPERATOR_ANSWER_BOUND_MS, 1, Some(200), None),
        ]);
        assert!(detail.contains("request 1 (GET /v1/agents)"), "{detail}");
        assert!(detail.contains("past"), "{detail}");
    }

    #[test]
    fn no_answer_a_429_or_a_shared_503_breaks_it() {
        assert!(broken(&[asked(10, 1), answered(20, 1, None, None)]).contains("no answer"));
        let detail = broken(&[asked(10, 1), answered(20, 1, Some(429), Some("rate_limited"))]);
        assert!(detail.contains("429 rate_limited"), "{detail}");
        let code = "too_many_streams_for_tenant";
        let detail = broken(&[asked(10, 1), answered(20, 1, Some(503), Some(code))]);
        assert!(detail.contains(code), "{detail}");
    }

    #[test]
    fn a_fault_between_request_and_answer_excuses_it() {
        // A partition opened after the request was sent, healed before the answer.
        judge(&[
            asked(1_000, 1),
            fault(1_500, struck(Fault::Partition { duration_ms: 60_000 })),
            fault(61_500, healed(Fault::Partition { duration_ms: 60_000 })),
            answered(61_600, 1, None, None),
        ])
        .expect("excused");
        // A crash, then the request meets the node while it is down and recovering.
        judge(&[
            record(100, TraceEvent::Crashed {
                during_write: false,
                pending_ops: 0,
                kept_ops: 0,
                torn_ops: 0,
                lost_bytes: 0,
            }),
            asked(5_000, 1),
            answered(15_000, 1, None, None),
        ])
        .expect("excused while down");
    }

    #[test]
    fn an_armed_power_cut_excuses_until_the_crash() {
        let crashed = |t_ms| {
            record(t_ms, TraceEvent::Crashed {
                during_write: true,
                pending_ops: 1,
                kept_ops: 0,
                torn_ops: 0,
                lost_bytes: 0,
            })
        };
        let recovered = |t_ms| {
            record(t_ms, TraceEvent::Recovered {
                head_seq: 0,
                digests: Vec::new(),
                unreported: Vec::new(),
            })
        };
        judge(&[
            fault(100, struck(Fault::PowerCut { after_ops: 3, downtime_ms: 1_000 })),
            asked(5_000, 1),
            answered(5_001, 1, Some(503), Some("storage_unavailable")),
            crashed(5_010),
        ])
        .expect("excused: the cut was armed");
        let detail = broken(&[
            fault(100, struck(Fault::PowerCut { after_ops: 3, downtime_ms: 1_000 })),
            crashed(5_010),
            recovered(6_000),
            asked(9_000, 1),
            answered(9_001, 1, Some(503), Some("storage_unavailable")),
        ]);
        assert!(detail.contains("storage_unavailable"), "{detail}");
    }

    #[test]
    fn overlapping_windows_of_one_kind_excuse_until_the_last_heals() {
        judge(&[
            fault(100, struck(Fault::PacketLoss { loss_permille: 495, duration_ms: 125_000 })),
            fault(200, struck(Fault::PacketLoss { loss_permille: 94, duration_ms: 5_000 })),
            fault(5_200, healed(Fault::PacketLoss { loss_permille: 94, duration_ms: 5_000 })),
            asked(50_000, 1),
            answered(50_003, 1, None, None),
        ])
        .expect("the longer window is still open");
        let detail = broken(&[
            fault(100, struck(Fault::PacketLoss { loss_permille: 495, duration_ms: 125_000 })),
            fault(200, struck(Fault::PacketLoss { loss_permille: 94, duration_ms: 5_000 })),
            fault(5_200, healed(Fault::PacketLoss { loss_permille: 94, duration_ms: 5_000 })),
            fault(125_100, healed(Fault::PacketLoss { loss_permille: 495, duration_ms: 125_000 })),
            asked(130_000, 1),
            answered(130_003, 1, None, None),
        ]);
        assert!(detail.contains("no answer"), "{detail}");
    }

    #[test]
    fn a_healed_fault_before_the_request_excuses_nothing() {
        let detail = broken(&[
            fault(100, struck(Fault::NetDelay { latency_ms: 3_000, duration_ms: 60_000 })),
            fault(60_100, healed(Fault::NetDelay { latency_ms: 3_000, duration_ms: 60_000 })),
            asked(60_200, 1),
            answered(60_300 + OPERATOR_ANSWER_BOUND_MS, 1, Some(200), None),
        ]);
        assert!(detail.contains("sent at 60200 ms"), "{detail}");
    }
}

//! `phi_offline_as_documented` (26): a `phi_accrual` agent is marked offline at the silence the
//! documented detector names (docs/api.md, "The `phi_accrual` detector, exactly"), not later
//! than the stale sweep's period after it and not before it.
//!
//! The detector is restated here from the document, never taken from the runtime: its gaps are
//! rebuilt from the workload's answered pulses. A pulse reached the node somewhere between its
//! sending and its 2xx, so each arrival is taken as the middle of that span and the judgement
//! allows for the error this leaves (see [`estimate_error_ms`]). A judgement is made only when
//! every arrival that decides it is known: no pulse whose answer was lost (it may or may not have
//! reached the node), no restart the first gap counts from, no answer slower than
//! [`ARRIVAL_SPREAD_MAX_MS`] among the arrivals the window holds, and no passive pulses (run
//! activity the trace does not time).

use std::collections::{BTreeMap, VecDeque};

use vigil::engine::event::{Event, EventKind};
use vigil::engine::liveness::{Detector, LivenessPolicy};

use super::{violation, Violation};

const INVARIANT: &str = "phi_offline_as_documented";

/// Pulse gaps the detector remembers (docs/api.md: the latest 32).
const WINDOW_GAPS: usize = 32;
/// Gaps needed before phi is used (docs/api.md: `PHI_SAMPLES_MIN`, 3).
const SAMPLES_MIN: usize = 3;
/// The standard deviation is raised to at least the interval divided by this (docs/api.md: a
/// tenth of `pulse_interval_ms`).
const SD_FLOOR_DIVISOR: f64 = 10.0;
/// The logistic approximation of the normal tail, `1 / (1 + e^(y (A + B y²)))` (docs/api.md).
const LOGISTIC_A: f64 = 1.5976;
const LOGISTIC_B: f64 = 0.070566;
/// The stale sweep looks at a suspected agent this often (docs/api.md: `LIVENESS_SWEEP_MS`,
/// every second).
const SWEEP_PERIOD_MS: u64 = super::documented::LIVENESS_SWEEP_MS;
/// From the sweep's decision to the `committed` record: the node's scheduler, the writer queue
/// and the disk (simulated latencies are milliseconds; this is the margin the other liveness
/// checks give a commit, `PULSE_SLACK_MS`).
const COMMIT_SLACK_MS: u64 = 1_000;
/// A pulse answered more slowly than this after its sending (a delayed or lossy network, a slow
/// commit ahead of it) reached the node at too uncertain an instant: while it is among the
/// arrivals the window holds, the agent is not judged. Each arrival's error is half its span,
/// and the judgement's error a few times that (`estimate_error_ms`), so this keeps the
/// tolerance to a few hundred ms, well below the seconds the detector moves by.
const ARRIVAL_SPREAD_MAX_MS: u64 = 100;

/// What the oracle keeps of an agent's liveness policy.
#[derive(Debug, Clone, Copy)]
struct Policy {
    phi: bool,
    passive: bool,
    interval_ms: u64,
    fixed_ms: u64,
    phi_threshold: f64,
}

impl Policy {
    fn of(liveness: &LivenessPolicy) -> Self {
        Policy {
            phi: liveness.detector == Detector::PhiAccrual,
            passive: liveness.passive_pulses,
            interval_ms: liveness.pulse_interval_ms,
            fixed_ms: super::documented::fixed_threshold_ms(liveness),
            phi_threshold: f64::from(liveness.phi_threshold),
        }
    }
}

/// The node's pulse track of one agent as far as the trace shows it.
#[derive(Debug, Clone, Default)]
struct Track {
    policy: Option<Policy>,
    /// No arrival of this track is unknown to the oracle: it started with the agent's first
    /// pulse since it was last offline (or ever), and every pulse since was answered promptly.
    clean: bool,
    /// Promptly answered pulses since the track started or its last unknown arrival, as (sent,
    /// answered) virtual ms, oldest first; at most one more than the window's gaps.
    arrivals: VecDeque<(u64, u64)>,
}

impl Track {
    fn restart(&mut self, clean: bool) {
        self.clean = clean;
        self.arrivals.clear();
    }

    /// An arrival the oracle cannot place: what follows must fill the window on its own.
    fn unknown_arrival(&mut self) {
        self.restart(false);
    }

    fn answered(&mut self, sent_ms: u64, answered_ms: u64) {
        if answered_ms.saturating_sub(sent_ms) > ARRIVAL_SPREAD_MAX_MS {
            return self.unknown_arrival();
        }
        self.arrivals.push_back((sent_ms, answered_ms));
        if self.arrivals.len() > WINDOW_GAPS + 1 {
            self.arrivals.pop_front();
        }
    }

    /// The arrivals that decide the node's window, if all of them are known.
    fn known_window(&self) -> Option<&VecDeque<(u64, u64)>> {
        let full = self.arrivals.len() > WINDOW_GAPS;
        (!self.arrivals.is_empty() && (self.clean || full)).then_some(&self.arrivals)
    }
}

/// What the oracle has seen of phi-accrual agents' pulses.
#[derive(Debug, Default)]
pub struct PhiOracle {
    tracks: BTreeMap<u64, Track>,
    /// Offline marks judged, and of them those phi decided (before the fixed threshold).
    judged: u64,
    judged_by_phi: u64,
}

impl PhiOracle {
    /// Checks one durable event, committed at virtual `t_ms`.
    pub fn committed(&mut self, t_ms: u64, event: &Event) -> Result<(), Violation> {
        match &event.kind {
            EventKind::AgentCreated { agent, spec, .. } => {
                let track = self.tracks.entry(agent.0).or_default();
                track.policy = Some(Policy::of(&spec.liveness));
                track.restart(true);
            }
            EventKind::AgentUpdated { agent, spec, .. } => {
                // The gaps stay; the new policy judges them from now on.
                self.tracks.entry(agent.0).or_default().policy = Some(Policy::of(&spec.liveness));
            }
            EventKind::AgentOffline { agent, .. } => {
                let track = self.tracks.entry(agent.0).or_default();
                let judged = judge(agent.0, track, t_ms);
                // The node forgot the agent: its next pulse starts a track without a gap.
                track.restart(true);
                if let Some(by_phi) = judged? {
                    self.judged += 1;
                    self.judged_by_phi += u64::from(by_phi);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The workload got a 2xx at `t_ms` for a pulse of `agent` sent at `sent_ms`.
    pub fn answered_pulse(&mut self, t_ms: u64, agent: u64, sent_ms: u64) {
        self.tracks
            .entry(agent)
            .or_default()
            .answered(sent_ms, t_ms);
    }

    /// A pulse of `agent` (or of every agent: `None`, a batch) got no 2xx: it may have reached
    /// the node or not.
    pub fn unanswered_pulse(&mut self, agent: Option<u64>) {
        match agent {
            Some(agent) => self.tracks.entry(agent).or_default().unknown_arrival(),
            None => self.tracks.values_mut().for_each(Track::unknown_arrival),
        }
    }

    /// The node process died: every track is gone. Those of agents that may be online in the
    /// recovered log start again from the restart, at an instant the trace does not give; the
    /// oracle cannot tell them apart (a power cut's unreported tail may hold their transitions),
    /// so no track is judged until its window is all pulses after the restart.
    pub fn restarted(&mut self) {
        self.tracks.values_mut().for_each(Track::unknown_arrival);
    }

    /// (offline marks judged, of them decided by phi before the fixed threshold).
    pub fn judged(&self) -> (u64, u64) {
        (self.judged, self.judged_by_phi)
    }
}

/// Judges an `agent_offline` of `agent` committed at `t_ms` against its track: `Ok(None)` when
/// it cannot be judged, `Ok(Some(by_phi))` when it was on time.
fn judge(agent: u64, track: &Track, t_ms: u64) -> Result<Option<bool>, Violation> {
    let Some(policy) = track.policy.filter(|p| p.phi && !p.passive) else {
        return Ok(None);
    };
    let Some(arrivals) = track.known_window() else {
        return Ok(None);
    };
    let middles: Vec<f64> = arrivals.iter().map(|(s, a)| middle(*s, *a)).collect();
    let gaps: Vec<f64> = middles.windows(2).map(|w| w[1] - w[0]).collect();
    let silence_ms = offline_silence_ms(&policy, &gaps);
    let due_ms = middles.last().expect("a known window is not empty") + silence_ms;
    let error_ms = estimate_error_ms(&policy, arrivals, gaps.len());
    let late_ms = (SWEEP_PERIOD_MS + COMMIT_SLACK_MS) as f64;
    let t = t_ms as f64;
    let by_phi = gaps.len() >= SAMPLES_MIN && silence_ms < policy.fixed_ms as f64;
    let what = || {
        format!(
            "agent {agent} was marked offline at {t_ms} ms; after {} gaps {:?} ms its detector says offline at {silence_ms:.0} ms of silence, {due_ms:.0} ms (± {error_ms:.0} ms for the pulses' arrival)",
            gaps.len(),
            gaps.iter().map(|g| g.round() as i64).collect::<Vec<_>>(),
        )
    };
    if t < due_ms - error_ms {
        return violation(INVARIANT, format!("{}: too early", what())).map(|()| None);
    }
    if t > due_ms + error_ms + late_ms {
        return violation(
            INVARIANT,
            format!(
                "{}: later than the sweep period {SWEEP_PERIOD_MS} ms plus {COMMIT_SLACK_MS} ms for the commit",
                what()
            ),
        )
        .map(|()| None);
    }
    Ok(Some(by_phi))
}

/// The middle of a pulse's (sent, answered) span: its arrival within half the span.
fn middle(sent_ms: u64, answered_ms: u64) -> f64 {
    (sent_ms as f64 + answered_ms as f64) / 2.0
}

/// The least silence at which the documented detector marks the agent offline, after `gaps`
/// (the latest [`WINDOW_GAPS`]): past the fixed threshold whatever phi says; with enough gaps,
/// past one interval once phi reaches the threshold.
fn offline_silence_ms(policy: &Policy, gaps: &[f64]) -> f64 {
    let fixed = policy.fixed_ms as f64;
    let gaps = &gaps[gaps.len().saturating_sub(WINDOW_GAPS)..];
    if gaps.len() < SAMPLES_MIN {
        return fixed;
    }
    let (mean, sd) = mean_and_sd(gaps, policy.interval_ms);
    let crossing = mean + policy.interval_ms as f64 + y_at_threshold(policy.phi_threshold) * sd;
    crossing.clamp(policy.interval_ms as f64, fixed)
}

/// The gaps' average and their standard deviation (over the n gaps), the latter at least a
/// tenth of the interval.
fn mean_and_sd(gaps: &[f64], interval_ms: u64) -> (f64, f64) {
    let n = gaps.len() as f64;
    let mean = gaps.iter().sum::<f64>() / n;
    let variance = gaps.iter().map(|g| (g - mean) * (g - mean)).sum::<f64>() / n;
    (
        mean,
        variance.sqrt().max(interval_ms as f64 / SD_FLOOR_DIVISOR),
    )
}

/// phi at `y` standard deviations past the expected gap: `-log10(p_later)` with `p_later` the
/// logistic approximation of the normal tail.
fn phi_at(y: f64) -> f64 {
    let p_later = 1.0 / (1.0 + (y * (LOGISTIC_A + LOGISTIC_B * y * y)).exp());
    -p_later.log10()
}

/// The `y` at which phi reaches `threshold` (phi grows with `y`): by bisection, to far below a
/// millisecond of silence.
fn y_at_threshold(threshold: f64) -> f64 {
    let (mut low, mut high) = (-10.0_f64, 50.0_f64);
    for _ in 0..60 {
        let mid = (low + high) / 2.0;
        if phi_at(mid) < threshold {
            low = mid;
        } else {
            high = mid;
        }
    }
    high
}

/// How far the restated offline instant may be from the node's, from what the oracle cannot know
/// exactly: each arrival lies within half its (sent, answered) span of its middle, at most `u`.
/// The last arrival moves the instant by up to its own error; each gap is off by at most `u`, so
/// the mean is too and the standard deviation (a root mean square of centred gaps, and its floor
/// is a max) as well, which the instant counts `y` times. Clamping to the floor or the fixed
/// threshold only shrinks a difference. Plus a millisecond for the node's whole-ms clock.
fn estimate_error_ms(policy: &Policy, arrivals: &VecDeque<(u64, u64)>, gaps: usize) -> f64 {
    let spread = |(s, a): &(u64, u64)| a.saturating_sub(*s) as f64 / 2.0;
    let u = arrivals.iter().map(spread).fold(0.0, f64::max);
    let last = arrivals.back().map_or(0.0, spread);
    let gaps_error = if gaps >= SAMPLES_MIN {
        2.0 * u * (1.0 + y_at_threshold(policy.phi_threshold).abs())
    } else {
        0.0
    };
    last + gaps_error + 1.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_events::event;
    use vigil::engine::agent::{AgentId, AgentSpec};
    use vigil::engine::tenant::TokenHash;

    /// An oracle that saw agent 1 created with the default phi-accrual policy (10 s interval, 3
    /// misses: fixed 30 s, phi 8).
    fn phi_oracle() -> PhiOracle {
        let mut spec = AgentSpec::with_interval("a", None);
        spec.liveness = LivenessPolicy {
            detector: Detector::PhiAccrual,
            ..LivenessPolicy::default()
        };
        let mut oracle = PhiOracle::default();
        let created = EventKind::AgentCreated {
            agent: AgentId(1),
            name: "a".into(),
            spec: Box::new(spec),
            token_hash: TokenHash::of("t"),
            first_fire_at_ms: None,
        };
        oracle.committed(0, &event(0, created)).unwrap();
        oracle
    }

    fn offline(oracle: &mut PhiOracle, t_ms: u64) -> Result<(), Violation> {
        let kind = EventKind::AgentOffline {
            agent: AgentId(1),
            silent_ms: 0,
            report: Default::default(),
        };
        oracle.committed(t_ms, &event(t_ms, kind))
    }

    /// Pulses 8 to 12 s apart (sd ≈ 1.4 s: phi 8 after about 27.4 s), each answered 10 ms after
    /// it was sent; returns the last sending.
    fn pulse_regularly(oracle: &mut PhiOracle, count: u64) -> u64 {
        let mut sent = 10_000;
        for i in 0..count {
            oracle.answered_pulse(sent + 10, 1, sent);
            sent += [8_000, 12_000, 10_000, 9_000, 11_000][i as usize % 5];
        }
        sent - [8_000, 12_000, 10_000, 9_000, 11_000][(count - 1) as usize % 5]
    }

    #[test]
    fn the_restated_detector_crosses_where_the_document_says() {
        // Its worked example: gaps 8 to 12 s (sd ≈ 1.15 s) reach phi 8 after about 26 s.
        let policy = Policy::of(&LivenessPolicy {
            detector: Detector::PhiAccrual,
            ..LivenessPolicy::default()
        });
        let uniform: Vec<f64> = (0..=40).map(|i| 8_000.0 + 100.0 * f64::from(i)).collect();
        let at = offline_silence_ms(&policy, &uniform);
        assert!((25_500.0..26_500.0).contains(&at), "{at}");
        // Perfectly regular: the spread's floor (1 s) decides; fewer than 3 gaps: the fixed 30 s.
        let regular = [10_000.0; 10];
        assert!((25_000.0..25_300.0).contains(&offline_silence_ms(&policy, &regular)));
        assert_eq!(offline_silence_ms(&policy, &[10_000.0, 10_000.0]), 30_000.0);
        // Irregular enough: past the fixed threshold, which stays the ceiling.
        let jittery = [2_000.0, 18_000.0, 3_000.0, 17_000.0, 10_000.0];
        assert_eq!(offline_silence_ms(&policy, &jittery), 30_000.0);
    }

    #[test]
    fn an_offline_mark_at_the_fixed_threshold_after_phi_crossed_is_caught() {
        let mut oracle = phi_oracle();
        let last = pulse_regularly(&mut oracle, 20);
        // phi crossed after about 27.4 s of silence; the mark came at the fixed 30 s.
        let caught = offline(&mut oracle, last + 5 + 30_001).unwrap_err();
        assert_eq!(caught.invariant, INVARIANT);
        assert!(caught.detail.contains("later than"), "{}", caught.detail);
    }

    #[test]
    fn an_offline_mark_long_before_phi_crossed_is_caught() {
        let mut oracle = phi_oracle();
        let last = pulse_regularly(&mut oracle, 20);
        let caught = offline(&mut oracle, last + 5 + 10_001).unwrap_err();
        assert_eq!(caught.invariant, INVARIANT);
        assert!(caught.detail.contains("too early"), "{}", caught.detail);
    }

    #[test]
    fn an_offline_mark_at_the_crossing_is_silent() {
        let mut oracle = phi_oracle();
        let last = pulse_regularly(&mut oracle, 20);
        let middles: Vec<f64> = oracle.tracks[&1]
            .arrivals
            .iter()
            .map(|(s, a)| middle(*s, *a))
            .collect();
        let gaps: Vec<f64> = middles.windows(2).map(|w| w[1] - w[0]).collect();
        let crossing = offline_silence_ms(&oracle.tracks[&1].policy.unwrap(), &gaps);
        assert!(crossing < 28_000.0, "{crossing}");
        // Found by the next sweep, committed a little later.
        assert!(offline(&mut oracle, last + 5 + crossing as u64 + 900).is_ok());
        assert_eq!(oracle.judged(), (1, 1));
    }

    #[test]
    fn an_agent_whose_arrivals_are_not_all_known_is_not_judged() {
        // A pulse whose answer was lost may have reached the node.
        let mut oracle = phi_oracle();
        let last = pulse_regularly(&mut oracle, 20);
        oracle.unanswered_pulse(Some(1));
        assert!(offline(&mut oracle, last + 5 + 30_001).is_ok());
        // After a restart the first gap counts from an instant the trace does not give.
        let mut oracle = phi_oracle();
        oracle.restarted();
        let last = pulse_regularly(&mut oracle, 20);
        assert!(offline(&mut oracle, last + 5 + 30_001).is_ok());
        // ... until the window is all pulses after it.
        let mut oracle = phi_oracle();
        oracle.restarted();
        let last = pulse_regularly(&mut oracle, 40);
        assert!(offline(&mut oracle, last + 5 + 30_001).is_err());
        assert_eq!(oracle.judged(), (0, 0));
    }

    #[test]
    fn with_too_few_gaps_the_fixed_threshold_decides() {
        let mut oracle = phi_oracle();
        let last = pulse_regularly(&mut oracle, 3);
        assert!(offline(&mut oracle, last + 5 + 26_000).is_err());
        let mut oracle = phi_oracle();
        let last = pulse_regularly(&mut oracle, 3);
        assert!(offline(&mut oracle, last + 5 + 30_500).is_ok());
        assert_eq!(oracle.judged(), (1, 0));
    }
}

//! Liveness: pulses and stale detection, with no LLM involved (docs/invariants.md, invariant 10).
//!
//! An agent (or the host it runs on) sends pulses. Pulses are frequent and carry no fact worth
//! keeping, so they are never written to the log: the [`PulseBook`] keeps the last arrival of
//! each agent in memory, on the node's *monotonic* clock (a wall-clock jump must not make a whole
//! fleet look silent). Only the transitions are durable: `agent_offline` when the stale sweep
//! finds an agent silent past its threshold, `agent_online` when a pulse comes from an agent
//! that is not online.
//!
//! Monitoring starts with an agent's first pulse (before it the agent is `unknown`: an agent that
//! never pulses is not watched). A restarted node has forgotten every arrival, so each agent that
//! was online gets a full threshold from the restart ([`PulseBook::grant`]) before it can be
//! marked offline.
//!
//! Two detectors:
//! - `fixed`: offline once the silence exceeds `pulse_interval_ms * offline_after_misses`;
//! - `phi_accrual` (Hayashibara et al.): offline once the suspicion level phi reaches
//!   `phi_threshold`, computed from the agent's recent pulse gaps. It only ever detects *earlier*
//!   than the fixed threshold, which stays its ceiling, and never before one whole interval of
//!   silence, its floor. So both detectors obey the same bounds (docs/invariants.md, 10).

use serde::{Deserialize, Serialize};

use super::agent::{AgentId, FieldError};
use super::dense::DenseById;
use super::pulse_report::PulseReport;

/// How often an agent pulses when its policy does not say.
pub const PULSE_INTERVAL_MS_DEFAULT: u64 = 10_000;
/// Shortest pulse interval accepted.
pub const PULSE_INTERVAL_MS_MIN: u64 = 1_000;
/// Longest pulse interval accepted: an hour.
pub const PULSE_INTERVAL_MS_MAX: u64 = 60 * 60 * 1_000;
/// Missed pulses after which an agent is offline, when its policy does not say.
pub const OFFLINE_AFTER_MISSES_DEFAULT: u32 = 3;
/// Most missed pulses a policy may tolerate.
pub const OFFLINE_AFTER_MISSES_MAX: u32 = 100;
/// The phi-accrual detector's threshold when the policy does not say (phi 8: about one false
/// suspicion in 10^8 under the observed gaps).
pub const PHI_THRESHOLD_DEFAULT: u32 = 8;
/// Range of `phi_threshold`.
pub const PHI_THRESHOLD_MIN: u32 = 1;
pub const PHI_THRESHOLD_MAX: u32 = 16;
/// The stale sweep looks at each online agent when its silence passes its floor, and then this
/// often while it is suspected; so a silent agent is marked offline within its threshold plus
/// this (invariant 10).
pub const LIVENESS_SWEEP_MS: u64 = 1_000;
/// Pulse gaps the phi-accrual detector remembers per agent.
pub const PHI_WINDOW: usize = 32;
/// Gaps needed before phi is trusted; until then the fixed threshold alone decides.
pub const PHI_SAMPLES_MIN: usize = 3;
/// Most agents one batch pulse may name.
pub const PULSE_BATCH_MAX: usize = 1_000;

/// How an agent's silence is judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LivenessPolicy {
    /// How often the agent is expected to pulse.
    #[serde(default = "pulse_interval_default")]
    pub pulse_interval_ms: u64,
    /// Pulses missed in a row after which the agent is offline (the fixed threshold is
    /// `pulse_interval_ms * offline_after_misses`).
    #[serde(default = "offline_after_misses_default")]
    pub offline_after_misses: u32,
    #[serde(default)]
    pub detector: Detector,
    /// Used by the `phi_accrual` detector only.
    #[serde(default = "phi_threshold_default")]
    pub phi_threshold: u32,
    /// Whether the activity of the agent's runs (their start, every transcript line: model
    /// calls, tool calls, output, and their end) counts as a pulse while the agent is watched,
    /// so that an agent busy in a long run is not judged silent. Off by default: most adapters
    /// run inside the node, and their activity shows that the node is alive, not the agent's
    /// host. Such a pulse never brings an agent online (only a real pulse does).
    #[serde(default, skip_serializing_if = "is_false")]
    pub passive_pulses: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Which detector judges silence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Detector {
    #[default]
    Fixed,
    PhiAccrual,
}

fn pulse_interval_default() -> u64 {
    PULSE_INTERVAL_MS_DEFAULT
}

fn offline_after_misses_default() -> u32 {
    OFFLINE_AFTER_MISSES_DEFAULT
}

fn phi_threshold_default() -> u32 {
    PHI_THRESHOLD_DEFAULT
}

impl Default for LivenessPolicy {
    fn default() -> Self {
        LivenessPolicy {
            pulse_interval_ms: PULSE_INTERVAL_MS_DEFAULT,
            offline_after_misses: OFFLINE_AFTER_MISSES_DEFAULT,
            detector: Detector::Fixed,
            phi_threshold: PHI_THRESHOLD_DEFAULT,
            passive_pulses: false,
        }
    }
}

impl LivenessPolicy {
    /// The fixed threshold: silence longer than this is offline under either detector.
    pub fn threshold_ms(&self) -> u64 {
        self.pulse_interval_ms
            .saturating_mul(u64::from(self.offline_after_misses))
    }

    pub fn validate(&self) -> Result<(), FieldError> {
        if !(PULSE_INTERVAL_MS_MIN..=PULSE_INTERVAL_MS_MAX).contains(&self.pulse_interval_ms) {
            return Err(FieldError::new(
                "liveness.pulse_interval_ms",
                format!(
                    "liveness.pulse_interval_ms must be between {PULSE_INTERVAL_MS_MIN} and {PULSE_INTERVAL_MS_MAX} (got {})",
                    self.pulse_interval_ms
                ),
            ));
        }
        if !(1..=OFFLINE_AFTER_MISSES_MAX).contains(&self.offline_after_misses) {
            return Err(FieldError::new(
                "liveness.offline_after_misses",
                format!(
                    "liveness.offline_after_misses must be between 1 and {OFFLINE_AFTER_MISSES_MAX} (got {})",
                    self.offline_after_misses
                ),
            ));
        }
        if !(PHI_THRESHOLD_MIN..=PHI_THRESHOLD_MAX).contains(&self.phi_threshold) {
            return Err(FieldError::new(
                "liveness.phi_threshold",
                format!(
                    "liveness.phi_threshold must be between {PHI_THRESHOLD_MIN} and {PHI_THRESHOLD_MAX} (got {})",
                    self.phi_threshold
                ),
            ));
        }
        Ok(())
    }

    /// The silence below which this policy never judges an agent offline: the fixed threshold,
    /// or for phi-accrual one interval.
    pub fn floor_ms(&self) -> u64 {
        match self.detector {
            Detector::Fixed => self.threshold_ms(),
            Detector::PhiAccrual => self.pulse_interval_ms,
        }
    }

    /// Whether `silent_ms` of silence, after pulses that came `gaps` apart, makes the agent
    /// offline.
    pub fn is_stale(&self, silent_ms: u64, gaps: &Gaps) -> bool {
        if silent_ms > self.threshold_ms() {
            return true;
        }
        match self.detector {
            Detector::Fixed => false,
            Detector::PhiAccrual => {
                silent_ms > self.pulse_interval_ms
                    && gaps.len() >= PHI_SAMPLES_MIN
                    && phi(silent_ms, gaps, self.pulse_interval_ms) >= f64::from(self.phi_threshold)
            }
        }
    }
}

/// The suspicion level after `silent_ms` of silence: `-log10` of the probability that a pulse
/// still comes later than that, with gaps taken as normally distributed around their mean plus
/// one interval of acceptable pause (so a single lost pulse is not suspicious) and a standard
/// deviation of at least a tenth of the interval (so a perfectly regular sender is not judged
/// on a zero spread). Uses the logistic approximation of the normal tail.
pub fn phi(silent_ms: u64, gaps: &Gaps, pulse_interval_ms: u64) -> f64 {
    let n = gaps.len().max(1) as f64;
    let mean = gaps.iter().map(|g| g as f64).sum::<f64>() / n;
    let variance = gaps.iter().map(|g| (g as f64 - mean).powi(2)).sum::<f64>() / n;
    let std_dev = variance.sqrt().max(pulse_interval_ms as f64 / 10.0);
    let y = (silent_ms as f64 - (mean + pulse_interval_ms as f64)) / std_dev;
    let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
    let p_later = if y > 0.0 {
        e / (1.0 + e)
    } else {
        1.0 - 1.0 / (1.0 + e)
    };
    -p_later.max(f64::MIN_POSITIVE).log10()
}

/// An agent's liveness as the log knows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LivenessStatus {
    /// Never pulsed: not watched.
    #[default]
    Unknown,
    Online,
    Offline,
}

impl LivenessStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            LivenessStatus::Unknown => "unknown",
            LivenessStatus::Online => "online",
            LivenessStatus::Offline => "offline",
        }
    }
}

/// The durable part of an agent's liveness.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Liveness {
    pub status: LivenessStatus,
    /// Wall time of the last transition.
    pub since_ms: Option<u64>,
}

/// The gaps between an agent's latest pulses, oldest first, the newest [`PHI_WINDOW`] kept.
///
/// A ring inline in its track, not a `VecDeque`: a deque is an allocation of its own per agent
/// (grown to 64 slots, 512 bytes, by the 33rd gap), and a batch's pulses then missed the cache
/// on each agent's deque after its track (ADR 0027); inline, a batch of neighbouring ids walks
/// one vector.
///
/// Why 32-bit gaps, and the ring last: a track is then 144 bytes instead of 272 (a million
/// watched agents hold 128 MB less), and a pulse finds its track's instant and the ring's
/// position in the same cache line as the ring's first gaps. A gap is at most [`GAP_MS_MAX`]
/// (49.7 days): a watched agent silent for a tenth of that is offline long before (the longest
/// fixed threshold is 100 intervals of an hour), and its track forgotten.
#[derive(Debug, Clone, Default)]
#[repr(C)]
pub struct Gaps {
    /// Where the oldest gap is.
    start: u8,
    len: u8,
    ring: [u32; PHI_WINDOW],
}

/// The longest gap a track holds, in milliseconds; a longer one is held as this.
pub const GAP_MS_MAX: u64 = u32::MAX as u64;

impl Gaps {
    /// Adds the newest gap; past [`PHI_WINDOW`] gaps the oldest goes.
    pub fn push(&mut self, gap: u64) {
        let end = (usize::from(self.start) + usize::from(self.len)) % PHI_WINDOW;
        self.ring[end] = u32::try_from(gap).unwrap_or(u32::MAX);
        if usize::from(self.len) < PHI_WINDOW {
            self.len += 1;
        } else {
            self.start = ((usize::from(self.start) + 1) % PHI_WINDOW) as u8;
        }
    }

    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The gaps, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len()).map(|i| u64::from(self.ring[(usize::from(self.start) + i) % PHI_WINDOW]))
    }
}

/// Equal when they hold the same gaps in the same order, wherever the ring starts.
impl PartialEq for Gaps {
    fn eq(&self, other: &Gaps) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Gaps {}

impl FromIterator<u64> for Gaps {
    /// The gaps of `gaps` pushed in order (the newest [`PHI_WINDOW`] kept).
    fn from_iter<I: IntoIterator<Item = u64>>(gaps: I) -> Gaps {
        let mut ring = Gaps::default();
        gaps.into_iter().for_each(|gap| ring.push(gap));
        ring
    }
}

/// One agent's recent pulses, on the monotonic clock. In this order (`repr(C)`): the instant,
/// then the gaps' position, then their ring (see [`Gaps`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[repr(C)]
struct Track {
    last_ms: u64,
    /// Gaps between consecutive pulses, newest last, at most [`PHI_WINDOW`].
    gaps: Gaps,
}

/// The latest pulse an agent sent, as its API answer and the agent view show it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LastPulse {
    /// The node's wall clock when it came.
    pub at_ms: u64,
    /// What the agent's pulses said, latest part by part.
    pub report: PulseReport,
}

/// The last pulse of every watched agent: memory only, rebuilt empty on restart.
///
/// Both tables are dense by agent id (ADR 0027): a host's batch of a thousand agents reads and
/// writes them in id order, one load each, where B-trees walked several nodes per agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PulseBook {
    tracks: DenseById<Track>,
    /// The latest pulse of every agent that pulsed since the node started, kept while it is
    /// offline too (an agent that said `shutting_down` before it went silent still says so).
    last: DenseById<LastPulse>,
}

impl PulseBook {
    pub fn new() -> Self {
        Self::default()
    }

    /// A pulse from `agent` arrived at monotonic `mono_ms`.
    pub fn pulse(&mut self, agent: AgentId, mono_ms: u64) {
        match self.tracks.get_mut(agent) {
            Some(track) => {
                let gap = mono_ms.saturating_sub(track.last_ms);
                track.last_ms = track.last_ms.max(mono_ms);
                track.gaps.push(gap);
            }
            None => {
                self.tracks.insert(
                    agent,
                    Track {
                        last_ms: mono_ms,
                        gaps: Gaps::default(),
                    },
                );
            }
        }
    }

    /// A run of `agent` showed activity at monotonic `mono_ms`: if the agent is watched, its
    /// silence starts again from now. No gap sample is taken (run activity is not the agent's
    /// rhythm, and must not teach the phi-accrual detector a false one), and an agent that is
    /// not watched stays so. Returns whether the agent was watched.
    pub fn touch(&mut self, agent: AgentId, mono_ms: u64) -> bool {
        match self.tracks.get_mut(agent) {
            Some(track) => {
                track.last_ms = track.last_ms.max(mono_ms);
                true
            }
            None => false,
        }
    }

    /// Remembers what `agent`'s pulse at wall instant `at_ms` said (beside [`PulseBook::pulse`],
    /// which judges its timing).
    pub fn report(&mut self, agent: AgentId, at_ms: u64, report: &PulseReport) {
        let last = self.last.get_or_insert_with(agent, LastPulse::default);
        last.at_ms = at_ms;
        last.report.update(report);
    }

    /// The latest pulse of `agent` since the node started.
    pub fn last(&self, agent: AgentId) -> Option<&LastPulse> {
        self.last.get(agent)
    }

    /// Starts watching `agent` as if it had just pulsed, without a gap sample: after a restart
    /// every agent the log says is online gets a full threshold from now.
    pub fn grant(&mut self, agent: AgentId, mono_ms: u64) {
        self.tracks.get_or_insert_with(agent, || Track {
            last_ms: mono_ms,
            gaps: Gaps::default(),
        });
    }

    /// Stops watching `agent` (it went offline or was terminated); its next pulse starts anew.
    pub fn forget(&mut self, agent: AgentId) {
        self.tracks.remove(agent);
    }

    /// How long `agent` has been silent, if it is watched.
    pub fn silent_ms(&self, agent: AgentId, mono_ms: u64) -> Option<u64> {
        self.tracks
            .get(agent)
            .map(|t| mono_ms.saturating_sub(t.last_ms))
    }

    /// When the stale sweep next needs to look at `candidates` (online agents with their
    /// policies), on the monotonic clock: just past the earliest floor, or one sweep period from
    /// now while some phi-accrual agent is between its floor and its threshold. `None` when no
    /// candidate is watched: nothing can go stale until a pulse comes.
    pub fn next_check_ms<'a>(
        &self,
        candidates: impl IntoIterator<Item = (AgentId, &'a LivenessPolicy)>,
        mono_ms: u64,
    ) -> Option<u64> {
        candidates
            .into_iter()
            .filter_map(|(agent, policy)| {
                let track = self.tracks.get(agent)?;
                let floor_at = track
                    .last_ms
                    .saturating_add(policy.floor_ms())
                    .saturating_add(1);
                Some(if floor_at > mono_ms {
                    floor_at
                } else {
                    mono_ms + LIVENESS_SWEEP_MS
                })
            })
            .min()
    }

    /// Of `candidates` (online agents with their policies), those silent past their
    /// detector's judgement, with how long they have been silent. In agent id order.
    pub fn stale<'a>(
        &self,
        candidates: impl IntoIterator<Item = (AgentId, &'a LivenessPolicy)>,
        mono_ms: u64,
    ) -> Vec<(AgentId, u64)> {
        candidates
            .into_iter()
            .filter_map(|(agent, policy)| {
                let track = self.tracks.get(agent)?;
                let silent_ms = mono_ms.saturating_sub(track.last_ms);
                policy
                    .is_stale(silent_ms, &track.gaps)
                    .then_some((agent, silent_ms))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(detector: Detector) -> LivenessPolicy {
        LivenessPolicy {
            detector,
            ..LivenessPolicy::default()
        }
    }

    #[test]
    fn defaults_are_ten_seconds_and_three_misses() {
        let p = LivenessPolicy::default();
        assert_eq!(p.pulse_interval_ms, 10_000);
        assert_eq!(p.offline_after_misses, 3);
        assert_eq!(p.threshold_ms(), 30_000);
        let parsed: LivenessPolicy = serde_json::from_str("{}").unwrap();
        assert_eq!(parsed, p);
        assert!(serde_json::from_str::<LivenessPolicy>(r#"{"misses":3}"#).is_err());
    }

    #[test]
    fn limits_name_their_field() {
        let mut p = LivenessPolicy::default();
        for (ms, ok) in [
            (PULSE_INTERVAL_MS_MIN - 1, false),
            (PULSE_INTERVAL_MS_MIN, true),
            (PULSE_INTERVAL_MS_MAX, true),
            (PULSE_INTERVAL_MS_MAX + 1, false),
        ] {
            p.pulse_interval_ms = ms;
            match p.validate() {
                Ok(()) => assert!(ok, "{ms} accepted"),
                Err(e) => {
                    assert!(!ok, "{ms} refused");
                    assert_eq!(e.field, "liveness.pulse_interval_ms");
                }
            }
        }
        let mut p = LivenessPolicy::default();
        for (misses, ok) in [
            (0, false),
            (1, true),
            (OFFLINE_AFTER_MISSES_MAX, true),
            (OFFLINE_AFTER_MISSES_MAX + 1, false),
        ] {
            p.offline_after_misses = misses;
            assert_eq!(p.validate().is_ok(), ok, "misses {misses}");
        }
        p.offline_after_misses = 3;
        p.phi_threshold = 0;
        assert_eq!(p.validate().unwrap_err().field, "liveness.phi_threshold");
        p.phi_threshold = PHI_THRESHOLD_MAX + 1;
        assert_eq!(p.validate().unwrap_err().field, "liveness.phi_threshold");
    }

    #[test]
    fn fixed_threshold_is_strict() {
        let p = policy(Detector::Fixed);
        let gaps = Gaps::default();
        assert!(
            !p.is_stale(30_000, &gaps),
            "a silence of exactly the threshold is not stale"
        );
        assert!(p.is_stale(30_001, &gaps));
    }

    #[test]
    fn phi_detects_a_regular_sender_earlier_but_never_before_one_interval() {
        let p = policy(Detector::PhiAccrual);
        let regular: Gaps = std::iter::repeat_n(10_000, 20).collect();
        assert!(!p.is_stale(10_000, &regular), "floor: one interval");
        assert!(
            !p.is_stale(20_000, &regular),
            "one lost pulse is acceptable"
        );
        assert!(
            p.is_stale(29_000, &regular),
            "regular pulses: suspected before the fixed 30 s"
        );
        // An irregular sender is judged more leniently, but never past the fixed ceiling.
        let jittery: Gaps = [2_000, 18_000, 3_000, 17_000, 10_000, 2_000, 18_000]
            .into_iter()
            .collect();
        assert!(!p.is_stale(29_000, &jittery));
        assert!(p.is_stale(30_001, &jittery));
        // Too few samples: the fixed threshold alone decides.
        let few: Gaps = [10_000, 10_000].into_iter().collect();
        assert!(!p.is_stale(29_000, &few));
    }

    #[test]
    fn phi_grows_with_silence() {
        let gaps: Gaps = [9_000, 11_000, 10_000, 10_500].into_iter().collect();
        let mut last = -1.0;
        for silent in (0..60_000).step_by(1_000) {
            let v = phi(silent, &gaps, 10_000);
            assert!(v >= last, "phi fell from {last} to {v} at {silent} ms");
            last = v;
        }
        assert!(phi(5_000, &gaps, 10_000) < 0.1);
    }

    #[test]
    fn the_book_measures_silence_on_the_monotonic_clock() {
        let mut book = PulseBook::new();
        let a = AgentId(1);
        let b = AgentId(2);
        let p = LivenessPolicy::default();
        book.pulse(a, 1_000);
        book.grant(b, 5_000);
        assert_eq!(book.silent_ms(a, 11_000), Some(10_000));
        assert_eq!(book.stale([(a, &p), (b, &p)], 31_000), vec![]);
        assert_eq!(book.stale([(a, &p), (b, &p)], 31_001), vec![(a, 30_001)]);
        assert_eq!(
            book.stale([(a, &p), (b, &p)], 35_001),
            vec![(a, 34_001), (b, 30_001)]
        );
        book.pulse(a, 35_001);
        assert_eq!(book.stale([(a, &p)], 36_000), vec![]);
        // The next look is just past the floor (the fixed threshold here); b is past it and not
        // swept yet, so it is looked at within a sweep period.
        assert_eq!(book.next_check_ms([(a, &p)], 36_000), Some(65_002));
        assert_eq!(
            book.next_check_ms([(a, &p), (b, &p)], 36_000),
            Some(36_000 + LIVENESS_SWEEP_MS)
        );
        let phi = policy(Detector::PhiAccrual);
        assert_eq!(book.next_check_ms([(a, &phi)], 36_000), Some(45_002));
        assert_eq!(
            book.next_check_ms([(a, &phi)], 50_000),
            Some(50_000 + LIVENESS_SWEEP_MS),
            "suspected: looked at every sweep period"
        );
        assert_eq!(book.next_check_ms([(AgentId(9), &p)], 0), None);
        // A grant never moves a pulse that came.
        book.grant(a, 40_000);
        assert_eq!(book.silent_ms(a, 40_000), Some(4_999));
        book.forget(a);
        assert_eq!(book.silent_ms(a, 40_000), None);
        assert_eq!(
            book.stale([(a, &p)], 99_000),
            vec![],
            "an unwatched agent is never stale"
        );
    }

    #[test]
    fn the_book_keeps_a_bounded_window_of_gaps() {
        let mut book = PulseBook::new();
        let a = AgentId(1);
        for i in 0..100 {
            book.pulse(a, i * 1_000);
        }
        assert_eq!(book.tracks.get(a).unwrap().gaps.len(), PHI_WINDOW);
    }

    #[test]
    fn the_gap_ring_keeps_the_newest_window_oldest_first() {
        let mut gaps = Gaps::default();
        assert!(gaps.is_empty());
        for gap in 1..=PHI_WINDOW as u64 - 1 {
            gaps.push(gap);
        }
        assert_eq!(
            gaps.iter().collect::<Vec<_>>(),
            (1..PHI_WINDOW as u64).collect::<Vec<_>>()
        );
        for gap in PHI_WINDOW as u64..=PHI_WINDOW as u64 + 5 {
            gaps.push(gap);
        }
        let newest: Vec<u64> = (6..=PHI_WINDOW as u64 + 5).collect();
        assert_eq!(gaps.len(), PHI_WINDOW);
        assert_eq!(gaps.iter().collect::<Vec<_>>(), newest);
        assert_eq!(
            gaps,
            Gaps::from_iter(newest.iter().copied()),
            "equal whatever slot the ring starts at"
        );
        assert_ne!(gaps, Gaps::from_iter(newest.iter().rev().copied()));
    }

    #[test]
    fn a_gap_is_held_up_to_its_bound_and_a_longer_one_as_the_bound() {
        let mut gaps = Gaps::default();
        gaps.push(GAP_MS_MAX - 1);
        gaps.push(GAP_MS_MAX);
        gaps.push(GAP_MS_MAX + 1);
        gaps.push(u64::MAX);
        assert_eq!(
            gaps.iter().collect::<Vec<_>>(),
            vec![GAP_MS_MAX - 1, GAP_MS_MAX, GAP_MS_MAX, GAP_MS_MAX]
        );
    }

    #[test]
    fn a_track_is_144_bytes_with_its_instant_and_the_ring_s_position_first() {
        assert_eq!(std::mem::size_of::<Track>(), 144);
        assert_eq!(std::mem::offset_of!(Track, gaps), 8);
        assert_eq!(std::mem::offset_of!(Gaps, ring), 4);
    }

    #[test]
    fn a_touch_restarts_a_watched_agent_s_silence_without_a_gap_sample() {
        let mut book = PulseBook::new();
        let a = AgentId(1);
        assert!(!book.touch(a, 500), "an agent that never pulsed is not watched");
        assert_eq!(book.silent_ms(a, 600), None);
        book.pulse(a, 1_000);
        book.pulse(a, 2_000);
        assert!(book.touch(a, 5_000));
        assert_eq!(book.silent_ms(a, 5_500), Some(500));
        // The gaps are the pulses' own (1 s), not the touch's.
        assert_eq!(book.tracks.get(a).unwrap().gaps, Gaps::from_iter([1_000]));
        // A touch from the past does not move the last pulse back.
        book.touch(a, 4_000);
        assert_eq!(book.silent_ms(a, 5_500), Some(500));
    }
}

//! The schedule chamber's arithmetic: where an agent's timer slots fall and which slot a fire
//! stands for. Slots lie on a grid anchored at the agent's first slot, so other wakes never move
//! them, and after downtime or a forward clock jump one fire covers every missed slot.

/// The largest jitter added to an agent's first slot.
pub const JITTER_MS_MAX: u64 = 5 * 60 * 1_000;

/// A fixed offset of the agent's timer grid, derived from its id, so that a fleet configured
/// alike does not wake in one instant. Less than one interval and at most `JITTER_MS_MAX`.
/// Why the whole interval (ADR 0021): a fleet created at once keeps its first slots' spread for
/// life, and with a tenth of the interval 100,000 agents on 60-s timers fell due within 7.5 s
/// of every minute, a burst the node cleared seconds late; over the whole interval the same
/// fleet asks a steady 1,700 fires a second.
pub fn jitter_ms(agent: u64, interval_ms: u64) -> u64 {
    let spread_ms = interval_ms.saturating_sub(1).min(JITTER_MS_MAX);
    if spread_ms == 0 {
        return 0;
    }
    // splitmix64: consecutive ids land far apart.
    let mut z = agent.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z % (spread_ms + 1)
}

/// The outcome of firing a timer at `now_ms` whose next slot was `next_fire_at_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerFire {
    /// The latest slot at or before `now_ms`.
    pub due_at_ms: u64,
    /// Slots between the scheduled one and `due_at_ms`, skipped rather than replayed.
    pub missed_slots: u64,
    /// The first slot strictly after `now_ms`.
    pub next_fire_at_ms: u64,
}

/// Returns the fire due at `now_ms`, or `None` while the next slot is still ahead (including
/// after a backward clock jump: the persisted slot simply waits for the clock to catch up).
pub fn fire_due(next_fire_at_ms: u64, interval_ms: u64, now_ms: u64) -> Option<TimerFire> {
    assert!(interval_ms > 0, "interval must be positive");
    if now_ms < next_fire_at_ms {
        return None;
    }
    let missed_slots = (now_ms - next_fire_at_ms) / interval_ms;
    let due_at_ms = next_fire_at_ms + missed_slots * interval_ms;
    let next_fire_at_ms = due_at_ms + interval_ms;
    debug_assert!(due_at_ms <= now_ms && now_ms < next_fire_at_ms);
    Some(TimerFire {
        due_at_ms,
        missed_slots,
        next_fire_at_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_is_bounded_stable_and_spread() {
        let interval_ms = 30 * 60 * 1_000;
        let offsets: Vec<u64> = (1..=100).map(|id| jitter_ms(id, interval_ms)).collect();
        assert!(offsets.iter().all(|&j| j <= JITTER_MS_MAX));
        assert_eq!(
            offsets,
            (1..=100)
                .map(|id| jitter_ms(id, interval_ms))
                .collect::<Vec<_>>()
        );
        let mut distinct = offsets.clone();
        distinct.sort();
        distinct.dedup();
        assert!(
            distinct.len() > 95,
            "100 agents share {} offsets",
            distinct.len()
        );
        // Spread over the whole range (5 minutes, the cap), not bunched at one end.
        let spread_ms = JITTER_MS_MAX;
        assert!(offsets.iter().all(|&j| j <= spread_ms));
        let low = offsets.iter().filter(|&&j| j < spread_ms / 2).count();
        assert!((30..=70).contains(&low), "{low} of 100 in the lower half");
        // Short intervals get less than themselves, spread over the whole of it.
        let short: Vec<u64> = (1..=100).map(|id| jitter_ms(id, 1_000)).collect();
        assert!(short.iter().all(|&j| j < 1_000));
        assert!(short.iter().any(|&j| j >= 900), "{short:?}");
        assert!((1..=100).all(|id| jitter_ms(id, 1) == 0));
    }

    #[test]
    fn not_due_before_the_slot() {
        assert_eq!(fire_due(10_000, 1_000, 9_999), None);
    }

    #[test]
    fn on_time_fire_moves_one_slot() {
        let fire = fire_due(10_000, 1_000, 10_000).unwrap();
        assert_eq!(
            fire,
            TimerFire {
                due_at_ms: 10_000,
                missed_slots: 0,
                next_fire_at_ms: 11_000
            }
        );
    }

    #[test]
    fn downtime_fires_once_and_stays_on_the_grid() {
        // Down for 5.5 intervals: one fire stands for the latest slot, the next is on the grid.
        let fire = fire_due(10_000, 1_000, 15_500).unwrap();
        assert_eq!(fire.due_at_ms, 15_000);
        assert_eq!(fire.missed_slots, 5);
        assert_eq!(fire.next_fire_at_ms, 16_000);
        assert_eq!(fire_due(fire.next_fire_at_ms, 1_000, 15_999), None);
    }
}

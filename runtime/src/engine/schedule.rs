//! The schedule chamber's arithmetic: where an agent's timer slots fall and which slot a fire
//! stands for. Slots lie on a grid anchored at the agent's first slot, so other wakes never move
//! them, and after downtime or a forward clock jump one fire covers every missed slot.

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

//! Pure work shared out over the machine's cores (recovery's decoding and index rebuild): a
//! slice cut into one chunk per thread, each chunk mapped on its own scoped thread, the results
//! returned in the slice's order, so an answer never depends on the thread count or on timing.
//! One thread under the simulator, whose world is a single thread.

/// Threads one call uses, at most.
pub const THREADS_MAX: usize = 8;

/// The cores this process may run on: one under the simulator, whose world is a single thread,
/// and where the system cannot tell.
pub fn cores() -> usize {
    if cfg!(madsim) {
        return 1;
    }
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The threads a call uses here: every core up to [`THREADS_MAX`], one under the simulator.
pub fn threads() -> usize {
    cores().min(THREADS_MAX)
}

/// `work` applied to consecutive chunks of `items`, one chunk per thread, the results in the
/// chunks' order; one call on the whole slice when it is too short to share. A panic in `work`
/// is raised again here.
pub fn map_chunks<T: Sync, R: Send>(items: &[T], work: impl Fn(&[T]) -> R + Sync) -> Vec<R> {
    let threads = threads();
    if threads <= 1 || items.len() < 2 * threads {
        return vec![work(items)];
    }
    let share = items.len().div_ceil(threads);
    let work = &work;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(share)
            .map(|part| scope.spawn(move || work(part)))
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_come_back_in_order_whatever_the_length() {
        for len in [0, 1, 3, 4, 5, 17, 1_000] {
            let items: Vec<u64> = (0..len).collect();
            let parts = map_chunks(&items, |part| part.to_vec());
            assert_eq!(parts.concat(), items, "length {len}");
            assert!(parts.len() <= threads().max(1));
        }
    }

    #[test]
    fn a_long_slice_is_shared_when_there_are_cores() {
        let items: Vec<u64> = (0..100).collect();
        let parts = map_chunks(&items, |part| part.len());
        assert_eq!(parts.len(), threads());
        assert_eq!(parts.iter().sum::<usize>(), 100);
    }
}

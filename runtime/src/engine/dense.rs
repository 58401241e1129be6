//! A map from agent id to a value, held in a vector indexed by the id.
//!
//! Why: agent ids are dense (the engine hands them out one after another and never reuses
//! one), so a vector is the whole index: a look-up is one load with no comparisons, and a
//! batch of neighbouring ids reads neighbouring memory, where a B-tree walks several nodes per
//! key and misses the cache at each (ADR 0027). The price is a slot per id up to the highest
//! one held, which for dense ids is what the values cost anyway.

use super::agent::AgentId;

/// Values by agent id, in id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenseById<T> {
    /// Indexed by id. Never ends in `None`, so two maps holding the same values are equal.
    slots: Vec<Option<T>>,
}

impl<T> Default for DenseById<T> {
    fn default() -> Self {
        DenseById { slots: Vec::new() }
    }
}

fn index(agent: AgentId) -> Option<usize> {
    usize::try_from(agent.0).ok()
}

impl<T> DenseById<T> {
    pub fn get(&self, agent: AgentId) -> Option<&T> {
        self.slots.get(index(agent)?)?.as_ref()
    }

    pub fn get_mut(&mut self, agent: AgentId) -> Option<&mut T> {
        self.slots.get_mut(index(agent)?)?.as_mut()
    }

    /// The value of `agent`, made by `make` if there was none.
    pub fn get_or_insert_with(&mut self, agent: AgentId, make: impl FnOnce() -> T) -> &mut T {
        let i = index(agent).expect("agent ids fit in memory");
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i].get_or_insert_with(make)
    }

    /// Sets the value of `agent`, returning the one it replaced.
    pub fn insert(&mut self, agent: AgentId, value: T) -> Option<T> {
        let mut value = Some(value);
        let slot = self.get_or_insert_with(agent, || value.take().expect("taken once"));
        value.map(|value| std::mem::replace(slot, value))
    }

    /// Takes the value of `agent` out; the vector shrinks past the highest id still held.
    pub fn remove(&mut self, agent: AgentId) -> Option<T> {
        let taken = self.slots.get_mut(index(agent)?)?.take();
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        taken
    }

    /// Every value, mutably, in id order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().flatten()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_values_by_id_and_forgets_trailing_slots_so_equal_contents_compare_equal() {
        let mut map = DenseById::default();
        assert_eq!(map.insert(AgentId(3), "c"), None);
        assert_eq!(map.insert(AgentId(1), "a"), None);
        assert_eq!(map.insert(AgentId(3), "C"), Some("c"));
        assert_eq!(map.get(AgentId(3)), Some(&"C"));
        assert_eq!(map.get(AgentId(2)), None);
        assert_eq!(map.get(AgentId(99)), None);
        assert_eq!(map.get(AgentId(u64::MAX)), None);
        *map.get_or_insert_with(AgentId(2), || "b") = "B";
        assert_eq!(
            map.values_mut().map(|v| *v).collect::<Vec<_>>(),
            ["a", "B", "C"]
        );
        assert_eq!(map.remove(AgentId(3)), Some("C"));
        assert_eq!(map.remove(AgentId(2)), Some("B"));
        assert_eq!(map.remove(AgentId(7)), None);
        let mut fresh = DenseById::default();
        fresh.insert(AgentId(1), "a");
        assert_eq!(map, fresh, "no slot is left past the highest id held");
        map.remove(AgentId(1));
        assert!(map.is_empty());
        assert_eq!(map, DenseById::default());
    }
}

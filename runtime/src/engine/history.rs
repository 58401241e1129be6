//! An agent's conversation history: the turns a model sees again at its next wakeup. Durable
//! because it is folded from `run_finished` events (each run appends its turns in the same
//! event that ends it), bounded in messages and bytes (the oldest turns go first), and left
//! untouched by a ghost run, which appends nothing.
//!
//! Only the wakeup prompt and the model's final answer of each run are kept: tool calls and
//! their results live in the run's transcript, so a history never grows by a tool's output.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Most messages a history keeps.
pub const HISTORY_MESSAGES_MAX: usize = 40;
/// Most bytes of text a history keeps (sum of its messages' texts).
pub const HISTORY_BYTES_MAX: usize = 64 * 1024;
/// Longest single message kept; a longer one is cut (and marked) before it is stored.
pub const HISTORY_MESSAGE_BYTES_MAX: usize = 16 * 1024;
/// Appended to a message cut to [`HISTORY_MESSAGE_BYTES_MAX`].
pub const CUT_MARK: &str = " [...cut]";

/// Who said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The wakeup prompt Vigil sent.
    User,
    /// The model's final answer.
    Assistant,
}

/// One message of a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryMessage {
    pub role: Role,
    pub text: String,
}

impl HistoryMessage {
    /// A message, its text cut to [`HISTORY_MESSAGE_BYTES_MAX`] at a character boundary.
    pub fn new(role: Role, text: &str) -> Self {
        let text = if text.len() <= HISTORY_MESSAGE_BYTES_MAX {
            text.to_string()
        } else {
            let mut end = HISTORY_MESSAGE_BYTES_MAX - CUT_MARK.len();
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}{CUT_MARK}", &text[..end])
        };
        HistoryMessage { role, text }
    }
}

/// The bounded history of one agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    messages: VecDeque<HistoryMessage>,
    bytes: usize,
}

impl History {
    /// Appends `messages`, then drops the oldest until both bounds hold.
    pub fn append(&mut self, messages: &[HistoryMessage]) {
        for message in messages {
            self.bytes += message.text.len();
            self.messages.push_back(message.clone());
        }
        while self.messages.len() > HISTORY_MESSAGES_MAX || self.bytes > HISTORY_BYTES_MAX {
            let dropped = self.messages.pop_front().expect("over a bound means not empty");
            self.bytes -= dropped.text.len();
        }
        debug_assert!(self.messages.len() <= HISTORY_MESSAGES_MAX);
    }

    /// A history holding exactly `messages` (a snapshot's), oldest first; its byte count is
    /// rebuilt from them. No bound is applied: the history was within the bounds in force when
    /// it was stored, and the next `append` enforces today's.
    pub(crate) fn restore(messages: Vec<HistoryMessage>) -> History {
        let bytes = messages.iter().map(|message| message.text.len()).sum();
        History {
            messages: messages.into(),
            bytes,
        }
    }

    /// The messages, oldest first.
    pub fn messages(&self) -> impl ExactSizeIterator<Item = &HistoryMessage> {
        self.messages.iter()
    }

    /// Bytes of text held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// SHA-256 of the history's canonical JSON, hex: equal exactly when the histories are.
    pub fn hash(&self) -> String {
        let json = serde_json::to_vec(&self.messages).expect("messages serialize");
        let digest = Sha256::digest(json);
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> HistoryMessage {
        HistoryMessage::new(Role::User, text)
    }

    #[test]
    fn the_oldest_messages_go_first_past_the_message_bound() {
        let mut history = History::default();
        for i in 0..HISTORY_MESSAGES_MAX + 3 {
            history.append(&[user(&i.to_string())]);
        }
        assert_eq!(history.messages().len(), HISTORY_MESSAGES_MAX);
        assert_eq!(history.messages().next().unwrap().text, "3");
    }

    #[test]
    fn the_byte_bound_holds_exactly() {
        let mut history = History::default();
        let chunk = "x".repeat(HISTORY_MESSAGE_BYTES_MAX);
        for _ in 0..HISTORY_BYTES_MAX / HISTORY_MESSAGE_BYTES_MAX {
            history.append(&[user(&chunk)]);
        }
        assert_eq!(history.bytes(), HISTORY_BYTES_MAX, "exactly at the bound stays");
        history.append(&[user("y")]);
        assert!(history.bytes() <= HISTORY_BYTES_MAX);
        assert_eq!(history.messages().last().unwrap().text, "y");
    }

    #[test]
    fn a_long_message_is_cut_at_a_char_boundary_and_marked() {
        let long = "é".repeat(HISTORY_MESSAGE_BYTES_MAX);
        let cut = user(&long);
        assert!(cut.text.len() <= HISTORY_MESSAGE_BYTES_MAX);
        assert!(cut.text.ends_with(CUT_MARK));
        let exact = "x".repeat(HISTORY_MESSAGE_BYTES_MAX);
        assert_eq!(user(&exact).text, exact, "at the bound nothing is cut");
    }

    #[test]
    fn the_hash_changes_with_any_message_and_only_then() {
        let mut a = History::default();
        let b = History::default();
        assert_eq!(a.hash(), b.hash());
        a.append(&[user("hi")]);
        assert_ne!(a.hash(), b.hash());
        let mut c = History::default();
        c.append(&[user("hi")]);
        assert_eq!(a.hash(), c.hash());
    }
}

//! The randomness seam: where secrets (bearer tokens) come from.
//!
//! Production draws from the operating system; the simulator injects a seeded stream so that a
//! seed reproduces every token, and so that nothing reaching the trace reads an OS source.

use std::sync::{Arc, Mutex};

use rand::{RngCore, SeedableRng};

/// A source of unpredictable bytes.
pub trait Entropy: Send + Sync + 'static {
    /// Fills `bytes` with random bytes.
    fn fill(&self, bytes: &mut [u8]);
}

/// The handle that is passed around.
pub type SharedEntropy = Arc<dyn Entropy>;

/// The production source: the operating system's CSPRNG.
#[derive(Debug, Default)]
pub struct OsEntropy;

impl OsEntropy {
    pub fn shared() -> SharedEntropy {
        Arc::new(OsEntropy)
    }
}

impl Entropy for OsEntropy {
    fn fill(&self, bytes: &mut [u8]) {
        rand::rngs::OsRng.fill_bytes(bytes);
    }
}

/// A seeded source, for the simulator and for tests that want reproducible tokens. Never use it
/// for real secrets.
#[derive(Debug)]
pub struct SeededEntropy(Mutex<rand_chacha::ChaCha8Rng>);

impl SeededEntropy {
    pub fn shared(seed: u64) -> SharedEntropy {
        Arc::new(SeededEntropy(Mutex::new(
            rand_chacha::ChaCha8Rng::seed_from_u64(seed),
        )))
    }
}

impl Entropy for SeededEntropy {
    fn fill(&self, bytes: &mut [u8]) {
        self.0.lock().expect("entropy lock").fill_bytes(bytes);
    }
}

/// Bytes of randomness in a token (256 bits).
pub const TOKEN_BYTES: usize = 32;

/// A new bearer token: `prefix` then 64 hex digits.
pub fn new_token(entropy: &dyn Entropy, prefix: &str) -> String {
    let mut bytes = [0u8; TOKEN_BYTES];
    entropy.fill(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_tokens_repeat_and_differ() {
        let a = new_token(&*SeededEntropy::shared(7), "vgl_");
        let b = new_token(&*SeededEntropy::shared(7), "vgl_");
        let c = new_token(&*SeededEntropy::shared(8), "vgl_");
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 4 + 2 * TOKEN_BYTES);
        assert_ne!(new_token(&OsEntropy, "x"), new_token(&OsEntropy, "x"));
    }
}

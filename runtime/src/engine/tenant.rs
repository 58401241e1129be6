//! Tenants and tokens: every resource belongs to a tenant, and every caller is either a tenant's
//! operator or one agent. The engine keeps only hashes of tokens; the tokens themselves are
//! shown once and never written down by the runtime.

use super::daily_cap::LocalDay;
use super::usage::{DaySpend, MicroUsd};
use serde::{Deserialize, Serialize};

use super::agent::{AgentId, FieldError};

/// Longest tenant name accepted.
pub const TENANT_NAME_CHARS_MAX: usize = 64;
/// The tenant a runtime creates on first start when none is configured.
pub const DEFAULT_TENANT: &str = "default";
/// Most tenants one runtime keeps.
pub const TENANTS_MAX: usize = 1_000;

/// A tenant's name, which is also its identifier.
pub type TenantName = String;

/// Bytes of a token's SHA-256.
pub const TOKEN_HASH_BYTES: usize = 32;

/// SHA-256 of a bearer token: its bytes inline, shown (in events, records, the trace, `Debug`)
/// as lowercase hex. Why bytes, not the hex text: every request looks its token up in the
/// engine's table and the rate limiter's, B-trees of one entry per agent; with `String` keys
/// each comparison of the walk followed a pointer to another cache line (a sixth of a single
/// pulse's time in a profile of the `pulses` benchmark at 64,000 agents). Bytes order as their
/// lowercase hex does, so every map keyed by a hash iterates as it did.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenHash([u8; TOKEN_HASH_BYTES]);

impl TokenHash {
    /// The hash of `token`.
    pub fn of(token: &str) -> TokenHash {
        use sha2::{Digest, Sha256};
        TokenHash(Sha256::digest(token.as_bytes()).into())
    }

    /// The hash whose lowercase hex is `hex` (64 characters `0-9a-f`), or `None`.
    pub fn from_hex(hex: &str) -> Option<TokenHash> {
        fn nibble(c: u8) -> Option<u8> {
            match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                _ => None,
            }
        }
        let hex = hex.as_bytes();
        if hex.len() != 2 * TOKEN_HASH_BYTES {
            return None;
        }
        let mut bytes = [0; TOKEN_HASH_BYTES];
        for (byte, pair) in bytes.iter_mut().zip(hex.chunks_exact(2)) {
            *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
        }
        Some(TokenHash(bytes))
    }

    /// The hash's lowercase hex, as records and events hold it.
    pub fn to_hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        // Two table look-ups a byte, not a `format!` each.
        let mut hex = String::with_capacity(2 * TOKEN_HASH_BYTES);
        for byte in self.0 {
            hex.push(char::from(HEX[usize::from(byte >> 4)]));
            hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        hex
    }
}

/// Builds [`DigestHasher`]s: for hash maps keyed by [`TokenHash`].
pub type TokenHashState = std::hash::BuildHasherDefault<DigestHasher>;

/// A hasher for keys that are digests already (a [`TokenHash`] is SHA-256, uniform in every
/// bit): it folds their words together, with nothing to seed. Why not the standard library's
/// SipHash: that costs more than the look-up it serves and its seed is the OS's randomness,
/// which must not reach behaviour; the keys are hashes of tokens the node made, so no client
/// can choose them to collide.
#[derive(Debug, Default, Clone, Copy)]
pub struct DigestHasher(u64);

impl std::hash::Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(23) ^ u64::from_le_bytes(word);
        }
    }
}

impl std::fmt::Debug for TokenHash {
    /// `TokenHash("<hex>")`, as when the hash was its hex text.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TokenHash").field(&self.to_hex()).finish()
    }
}

impl Serialize for TokenHash {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for TokenHash {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let hex = std::borrow::Cow::<str>::deserialize(deserializer)?;
        TokenHash::from_hex(&hex).ok_or_else(|| {
            serde::de::Error::custom("a token hash is 64 lowercase hex characters (SHA-256)")
        })
    }
}

/// Where a tenant's new operator token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSetBy {
    /// The node's configuration named a token other than the one last configured.
    Configuration,
    /// The tenant's operator rotated it through the API.
    Operator,
}

/// A tenant's name shared by every token of the tenant. Why shared: every request copies its
/// caller's principal (and the request slots count by tenant), and a `String` each was an
/// allocation per request and a copy of the name per agent.
pub type TenantHandle = std::sync::Arc<str>;

/// Who is calling, as established by a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// Operates every agent of one tenant.
    Operator { tenant: TenantHandle },
    /// Acts only on itself.
    Agent {
        tenant: TenantHandle,
        agent: AgentId,
    },
}

impl Principal {
    /// The tenant whose data this caller may see.
    pub fn tenant(&self) -> &str {
        self.tenant_handle()
    }

    /// [`Principal::tenant`], shared.
    pub fn tenant_handle(&self) -> &TenantHandle {
        match self {
            Principal::Operator { tenant } | Principal::Agent { tenant, .. } => tenant,
        }
    }
}

/// A tenant as the engine holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    pub name: TenantName,
    pub operator_token_hash: TokenHash,
    /// The token configuration last set (at creation, or `operator_token_set` by
    /// configuration): a start configuring this same token changes nothing, so a token the
    /// operator rotated since stays in force; configuring another token replaces it.
    pub configured_token_hash: TokenHash,
    /// The most the tenant's agents together may spend on model calls per UTC day.
    pub daily_budget_usd: Option<MicroUsd>,
    /// The tenant's model usage on the latest UTC day that saw any.
    pub day_spend: DaySpend,
}

/// The time zone of a tenant's budget day: one day for agents in every zone.
pub const TENANT_BUDGET_TIME_ZONE: &str = "UTC";

impl Tenant {
    /// Micro-dollars the tenant may still spend today (`None`: no budget).
    pub fn budget_left(&self, now_ms: u64) -> Option<u64> {
        let budget = self.daily_budget_usd?;
        let today = LocalDay::of(now_ms, TENANT_BUDGET_TIME_ZONE);
        let spent = self.day_spend.on(self.day_spend.day_for(today)).cost_micro_usd;
        Some(budget.0.saturating_sub(spent))
    }
}

/// Checks a name of 1..=`chars_max` characters of `[A-Za-z0-9._-]`.
pub fn validate_name(field: &'static str, name: &str, chars_max: usize) -> Result<(), FieldError> {
    let ok = !name.is_empty()
        && name.chars().count() <= chars_max
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("{field} must be 1 to {chars_max} characters of letters, digits, '.', '_' or '-' (got {})", super::spec_error::echo(name)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_hash_is_sha256_hex() {
        // SHA-256("abc") from FIPS 180-2's example.
        assert_eq!(
            TokenHash::of("abc").to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_token_hash_reads_back_from_its_hex_and_nothing_else() {
        let hash = TokenHash::of("abc");
        assert_eq!(TokenHash::from_hex(&hash.to_hex()), Some(hash.clone()));
        let hex = hash.to_hex();
        // One character short or long, upper case, or not hex: refused.
        assert_eq!(TokenHash::from_hex(&hex[1..]), None);
        assert_eq!(TokenHash::from_hex(&format!("{hex}0")), None);
        assert_eq!(TokenHash::from_hex(&hex.to_uppercase()), None);
        assert_eq!(TokenHash::from_hex(&format!("g{}", &hex[1..])), None);
        assert_eq!(TokenHash::from_hex(""), None);
        // As JSON it is its hex, and reads back only from that.
        let json = serde_json::to_string(&hash).unwrap();
        assert_eq!(json, format!("\"{hex}\""));
        assert_eq!(serde_json::from_str::<TokenHash>(&json).unwrap(), hash);
        assert!(serde_json::from_str::<TokenHash>("\"abc\"").is_err());
        assert_eq!(format!("{hash:?}"), format!("TokenHash({hex:?})"));
    }

    #[test]
    fn token_hashes_hash_apart() {
        use std::hash::BuildHasher;
        let state = TokenHashState::default();
        let hashes: std::collections::BTreeSet<u64> = (0..10_000)
            .map(|i| state.hash_one(TokenHash::of(&i.to_string())))
            .collect();
        assert_eq!(hashes.len(), 10_000, "no two of 10,000 tokens share a hash");
        let low_bits: std::collections::BTreeSet<u64> = hashes.iter().map(|h| h & 0xff).collect();
        assert_eq!(low_bits.len(), 256, "every bucket of 256 is used");
    }

    #[test]
    fn token_hashes_order_as_their_hex() {
        let mut hashes: Vec<TokenHash> = (0..200).map(|i| TokenHash::of(&i.to_string())).collect();
        let mut by_hex = hashes.clone();
        hashes.sort();
        by_hex.sort_by_key(TokenHash::to_hex);
        assert_eq!(hashes, by_hex);
    }

    #[test]
    fn names_are_checked() {
        assert!(validate_name("tenant", "acme-1", TENANT_NAME_CHARS_MAX).is_ok());
        assert!(validate_name("tenant", "", TENANT_NAME_CHARS_MAX).is_err());
        assert!(validate_name("tenant", "a/b", TENANT_NAME_CHARS_MAX).is_err());
        let long = "x".repeat(TENANT_NAME_CHARS_MAX + 1);
        assert_eq!(
            validate_name("tenant", &long, TENANT_NAME_CHARS_MAX)
                .unwrap_err()
                .field,
            "tenant"
        );
    }
}

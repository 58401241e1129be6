//! The request-rate limit per bearer token: every authenticated request is charged to its
//! token's bucket (a token bucket: `REQUEST_BURST_PER_TOKEN` requests at once, refilled at
//! `REQUESTS_PER_SECOND_PER_TOKEN`). Past it the request answers 429 `rate_limited` with
//! `Retry-After`. Buckets are per token, so an agent hammering the node spends only its own:
//! the operator's token (and every other agent's) keeps its full bucket.
//!
//! Time is the node's monotonic clock in milliseconds (the `Clock` seam), passed in, so the
//! simulator stays deterministic and the arithmetic is a pure function tested at its edges.
//! Buckets live in memory only; a restarted node starts every token full.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::engine::tenant::{TokenHash, TokenHashState};

/// Requests one token may make per second, sustained (the bucket's refill rate).
///
/// Why this figure: normal use is far below it. A host batch-pulses its agents every 10 s
/// (0.1 request/s), `vigil top` polls a few routes a second, and an operator script waking
/// agents one after another is bounded by the node's own commit rate. The simulator's busiest
/// workload (a wakeup burst retried every 2 s after a crash) stays inside the burst below.
pub const REQUESTS_PER_SECOND_PER_TOKEN: u64 = 100;

/// Requests one token may make at once, from a full bucket.
///
/// Why this figure: above the largest burst a legitimate client sends. The simulator's operator
/// sends up to 200 wakeups inside one second (`coalesce_burst`, two bursts may overlap) and a
/// `wakeup_burst` storm of up to 300 at once, retried together after a crash; 1,000 leaves room
/// for them together. An agent flooding the node is held to it and then to the rate above.
pub const REQUEST_BURST_PER_TOKEN: u64 = 1_000;

/// Most token buckets a node tracks at once. When a new token would pass it, every bucket that
/// is full again (idle since at least `REQUEST_BURST_PER_TOKEN / REQUESTS_PER_SECOND_PER_TOKEN`
/// seconds) is dropped, which loses nothing: a dropped token starts full, as it would have been.
/// If none is full, the least recently charged bucket is dropped (its token gets a full bucket
/// early, the one leniency). Only authenticated tokens get buckets, so this is reached only by
/// a node with that many live tokens.
pub const RATE_LIMITED_TOKENS_MAX: usize = 100_000;

/// A request's cost in thousandths of a request: the bucket counts in thousandths so that
/// refilling is integer arithmetic (`REQUESTS_PER_SECOND_PER_TOKEN` thousandths per millisecond).
const MILLI: u64 = 1_000;

/// One token's bucket: its level (in thousandths of a request) as of `at_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    level_milli: u64,
    at_ms: u64,
}

impl Bucket {
    /// A full bucket at `now_ms`.
    pub fn full(now_ms: u64) -> Self {
        Bucket {
            level_milli: REQUEST_BURST_PER_TOKEN * MILLI,
            at_ms: now_ms,
        }
    }

    /// Charges one request at `now_ms`, or says in how many milliseconds one will be allowed.
    pub fn take(&mut self, now_ms: u64) -> Result<(), u64> {
        self.refill(now_ms);
        if self.level_milli >= MILLI {
            self.level_milli -= MILLI;
            return Ok(());
        }
        Err((MILLI - self.level_milli).div_ceil(REQUESTS_PER_SECOND_PER_TOKEN))
    }

    /// Whether the bucket has refilled completely by `now_ms` (forgetting it changes nothing).
    fn is_full_at(&self, now_ms: u64) -> bool {
        let mut copy = *self;
        copy.refill(now_ms);
        copy.level_milli == REQUEST_BURST_PER_TOKEN * MILLI
    }

    fn refill(&mut self, now_ms: u64) {
        // The monotonic clock never goes back; a reading before `at_ms` adds nothing.
        let elapsed_ms = now_ms.saturating_sub(self.at_ms);
        let added = elapsed_ms.saturating_mul(REQUESTS_PER_SECOND_PER_TOKEN);
        self.level_milli = self
            .level_milli
            .saturating_add(added)
            .min(REQUEST_BURST_PER_TOKEN * MILLI);
        self.at_ms = self.at_ms.max(now_ms);
    }
}

/// A refused request: 429 with `Retry-After` in whole seconds (at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimited {
    pub retry_after_ms: u64,
}

impl RateLimited {
    /// `Retry-After`'s value: whole seconds, rounded up, at least 1.
    pub fn retry_after_s(self) -> u64 {
        self.retry_after_ms.div_ceil(1_000).max(1)
    }
}

impl IntoResponse for RateLimited {
    fn into_response(self) -> Response {
        let error = ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "rate_limited",
            message: format!(
                "this token made more requests than it may ({REQUEST_BURST_PER_TOKEN} at once, \
                 then {REQUESTS_PER_SECOND_PER_TOKEN} per second); retry after {} s",
                self.retry_after_s()
            ),
            field: None,
            retry_after_s: Some(self.retry_after_s()),
        };
        error.into_response()
    }
}

/// The node's token buckets. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RateLimits {
    /// A hash map: one look-up per request, where a B-tree of a bucket per agent token walked
    /// several cache misses deep (6 % of a single pulse in a profile). Nothing depends on its
    /// order ([`make_room`] breaks ties by token).
    buckets: Arc<Mutex<HashMap<TokenHash, Bucket, TokenHashState>>>,
    /// Most buckets kept: `RATE_LIMITED_TOKENS_MAX`, smaller in tests.
    tokens_max: usize,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits::with_tokens_max(RATE_LIMITED_TOKENS_MAX)
    }
}

impl RateLimits {
    /// Buckets for at most `tokens_max` tokens.
    pub fn with_tokens_max(tokens_max: usize) -> Self {
        RateLimits {
            buckets: Arc::default(),
            tokens_max: tokens_max.max(1),
        }
    }

    /// Charges one request of `token` at `now_ms` (the node's monotonic milliseconds).
    pub fn charge(&self, token: &TokenHash, now_ms: u64) -> Result<(), RateLimited> {
        let mut buckets = self.buckets.lock().expect("rate limits lock");
        if !buckets.contains_key(token) && buckets.len() >= self.tokens_max {
            make_room(&mut buckets, self.tokens_max, now_ms);
        }
        buckets
            .entry(token.clone())
            .or_insert_with(|| Bucket::full(now_ms))
            .take(now_ms)
            .map_err(|retry_after_ms| RateLimited { retry_after_ms })
    }

    /// Buckets tracked now.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.buckets.lock().expect("rate limits lock").len()
    }
}

/// Frees at least one place: drops every full bucket, else the least recently charged one
/// (the first in token order among equals, so the choice is deterministic).
fn make_room(
    buckets: &mut HashMap<TokenHash, Bucket, TokenHashState>,
    tokens_max: usize,
    now_ms: u64,
) {
    buckets.retain(|_, bucket| !bucket.is_full_at(now_ms));
    if buckets.len() < tokens_max {
        return;
    }
    // The least recently charged; of several, the least token, whatever the map's order.
    let oldest = buckets
        .iter()
        .min_by_key(|(token, bucket)| (bucket.at_ms, *token))
        .map(|(token, _)| token.clone());
    if let Some(oldest) = oldest {
        buckets.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    /// Milliseconds for one request to drip back in.
    const ONE_REQUEST_MS: u64 = 1_000 / REQUESTS_PER_SECOND_PER_TOKEN;
    /// Milliseconds for an empty bucket to fill.
    const REFILL_MS: u64 = REQUEST_BURST_PER_TOKEN * 1_000 / REQUESTS_PER_SECOND_PER_TOKEN;

    fn empty_at(now_ms: u64) -> Bucket {
        let mut bucket = Bucket::full(now_ms);
        for i in 0..REQUEST_BURST_PER_TOKEN {
            assert_eq!(bucket.take(now_ms), Ok(()), "request {i} of the burst");
        }
        bucket
    }

    #[test]
    fn exactly_the_burst_passes_at_once_and_the_next_waits_one_drip() {
        let mut bucket = empty_at(5_000);
        assert_eq!(bucket.take(5_000), Err(ONE_REQUEST_MS));
        // One millisecond short of a drip is still refused, with the rest to wait.
        assert_eq!(bucket.take(5_000 + ONE_REQUEST_MS - 1), Err(1));
        assert_eq!(bucket.take(5_000 + ONE_REQUEST_MS), Ok(()));
        assert_eq!(bucket.take(5_000 + ONE_REQUEST_MS), Err(ONE_REQUEST_MS));
    }

    #[test]
    fn an_empty_bucket_is_full_again_after_the_refill_time_and_no_fuller() {
        let bucket = empty_at(0);
        assert!(!bucket.is_full_at(REFILL_MS - 1));
        assert!(bucket.is_full_at(REFILL_MS));
        // Idle ten times as long still gives exactly the burst.
        let mut later = bucket;
        for i in 0..REQUEST_BURST_PER_TOKEN {
            assert_eq!(later.take(10 * REFILL_MS), Ok(()), "request {i}");
        }
        assert!(later.take(10 * REFILL_MS).is_err());
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_at_least_one() {
        let s = |retry_after_ms| RateLimited { retry_after_ms }.retry_after_s();
        assert_eq!(s(0), 1);
        assert_eq!(s(ONE_REQUEST_MS), 1);
        assert_eq!(s(1_000), 1);
        assert_eq!(s(1_001), 2);
    }

    #[test]
    fn the_answer_is_429_with_retry_after_and_names_the_limit() {
        let response = RateLimited {
            retry_after_ms: 1_500,
        }
        .into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
    }

    #[test]
    fn tokens_have_their_own_buckets() {
        let limits = RateLimits::default();
        let (agent, operator) = (TokenHash::of("agent"), TokenHash::of("operator"));
        for _ in 0..REQUEST_BURST_PER_TOKEN {
            limits.charge(&agent, 0).unwrap();
        }
        let refused = limits.charge(&agent, 0).unwrap_err();
        assert_eq!(refused.retry_after_ms, ONE_REQUEST_MS);
        for _ in 0..REQUEST_BURST_PER_TOKEN {
            limits.charge(&operator, 0).unwrap();
        }
    }

    #[test]
    fn at_the_cap_full_buckets_go_first_then_the_least_recently_charged() {
        let limits = RateLimits::with_tokens_max(3);
        let token = |n: u32| TokenHash::of(&format!("token-{n}"));
        limits.charge(&token(1), 0).unwrap(); // full again at ONE_REQUEST_MS
        for _ in 0..REQUEST_BURST_PER_TOKEN {
            limits.charge(&token(2), 0).unwrap(); // empty
        }
        limits.charge(&token(3), 5).unwrap(); // full again at 5 + ONE_REQUEST_MS
        assert_eq!(limits.tracked(), 3);
        // Only token 1 has refilled: it alone makes room.
        limits.charge(&token(4), ONE_REQUEST_MS).unwrap();
        assert_eq!(limits.tracked(), 3);
        // Token 2 kept its bucket: one request has dripped back in, no more.
        assert!(limits.charge(&token(2), ONE_REQUEST_MS).is_ok());
        assert!(limits.charge(&token(2), ONE_REQUEST_MS).is_err());
        // Nothing is full now: the least recently charged (token 3, at 5) makes room.
        limits.charge(&token(5), ONE_REQUEST_MS + 1).unwrap();
        assert_eq!(limits.tracked(), 3);
        assert!(
            limits.charge(&token(2), ONE_REQUEST_MS + 1).is_err(),
            "token 2 is kept"
        );
    }

    #[test]
    fn of_equally_old_buckets_the_least_token_makes_room() {
        let limits = RateLimits::with_tokens_max(2);
        let mut two = [TokenHash::of("token-a"), TokenHash::of("token-b")];
        two.sort();
        let [least, other] = two;
        for token in [&other, &least] {
            for _ in 0..REQUEST_BURST_PER_TOKEN {
                limits.charge(token, 0).unwrap();
            }
        }
        // Both empty, both charged last at 0: the least token's bucket goes, whatever the
        // order they were charged in or the map keeps them in.
        limits.charge(&TokenHash::of("token-c"), 0).unwrap();
        assert!(
            limits.charge(&other, 0).is_err(),
            "the other bucket is kept, empty"
        );
        assert!(
            limits.charge(&least, 0).is_ok(),
            "the least starts again, full"
        );
    }
}

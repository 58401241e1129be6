//! Run tokens: the bearer token an asynchronous webhook reports its run's result with
//! (`POST /v1/runs/{id}/result`, docs/adapters/http.md).
//!
//! A token is minted per run from the node's entropy seam, handed to the webhook once, and held
//! here only as its hash (`TokenHash`), in memory: a node that restarts fails its running runs
//! anyway (`control_plane_restart`), so a token never needs to outlive the process. The registry
//! is bounded twice: at most [`RUN_TOKENS_LIVE_MAX`] runs wait for a report at once, and the
//! hashes of the last [`RUN_TOKENS_RETIRED_MAX`] ended waits are remembered, so that a second or
//! late report is told why (409) instead of being taken for a stranger (401).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use tokio::sync::oneshot;

use crate::engine::run::RunId;
use crate::engine::tenant::TokenHash;
use crate::io::entropy::{new_token, Entropy};

/// Most runs waiting for a report at once (one per asynchronous webhook run in progress).
pub const RUN_TOKENS_LIVE_MAX: usize = 10_000;
/// Most ended waits whose token hash is remembered (to answer 409 rather than 401).
pub const RUN_TOKENS_RETIRED_MAX: usize = 10_000;
/// Prefix of run tokens.
pub const RUN_TOKEN_PREFIX: &str = "vgl_run_";

/// The registry a node's runs and its API share.
pub type SharedRunTokens = Arc<RunTokens>;

/// What a webhook reports (the body of `POST /v1/runs/{id}/result`), and what a synchronous
/// webhook answers, in one schema: `{status, output?, usage?}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookResult {
    /// `succeeded` or `failed` (required in a report; a sync answer without one succeeded).
    pub status: Option<ResultStatus>,
    /// The run's answer, shown as its answer excerpt (capped).
    #[serde(default)]
    pub output: Option<String>,
    #[serde(default)]
    pub usage: Option<ResultUsage>,
}

/// A webhook's verdict on its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResultStatus {
    Succeeded,
    Failed,
}

/// Model use a webhook reports, recorded on the run and the agent's day like an LLM's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResultUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    /// Dollars, when the webhook knows its cost.
    #[serde(default)]
    #[schema(value_type = Option<f64>)]
    pub cost_usd: Option<crate::engine::usage::MicroUsd>,
}

/// Why a report was refused. Each maps to one HTTP status and code (`api::runs`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportRefusal {
    #[error("send `Authorization: Bearer <report_token>`: the run token the webhook received")]
    NoToken,
    #[error("this token is not a live run token (it may have expired long ago)")]
    UnknownToken,
    #[error("this token belongs to another run, not run {0}")]
    WrongRun(RunId),
    #[error("run {0} already received its report; a run takes exactly one")]
    AlreadyReported(RunId),
    #[error("run {0} is over (its report wait ran out, or it was cancelled or timed out); the report came too late")]
    RunEnded(RunId),
    #[error(
        "{RUN_TOKENS_LIVE_MAX} runs already wait for a webhook's report (RUN_TOKENS_LIVE_MAX)"
    )]
    TooManyWaiting,
    #[error("this node has no API address a webhook could report to")]
    NoReportAddress,
}

/// What a run holds while it waits: the token to send, and the receiving end of its report.
/// Dropping it (the run ended, however) retires the token.
pub struct RunTokenGrant {
    /// The bearer token, sent once in the webhook's body; never stored.
    pub token: String,
    /// Where the webhook reports: `<base>/v1/runs/<id>/result`.
    pub report_url: String,
    pub report: oneshot::Receiver<WebhookResult>,
    _live: LiveGuard,
}

/// Retires a live token when its run stops waiting.
struct LiveGuard {
    tokens: SharedRunTokens,
    hash: TokenHash,
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.tokens.retire(&self.hash);
    }
}

/// The live and recently retired run tokens of a node, by hash.
#[derive(Default)]
pub struct RunTokens {
    inner: Mutex<Inner>,
    /// The API's base URL as webhooks reach it (`http://127.0.0.1:7070`).
    base_url: Mutex<Option<String>>,
}

#[derive(Default)]
struct Inner {
    live: BTreeMap<TokenHash, Live>,
    retired: BTreeMap<TokenHash, Retired>,
    /// Retired hashes, oldest first, to forget them in order.
    retired_order: VecDeque<TokenHash>,
}

struct Live {
    run: RunId,
    /// Taken by the first report.
    sender: Option<oneshot::Sender<WebhookResult>>,
}

#[derive(Clone, Copy)]
struct Retired {
    run: RunId,
    reported: bool,
}

impl RunTokens {
    pub fn shared() -> SharedRunTokens {
        Arc::default()
    }

    /// Sets the base URL reports are sent to (a node config's `report_base_url`).
    pub fn set_base_url(&self, url: &str) {
        *self.base_url.lock().expect("run tokens lock") = Some(url.trim_end_matches('/').into());
    }

    /// The API's own address as the base URL, unless one was set. An unspecified listen
    /// address (`0.0.0.0`) becomes loopback: it is what reaches the node from its own host.
    pub fn default_base_url(&self, listen: SocketAddr) {
        let mut base = self.base_url.lock().expect("run tokens lock");
        if base.is_none() {
            let ip = match listen.ip() {
                ip if ip.is_unspecified() && ip.is_ipv4() => std::net::Ipv4Addr::LOCALHOST.into(),
                ip if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
                ip => ip,
            };
            *base = Some(format!("http://{}", SocketAddr::new(ip, listen.port())));
        }
    }

    /// Mints run `run` a token from `entropy` and registers its hash; the run waits on the
    /// grant's receiver. Refused when [`RUN_TOKENS_LIVE_MAX`] runs wait already, or when the
    /// node has no API address to report to.
    pub fn issue(
        self: &Arc<Self>,
        run: RunId,
        entropy: &dyn Entropy,
    ) -> Result<RunTokenGrant, ReportRefusal> {
        let base = self.base_url.lock().expect("run tokens lock").clone();
        let base = base.ok_or(ReportRefusal::NoReportAddress)?;
        let token = new_token(entropy, RUN_TOKEN_PREFIX);
        let hash = TokenHash::of(&token);
        let (sender, report) = oneshot::channel();
        {
            let mut inner = self.inner.lock().expect("run tokens lock");
            if inner.live.len() >= RUN_TOKENS_LIVE_MAX {
                return Err(ReportRefusal::TooManyWaiting);
            }
            let live = Live {
                run,
                sender: Some(sender),
            };
            inner.live.insert(hash.clone(), live);
        }
        Ok(RunTokenGrant {
            token,
            report_url: format!("{base}/v1/runs/{run}/result"),
            report,
            _live: LiveGuard {
                tokens: self.clone(),
                hash,
            },
        })
    }

    /// Delivers a report for run `run` carried with `token`. The token is checked first, so a
    /// stranger learns nothing from the body's errors; `result` is the parsed body (or why it
    /// did not parse, answered only to the token's holder). `run_over` is the engine's word
    /// that the run has ended: its task may not have been dropped yet (an abort lands a moment
    /// after the cancel's commit), and a report must not be taken by a run already over.
    pub fn report<E>(
        &self,
        run: RunId,
        token: Option<&str>,
        run_over: bool,
        result: Result<WebhookResult, E>,
    ) -> Result<(), ReportOrBody<E>> {
        let hash = TokenHash::of(token.ok_or(ReportRefusal::NoToken)?);
        let mut inner = self.inner.lock().expect("run tokens lock");
        if let Some(live) = inner.live.get_mut(&hash) {
            if live.run != run {
                return Err(ReportRefusal::WrongRun(run).into());
            }
            if live.sender.is_none() {
                return Err(ReportRefusal::AlreadyReported(run).into());
            }
            if run_over {
                return Err(ReportRefusal::RunEnded(run).into());
            }
            let result = result.map_err(ReportOrBody::Body)?;
            let sender = live.sender.take().expect("checked above");
            // A run that stopped waiting this instant (its guard retires it next) is over.
            return sender
                .send(result)
                .map_err(|_| ReportRefusal::RunEnded(run).into());
        }
        match inner.retired.get(&hash) {
            Some(retired) if retired.run != run => Err(ReportRefusal::WrongRun(run).into()),
            Some(retired) if retired.reported => Err(ReportRefusal::AlreadyReported(run).into()),
            Some(_) => Err(ReportRefusal::RunEnded(run).into()),
            None => Err(ReportRefusal::UnknownToken.into()),
        }
    }

    /// Whether `token` is a run token this node issued and still remembers (live or retired):
    /// the API charges only such tokens to the request-rate limit.
    pub fn knows(&self, token: &str) -> bool {
        let hash = TokenHash::of(token);
        let inner = self.inner.lock().expect("run tokens lock");
        inner.live.contains_key(&hash) || inner.retired.contains_key(&hash)
    }

    /// Runs waiting for a report now.
    pub fn live(&self) -> usize {
        self.inner.lock().expect("run tokens lock").live.len()
    }

    /// Ended waits remembered now.
    pub fn retired(&self) -> usize {
        self.inner.lock().expect("run tokens lock").retired.len()
    }

    fn retire(&self, hash: &TokenHash) {
        let mut inner = self.inner.lock().expect("run tokens lock");
        let Some(live) = inner.live.remove(hash) else {
            return;
        };
        let retired = Retired {
            run: live.run,
            reported: live.sender.is_none(),
        };
        inner.retired.insert(hash.clone(), retired);
        inner.retired_order.push_back(hash.clone());
        while inner.retired_order.len() > RUN_TOKENS_RETIRED_MAX {
            if let Some(oldest) = inner.retired_order.pop_front() {
                inner.retired.remove(&oldest);
            }
        }
    }
}

/// A refused report, or a token holder's body that did not parse.
#[derive(Debug)]
pub enum ReportOrBody<E> {
    Refused(ReportRefusal),
    Body(E),
}

impl<E> From<ReportRefusal> for ReportOrBody<E> {
    fn from(refusal: ReportRefusal) -> Self {
        ReportOrBody::Refused(refusal)
    }
}

#[cfg(test)]
#[path = "run_tokens_tests.rs"]
mod tests;

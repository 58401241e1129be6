//! Who is calling: the readiness gate and the bearer-token check every route except `/v1/health`
//! passes through. Scoping rules (docs/api.md): an operator token sees its tenant only; an agent
//! token acts on its own agent only. Another tenant's resources answer 404, so their existence
//! is not revealed.

use std::sync::{Arc, OnceLock};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::rate_limit::{RateLimited, RateLimits};
use super::slots::{SlotPermit, Slots};
use super::streams::StreamSlots;
use crate::engine::agent::{Agent, AgentId};
use crate::engine::roster::PulseCard;
use crate::engine::spec_error::echo;
use crate::engine::tenant::{Principal, TokenHash};
use crate::engine::wakeup::RequestedBy;
use crate::heartbeats::HeartbeatRunner;
use crate::shell::Shell;
use crate::transcript::SharedTranscriptStore;

/// Closed while the node recovers (requests answer `503 recovering`), open once it is ready.
///
/// Why its parts sit behind one `Arc`: axum hands every request its own clone of the router's
/// state, so a gate is cloned and dropped once per request. With six shared parts of its own
/// that was six reference counts up and down per request, about 1.7 % of a single pulse's CPU
/// in a profile of the `pulses` benchmark; now it is one.
#[derive(Clone)]
pub struct Gate {
    parts: Arc<GateParts>,
}

/// What a [`Gate`] shares between its clones.
struct GateParts {
    shell: OnceLock<Arc<Shell>>,
    /// The node's live event stream slots (`api::streams`).
    streams: StreamSlots,
    /// Every token's request-rate bucket (`api::rate_limit`).
    rate_limits: RateLimits,
    /// Requests in flight per token, tenant and node (`api::in_flight`).
    requests: Slots,
    /// Where run transcripts are read from (`GET /v1/runs/{id}/log`).
    transcripts: SharedTranscriptStore,
    /// The heartbeats' ticks, once the node is ready (`api::heartbeats`).
    heartbeats: OnceLock<Arc<HeartbeatRunner>>,
    /// Whether the RFC 0060 test seam answers.
    heartbeat_seam: bool,
}

impl Gate {
    pub fn new(transcripts: SharedTranscriptStore) -> Self {
        Gate {
            parts: Arc::new(GateParts {
                shell: OnceLock::new(),
                streams: StreamSlots::default(),
                rate_limits: RateLimits::default(),
                requests: super::in_flight::request_slots(),
                transcripts,
                heartbeats: OnceLock::new(),
                heartbeat_seam: false,
            }),
        }
    }

    /// The same gate, with the heartbeat test seam on or off. Only before the gate is shared
    /// (the node sets it once, when it builds its gate).
    pub fn with_heartbeat_seam(mut self, on: bool) -> Self {
        Arc::get_mut(&mut self.parts)
            .expect("the test seam is set before the gate is cloned")
            .heartbeat_seam = on;
        self
    }

    /// Hands the API the heartbeats' runner (before [`Gate::open`]).
    pub fn open_heartbeats(&self, runner: Arc<HeartbeatRunner>) {
        assert!(
            self.parts.heartbeats.set(runner).is_ok(),
            "heartbeats opened twice"
        );
    }

    /// The heartbeats' runner (set before the gate opens, so any caller past it finds it).
    pub(super) fn heartbeats(&self) -> Option<&Arc<HeartbeatRunner>> {
        self.parts.heartbeats.get()
    }

    /// Whether the heartbeat test seam answers.
    pub(super) fn heartbeat_seam(&self) -> bool {
        self.parts.heartbeat_seam
    }

    /// Lets requests through to `shell`.
    pub fn open(&self, shell: Arc<Shell>) {
        assert!(self.parts.shell.set(shell).is_ok(), "gate opened twice");
    }

    /// The shell, once ready.
    pub fn shell(&self) -> Result<Arc<Shell>, ApiError> {
        self.parts.shell.get().cloned().ok_or_else(|| ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "recovering",
            message: "the node is still recovering its state; retry in a moment".into(),
            field: None,
            retry_after_s: None,
        })
    }

    /// Charges one request of the authenticated token `token` to its bucket, at the node's
    /// monotonic now (429 `rate_limited` past the limit).
    pub(super) fn charge(&self, shell: &Shell, token: &TokenHash) -> Result<(), RateLimited> {
        let now_ms = u64::try_from(shell.clock().mono_now().as_millis()).unwrap_or(u64::MAX);
        self.parts.rate_limits.charge(token, now_ms)
    }
}

/// An authenticated request.
pub struct Caller {
    pub shell: Arc<Shell>,
    pub principal: Principal,
    /// The node's live event stream slots.
    pub streams: StreamSlots,
    /// The node's transcript store.
    pub transcripts: SharedTranscriptStore,
    /// The request's slot among the requests in flight, held until the answer is produced
    /// (dropped with the caller), or given back by a live stream.
    in_flight: Option<SlotPermit>,
}

impl FromRequestParts<Gate> for Caller {
    type Rejection = Response;

    /// Authenticates the bearer token, then charges the request to it: an unknown token is
    /// refused before it can cost anything or take a bucket.
    async fn from_request_parts(parts: &mut Parts, gate: &Gate) -> Result<Self, Self::Rejection> {
        let shell = gate.shell().map_err(IntoResponse::into_response)?;
        let token = bearer_token(parts).map_err(IntoResponse::into_response)?;
        let hash = TokenHash::of(token);
        let principal = shell.engine().principal(&hash).cloned().ok_or_else(|| {
            ApiError::unauthenticated(
                "this token is not known; use the operator token or an agent's token",
            )
            .into_response()
        })?;
        gate.charge(&shell, &hash)
            .map_err(IntoResponse::into_response)?;
        let in_flight = gate
            .parts
            .requests
            .try_acquire(&principal)
            .map_err(|refusal| {
                // Why close: the refused client's connection would otherwise stay open, idle, for
                // the header timeout; closing it keeps a token past its cap from hoarding
                // connections with requests it knows will be refused.
                let mut response = refusal.request_error().into_response();
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                response
            })?;
        Ok(Caller {
            shell,
            principal,
            streams: gate.parts.streams.clone(),
            transcripts: gate.parts.transcripts.clone(),
            in_flight: Some(in_flight),
        })
    }
}

pub(super) fn bearer_token(parts: &Parts) -> Result<&str, ApiError> {
    let value = parts.headers.get(header::AUTHORIZATION).ok_or_else(|| {
        ApiError::unauthenticated(
            "send `Authorization: Bearer <token>`; the operator token is printed on first start \
             and kept in <data-dir>/operator-token",
        )
    })?;
    value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .filter(|t| is_token_shaped(t))
        .ok_or_else(|| {
            ApiError::unauthenticated(
                "the Authorization header must be `Bearer <token>`: the word Bearer, exactly one \
                 space, then the token, with no other spaces",
            )
        })
}

/// Whether `token` can be a token as sent: non-empty, no whitespace anywhere. Why so strict:
/// docs/api.md promises exactly one space, and proxies or logs that parse the header the
/// documented way must see the same token the node authenticates.
fn is_token_shaped(token: &str) -> bool {
    !token.is_empty() && !token.contains(|c: char| c.is_whitespace())
}

impl Caller {
    /// Runs `command` through the node's writer for this request, answered once durable. A
    /// request never waits for room in the writer's queue: a full queue is 503 `busy`
    /// (ADR 0012).
    pub async fn execute(
        &self,
        command: crate::engine::Command,
    ) -> Result<crate::engine::Decision, ApiError> {
        Ok(self
            .shell
            .execute(command, crate::writer::WhenFull::Refuse)
            .await?)
    }

    /// Gives the request's in-flight slot back: a live stream, which holds a stream slot for
    /// as long as it lasts, is not a request in flight.
    pub fn end_request(&mut self) {
        self.in_flight = None;
    }

    /// Who a wakeup this caller sends is recorded as asked by.
    pub fn requested_by(&self) -> RequestedBy {
        match self.principal {
            Principal::Operator { .. } => RequestedBy::Operator,
            Principal::Agent { .. } => RequestedBy::Agent,
        }
    }

    /// The caller's tenant, if the caller is its operator.
    pub fn operator(&self) -> Result<&str, ApiError> {
        match &self.principal {
            Principal::Operator { tenant } => Ok(tenant),
            Principal::Agent { .. } => Err(ApiError::forbidden(
                "this needs the operator token; an agent token acts only on its own agent",
            )),
        }
    }

    /// The agent called `id`, if the caller may see it: its tenant's operator, or itself.
    pub fn agent(&self, id: AgentId) -> Result<Agent, ApiError> {
        self.with_agent(id, Agent::clone)
    }

    /// `look` at the agent called `id`, if the caller may see it, without copying it. Why: a
    /// batch of pulses checks every agent it names, and an agent's spec (prompts, tool
    /// schemas) is large; copying it per pulse once cost a tenth of a simulated fleet's time.
    pub fn with_agent<T>(
        &self,
        id: AgentId,
        look: impl FnOnce(&Agent) -> T,
    ) -> Result<T, ApiError> {
        self.visible(&self.shell.engine(), id).map(look)
    }

    /// The pulse card (ADR 0027) of each of `ids`, in order, where the caller may see the agent:
    /// [`Caller::with_agent`]'s check and answers, under one hold of the engine's lock. Why
    /// cards: a batch of a thousand pulses looked each agent up in the engine's B-tree and
    /// compared its tenant's name, most of a batch's time (a profile of the `pulses`
    /// benchmark); a card is one load from a dense table, its tenant a number.
    pub fn pulse_cards(
        &self,
        ids: impl IntoIterator<Item = AgentId>,
    ) -> Vec<Result<PulseCard, ApiError>> {
        let engine = self.shell.engine();
        let tenant = engine.tenant_rank(self.principal.tenant());
        ids.into_iter()
            .map(|id| self.visible_card(&engine, tenant, id))
            .collect()
    }

    /// [`Caller::pulse_cards`] for one agent.
    pub fn pulse_card(&self, id: AgentId) -> Result<PulseCard, ApiError> {
        let engine = self.shell.engine();
        let tenant = engine.tenant_rank(self.principal.tenant());
        self.visible_card(&engine, tenant, id)
    }

    /// The card of the agent called `id` in `engine`, if the caller (of tenant rank `tenant`)
    /// may see it.
    fn visible_card(
        &self,
        engine: &crate::engine::Engine,
        tenant: Option<crate::engine::roster::TenantRank>,
        id: AgentId,
    ) -> Result<PulseCard, ApiError> {
        let card = engine
            .pulse_card(id)
            .filter(|card| Some(card.tenant) == tenant);
        self.allowed(id, card)
    }

    /// The agent called `id` in `engine`, if the caller may see it.
    fn visible<'e>(
        &self,
        engine: &'e crate::engine::Engine,
        id: AgentId,
    ) -> Result<&'e Agent, ApiError> {
        let agent = engine
            .agent(id)
            .filter(|a| a.tenant == self.principal.tenant());
        self.allowed(id, agent)
    }

    /// `found`, what the caller's tenant holds of the agent called `id`, if the caller may act
    /// on it: its tenant's operator, or the agent itself.
    fn allowed<T>(&self, id: AgentId, found: Option<T>) -> Result<T, ApiError> {
        let found = found.ok_or_else(|| ApiError::not_found(format!("no agent with id {id}")))?;
        match &self.principal {
            Principal::Agent { agent: own, .. } if *own != id => Err(ApiError::forbidden(format!(
                "an agent token acts only on its own agent ({own}), not agent {id}"
            ))),
            _ => Ok(found),
        }
    }

    /// Like [`Caller::agent`], but only for the tenant's operator.
    pub fn operated_agent(&self, id: AgentId) -> Result<Agent, ApiError> {
        self.operator()?;
        self.agent(id)
    }
}

/// Parses a numeric path id, naming `field` when it is not one.
pub fn parse_id(field: &'static str, raw: &str) -> Result<u64, ApiError> {
    raw.parse().map_err(|_| {
        ApiError::invalid_field(
            field,
            format!("{field} must be a number, got {}", echo(raw)),
        )
    })
}

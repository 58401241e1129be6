//! What a node gives its runs: [`RunServices`] (the network, the price table, where secrets
//! come from), and [`ShellHost`], the production [`RunHost`] that records spend through the
//! shell as it happens.

use std::sync::Arc;

use super::adapter::{RecordFuture, RunHost};
use super::model::{GetRequest, PostAnswer, PostError, PostFuture, PostRequest, Poster};
use super::pricing::PriceTable;
#[cfg(madsim)]
use super::spawn::NoSpawner;
use super::spawn::SharedSpawner;
use super::tools::{ToolHttp, ToolHttpAnswer, ToolHttpError, ToolHttpFuture};
use crate::engine::run::RunId;
use crate::engine::usage::Usage;
use crate::engine::Command;
use crate::net::{
    Endpoint, JsonBody, OutboundClient, OutboundError, OutboundHeader, OutboundPolicy, OutboundRequest,
    TlsOptions, TlsSetupError,
};
use crate::redact::Redactor;
use crate::shell::Shell;
use crate::writer::WhenFull;

/// Reads a secret by environment variable name.
pub type SecretSource = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Where each run gets its poster, knowing the run's tenant: the node's outbound client with
/// the address policy for that tenant ([`GuardedOutbound`]). Any plain [`Poster`] is a source
/// too, handing every run itself (the simulator's client, test stubs).
pub trait PosterSource: Send + Sync {
    /// The poster for one run of an agent of `tenant`.
    fn poster_for(self: Arc<Self>, tenant: &str) -> Arc<dyn Poster>;
}

impl<P: Poster + 'static> PosterSource for P {
    fn poster_for(self: Arc<Self>, _tenant: &str) -> Arc<dyn Poster> {
        self
    }
}

/// Production's poster source: one outbound client (TLS roots shared), asked per run for a
/// copy whose address policy is the node's [`OutboundPolicy`] for the run's tenant (the SSRF
/// guard, `crate::net::policy`).
pub struct GuardedOutbound {
    pub client: OutboundClient,
    pub policy: Arc<OutboundPolicy>,
}

impl PosterSource for GuardedOutbound {
    fn poster_for(self: Arc<Self>, tenant: &str) -> Arc<dyn Poster> {
        let policy = self.policy.for_tenant(tenant);
        Arc::new(self.client.clone().with_address_policy(policy))
    }
}

/// The services a node's runs share.
#[derive(Clone)]
pub struct RunServices {
    /// Where each run's poster comes from (`PosterSource::poster_for` the run's tenant).
    pub poster: Arc<dyn PosterSource>,
    pub prices: PriceTable,
    pub secrets: SecretSource,
    /// Starts the children of `process` and coding-CLI runs.
    pub spawner: SharedSpawner,
    /// A child's working directory when its spec names none (the node's data directory).
    pub work_dir: Option<std::path::PathBuf>,
    /// The tokens of runs waiting for an asynchronous webhook's report (shared with the API).
    pub run_tokens: super::run_tokens::SharedRunTokens,
}

impl RunServices {
    /// Production's services with every default: the outbound client with the standard
    /// roots and the default address policy, no prices (tokens are counted, cost is zero),
    /// secrets from the environment.
    pub fn standard() -> Self {
        Self::production(&TlsOptions::default(), PriceTable::default())
            .expect("the standard roots always load")
    }

    /// Production's services: the outbound client trusting `tls`'s roots under the default
    /// address policy (special addresses refused to every tenant but `default`), `prices`,
    /// secrets from the environment. Reads the extra CA file (blocking, at start-up only).
    pub fn production(tls: &TlsOptions, prices: PriceTable) -> Result<Self, TlsSetupError> {
        Self::guarded(tls, prices, OutboundPolicy::default())
    }

    /// Like [`RunServices::production`], with the node config's address policy.
    pub fn guarded(
        tls: &TlsOptions,
        prices: PriceTable,
        policy: OutboundPolicy,
    ) -> Result<Self, TlsSetupError> {
        Ok(RunServices {
            poster: Arc::new(GuardedOutbound {
                client: OutboundClient::new(tls)?,
                policy: Arc::new(policy),
            }),
            prices,
            secrets: Self::environment_secrets(),
            spawner: production_spawner(),
            work_dir: None,
            run_tokens: super::run_tokens::RunTokens::shared(),
        })
    }

    /// The same services, with children started in `dir` when their spec names no `cwd`.
    pub fn with_work_dir(self, dir: std::path::PathBuf) -> Self {
        RunServices {
            work_dir: Some(dir),
            ..self
        }
    }

    /// Secrets from the process environment (production).
    pub fn environment_secrets() -> SecretSource {
        Arc::new(|name: &str| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }
}

/// Real processes (the simulator's build starts none; it gives its own spawner).
fn production_spawner() -> SharedSpawner {
    #[cfg(not(madsim))]
    return Arc::new(super::process_spawner::TokioSpawner);
    #[cfg(madsim)]
    return Arc::new(NoSpawner);
}

/// The production run host: spend goes through the shell, as a `RecordUsage` command.
pub struct ShellHost {
    pub shell: Arc<Shell>,
    pub services: RunServices,
    /// This run's poster: the services' poster for the agent's tenant.
    pub poster: Arc<dyn Poster>,
}

impl ShellHost {
    /// The host of one run of an agent of `tenant`.
    pub fn for_run(shell: Arc<Shell>, services: RunServices, tenant: &str) -> Self {
        let poster = services.poster.clone().poster_for(tenant);
        ShellHost {
            shell,
            services,
            poster,
        }
    }
}

impl RunHost for ShellHost {
    fn record_usage(&self, run: RunId, usage: Usage) -> RecordFuture<'_, Option<u64>> {
        Box::pin(async move {
            self.shell
                .execute(Command::RecordUsage { run, usage }, WhenFull::Wait)
                .await
                .map_err(|error| error.to_string())?;
            let now_ms = self.shell.clock().wall_now_ms();
            Ok(self.shell.engine().budget_left(run, now_ms))
        })
    }

    fn poster(&self) -> Arc<dyn Poster> {
        self.poster.clone()
    }

    fn prices(&self) -> &PriceTable {
        &self.services.prices
    }

    fn secret(&self, name: &str) -> Option<String> {
        (self.services.secrets)(name)
    }

    fn spawner(&self) -> SharedSpawner {
        self.services.spawner.clone()
    }

    fn work_dir(&self) -> Option<std::path::PathBuf> {
        self.services.work_dir.clone()
    }

    fn record_process_group(&self, run: RunId, pgid: u32) -> RecordFuture<'_, ()> {
        Box::pin(async move {
            self.shell
                .execute(Command::RecordProcessGroup { run, pgid }, WhenFull::Wait)
                .await
                .map(|_| ())
                .map_err(|error| error.to_string())
        })
    }

    fn live_groups(&self) -> Option<Arc<super::live_groups::LiveGroups>> {
        Some(self.shell.executor.live_groups())
    }

    fn issue_run_token(
        &self,
        run: RunId,
    ) -> Result<super::run_tokens::RunTokenGrant, super::run_tokens::ReportRefusal> {
        self.services.run_tokens.issue(run, &**self.shell.entropy())
    }
}

/// A poster's header as the transport takes it (a sensitive one stays redacted in errors).
fn outbound_header(header: &super::model::Header) -> OutboundHeader<'_> {
    match header.sensitive {
        true => OutboundHeader::sensitive(&header.name, &header.value),
        false => OutboundHeader::plain(&header.name, &header.value),
    }
}

/// An outbound answer or error as the poster seam speaks them.
fn post_result(result: Result<crate::net::OutboundAnswer, OutboundError>) -> Result<PostAnswer, PostError> {
    match result {
        Ok(answer) => Ok(PostAnswer {
            status: answer.status.as_u16(),
            retry_after_ms: answer.retry_after_ms,
            body: answer.body,
        }),
        Err(OutboundError::Timeout { timeout_ms }) => Err(PostError::Timeout { timeout_ms }),
        Err(OutboundError::TooLarge { limit_bytes }) => Err(PostError::TooLarge {
            limit_bytes: limit_bytes as u64,
        }),
        Err(error) => Err(PostError::Failed(error.to_string())),
    }
}

/// Production's poster: the outbound HTTP(S) client (`crate::net`).
impl Poster for OutboundClient {
    fn get<'a>(&'a self, request: GetRequest<'a>) -> PostFuture<'a> {
        Box::pin(async move {
            let endpoint = Endpoint::parse(request.url)
                .map_err(|error| PostError::Failed(error.to_string()))?;
            let bytes_max = usize::try_from(request.response_bytes_max).unwrap_or(usize::MAX);
            let headers: Vec<OutboundHeader<'_>> = request.headers.iter().map(outbound_header).collect();
            post_result(self.get(&endpoint, &headers, request.timeout_ms, bytes_max).await)
        })
    }

    fn post<'a>(&'a self, request: PostRequest<'a>) -> PostFuture<'a> {
        Box::pin(async move {
            let endpoint = Endpoint::parse(request.base_url)
                .map_err(|error| PostError::Failed(error.to_string()))?;
            let headers: Vec<OutboundHeader<'_>> =
                request.headers.iter().map(outbound_header).collect();
            let mut outbound = OutboundRequest::new(&endpoint, request.path, &request.body);
            outbound.headers = &headers;
            outbound.timeout_ms = request.timeout_ms;
            outbound.response_bytes_max =
                usize::try_from(request.response_bytes_max).unwrap_or(usize::MAX);
            post_result(self.post_json(outbound).await)
        })
    }
}

/// HTTP tools reach their URLs through the run's poster; answers come back with the run's
/// secrets (its redactor's) taken out.
pub struct PosterToolHttp(pub Arc<dyn Poster>, pub Redactor);

impl ToolHttp for PosterToolHttp {
    fn post(
        &self,
        url: &str,
        body: serde_json::Value,
        timeout_ms: u64,
        response_bytes_max: u64,
    ) -> ToolHttpFuture {
        let (poster, redactor, url) = (self.0.clone(), self.1.clone(), url.to_string());
        Box::pin(async move {
            let request = PostRequest {
                base_url: &url,
                path: "",
                headers: Vec::new(),
                body: JsonBody::from(&body),
                timeout_ms,
                response_bytes_max,
            };
            match poster.post(request).await {
                Ok(answer) => Ok(ToolHttpAnswer {
                    status: answer.status,
                    body: without_secrets(&redactor, answer.body),
                }),
                Err(PostError::Timeout { timeout_ms }) => {
                    Err(ToolHttpError::Timeout { timeout_ms })
                }
                Err(error) => Err(ToolHttpError::Transport(error.to_string())),
            }
        })
    }
}

/// `body` with `redactor`'s secrets taken out (unchanged, bytes and all, when it has none).
/// Why: the toolbox cuts a tool's answer (an error's output, a body past `response_bytes_max`)
/// before the transcript's redactor sees it, so a key echoed across the cut would survive as a
/// fragment no redactor recognises, in the transcript and in the run's detail.
fn without_secrets(redactor: &Redactor, body: bytes::Bytes) -> bytes::Bytes {
    match redactor.redact(&String::from_utf8_lossy(&body)) {
        std::borrow::Cow::Borrowed(_) => body,
        std::borrow::Cow::Owned(clean) => bytes::Bytes::from(clean),
    }
}

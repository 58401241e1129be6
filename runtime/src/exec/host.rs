//! What a node gives its runs: [`RunServices`] (the network, the price table, where secrets
//! come from), and [`ShellHost`], the production [`RunHost`] that records spend through the
//! shell as it happens.

use std::sync::Arc;

use super::adapter::RunHost;
use super::model::Poster;
use super::pricing::PriceTable;
use crate::engine::run::RunId;
use crate::engine::usage::Usage;
use crate::engine::Command;
use crate::shell::Shell;

/// Reads a secret by environment variable name.
pub type SecretSource = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The services a node's runs share.
#[derive(Clone)]
pub struct RunServices {
    pub poster: Arc<dyn Poster>,
    pub prices: PriceTable,
    pub secrets: SecretSource,
}

impl RunServices {
    /// Production's services with every default: the outbound client with the standard
    /// roots, no prices (tokens are counted, cost is zero), secrets from the environment.
    pub fn standard() -> Self {
        RunServices {
            poster: Arc::new(PlainHttpPoster),
            prices: PriceTable::default(),
            secrets: Self::environment_secrets(),
        }
    }

    /// Secrets from the process environment (production).
    pub fn environment_secrets() -> SecretSource {
        Arc::new(|name: &str| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }
}

/// The production run host: spend goes through the shell, as a `RecordUsage` command.
pub struct ShellHost {
    pub shell: Arc<Shell>,
    pub services: RunServices,
}

impl RunHost for ShellHost {
    fn record_usage(&self, run: RunId, usage: Usage) -> Result<Option<u64>, String> {
        self.shell
            .execute(Command::RecordUsage { run, usage })
            .map_err(|error| error.to_string())?;
        let engine = self.shell.engine();
        let now_ms = self.shell.clock().wall_now_ms();
        let owner = engine.owner_of(run).ok_or("the run is gone")?;
        Ok(owner.budget_left(now_ms))
    }

    fn poster(&self) -> &dyn Poster {
        &*self.services.poster
    }

    fn prices(&self) -> &PriceTable {
        &self.services.prices
    }

    fn secret(&self, name: &str) -> Option<String> {
        (self.services.secrets)(name)
    }
}

/// Interim poster over the API client: plain `http://IP:PORT` only. Replaced by the outbound
/// HTTPS client.
pub struct PlainHttpPoster;

impl Poster for PlainHttpPoster {
    fn post<'a>(&'a self, request: super::model::PostRequest<'a>) -> super::model::PostFuture<'a> {
        use super::model::{PostAnswer, PostError};
        use crate::api::client::{ApiClient, ClientError};
        Box::pin(async move {
            let addr = request
                .base_url
                .strip_prefix("http://")
                .map(|rest| rest.trim_end_matches('/'))
                .and_then(|rest| rest.parse().ok())
                .ok_or_else(|| PostError::Failed(format!("cannot reach {:?} yet", request.base_url)))?;
            let client = ApiClient::new(addr).with_timeout_ms(request.timeout_ms);
            match client.post_json(request.path, &request.body).await {
                Ok(answer) => Ok(PostAnswer {
                    status: answer.status.as_u16(),
                    retry_after_ms: None,
                    body: answer.body,
                }),
                Err(ClientError::Timeout { timeout_ms, .. }) => Err(PostError::Timeout { timeout_ms }),
                Err(error) => Err(PostError::Failed(error.to_string())),
            }
        })
    }
}

//! The `http` adapter: each run POSTs its wakeup to the agent's webhook, signed with
//! HMAC-SHA256, and takes the webhook's answer as the run's result, at once (`sync`) or later
//! through `POST /v1/runs/{id}/result` with the run's own token (`async`). docs/adapters/http.md.
//!
//! Every failure of the webhook (unreachable, a timeout, a 4xx/5xx, an answer that does not
//! parse, no report in time, a reported failure) fails the run for the breaker's *tool*
//! trigger: the webhook is a service the agent's work depends on, not a model call this node
//! made, so it must not open the breaker as if the model provider were down (the `llm`
//! trigger), and repeated webhook failures must still open it.

use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::{json, Value};

use super::adapter::{Adapter, AdapterFuture, AdapterOutcome, RunContext};
use super::model::{excerpt, Header, PostError, PostRequest};
use super::run_tokens::{ResultStatus, RunTokenGrant, WebhookResult};
use crate::engine::breaker::FailureCause;
use crate::engine::cli_spec::{WebhookMode, WebhookSpec};
use crate::engine::run::{ErrorClass, RunReport, RunStatus, StopReason};
use crate::engine::usage::Usage;
use crate::net::JsonBody;
use crate::transcript::EntryBody;
use crate::transcript::{excerpt as cut, FINAL_ANSWER_EXCERPT_BYTES_MAX};

/// Most bytes of a webhook's answer read; a longer one is a `parse_error`.
pub const WEBHOOK_ANSWER_BYTES_MAX: u64 = 1024 * 1024;
/// The header carrying the signed timestamp: Unix milliseconds of the node's clock.
pub const TIMESTAMP_HEADER: &str = "x-vigil-timestamp";
/// The header carrying `sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`.
pub const SIGNATURE_HEADER: &str = "x-vigil-signature";
/// What the signature's hex digits follow.
pub const SIGNATURE_PREFIX: &str = "sha256=";
/// What the run token is replaced with in the transcript's copy of the request.
const TOKEN_PLACEHOLDER: &str = "[run token]";
/// The transcript's id and name for the webhook call and the report.
const CALL_ID: &str = "webhook";

/// Calls a webhook.
#[derive(Debug, Clone)]
pub struct Webhook {
    spec: WebhookSpec,
}

impl Webhook {
    pub fn new(spec: WebhookSpec) -> Self {
        Webhook { spec }
    }
}

impl Adapter for Webhook {
    fn execute(&self, run: RunContext) -> AdapterFuture {
        let spec = self.spec.clone();
        Box::pin(async move { call(&spec, &run).await.unwrap_or_else(Failure::outcome) })
    }
}

/// `sha256=` and the hex HMAC-SHA256, keyed with `key`, of `"<timestamp_ms>.<body>"`.
pub fn signature(key: &[u8], timestamp_ms: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(timestamp_ms.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{SIGNATURE_PREFIX}{hex}")
}

/// Why a run failed, and whether the breaker counts it.
struct Failure {
    class: ErrorClass,
    detail: String,
    cause: Option<FailureCause>,
}

impl Failure {
    /// The webhook failed (counted on the breaker's tool trigger, see the module's comment).
    fn webhook(detail: impl Into<String>) -> Self {
        Failure {
            class: ErrorClass::WebhookError,
            detail: detail.into(),
            cause: Some(FailureCause::Tool),
        }
    }

    /// The webhook answered something that is not a result.
    fn parse(detail: impl Into<String>) -> Self {
        Failure {
            class: ErrorClass::ParseError,
            ..Failure::webhook(detail)
        }
    }

    /// The node could not call the webhook at all (a missing secret, no report address): a
    /// configuration problem, not the webhook's fault, so the breaker does not count it.
    fn setup(detail: impl Into<String>) -> Self {
        Failure {
            cause: None,
            ..Failure::webhook(detail)
        }
    }

    fn outcome(self) -> AdapterOutcome {
        AdapterOutcome {
            stop_reason: Some(StopReason::ToolError),
            error_class: Some(self.class),
            ..AdapterOutcome::new(RunStatus::Failed, self.detail, self.cause)
        }
    }
}

/// One run: sign and POST the wakeup, then read the result from the answer or the report.
async fn call(spec: &WebhookSpec, run: &RunContext) -> Result<AdapterOutcome, Failure> {
    let key = run.host.secret(&spec.secret_env).ok_or_else(|| {
        Failure::setup(format!(
            "the webhook's signing key is missing: the node's environment variable {} (adapter.secret_env) is not set",
            spec.secret_env
        ))
    })?;
    run.record_wakeup().await;
    let mut grant = match spec.mode {
        WebhookMode::Sync => None,
        WebhookMode::Async => Some(run.host.issue_run_token(run.run).map_err(|refusal| {
            Failure::setup(format!("could not issue the run's report token: {refusal}"))
        })?),
    };
    let (status, body) = post(spec, run, key.as_bytes(), grant.as_ref()).await?;
    match (spec.mode, status, grant.as_mut()) {
        (WebhookMode::Async, 202, Some(grant)) => await_report(spec, run, grant).await,
        (WebhookMode::Sync, 202, _) => Err(Failure::webhook(
            "the webhook answered 202 Accepted, but adapter.mode is sync: a sync webhook answers with its result (or set mode = \"async\")",
        )),
        (_, 200..=299, _) => Ok(finish(run, parse_answer(&body)?).await),
        (_, status, _) => Err(Failure::webhook(format!(
            "the webhook answered {status}{}: {}",
            if status == 401 || status == 403 { " (does it verify with the key in adapter.secret_env?)" } else { "" },
            excerpt(&String::from_utf8_lossy(&body))
        ))),
    }
}

/// The JSON the webhook receives.
fn request_body(spec: &WebhookSpec, run: &RunContext, grant: Option<&RunTokenGrant>) -> Value {
    let mut body = json!({
        "agent": { "id": run.agent, "name": run.agent_name },
        "run": {
            "id": run.run,
            "number": run.run_number,
            "source": run.source.as_str(),
            "reason": run.reason,
            "payload": run.payload,
            "task_key": run.task_key,
        },
        "mode": match spec.mode { WebhookMode::Sync => "sync", WebhookMode::Async => "async" },
    });
    if let Some(grant) = grant {
        body["report_url"] = json!(grant.report_url);
        body["report_token"] = json!(grant.token);
    }
    body
}

/// Signs and POSTs the wakeup through the run's poster (the SSRF guard of its tenant); answers
/// the status and body, each logged in the transcript.
async fn post(
    spec: &WebhookSpec,
    run: &RunContext,
    key: &[u8],
    grant: Option<&RunTokenGrant>,
) -> Result<(u16, bytes::Bytes), Failure> {
    let body = request_body(spec, run, grant);
    let timestamp_ms = run.transcript.now_ms();
    // The poster sends exactly these bytes, so the signature is over the bytes on the wire.
    // The webhook test verifies it over the bytes it received.
    let bytes = JsonBody::from(&body);
    let headers = vec![
        Header {
            name: TIMESTAMP_HEADER.into(),
            value: timestamp_ms.to_string(),
            sensitive: false,
        },
        Header {
            name: SIGNATURE_HEADER.into(),
            value: signature(key, timestamp_ms, bytes.bytes()),
            sensitive: false,
        },
    ];
    let mut logged = body.clone();
    if grant.is_some() {
        logged["report_token"] = json!(TOKEN_PLACEHOLDER);
    }
    run.transcript
        .write(EntryBody::ToolCall {
            id: CALL_ID.into(),
            name: CALL_ID.into(),
            arguments: logged,
        })
        .await;
    let request = PostRequest {
        base_url: &spec.url,
        path: "",
        headers,
        body: bytes,
        timeout_ms: spec.timeout_ms,
        response_bytes_max: WEBHOOK_ANSWER_BYTES_MAX,
    };
    let sent_at = tokio::time::Instant::now();
    let answer = run.host.poster().post(request).await.map(|mut answer| {
        answer.body = without_token(answer.body, grant);
        answer
    });
    let (output, failure) = match &answer {
        Ok(answer) => {
            let text = String::from_utf8_lossy(&answer.body).into_owned();
            (
                format!("{} {text}", answer.status),
                !(200..=299).contains(&answer.status),
            )
        }
        Err(error) => (error.to_string(), true),
    };
    run.transcript
        .write(EntryBody::ToolResult {
            id: CALL_ID.into(),
            name: CALL_ID.into(),
            output,
            is_error: failure,
            latency_ms: sent_at.elapsed().as_millis() as u64,
        })
        .await;
    match answer {
        Ok(answer) => Ok((answer.status, answer.body)),
        Err(PostError::Timeout { timeout_ms }) => Err(Failure::webhook(format!(
            "the webhook did not answer within adapter.timeout_ms = {timeout_ms}"
        ))),
        Err(error @ PostError::TooLarge { .. }) => {
            Err(Failure::parse(format!("the webhook's answer: {error}")))
        }
        Err(PostError::Failed(error)) => Err(Failure::webhook(format!(
            "could not reach the webhook: {error}"
        ))),
    }
}

/// `body` with the run token taken out. Why: a service that echoes its request would put the
/// token into the transcript and the run's detail, where anyone reading the run could report
/// for it while it waits.
fn without_token(body: bytes::Bytes, grant: Option<&RunTokenGrant>) -> bytes::Bytes {
    let Some(grant) = grant else {
        return body;
    };
    let text = String::from_utf8_lossy(&body);
    if !text.contains(&grant.token) {
        return body;
    }
    bytes::Bytes::from(text.replace(&grant.token, TOKEN_PLACEHOLDER))
}

/// A sync webhook's 2xx answer: a JSON object `{status?, output?, usage?}`.
fn parse_answer(body: &[u8]) -> Result<WebhookResult, Failure> {
    serde_json::from_slice(body).map_err(|error| {
        Failure::parse(format!(
            "the webhook's 2xx answer is not a result ({{\"status\": \"succeeded\"|\"failed\", \"output\": \"…\", \"usage\": {{…}}}}): {error}"
        ))
    })
}

/// Waits for the report, at most `report_wait_sec` (the executor's `limits.run_timeout_ms`
/// ends the run earlier if it is shorter; dropping the grant then retires the token).
async fn await_report(
    spec: &WebhookSpec,
    run: &RunContext,
    grant: &mut RunTokenGrant,
) -> Result<AdapterOutcome, Failure> {
    run.transcript
        .write(EntryBody::Note {
            text: format!(
                "the webhook accepted the run (202); waiting up to {} s for its report at {}",
                spec.report_wait_sec, grant.report_url
            ),
        })
        .await;
    let wait = Duration::from_secs(spec.report_wait_sec);
    let waited_from = tokio::time::Instant::now();
    let report = match tokio::time::timeout(wait, &mut grant.report).await {
        Ok(Ok(report)) => report,
        Ok(Err(_)) => return Err(Failure::webhook("the run's report channel closed")),
        Err(_) => return Err(Failure::webhook(format!(
            "the webhook accepted the run but sent no report within adapter.report_wait_sec = {}",
            spec.report_wait_sec
        ))),
    };
    run.transcript
        .write(EntryBody::ToolResult {
            id: "report".into(),
            name: "webhook_report".into(),
            output: report.output.clone().unwrap_or_default(),
            is_error: report.status == Some(ResultStatus::Failed),
            latency_ms: waited_from.elapsed().as_millis() as u64,
        })
        .await;
    Ok(finish(run, report).await)
}

/// The run's end from the webhook's result: its usage recorded, its output as the answer.
async fn finish(run: &RunContext, result: WebhookResult) -> AdapterOutcome {
    if let Some(usage) = result.usage {
        let usage = Usage {
            llm_calls: 0,
            input_tokens: usage.input_tokens,
            cached_input_tokens: usage.cached_input_tokens,
            output_tokens: usage.output_tokens,
            cost_micro_usd: usage.cost_usd.map_or(0, |cost| cost.0),
        };
        if let Err(error) = run.host.record_usage(run.run, usage).await {
            tracing::warn!(run = %run.run, %error, "could not record a webhook's usage");
        }
    }
    let output = result.output.unwrap_or_default();
    let answer = cut(&output, FINAL_ANSWER_EXCERPT_BYTES_MAX);
    let report = RunReport {
        answer_excerpt: (!output.is_empty()).then_some(answer.text),
        excerpt_truncated: answer.truncated,
        ..RunReport::default()
    };
    let outcome = match result.status.unwrap_or(ResultStatus::Succeeded) {
        ResultStatus::Succeeded => AdapterOutcome {
            stop_reason: Some(StopReason::EndTurn),
            ..AdapterOutcome::new(
                RunStatus::Succeeded,
                format!("the webhook answered: {}", excerpt(&output)),
                None,
            )
        },
        ResultStatus::Failed => Failure::webhook(format!(
            "the webhook reported a failure: {}",
            excerpt(&output)
        ))
        .outcome(),
    };
    AdapterOutcome {
        report: Some(report),
        ..outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned against an independent HMAC-SHA256 (Python's `hmac` module) of
    /// `"1700000000000.{\"a\":1}"` keyed with `"key"`: the wire format must not drift.
    #[test]
    fn the_signature_is_hmac_sha256_over_timestamp_dot_body() {
        assert_eq!(
            signature(b"key", 1_700_000_000_000, br#"{"a":1}"#),
            "sha256=2c8bc12f88d77789404ce0a63cf69acf735ba98832f7a7d36147f537be556f3e"
        );
    }

    #[test]
    fn answers_parse_strictly() {
        let ok = parse_answer(br#"{"status":"failed","output":"no","usage":{"input_tokens":3}}"#)
            .ok()
            .unwrap();
        assert_eq!(ok.status, Some(ResultStatus::Failed));
        assert_eq!(ok.usage.unwrap().input_tokens, 3);
        assert!(parse_answer(b"{}").is_ok());
        for bad in [
            &b""[..],
            b"ok",
            br#"{"status":"done"}"#,
            br#"{"outptu":"x"}"#,
            br#"[1]"#,
        ] {
            let failure = parse_answer(bad).map(|_| ()).expect_err("refused");
            assert_eq!(failure.class, ErrorClass::ParseError);
            assert_eq!(failure.cause, Some(FailureCause::Tool));
        }
    }
}

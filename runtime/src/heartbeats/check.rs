//! The checks a heartbeat observes its world with: an HTTP `GET` whose JSON answer is the state,
//! or a command whose stdout is. Both are bounded by the tick's budget from outside (the caller
//! drops the future past `max_runtime_ms`); dropping a command's future kills its process group.

use std::collections::BTreeMap;

use super::CheckServices;
use crate::engine::predicate::{HeartbeatId, HEARTBEAT_MAX_RUNTIME_MS};
use crate::engine::run::RunId;
use crate::exec::child_env::NODE_ENV_ALLOWED;
use crate::exec::host::SecretSource;
use crate::exec::model::{GetRequest, Header, PostError, Poster};
use crate::exec::spawn::{Child, ChildEvent, GroupSignal, SpawnRequest, Stream};

/// Largest answer an HTTP check may give, or stdout a command check may write, in bytes; more
/// is an `error`.
pub const HEARTBEAT_ANSWER_BYTES_MAX: u64 = 256 * 1024;
/// The variable a command check gets with its heartbeat's id.
pub const HEARTBEAT_CHECK_ENV: &str = "VIGIL_HEARTBEAT_ID";

/// The check's secret headers, each value read from the node's environment variable it names
/// (an unset one is an error naming the variable, never a value).
pub(super) fn secret_headers(
    secrets: &SecretSource,
    named: &BTreeMap<String, String>,
) -> Result<Vec<Header>, String> {
    named
        .iter()
        .map(|(name, variable)| {
            let value = secrets(variable).ok_or_else(|| {
                format!(
                    "the environment variable {variable} (check.secret_headers.{name}) is not set"
                )
            })?;
            Ok(Header {
                name: name.to_ascii_lowercase().into(),
                value,
                sensitive: true,
            })
        })
        .collect()
}

/// GETs `url` with `headers` and reads the state from its JSON answer (at `pointer`, if given).
pub(super) async fn http(
    poster: &dyn Poster,
    url: &str,
    headers: Vec<Header>,
    pointer: Option<&str>,
) -> Result<serde_json::Value, String> {
    let request = GetRequest {
        url,
        headers,
        // The tick's budget bounds it from outside; this only has to be no tighter.
        timeout_ms: HEARTBEAT_MAX_RUNTIME_MS,
        response_bytes_max: HEARTBEAT_ANSWER_BYTES_MAX,
    };
    let answer = poster.get(request).await.map_err(|error| match error {
        PostError::TooLarge { limit_bytes } => {
            format!("the answer is larger than {limit_bytes} bytes")
        }
        other => other.to_string(),
    })?;
    if !(200..300).contains(&answer.status) {
        return Err(format!("the check answered HTTP {}", answer.status));
    }
    let body: serde_json::Value = serde_json::from_slice(&answer.body)
        .map_err(|error| format!("the answer is not JSON: {error}"))?;
    match pointer {
        None => Ok(body),
        Some(pointer) => body
            .pointer(pointer)
            .cloned()
            .ok_or_else(|| format!("the answer has nothing at {pointer}")),
    }
}

/// Runs `command args…` and reads the state from its stdout: exit 0 needed; the trimmed output
/// as JSON when it parses as JSON, else as a string.
pub(super) async fn command(
    services: &CheckServices,
    id: &HeartbeatId,
    command: &str,
    args: &[String],
) -> Result<serde_json::Value, String> {
    let mut env: BTreeMap<String, String> = NODE_ENV_ALLOWED
        .iter()
        .filter_map(|name| {
            std::env::var(name)
                .ok()
                .map(|value| (name.to_string(), value))
        })
        .collect();
    env.insert(HEARTBEAT_CHECK_ENV.into(), id.0.clone());
    let request = SpawnRequest {
        // Why run 0: a check belongs to no run, and run ids start at 1, so recovery's kill of
        // orphaned groups (which matches a recorded run's marker) can never take it for one.
        run: RunId(0),
        program: command.to_string(),
        args: args.to_vec(),
        cwd: services.work_dir.clone(),
        env,
        stdin: None,
    };
    let child = services
        .spawner
        .spawn(request)
        .await
        .map_err(|error| error.to_string())?;
    let mut child = KillOnDrop(Some(child));
    let (stdout, exit) = read_all(child.0.as_mut().expect("held until dropped").as_mut()).await?;
    child.0 = None; // it exited: nothing to kill
    match exit {
        Some(status) if status.success() => Ok(state_of(&stdout)),
        Some(status) => Err(match (status.code, status.signal) {
            (Some(code), _) => format!("the check exited with code {code}"),
            (None, Some(signal)) => format!("the check was killed by signal {signal}"),
            (None, None) => "the check ended without a status".to_string(),
        }),
        None => Err("the check's output closed but its exit was never told".into()),
    }
}

/// Reads a child's stdout to its end (stderr is dropped) and its exit.
async fn read_all(
    child: &mut dyn Child,
) -> Result<(String, Option<crate::exec::spawn::ExitStatus>), String> {
    let (mut stdout, mut exit) = (String::new(), None);
    while let Some(event) = child.next_event().await {
        match event {
            ChildEvent::Line(line) if line.stream == Stream::Stdout => {
                if (stdout.len() + line.text.len() + 1) as u64 > HEARTBEAT_ANSWER_BYTES_MAX {
                    return Err(format!(
                        "the check wrote more than {HEARTBEAT_ANSWER_BYTES_MAX} bytes"
                    ));
                }
                if !stdout.is_empty() {
                    stdout.push('\n');
                }
                stdout.push_str(&line.text);
            }
            ChildEvent::Line(_) => {}
            ChildEvent::Exited(status) => exit = Some(status),
        }
    }
    Ok((stdout, exit))
}

/// A command's output as a state: JSON when it is JSON (`3`, `{"unread": 3}`), else the text.
fn state_of(stdout: &str) -> serde_json::Value {
    let text = stdout.trim();
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_string()))
}

/// Kills the check's whole process group when its future is dropped before it exited (the tick
/// ran out of budget, the node is stopping), then reaps it.
struct KillOnDrop(Option<Box<dyn Child>>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let Some(mut child) = self.0.take() else {
            return;
        };
        child.signal_group(GroupSignal::Kill);
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(async move { child.group_gone().await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::state_of;
    use serde_json::json;

    #[test]
    fn a_commands_output_is_its_json_or_its_text() {
        assert_eq!(state_of("3\n"), json!(3));
        assert_eq!(state_of(" {\"unread\": 2}\n"), json!({"unread": 2}));
        assert_eq!(state_of("new mail\n"), json!("new mail"));
        assert_eq!(state_of(""), json!(""));
    }
}

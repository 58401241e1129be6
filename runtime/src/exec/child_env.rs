//! What a run's child is started with: its program and arguments as the adapter built them, its
//! working directory, and the whole of its environment (nothing else of the node's leaks in).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::adapter::RunContext;
use super::spawn::{SpawnRequest, RUN_MARKER_ENV};
use crate::engine::cli_spec::ChildSpec;

/// The node's own variables a child inherits, when set. Why these: `PATH` to find programs the
/// way a shell would; `HOME` and `USER` because CLIs keep their configuration and login under
/// the home directory; `LANG`, `LC_ALL` and `TZ` so text and times read as on the node; `TMPDIR`
/// for scratch files; `TERM` because some CLIs refuse to start without one. Nothing else: the
/// node's environment holds API keys and tokens, which a child gets only through `secret_env`.
pub const NODE_ENV_ALLOWED: [&str; 8] =
    ["PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "TERM"];

/// The variable holding the agent's id, and the one holding its name.
pub const AGENT_ID_ENV: &str = "VIGIL_AGENT_ID";
pub const AGENT_NAME_ENV: &str = "VIGIL_AGENT_NAME";

/// The spawn request for `context`'s run: `program` with `args`, `stdin`, in `spec.cwd` (else
/// the node's working directory for children), with the environment built from `spec`. Fails,
/// naming the variable, when a `secret_env` entry names a node variable that is not set (the run
/// fails with class `spawn_failed`).
pub fn child_request(
    context: &RunContext,
    program: &str,
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
    spec: &ChildSpec,
) -> Result<SpawnRequest, String> {
    Ok(SpawnRequest {
        run: context.run,
        program: program.to_string(),
        args,
        cwd: spec
            .cwd
            .as_ref()
            .map(PathBuf::from)
            .or_else(|| context.host.work_dir()),
        env: child_env(context, spec, &|name| std::env::var(name).ok())?,
        stdin,
    })
}

/// The child's whole environment: the allowed node variables (read through `node_var`), the
/// spec's plain `env`, its `secret_env` (read through the host), then Vigil's own variables,
/// which nothing can override.
fn child_env(
    context: &RunContext,
    spec: &ChildSpec,
    node_var: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, String> {
    let mut env: BTreeMap<String, String> = NODE_ENV_ALLOWED
        .iter()
        .filter_map(|name| node_var(name).map(|value| (name.to_string(), value)))
        .collect();
    env.extend(spec.env.clone());
    for (name, from) in &spec.secret_env {
        let value = context.host.secret(from).ok_or_else(|| {
            format!(
                "adapter.secret_env.{name}: the node's environment variable {from} is not set \
                 (set it where vigil serve runs)"
            )
        })?;
        env.insert(name.clone(), value);
    }
    env.insert(RUN_MARKER_ENV.to_string(), context.run.0.to_string());
    env.insert(AGENT_ID_ENV.to_string(), context.agent.0.to_string());
    env.insert(AGENT_NAME_ENV.to_string(), context.agent_name.clone());
    Ok(env)
}

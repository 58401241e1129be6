//! What a run's child is started with: its program and arguments as the adapter built them, its
//! working directory, and the whole of its environment (nothing else of the node's leaks in).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::adapter::RunContext;
use super::spawn::{SpawnRequest, RUN_MARKER_ENV};
use crate::engine::agent::AgentId;
use crate::engine::cli_spec::ChildSpec;
use crate::engine::run::RunId;

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
        env: child_env(
            &Marks {
                run: context.run,
                agent: context.agent,
                agent_name: &context.agent_name,
            },
            spec,
            &|name| context.host.secret(name),
            &|name| std::env::var(name).ok(),
        )?,
        stdin,
    })
}

/// Who the child works for: the values of Vigil's own variables.
struct Marks<'a> {
    run: RunId,
    agent: AgentId,
    agent_name: &'a str,
}

/// The child's whole environment: the allowed node variables (read through `node_var`), the
/// spec's plain `env`, its `secret_env` (read through `secret`, the host's), then Vigil's own
/// variables, which nothing can override.
fn child_env(
    marks: &Marks<'_>,
    spec: &ChildSpec,
    secret: &dyn Fn(&str) -> Option<String>,
    node_var: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, String> {
    let mut env: BTreeMap<String, String> = NODE_ENV_ALLOWED
        .iter()
        .filter_map(|name| node_var(name).map(|value| (name.to_string(), value)))
        .collect();
    env.extend(spec.env.clone());
    for (name, from) in &spec.secret_env {
        let value = secret(from).ok_or_else(|| {
            format!(
                "adapter.secret_env.{name}: the node's environment variable {from} is not set \
                 (set it where vigil serve runs)"
            )
        })?;
        env.insert(name.clone(), value);
    }
    env.insert(RUN_MARKER_ENV.to_string(), marks.run.0.to_string());
    env.insert(AGENT_ID_ENV.to_string(), marks.agent.0.to_string());
    env.insert(AGENT_NAME_ENV.to_string(), marks.agent_name.to_string());
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARKS: Marks<'static> = Marks {
        run: RunId(42),
        agent: AgentId(7),
        agent_name: "worker",
    };

    fn node(name: &str) -> Option<String> {
        match name {
            "PATH" => Some("/usr/bin".into()),
            "HOME" => Some("/home/vigil".into()),
            "OPENAI_API_KEY" | "VIGIL_OPERATOR_TOKEN" => Some("node-only".into()),
            _ => None,
        }
    }

    fn secrets(name: &str) -> Option<String> {
        (name == "NODE_TOKEN").then(|| "s3cret".to_string())
    }

    #[test]
    fn the_child_sees_the_allow_list_its_spec_and_vigils_marks_and_nothing_else() {
        let spec = ChildSpec {
            env: BTreeMap::from([("MODE".into(), "fast".into()), ("HOME".into(), "/tmp/h".into())]),
            secret_env: BTreeMap::from([("TOKEN".into(), "NODE_TOKEN".into())]),
            ..ChildSpec::default()
        };
        let env = child_env(&MARKS, &spec, &secrets, &node).unwrap();
        let expected: BTreeMap<String, String> = [
            ("HOME", "/tmp/h"),
            ("MODE", "fast"),
            ("PATH", "/usr/bin"),
            ("TOKEN", "s3cret"),
            ("VIGIL_AGENT_ID", "7"),
            ("VIGIL_AGENT_NAME", "worker"),
            ("VIGIL_RUN_ID", "42"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(env, expected);
    }

    #[test]
    fn the_spec_cannot_override_the_run_marker() {
        let spec = ChildSpec {
            env: BTreeMap::from([(RUN_MARKER_ENV.to_string(), "1".to_string())]),
            ..ChildSpec::default()
        };
        let env = child_env(&MARKS, &spec, &secrets, &node).unwrap();
        assert_eq!(env[RUN_MARKER_ENV], "42");
    }

    #[test]
    fn a_missing_secret_names_the_child_variable_and_the_node_variable() {
        let spec = ChildSpec {
            secret_env: BTreeMap::from([("TOKEN".into(), "NOT_SET_ON_THE_NODE".into())]),
            ..ChildSpec::default()
        };
        let error = child_env(&MARKS, &spec, &secrets, &node).unwrap_err();
        assert!(error.contains("adapter.secret_env.TOKEN"), "{error}");
        assert!(error.contains("NOT_SET_ON_THE_NODE"), "{error}");
    }
}

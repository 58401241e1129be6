//! Whether a coding CLI's binary can be found, for the warning given when an agent is saved
//! (the agent is saved either way: the CLI may be installed later; a run without it fails with
//! `adapter_not_installed`).

use std::path::{Path, PathBuf};

use crate::engine::agent::AdapterSpec;
use crate::engine::cli_spec::CodingCliSpec;

/// The variable a program name is looked up in.
const PATH_VAR: &str = "PATH";

/// A warning when `spec` is a coding CLI whose binary is not found: in `PATH` (the spec's own
/// `env.PATH`, else `node_path`), or at its path when it names one. Does file-system lookups:
/// call it off the async workers.
pub fn missing_binary_warning(spec: &AdapterSpec, node_path: Option<&str>) -> Option<String> {
    let (cli, spec, default) = match spec {
        AdapterSpec::ClaudeLocal(spec) => ("claude_local", spec, super::claude::DEFAULT_BINARY),
        AdapterSpec::CodexLocal(spec) => ("codex_local", spec, super::codex::DEFAULT_BINARY),
        _ => return None,
    };
    let binary = binary_of(spec, default);
    if find(binary, spec, node_path).is_some() {
        return None;
    }
    Some(format!(
        "{cli}: the CLI {binary:?} (adapter.binary) is not found in this node's PATH; the agent is saved, but its runs fail with adapter_not_installed until it is installed"
    ))
}

/// The warnings saving an agent of `spec` answers with: a coding CLI whose binary is not found.
/// The lookup runs on the blocking pool. Under the simulator there are none (its hosts have no
/// files, and the answer must not depend on the machine that runs it).
pub async fn save_warnings(spec: &AdapterSpec) -> Vec<String> {
    if !matches!(spec, AdapterSpec::ClaudeLocal(_) | AdapterSpec::CodexLocal(_)) {
        return Vec::new();
    }
    #[cfg(madsim)]
    {
        Vec::new()
    }
    #[cfg(not(madsim))]
    {
        let spec = spec.clone();
        let node_path = std::env::var(PATH_VAR).ok();
        let lookup = move || missing_binary_warning(&spec, node_path.as_deref());
        tokio::task::spawn_blocking(lookup)
            .await
            .ok()
            .flatten()
            .into_iter()
            .collect()
    }
}

/// The program a spec runs.
pub fn binary_of<'a>(spec: &'a CodingCliSpec, default: &'a str) -> &'a str {
    spec.binary.as_deref().unwrap_or(default)
}

/// Where `binary` would be found: as given when it holds a `/` (relative to the spec's `cwd`),
/// else in the first `PATH` directory that has it as an executable file.
fn find(binary: &str, spec: &CodingCliSpec, node_path: Option<&str>) -> Option<PathBuf> {
    if binary.contains('/') {
        let path = match &spec.child.cwd {
            Some(cwd) => Path::new(cwd).join(binary),
            None => PathBuf::from(binary),
        };
        return is_executable(&path).then_some(path);
    }
    let path_var = spec
        .child
        .env
        .get(PATH_VAR)
        .map(String::as_str)
        .or(node_path)?;
    std::env::split_paths(path_var)
        .map(|dir| dir.join(binary))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A fresh directory of this test's own.
    fn scratch(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vigil-cli-install-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn claude(binary: Option<&str>) -> AdapterSpec {
        AdapterSpec::ClaudeLocal(CodingCliSpec {
            binary: binary.map(str::to_string),
            ..CodingCliSpec::default()
        })
    }

    #[test]
    fn a_binary_in_path_gives_no_warning_and_a_missing_one_does() {
        let dir = scratch("found");
        let exe = dir.join("claude");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.to_str().unwrap();
        assert_eq!(missing_binary_warning(&claude(None), Some(path)), None);
        let absolute = exe.to_str().unwrap();
        assert_eq!(missing_binary_warning(&claude(Some(absolute)), None), None);
        let warning = missing_binary_warning(&claude(Some("claude-nope")), Some(path)).unwrap();
        assert!(warning.contains("claude-nope") && warning.contains("adapter_not_installed"), "{warning}");
        assert!(missing_binary_warning(&claude(None), None).is_some(), "no PATH at all");
    }

    #[test]
    fn a_file_that_is_not_executable_does_not_count() {
        let dir = scratch("not-exec");
        std::fs::write(dir.join("codex"), "data").unwrap();
        let codex = AdapterSpec::CodexLocal(CodingCliSpec::default());
        assert!(missing_binary_warning(&codex, dir.to_str()).is_some());
    }
}

//! The node's own configuration file (`vigil serve --config FILE`, TOML): what the node needs
//! beyond its agents: the outbound transport's extra CA and allow-list, the webhook report
//! address, the model price table, and the alert sinks.
//!
//! ```toml
//! [outbound]
//! extra_ca_file = "/etc/vigil/corporate-ca.pem"   # trusted beside the built-in roots
//! allow = ["10.1.2.0/24", "127.0.0.1/32"]         # special addresses every tenant may reach
//!
//! [webhook]
//! report_base_url = "https://vigil.example.com"  # where async webhooks reach this node's API
//!
//! [prices."gpt-4o-mini"]                           # dollars per million tokens
//! input_usd_per_mtok = 0.15
//! cached_input_usd_per_mtok = 0.075
//! output_usd_per_mtok = 0.60
//!
//! [[alerts]]                                       # docs/operations.md, "Alerts"
//! name = "ops"
//! url = "https://hooks.example.com/vigil"
//! secret_env = "VIGIL_ALERT_KEY"
//! kinds = ["agent_offline", "run_failed"]          # absent: all five
//! tenants = ["acme"]                               # absent: every tenant
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::alerts::{validate_sinks, AlertSink, AlertSinkSpec};
use crate::exec::pricing::PriceTable;
use crate::net::{Cidr, OutboundPolicy, TlsOptions, OUTBOUND_ALLOW_ENTRIES_MAX};
use crate::snapshots::SnapshotPolicy;

/// Largest config file read.
pub const NODE_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// The parsed file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFile {
    #[serde(default)]
    pub outbound: OutboundSection,
    /// Prices by model name.
    #[serde(default)]
    pub prices: PriceTable,
    #[serde(default)]
    pub webhook: WebhookSection,
    /// `[[alerts]]`: where alerts go, as written (checked by [`NodeFile::parse`]).
    #[serde(default)]
    pub alerts: Vec<AlertSinkSpec>,
    /// `[snapshots]`: when the node snapshots its engine (docs/operations.md, "Snapshots").
    #[serde(default)]
    pub snapshots: SnapshotsSection,
    /// `[heartbeats]`: predicate heartbeats (docs/api.md, "Predicate heartbeats").
    #[serde(default)]
    pub heartbeats: HeartbeatsSection,
}

/// `[heartbeats]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatsSection {
    /// Answer `POST /v1/host/sample/heartbeat/tick`, the RFC 0060 test seam that drives one
    /// tick with an injected observation (off: 404). For conformance suites, never production.
    #[serde(default)]
    pub test_seam: bool,
}

/// `[snapshots]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotsSection {
    /// Events after the current snapshot that make the next one due (at least the number of
    /// agents); default `SNAPSHOT_EVERY_EVENTS`.
    #[serde(default)]
    pub every_events: Option<u64>,
    /// Milliseconds after the current snapshot that make the next one due, if an event came
    /// since; default `SNAPSHOT_EVERY_MS`.
    #[serde(default)]
    pub every_ms: Option<u64>,
    /// Milliseconds events stay in the log once a snapshot holds them; default
    /// `EVENTS_RETENTION_MS`.
    #[serde(default)]
    pub keep_events_ms: Option<u64>,
}

/// `[webhook]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSection {
    /// The node's API as asynchronous webhooks reach it (`report_url` is this plus
    /// `/v1/runs/{id}/result`); unset, the listen address (loopback for `0.0.0.0`).
    #[serde(default)]
    pub report_base_url: Option<String>,
}

/// `[outbound]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboundSection {
    /// A PEM file of CA certificates trusted beside the built-in roots (a relative path is
    /// taken from the config file's directory).
    #[serde(default)]
    pub extra_ca_file: Option<PathBuf>,
    /// Address ranges that tenants other than `default` may reach although they are not
    /// public (loopback, link-local, private, …): see `crate::net::policy`.
    #[serde(default)]
    pub allow: Vec<Cidr>,
}

/// Why the file was refused.
#[derive(Debug, thiserror::Error)]
pub enum NodeFileError {
    #[error("could not read the node config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the node config {path} is larger than {NODE_FILE_BYTES_MAX} bytes")]
    TooLarge { path: PathBuf },
    #[error("the node config {path} is not valid: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl NodeFile {
    /// Reads and checks `path` (blocking: called once, before the node starts).
    pub fn load(path: &Path) -> Result<NodeFile, NodeFileError> {
        let read = |source| NodeFileError::Read {
            path: path.to_path_buf(),
            source,
        };
        if std::fs::metadata(path).map_err(read)?.len() > NODE_FILE_BYTES_MAX {
            return Err(NodeFileError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        let mut file = NodeFile::parse(&text).map_err(|message| NodeFileError::Invalid {
            path: path.to_path_buf(),
            message,
        })?;
        if let (Some(ca), Some(dir)) = (&file.outbound.extra_ca_file, path.parent()) {
            file.outbound.extra_ca_file = Some(dir.join(ca));
        }
        Ok(file)
    }

    /// Parses the text of a node config, naming what is wrong (with its line and column).
    pub fn parse(text: &str) -> Result<NodeFile, String> {
        let file: NodeFile = toml::from_str(text).map_err(|e| e.to_string())?;
        file.prices.validate()?;
        if let Some(url) = &file.webhook.report_base_url {
            crate::net::Endpoint::parse(url)
                .map_err(|error| format!("webhook.report_base_url: {error}"))?;
        }
        validate_sinks(&file.alerts)?;
        for (field, value) in [
            ("snapshots.every_events", file.snapshots.every_events),
            ("snapshots.every_ms", file.snapshots.every_ms),
            ("snapshots.keep_events_ms", file.snapshots.keep_events_ms),
        ] {
            if value == Some(0) {
                return Err(format!("{field} must be at least 1"));
            }
        }
        if file.outbound.allow.len() > OUTBOUND_ALLOW_ENTRIES_MAX {
            return Err(format!(
                "outbound.allow has {} entries; at most {OUTBOUND_ALLOW_ENTRIES_MAX}",
                file.outbound.allow.len()
            ));
        }
        Ok(file)
    }

    /// The alert sinks, checked (the file was checked when parsed).
    pub fn alert_sinks(&self) -> Vec<AlertSink> {
        validate_sinks(&self.alerts).expect("checked by NodeFile::parse")
    }

    /// When the node snapshots its engine.
    pub fn snapshot_policy(&self) -> SnapshotPolicy {
        let default = SnapshotPolicy::default();
        SnapshotPolicy {
            every_events: self.snapshots.every_events.unwrap_or(default.every_events),
            every_ms: self.snapshots.every_ms.unwrap_or(default.every_ms),
            keep_events_ms: self
                .snapshots
                .keep_events_ms
                .unwrap_or(default.keep_events_ms),
        }
    }

    /// The outbound address policy (the SSRF guard) with this file's allow-list.
    pub fn outbound_policy(&self) -> OutboundPolicy {
        OutboundPolicy {
            allow: self.outbound.allow.clone(),
        }
    }

    /// The outbound transport's TLS options.
    pub fn tls(&self) -> TlsOptions {
        TlsOptions {
            extra_ca_file: self.outbound.extra_ca_file.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_parses() {
        let file = NodeFile::parse(
            r#"
            [outbound]
            extra_ca_file = "ca.pem"
            [prices."gpt-4o-mini"]
            input_usd_per_mtok = 0.15
            output_usd_per_mtok = 0.6
            "#,
        )
        .unwrap();
        assert_eq!(file.outbound.extra_ca_file, Some(PathBuf::from("ca.pem")));
        assert!(file.prices.knows("gpt-4o-mini"));
        assert_eq!(NodeFile::parse("").unwrap(), NodeFile::default());
    }

    #[test]
    fn the_allow_list_parses_and_is_bounded() {
        let file = NodeFile::parse("[outbound]\nallow = [\"127.0.0.1/32\", \"::1\"]\n").unwrap();
        let policy = file.outbound_policy();
        assert_eq!(policy.allow.len(), 2);
        assert!(policy.check("acme", "127.0.0.1:9".parse().unwrap()).is_ok());
        let bad = NodeFile::parse("[outbound]\nallow = [\"127.0.0.1/40\"]\n").unwrap_err();
        assert!(bad.contains("prefix length") && bad.contains("line 2"), "{bad}");
        let entries = |n: usize| {
            let list = vec!["\"10.0.0.1\""; n].join(", ");
            NodeFile::parse(&format!("[outbound]\nallow = [{list}]\n"))
        };
        assert!(entries(OUTBOUND_ALLOW_ENTRIES_MAX).is_ok());
        assert!(entries(OUTBOUND_ALLOW_ENTRIES_MAX + 1).unwrap_err().contains("at most"));
    }

    #[test]
    fn mistakes_are_named() {
        let unknown = NodeFile::parse("[outbound]\nextra_ca = \"x\"\n").unwrap_err();
        assert!(unknown.contains("extra_ca") && unknown.contains("line 2"), "{unknown}");
        let price = NodeFile::parse("[prices.m]\ninput_usd_per_mtok = -1\noutput_usd_per_mtok = 1\n")
            .unwrap_err();
        assert!(price.contains("input_usd_per_mtok"), "{price}");
        let missing = NodeFile::parse("[prices.m]\ninput_usd_per_mtok = 1\n").unwrap_err();
        assert!(missing.contains("output_usd_per_mtok"), "{missing}");
        let report = NodeFile::parse("[webhook]\nreport_base_url = \"ftp://x\"\n").unwrap_err();
        assert!(report.contains("webhook.report_base_url"), "{report}");
        let zero = NodeFile::parse("[snapshots]\nevery_events = 0\n").unwrap_err();
        assert_eq!(zero, "snapshots.every_events must be at least 1");
        let one = NodeFile::parse("[snapshots]\nevery_events = 1\n").unwrap();
        assert_eq!(one.snapshot_policy().every_events, 1);
        assert_eq!(
            one.snapshot_policy().every_ms,
            SnapshotPolicy::default().every_ms
        );
        let fine = NodeFile::parse("[webhook]\nreport_base_url = \"https://v.example\"\n").unwrap();
        assert_eq!(fine.webhook.report_base_url.as_deref(), Some("https://v.example"));
    }

    #[test]
    fn a_relative_ca_path_is_taken_from_the_file_directory() {
        let dir = std::env::temp_dir().join(format!("vigil-node-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("vigil.toml");
        std::fs::write(&path, "[outbound]\nextra_ca_file = \"ca.pem\"\n").unwrap();
        let file = NodeFile::load(&path).unwrap();
        assert_eq!(file.tls().extra_ca_file, Some(dir.join("ca.pem")));
        let missing = NodeFile::load(&dir.join("absent.toml")).unwrap_err();
        assert!(missing.to_string().contains("absent.toml"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

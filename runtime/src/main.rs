//! `vigil`: the heartbeat runtime's one binary.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use vigil::engine::agent::AgentSpec;
use vigil::engine::tenant::DEFAULT_TENANT;
use vigil::io::entropy::OsEntropy;
use vigil::io::clock::SystemClock;
use vigil::io::storage::StorageLocation;
use vigil::node::{Node, NodeConfig};

/// Database file name inside the data directory.
const DATABASE_FILE: &str = "vigil.redb";
/// File in the data directory holding the generated operator token.
const OPERATOR_TOKEN_FILE: &str = "operator-token";

#[derive(Parser)]
#[command(
    name = "vigil",
    version,
    about = "Keeps a fleet of LLM agents alive and wakes them safely."
)]
struct Cli {
    #[command(subcommand)]
    command: CliCommand,
}

#[derive(Subcommand)]
enum CliCommand {
    /// Run the runtime: recover state from the data directory, fire timers, serve the HTTP API.
    Serve {
        /// Address of the HTTP API (port 0 picks a free port; the chosen one is printed).
        #[arg(long, env = "VIGIL_LISTEN", default_value = "127.0.0.1:7070")]
        listen: SocketAddr,
        /// Directory holding the database (created if absent).
        #[arg(long, env = "VIGIL_DATA_DIR", default_value = "vigil-data")]
        data_dir: PathBuf,
        /// On an empty database, register three demo agents (5 s, 7 s and 11 s timers) so that
        /// something visibly happens.
        #[arg(long)]
        demo: bool,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VIGIL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the async runtime")?;
    match cli.command {
        CliCommand::Serve {
            listen,
            data_dir,
            demo,
        } => runtime.block_on(serve(listen, data_dir, demo)),
    }
}

async fn serve(listen: SocketAddr, data_dir: PathBuf, demo: bool) -> anyhow::Result<()> {
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("could not create data directory {}", data_dir.display()))?;
    let mut node = Node::start(NodeConfig {
        listen_addr: listen,
        storage: StorageLocation::File(data_dir.join(DATABASE_FILE)),
        clock: SystemClock::shared(),
        entropy: OsEntropy::shared(),
        tenants: Vec::new(),
        on_commit: None,
    })
    .await?;
    // The first stdout line is the contract with scripts and tests that start `vigil serve`.
    println!(
        "vigil listening on http://{} (data: {})",
        node.local_addr(),
        data_dir.display()
    );
    let recovered = node.ready().await?.clone();
    if let Some(token) = &recovered.generated_token {
        let path = data_dir.join(OPERATOR_TOKEN_FILE);
        std::fs::write(&path, format!("{token}\n"))
            .with_context(|| format!("could not write {}", path.display()))?;
        eprintln!("operator token (also in {}): {token}", path.display());
    }
    if demo && node.shell().engine().agents().next().is_none() {
        for (name, interval_ms) in [("demo-5s", 5_000), ("demo-7s", 7_000), ("demo-11s", 11_000)] {
            let spec = AgentSpec::with_interval(name, Some(interval_ms));
            node.shell().create_agent(DEFAULT_TENANT, spec)?;
        }
    }
    eprintln!(
        "try: curl -s -H \"Authorization: Bearer $(cat {1}/{2})\" http://{0}/v1/agents   (Ctrl-C stops)",
        node.local_addr(),
        data_dir.display(),
        OPERATOR_TOKEN_FILE
    );
    stop_requested().await?;
    tracing::info!("stopping");
    node.stop();
    Ok(())
}

/// Waits for Ctrl-C or, on Unix, SIGTERM (what service managers send). Stopping this way is a
/// courtesy: the store is crash-safe, so SIGKILL loses nothing acknowledged either.
async fn stop_requested() -> anyhow::Result<()> {
    #[cfg(all(unix, not(madsim)))]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut terminate =
            signal(SignalKind::terminate()).context("could not listen for SIGTERM")?;
        tokio::select! {
            biased;
            result = tokio::signal::ctrl_c() => result.context("could not wait for Ctrl-C")?,
            _ = terminate.recv() => {}
        }
        Ok(())
    }
    #[cfg(not(all(unix, not(madsim))))]
    {
        tokio::signal::ctrl_c()
            .await
            .context("could not wait for Ctrl-C")
    }
}

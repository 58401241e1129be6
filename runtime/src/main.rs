//! `vigil`: the heartbeat runtime's one binary. `vigil serve` runs a node;
//! `vigil agent|runs|events|top` operate one over its HTTP API (the calls and their output live
//! in `vigil::cli`).

/// The node allocates through mimalloc, as the simulator does (ADR 0029): with glibc's malloc a
/// tenth to a sixth of a busy node's time went to `malloc`, `free` and trimming heaps.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{IsTerminal, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use vigil::cli::{
    parse_interval, resolve_token, AgentCreate, AgentUpdate, CliError, FleetFile, HeartbeatCreate, Output, Printed,
    RunFilter, Session, SpecSource, Wake, WakeupFilter, OPERATOR_TOKEN_FILE, SERVER_DEFAULT,
};
use vigil::engine::tenant::DEFAULT_TENANT;
use vigil::fleet::{checked_token, Fleet};
use vigil::io::clock::SystemClock;
use vigil::io::entropy::OsEntropy;
use vigil::io::storage::StorageLocation;
use vigil::node::{Node, NodeConfig, TenantToken};
use vigil::transcript::FileTranscripts;

/// Database file name inside the data directory.
const DATABASE_FILE: &str = "vigil.redb";
/// File in the data directory that the running `vigil serve` holds locked, holding its PID.
const PID_FILE: &str = "vigil.pid";

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
    Serve(ServeArgs),
    /// Register, read, wake, pause, resume and terminate agents.
    Agent {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// List, read and cancel runs; read their transcripts.
    Runs {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Read the wakeup history: every wakeup, who asked, and what became of it.
    Wakeups {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: WakeupsCommand,
    },
    /// Predicate heartbeats: checks that wake an agent only when what they observe changes
    /// (docs/api.md, "Predicate heartbeats").
    Heartbeat {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: HeartbeatCommand,
    },
    /// Make a node hold what a fleet file declares: `plan` shows the difference, `apply` makes
    /// it (creates and updates; deletes only with --prune).
    Fleet {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: FleetCommand,
    },
    /// Write a consistent copy of the node's database beside it while it serves (operator of
    /// tenant default); prints where. docs/operations.md, "Backup and restore".
    Backup {
        #[command(flatten)]
        connection: Connection,
    },
    /// The operator's own token.
    Operator {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: OperatorCommand,
    },
    /// Read the event log.
    Events {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// Live fleet view: each agent's liveness, timers, pause, breaker, daily cap use and active
    /// run, refreshed from the event stream (Ctrl-C quits). Prints one snapshot when stdout is
    /// not a terminal, or with --once (--json: the snapshot as JSON).
    Top {
        #[command(flatten)]
        connection: Connection,
        /// Print one snapshot and exit.
        #[arg(long)]
        once: bool,
    },
}

#[derive(Args)]
struct ServeArgs {
    /// Address of the HTTP API (port 0 picks a free port; the chosen one is printed).
    #[arg(long, env = "VIGIL_LISTEN", default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// Directory holding the database and run transcripts (created if absent).
    #[arg(long, env = "VIGIL_DATA_DIR", default_value = "vigil-data")]
    data_dir: PathBuf,
    /// Fleet file (TOML): agents to create at start if they do not exist yet or to update to
    /// the file's spec (never deleted), and tenant tokens. See examples/fleet.toml.
    #[arg(long, env = "VIGIL_FLEET")]
    fleet: Option<PathBuf>,
    /// Operator token of tenant `default` (at least 16 characters). Without it, the first start
    /// generates one and writes it to <data-dir>/operator-token. On the command line it is
    /// visible to every local user (`ps`): prefer --operator-token-file or the variable.
    #[arg(long, env = "VIGIL_OPERATOR_TOKEN", hide_env_values = true)]
    operator_token: Option<String>,
    /// A file holding the operator token of tenant `default` (its first line), instead of
    /// --operator-token.
    #[arg(
        long,
        env = "VIGIL_OPERATOR_TOKEN_FILE",
        value_name = "PATH",
        conflicts_with = "operator_token"
    )]
    operator_token_file: Option<PathBuf>,
    /// Node config (TOML): the model price table, an extra CA for outbound HTTPS. See
    /// docs/agents.md.
    #[arg(long, env = "VIGIL_CONFIG")]
    config: Option<PathBuf>,
    /// On SIGTERM or Ctrl-C, how long running runs may finish before they are stopped (no new
    /// run starts meanwhile; wakeups queue for the next start). A second signal stops at once.
    #[arg(
        long,
        env = "VIGIL_DRAIN_GRACE_S",
        value_name = "SECONDS",
        default_value_t = vigil::node::DRAIN_GRACE_DEFAULT_S,
        value_parser = clap::value_parser!(u64).range(0..=vigil::node::DRAIN_GRACE_MAX_S)
    )]
    drain_grace_s: u64,
    /// Async worker threads: the API's connections, the runs, the timers (default: one per CPU
    /// core). The writer, fsyncs and file I/O have threads of their own beside these. On a small
    /// machine shared with other busy processes, fewer can serve more; docs/operations.md,
    /// "Worker threads", has the measurements.
    #[arg(
        long,
        env = "VIGIL_WORKERS",
        value_name = "THREADS",
        value_parser = clap::value_parser!(u64).range(1..=vigil::node::WORKERS_MAX)
    )]
    workers: Option<u64>,
}

/// Where the node is and how to authenticate; accepted before or after the subcommand.
#[derive(Args)]
struct Connection {
    /// The node's API.
    #[arg(long, env = "VIGIL_SERVER", default_value = SERVER_DEFAULT, global = true)]
    server: String,
    /// Bearer token (the operator token, or an agent's). Default: <data-dir>/operator-token.
    #[arg(long, env = "VIGIL_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// Data directory of a local `vigil serve`, to read its operator-token file.
    #[arg(
        long,
        env = "VIGIL_DATA_DIR",
        default_value = "vigil-data",
        global = true
    )]
    data_dir: PathBuf,
    /// Print the server's JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum AgentCommand {
    /// Register an agent; prints its token, shown only this once.
    Create {
        /// Unique within the tenant: 1 to 64 of A-Z a-z 0-9 . _ -
        #[arg(long)]
        name: Option<String>,
        /// Timer period, with a unit: 30s, 5m, 1h (a bare number is refused). Without it (and without one in the
        /// spec), the agent is only woken on request.
        #[arg(long, value_parser = parse_interval)]
        interval: Option<u64>,
        /// A full agent spec, JSON or TOML (as in POST /v1/agents), from a file or `-` for
        /// stdin; --name and --interval override its fields.
        #[arg(long, value_name = "FILE|-")]
        spec: Option<String>,
    },
    /// The tenant's agents, one per line.
    List,
    /// One agent: policy and counters.
    Show {
        /// Agent id or name.
        agent: String,
    },
    /// Wake an agent through the one wakeup entry point.
    Wake {
        /// Agent id or name.
        agent: String,
        /// timer, idle, assignment, on_demand, automation or predicate.
        #[arg(long, default_value = "on_demand")]
        source: String,
        /// Why, for humans and the agent.
        #[arg(long)]
        reason: Option<String>,
        /// Wakeups with the same task key coalesce onto one queued run.
        #[arg(long)]
        task_key: Option<String>,
        /// A retry with a key seen in the last 24 h gets the first answer.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// JSON handed to the run.
        #[arg(long)]
        payload: Option<String>,
        /// A JSON object saying what caused the wakeup, kept in the wakeup history.
        #[arg(long)]
        trigger_detail: Option<String>,
    },
    /// User input for an agent: restarts its idle chamber and wakes it on demand.
    Input {
        /// Agent id or name.
        agent: String,
        /// What the user wrote (handed to the run as `payload.text`).
        #[arg(long)]
        text: String,
        #[arg(long)]
        task_key: Option<String>,
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Send a liveness pulse for one agent, or a host's batch for several.
    Pulse {
        /// Agent ids or names.
        #[arg(required = true)]
        agents: Vec<String>,
    },
    /// Pause an agent: until resumed (every wakeup refused, its runs cancelled), or with
    /// `--minutes N` for N minutes (timer and idle wakeups refused, the running run cancelled).
    Pause {
        agent: String,
        /// Pause for this many minutes (1..=10080) instead of until resumed.
        #[arg(long)]
        minutes: Option<u64>,
    },
    /// Take wakeups again.
    Resume { agent: String },
    /// Stop taking wakeups for good; the name stays taken.
    Terminate { agent: String },
    /// Replace the agent's token: the old one stops working at once; the new one is printed
    /// this once.
    RotateToken { agent: String },
    /// Change an agent's spec: a JSON merge patch (`--patch '{"limits": {"daily_cap": 10}}'`;
    /// null removes a field), with --interval and --daily-cap as shortcuts. Validated like a
    /// create; see docs/api.md, "Changing an agent".
    Update {
        /// Agent id or name.
        agent: String,
        /// A JSON object: the spec fields to change.
        #[arg(long)]
        patch: Option<String>,
        /// New timer period, with a unit: 30s, 5m, 1h.
        #[arg(long, value_parser = parse_interval)]
        interval: Option<u64>,
        /// New daily invocation cap.
        #[arg(long)]
        daily_cap: Option<u32>,
    },
    /// Terminate an agent (if it is not) and forget it: its events stay in the log, its name is
    /// free again.
    Delete { agent: String },
    /// A coding-CLI agent's task sessions (task key, session id, last run).
    Sessions { agent: String },
    /// Forget one task's session: its next run starts a fresh one.
    SessionReset { agent: String, task_key: String },
}

#[derive(Subcommand)]
enum FleetCommand {
    /// What `apply` would do: agents to create, update (with the fields that change) and
    /// delete, and those the file does not declare. Changes nothing.
    Plan {
        /// The fleet file (TOML), as `vigil serve --fleet` takes it.
        file: PathBuf,
        /// Plan to delete the agents the file does not declare.
        #[arg(long)]
        prune: bool,
    },
    /// Create the declared agents that do not exist, update those whose spec differs to the
    /// file's; with --prune, delete the agents the file does not declare. Prints each new
    /// agent's token once.
    Apply {
        file: PathBuf,
        /// Also delete the agents the file does not declare.
        #[arg(long)]
        prune: bool,
    },
}

#[derive(Subcommand)]
enum OperatorCommand {
    /// Replace this tenant's operator token: the old one stops working at once; the new one
    /// is printed this once (and written to the data directory's token file when the old one
    /// came from there). A restart with the same configuration keeps the new token.
    RotateToken,
}

#[derive(Subcommand)]
enum RunsCommand {
    /// Runs, newest first.
    List {
        /// Only this agent's (id or name).
        #[arg(long)]
        agent: Option<String>,
        /// Only runs in this status: queued, running, succeeded, failed, cancelled, timed_out.
        #[arg(long)]
        status: Option<String>,
        /// At most this many (server default 100).
        #[arg(long)]
        limit: Option<u64>,
    },
    /// One run.
    Show { run: u64 },
    /// A run's transcript, one line per entry (model calls, tool calls, why it stopped);
    /// control characters from models and tools are printed escaped.
    Log {
        run: u64,
        /// Keep polling until the run's transcript is complete.
        #[arg(long)]
        follow: bool,
    },
    /// Cancel a queued or running run.
    Cancel { run: u64 },
}

#[derive(Subcommand)]
enum HeartbeatCommand {
    /// Define a heartbeat of an agent, with exactly one check.
    Create(HeartbeatCreate),
    /// The tenant's heartbeats (one agent's with --agent).
    List {
        #[arg(long)]
        agent: Option<String>,
        /// The next page: heartbeats with an id after this one.
        #[arg(long)]
        after: Option<String>,
    },
    /// One heartbeat: its state and its recent ticks.
    Show { id: String },
    /// Stop and forget a heartbeat.
    Delete { id: String },
}

#[derive(Subcommand)]
enum WakeupsCommand {
    /// Wakeups in the order they came, one line each; the next page with --after.
    List {
        /// Only this agent's (id or name).
        #[arg(long)]
        agent: Option<String>,
        /// Only this source: timer, idle, assignment, on_demand, automation, predicate.
        #[arg(long)]
        source: Option<String>,
        /// Only wakeups now refused, queued, coalesced, started or finished.
        #[arg(long)]
        status: Option<String>,
        /// Only those asked for by operator, agent, timer, idle, predicate or fleet_file.
        #[arg(long)]
        requested_by: Option<String>,
        /// Start after this log position (the `next_after` of the previous page).
        #[arg(long)]
        after: Option<u64>,
        /// At most this many (server default 100).
        #[arg(long)]
        limit: Option<u64>,
    },
}

#[derive(Subcommand)]
enum EventsCommand {
    /// Print events, one per line: up to the current head, or live with --follow.
    Tail {
        /// Start after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Keep the stream open (Server-Sent Events) and print events as they happen.
        #[arg(long)]
        follow: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before the runtime's threads allocate: the node's memory in 4 KiB pages (ADR 0031). Told
    // in the log once logging is up.
    let huge_pages = matches!(cli.command, CliCommand::Serve(_)).then(vigil::huge_pages::turn_off);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let CliCommand::Serve(ServeArgs {
        workers: Some(workers),
        ..
    }) = &cli.command
    {
        // At most `WORKERS_MAX` (the argument's parser holds it), so it fits.
        builder.worker_threads(usize::try_from(*workers).expect("at most WORKERS_MAX"));
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: could not start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        CliCommand::Serve(args) => {
            init_logging();
            if let Some(huge_pages) = huge_pages {
                tracing::debug!(?huge_pages, "transparent huge pages for the node's memory");
            }
            runtime.block_on(serve(args))
        }
        CliCommand::Agent {
            connection,
            command,
        } => runtime.block_on(operate(connection, Operation::Agent(command))),
        CliCommand::Runs {
            connection,
            command,
        } => runtime.block_on(operate(connection, Operation::Runs(command))),
        CliCommand::Events {
            connection,
            command,
        } => runtime.block_on(operate(connection, Operation::Events(command))),
        CliCommand::Fleet {
            connection,
            command,
        } => runtime.block_on(operate(connection, Operation::Fleet(command))),
        CliCommand::Heartbeat {
            connection,
            command,
        } => runtime.block_on(operate(connection, Operation::Heartbeat(command))),
        CliCommand::Operator {
            connection,
            command,
        } => runtime.block_on(operate(connection, Operation::Operator(command))),
        CliCommand::Backup { connection } => {
            runtime.block_on(operate(connection, Operation::Backup))
        }
        CliCommand::Wakeups {
            connection,
            command,
        } => runtime.block_on(operate(connection, Operation::Wakeups(command))),
        CliCommand::Top { connection, once } => {
            runtime.block_on(operate(connection, Operation::Top { once }))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // The chain, minus causes a message already quotes (many end in their source's text).
            let mut message = error.to_string();
            for cause in error.chain().skip(1) {
                let cause = cause.to_string();
                if !message.contains(&cause) {
                    message = format!("{message}: {cause}");
                }
            }
            // Server errors quote what clients sent; the terminal gets it escaped.
            eprintln!("error: {}", vigil::cli::escape_controls(&message));
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr, filtered by `VIGIL_LOG` (default `info`); colour codes only when stderr
/// is a terminal, so files, pipes and journald get plain text.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("VIGIL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // `VIGIL_LOG_FORMAT=json`: one JSON object per line, for log collectors.
    if std::env::var("VIGIL_LOG_FORMAT").is_ok_and(|format| format == "json") {
        logs.json().with_ansi(false).init();
    } else {
        logs.with_ansi(std::io::stderr().is_terminal()).init();
    }
}

enum Operation {
    Agent(AgentCommand),
    Fleet(FleetCommand),
    Heartbeat(HeartbeatCommand),
    Operator(OperatorCommand),
    Backup,
    Runs(RunsCommand),
    Events(EventsCommand),
    Wakeups(WakeupsCommand),
    Top { once: bool },
}

/// One `vigil heartbeat` command.
async fn heartbeat(session: &Session, command: HeartbeatCommand) -> Result<Printed, CliError> {
    match command {
        HeartbeatCommand::Create(create) => session.heartbeat_create(&create).await,
        HeartbeatCommand::List { agent, after } => {
            session.heartbeat_list(agent.as_deref(), after.as_deref()).await
        }
        HeartbeatCommand::Show { id } => session.heartbeat_show(&id).await,
        HeartbeatCommand::Delete { id } => session.heartbeat_delete(&id).await,
    }
}

/// Runs one operator command against the node and prints its answer.
async fn operate(connection: Connection, operation: Operation) -> anyhow::Result<()> {
    let token = resolve_token(connection.token.as_deref(), &connection.data_dir)?;
    let output = if connection.json {
        Output::Json
    } else {
        Output::Human
    };
    let session = Session::new(&connection.server, token, output)?;
    let printed = match operation {
        Operation::Agent(command) => match command {
            AgentCommand::Create {
                name,
                interval,
                spec,
            } => {
                let spec = spec.map(|name| read_spec(&name)).transpose()?;
                let request = AgentCreate {
                    name,
                    interval_ms: interval,
                    spec,
                };
                session.agent_create(&request).await?
            }
            AgentCommand::List => session.agent_list().await?,
            AgentCommand::Show { agent } => session.agent_show(&agent).await?,
            AgentCommand::Wake {
                agent,
                source,
                reason,
                task_key,
                idempotency_key,
                payload,
                trigger_detail,
            } => {
                let wake = Wake {
                    source,
                    reason,
                    task_key,
                    idempotency_key,
                    payload,
                    trigger_detail,
                };
                session.agent_wake(&agent, &wake).await?
            }
            AgentCommand::Input {
                agent,
                text,
                task_key,
                idempotency_key,
            } => {
                session
                    .agent_input(
                        &agent,
                        &text,
                        task_key.as_deref(),
                        idempotency_key.as_deref(),
                    )
                    .await?
            }
            AgentCommand::Pulse { agents } => session.agent_pulse(&agents).await?,
            AgentCommand::Pause { agent, minutes } => session.agent_pause(&agent, minutes).await?,
            AgentCommand::Resume { agent } => session.agent_control(&agent, "resume").await?,
            AgentCommand::Terminate { agent } => session.agent_control(&agent, "terminate").await?,
            AgentCommand::RotateToken { agent } => session.agent_rotate_token(&agent).await?,
            AgentCommand::Update {
                agent,
                patch,
                interval,
                daily_cap,
            } => {
                let update = AgentUpdate {
                    patch,
                    interval_ms: interval,
                    daily_cap,
                };
                session.agent_update(&agent, &update).await?
            }
            AgentCommand::Delete { agent } => session.agent_delete(&agent).await?,
            AgentCommand::Sessions { agent } => session.agent_sessions(&agent).await?,
            AgentCommand::SessionReset { agent, task_key } => {
                session.agent_session_reset(&agent, &task_key).await?
            }
        },
        Operation::Fleet(command) => match command {
            FleetCommand::Plan { file, prune } => {
                session.fleet_plan(&FleetFile { path: file, prune }).await?
            }
            FleetCommand::Apply { file, prune } => {
                session
                    .fleet_apply(&FleetFile { path: file, prune })
                    .await?
            }
        },
        Operation::Operator(OperatorCommand::RotateToken) => {
            session.operator_rotate_token().await?
        }
        Operation::Backup => session.backup().await?,
        Operation::Runs(command) => match command {
            RunsCommand::List {
                agent,
                status,
                limit,
            } => {
                let filter = RunFilter {
                    agent,
                    status,
                    limit,
                };
                session.runs_list(&filter).await?
            }
            RunsCommand::Show { run } => session.runs_show(run).await?,
            RunsCommand::Log { run, follow } => {
                session
                    .runs_log(run, follow, &mut |printed: Printed| print(&printed))
                    .await?;
                Printed::default()
            }
            RunsCommand::Cancel { run } => session.runs_cancel(run).await?,
        },
        Operation::Heartbeat(command) => heartbeat(&session, command).await?,
        Operation::Wakeups(WakeupsCommand::List {
            agent,
            source,
            status,
            requested_by,
            after,
            limit,
        }) => {
            let filter = WakeupFilter {
                agent,
                source,
                status,
                requested_by,
                after,
                limit,
            };
            session.wakeups_list(&filter).await?
        }
        Operation::Events(EventsCommand::Tail { after, follow }) => {
            let mut emit = |printed: Printed| print(&printed);
            let after = session.events_catch_up(after, &mut emit).await?;
            if follow {
                session.events_follow(after, &mut emit).await?;
            }
            Printed::default()
        }
        // A live view needs a terminal; JSON is one document, never a screen.
        Operation::Top { once } if once || connection.json || !std::io::stdout().is_terminal() => {
            session.top_once().await?
        }
        Operation::Top { .. } => {
            session
                .top_live(&mut |printed: Printed| print(&printed))
                .await?;
            Printed::default()
        }
    };
    print(&printed);
    Ok(())
}

fn print(printed: &Printed) {
    // A closed pipe (`vigil events tail | head`) is not worth a panic.
    let _ = std::io::stdout().write_all(printed.stdout.as_bytes());
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().write_all(printed.stderr.as_bytes());
}

/// The `--spec` argument's text: a file, or stdin for `-`.
fn read_spec(name: &str) -> Result<SpecSource, CliError> {
    let text = if name == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(name)
    };
    let text = text.map_err(|error| CliError::Input {
        field: "spec".into(),
        message: format!("could not read {name}: {error}"),
    })?;
    Ok(SpecSource {
        name: name.to_string(),
        text,
    })
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let ServeArgs {
        listen,
        data_dir,
        fleet,
        operator_token,
        operator_token_file,
        config,
        drain_grace_s,
        workers: _,
    } = args;
    if token_on_command_line(std::env::args_os()) {
        eprintln!(
            "warning: --operator-token on the command line is visible to every local user (ps, \
             /proc); use --operator-token-file PATH or VIGIL_OPERATOR_TOKEN instead"
        );
    }
    let operator_token = match operator_token_file {
        Some(path) => Some(read_token_file(&path)?),
        None => operator_token,
    };
    // Everything configured is checked before binding, so a mistake never half-starts a node.
    let node_file = config
        .map(|path| vigil::node_file::NodeFile::load(&path))
        .transpose()?
        .unwrap_or_default();
    let run_services = vigil::exec::host::RunServices::guarded(
        &node_file.tls(),
        node_file.prices.clone(),
        node_file.outbound_policy(),
    )
    .context("could not set up outbound HTTPS")?
    .with_work_dir(data_dir.clone());
    if let Some(url) = &node_file.webhook.report_base_url {
        run_services.run_tokens.set_base_url(url);
    }
    let alert_sinks = node_file.alert_sinks();
    for sink in &alert_sinks {
        if (run_services.secrets)(&sink.secret_env).is_none() {
            anyhow::bail!(
                "alert sink {:?}: its signing key's environment variable {} (secret_env) is not set",
                sink.name,
                sink.secret_env
            );
        }
    }
    let fleet = fleet.map(|path| Fleet::load(&path)).transpose()?;
    let tenants = configured_tenants(fleet.as_ref(), operator_token)?;
    create_private_dir(&data_dir)
        .with_context(|| format!("could not create data directory {}", data_dir.display()))?;
    // Held until the process exits; a second `vigil serve` on this directory stops here.
    let _holder = hold_data_dir(&data_dir)?;
    let mut node = Node::start(NodeConfig {
        listen_addr: listen,
        storage: StorageLocation::File(data_dir.join(DATABASE_FILE)),
        clock: SystemClock::shared(),
        entropy: OsEntropy::shared(),
        tenants: tenants.clone(),
        on_commit: None,
        on_replayed: None,
        adapters: vigil::exec::adapter::BuiltinAdapters::shared(),
        run_services,
        transcripts: FileTranscripts::shared(&data_dir),
        alert_sinks,
        snapshots: node_file.snapshot_policy(),
        heartbeat_test_seam: node_file.heartbeats.test_seam,
    })
    .await?;
    // The first stdout line is the contract with scripts and tests that start `vigil serve`.
    println!(
        "vigil listening on http://{} (data: {})",
        node.local_addr(),
        data_dir.display()
    );
    let recovered = node.ready().await?.clone();
    let token_path = data_dir.join(OPERATOR_TOKEN_FILE);
    if let Some(token) = &recovered.generated_token {
        write_token(&token_path, token)?;
        eprintln!("operator token (also in {}): {token}", token_path.display());
    }
    if let Some(configured) = tenants.iter().find(|t| t.tenant == DEFAULT_TENANT) {
        forget_stale_token(&token_path, &configured.token);
    }
    if let Some(fleet) = &fleet {
        let applied = fleet
            .apply(node.shell())
            .await
            .context("could not apply the fleet file")?;
        for (tenant, token) in &applied.generated_tokens {
            if tenant == DEFAULT_TENANT {
                write_token(&token_path, token)?;
                eprintln!("operator token (also in {}): {token}", token_path.display());
            } else {
                eprintln!("operator token of tenant {tenant:?} (shown once): {token}");
            }
        }
        for (tenant, name, id) in &applied.created {
            tracing::info!(%tenant, %name, %id, "fleet: created agent");
        }
        for (tenant, name, id, changed) in &applied.updated {
            let changed = changed.join(", ");
            tracing::info!(%tenant, %name, %id, %changed, "fleet: updated agent to the file's spec");
        }
        for warning in &applied.warnings {
            tracing::warn!("fleet: {warning}");
        }
        for (tenant, id) in &applied.heartbeats_created {
            tracing::info!(%tenant, %id, "fleet: created heartbeat");
        }
        for (tenant, id) in &applied.heartbeats_replaced {
            tracing::info!(%tenant, %id, "fleet: replaced heartbeat with the file's definition");
        }
        node.start_heartbeats();
        tracing::info!(
            declared = fleet.agent_count(),
            created = applied.created.len(),
            updated = applied.updated.len(),
            unchanged = applied.unchanged,
            undeclared = applied.undeclared,
            "fleet applied"
        );
    }
    eprintln!(
        "try: {3} agent list --server http://{0} --data-dir {1}   or   curl -s -H \"Authorization: Bearer $(cat {1}/{2})\" http://{0}/v1/agents   (Ctrl-C stops)",
        node.local_addr(),
        data_dir.display(),
        OPERATOR_TOKEN_FILE,
        this_binary()
    );
    eprintln!(
        "dashboard: http://{}/ (sign in with the operator token)",
        node.local_addr()
    );
    let failed_write = tokio::select! {
        stop = stop_requested() => stop.map(|()| None)?,
        cause = node.failed() => Some(cause),
    };
    let failed_write = match failed_write {
        None => drain(&node, drain_grace_s).await?,
        failed => failed,
    };
    tracing::info!("stopping");
    // Either way the runs' children are terminated (SIGTERM, then SIGKILL after their grace)
    // before the process exits.
    node.stop_and_reap().await;
    if let Some(cause) = failed_write {
        // Crash-only (ADR 0008): a failed write stopped the node; exit non-zero so that the
        // supervisor restarts us and recovery reads what really reached the disk.
        anyhow::bail!(
            "stopped after a failed write to {}: {cause}; restart vigil serve (a supervisor such \
             as systemd with Restart=on-failure does this): it recovers every acknowledged \
             write from the data directory",
            data_dir.join(DATABASE_FILE).display()
        );
    }
    Ok(())
}

/// Tenant tokens from `--operator-token` and the fleet file; the two must agree on `default`.
fn configured_tenants(
    fleet: Option<&Fleet>,
    operator_token: Option<String>,
) -> anyhow::Result<Vec<TenantToken>> {
    let mut tenants = match fleet {
        Some(fleet) => fleet.tenant_tokens(|variable| std::env::var(variable).ok())?,
        None => Vec::new(),
    };
    if let Some(token) = operator_token.filter(|t| !t.trim().is_empty()) {
        let token = checked_token(DEFAULT_TENANT, "--operator-token", token)?;
        match tenants.iter().find(|t| t.tenant == DEFAULT_TENANT) {
            Some(other) if other.token != token => anyhow::bail!(
                "--operator-token (or VIGIL_OPERATOR_TOKEN) and the fleet file's operator_token_env for tenant \"default\" differ; configure one"
            ),
            Some(_) => {}
            None => tenants.insert(
                0,
                TenantToken {
                    tenant: DEFAULT_TENANT.to_string(),
                    token,
                },
            ),
        }
    }
    Ok(tenants)
}

/// Mode of a data directory `vigil serve` creates: the owner only.
#[cfg(unix)]
const DATA_DIR_MODE: u32 = 0o700;
/// Largest operator-token file read, in bytes (a token is at most a few hundred characters).
const TOKEN_FILE_BYTES_MAX: u64 = 4 * 1024;

/// Whether `--operator-token` itself (not `--operator-token-file`, not the variable) is among
/// the process arguments, where `ps` shows it.
fn token_on_command_line(args: impl IntoIterator<Item = std::ffi::OsString>) -> bool {
    args.into_iter().any(|arg| {
        let arg = arg.to_string_lossy();
        arg == "--operator-token" || arg.starts_with("--operator-token=")
    })
}

/// The token in `path`: its first line, trimmed.
fn read_token_file(path: &Path) -> anyhow::Result<String> {
    let context = || format!("could not read the operator token file {}", path.display());
    let length = std::fs::metadata(path).with_context(context)?.len();
    if length > TOKEN_FILE_BYTES_MAX {
        anyhow::bail!(
            "the operator token file {} has {length} bytes; a token file holds one token (at most {TOKEN_FILE_BYTES_MAX} bytes)",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path).with_context(context)?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        anyhow::bail!("the operator token file {} is empty", path.display());
    }
    Ok(token)
}

/// Locks `dir` for this process through its [`PID_FILE`] (writing our PID into it), or says
/// which process already holds it. The lock lasts as long as the returned file is open.
fn hold_data_dir(dir: &Path) -> anyhow::Result<std::fs::File> {
    let path = dir.join(PID_FILE);
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    // Like every file the node writes: the owner's only.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&path)
        .with_context(|| format!("could not open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another vigil{} holds the data directory {}; stop it first, or give this one its own --data-dir",
            holder_pid(&mut file).map_or(String::new(), |pid| format!(" (pid {pid})")),
            dir.display()
        ),
        Err(std::fs::TryLockError::Error(error)) => {
            return Err(error).with_context(|| format!("could not lock {}", path.display()))
        }
    }
    file.set_len(0)
        .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .with_context(|| format!("could not write {}", path.display()))?;
    Ok(file)
}

/// The PID a holder wrote into its [`PID_FILE`], if it reads as one.
fn holder_pid(file: &mut std::fs::File) -> Option<u32> {
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// Creates `dir` (and its parents) readable by the owner only. An existing directory is left
/// as it is: it may be the operator's own, shared on purpose.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DATA_DIR_MODE);
    builder.create(dir)
}

/// How the startup banner names the CLI: this very binary's path, so the suggested command
/// works as printed whether `vigil` is installed or was built by `cargo xtask run` (where a bare
/// `vigil` is not on the PATH). Quoted for a POSIX shell when it needs it.
fn this_binary() -> String {
    let path = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "vigil".into());
    if path.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c)) {
        path
    } else {
        format!("'{}'", path.replace('\'', r"'\''"))
    }
}

/// Writes a generated token where the CLI looks for it, readable by the owner only.
fn write_token(path: &Path, token: &str) -> anyhow::Result<()> {
    vigil::cli::write_token_file(path, token)
        .with_context(|| format!("could not write {}", path.display()))
}

/// A token file left by an earlier generated token no longer works once tenant `default` is
/// given a configured token: remove it, so the CLI says "no token" rather than "unknown token".
fn forget_stale_token(path: &Path, configured: &str) {
    let Ok(stored) = std::fs::read_to_string(path) else {
        return;
    };
    if stored.trim() != configured {
        match std::fs::remove_file(path) {
            Ok(()) => tracing::warn!(
                "removed {}: tenant default now uses the configured operator token",
                path.display()
            ),
            Err(error) => tracing::warn!(%error, "could not remove stale {}", path.display()),
        }
    }
}

/// The first stop signal drains the node (ADR 0015): no new run starts, and the runs going have
/// `grace_s` to finish. A second signal, or a failed write, ends the drain at once. Returns the
/// failed write's error, if one ended it.
async fn drain(node: &vigil::node::Node, grace_s: u64) -> anyhow::Result<Option<String>> {
    tracing::info!(
        grace_s,
        "draining: no new run starts, wakeups queue for the next start, running runs may finish \
         (a second signal stops at once)"
    );
    tokio::select! {
        left = node.drain(std::time::Duration::from_secs(grace_s)) => {
            if left == 0 {
                tracing::info!("drained: every run that was going has finished");
            } else {
                tracing::warn!(
                    runs = left,
                    "drain grace over: the runs still going are stopped and re-queued at the next start"
                );
            }
            Ok(None)
        }
        stop = stop_requested() => {
            stop?;
            tracing::warn!("second stop signal: stopping now; runs still going are re-queued at the next start");
            Ok(None)
        }
        cause = node.failed() => Ok(Some(cause)),
    }
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

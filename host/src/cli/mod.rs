//! The `sluice` command line. Exit codes: 0 ok, 1 runtime failure, 2 invalid configuration
//! or usage. Errors go to stderr, one line per problem.

mod control;
pub mod demo;
mod inspect;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::admin::{AdminServer, ReloadRequest};
use crate::config::{self, Config, ConfigError};
use crate::kafka::embedded::EmbeddedKafka;
use crate::sink::Sink;
use crate::supervisor::Supervisor;
use inspect::{DryRunFormat, InspectFormat};

/// Exit code: invalid configuration or usage.
pub const EXIT_INVALID: u8 = 2;
/// Exit code: runtime failure.
pub const EXIT_FAILURE: u8 = 1;

/// Longest a stop (SIGINT / SIGTERM) may take before `sluice run` exits without the tasks
/// still closing. With the runtime's own 5 s to wind down, the process is gone within
/// 25 s: under the 30 s a container platform usually grants before SIGKILL.
const SHUTDOWN_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

#[derive(Parser, Debug)]
#[command(
    name = "sluice",
    version,
    about = "Kafka -> WASM transforms -> SQL, exactly once"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run every connector until SIGINT or SIGTERM; SIGHUP re-reads the file.
    Run {
        #[arg(long, short, default_value = "connectors.yaml")]
        config: PathBuf,
    },
    /// Print records of a topic, read through the seek-consumer pool (never in a group,
    /// nothing committed): one JSON object per line (`plugin test --input` reads them), or
    /// a table.
    #[command(group(clap::ArgGroup::new("start").required(true).args(["offset", "timestamp", "from_end"])))]
    Inspect {
        #[arg(long, short, default_value = "connectors.yaml")]
        config: PathBuf,
        #[arg(long)]
        topic: String,
        /// Only this partition (default: each partition, `-n` records from each).
        #[arg(long)]
        partition: Option<i32>,
        /// Start at this offset.
        #[arg(long)]
        offset: Option<i64>,
        /// Start at the first record at or after this time: RFC 3339, or ms since the epoch.
        #[arg(long)]
        timestamp: Option<String>,
        /// Start this many records before the end.
        #[arg(long)]
        from_end: Option<i64>,
        /// Most records (per partition).
        #[arg(short = 'n', long = "limit", default_value_t = 10)]
        limit: usize,
        #[arg(long, value_enum, default_value = "jsonl")]
        format: InspectFormat,
    },
    /// Run a connector's whole path (transforms, schema, mapping, the database's own
    /// checks in a transaction rolled back) on real records, and print what it would write
    /// for each, or why it fails. Nothing is written, no offset moves.
    DryRun {
        #[arg(long, short, default_value = "connectors.yaml")]
        config: PathBuf,
        #[arg(long)]
        connector: String,
        /// Records of this topic (default: the connector's first)...
        #[arg(long, conflicts_with = "dead_letters")]
        topic: Option<String>,
        /// ... of this partition (default 0) ...
        #[arg(long, conflicts_with = "dead_letters")]
        partition: Option<i32>,
        /// ... from this offset (default: the last `-n` records).
        #[arg(long, conflicts_with = "dead_letters")]
        offset: Option<i64>,
        /// The connector's dead letters (errors.dlq.table) instead of a topic's records.
        #[arg(long)]
        dead_letters: bool,
        /// Most records.
        #[arg(short = 'n', long = "limit", default_value_t = 10)]
        limit: usize,
        #[arg(long, value_enum, default_value = "text")]
        format: DryRunFormat,
    },
    /// Check a configuration file and print every problem, one per line.
    Validate {
        #[arg(long, short, default_value = "connectors.yaml")]
        config: PathBuf,
    },
    /// Produce word events into the embedded Kafka, run the pipeline into the configured
    /// database, and check the table against what was produced.
    Demo {
        #[arg(long, short, default_value = "connectors.yaml")]
        config: PathBuf,
        /// How many events to produce.
        #[arg(long, default_value_t = 100_000)]
        records: u64,
        /// Partitions of the demo topic.
        #[arg(long, default_value_t = 4)]
        partitions: i32,
    },
    /// Show or reset the offsets stored in a connector's sink database.
    Offsets {
        #[command(subcommand)]
        action: OffsetsAction,
    },
    /// Work with a connector's dead letters.
    Dlq {
        #[command(subcommand)]
        action: DlqAction,
    },
    /// Write, build and try transform plugins.
    Plugin {
        #[command(subcommand)]
        action: PluginAction,
    },
    /// Show the connectors of a running sluice (admin API): states, tasks, lag, rows/s.
    Status {
        #[command(flatten)]
        target: control::Target,
    },
    /// Pause a connector in every process: its consumers stay in the group, its
    /// partitions pause; survives rebalances and restarts.
    Pause {
        name: String,
        #[command(flatten)]
        target: control::Target,
    },
    /// Resume a paused or stopped connector in every process.
    Resume {
        name: String,
        #[command(flatten)]
        target: control::Target,
    },
    /// Stop a connector's tasks in every process (its offsets may then be changed).
    Stop {
        name: String,
        #[command(flatten)]
        target: control::Target,
    },
    /// Restart a connector: a failed database connection, and with --tasks its tasks.
    Restart {
        name: String,
        /// Restart the connector's tasks too.
        #[arg(long)]
        tasks: bool,
        /// Only the failed ones.
        #[arg(long)]
        only_failed: bool,
        #[command(flatten)]
        target: control::Target,
    },
}

#[derive(Subcommand, Debug)]
enum PluginAction {
    /// Create a plugin crate NAME (in the current directory) that builds as it is.
    New {
        name: String,
        /// Where to create it.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
    /// Build a plugin crate for wasm32-wasip2 and print the component's path.
    Build {
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Run a plugin over sample records (JSON lines: {"key":…, "value":…, "headers":{…}})
    /// and print each outcome with the time it took.
    Test {
        /// The component (.wasm).
        plugin: PathBuf,
        /// Sample records, one JSON object per line.
        #[arg(long)]
        input: PathBuf,
        /// A config entry for the plugin's init, `key=value`; repeat for more.
        #[arg(long = "config", value_name = "KEY=VALUE")]
        config: Vec<String>,
        /// CPU deadline per call.
        #[arg(long, default_value = "2s")]
        timeout: String,
        /// Memory cap.
        #[arg(long, default_value = "64MiB")]
        memory: String,
    },
}

#[derive(Subcommand, Debug)]
enum DlqAction {
    /// Re-submit a connector's dead letters through its current transforms and sink (after
    /// a plugin fix, say). From its dead-letter table: what succeeds is written and removed
    /// from the table in one transaction, what still fails stays with its new cause. From
    /// its dead-letter topic (a range of it): what succeeds is written and recorded as
    /// redriven in the same transaction (so it is never written twice), what still fails
    /// stays in the topic, and the command says why.
    Redrive {
        #[arg(long, short, default_value = "connectors.yaml")]
        config: PathBuf,
        #[arg(long)]
        connector: String,
        /// Topic only: one partition of the dead-letter topic (default: all).
        #[arg(long)]
        partition: Option<i32>,
        /// Topic only: start at this offset (default: the log's start).
        #[arg(long, conflicts_with = "from_time")]
        from_offset: Option<i64>,
        /// Topic only: stop before this offset.
        #[arg(long)]
        to_offset: Option<i64>,
        /// Topic only: start at the first dead letter at or after this time (RFC 3339 or
        /// ms since the epoch).
        #[arg(long)]
        from_time: Option<String>,
        /// Topic only: stop at the first dead letter after this time.
        #[arg(long)]
        to_time: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum OffsetsAction {
    /// Print each partition's stored next offset.
    Show {
        #[arg(long, short, default_value = "connectors.yaml")]
        config: PathBuf,
        /// Only this connector.
        #[arg(long)]
        connector: Option<String>,
    },
    /// Forget the stored offsets of a connector: it starts again per auto.offset.reset.
    Reset {
        #[arg(long, short, default_value = "connectors.yaml")]
        config: PathBuf,
        #[arg(long)]
        connector: String,
    },
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return match error.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(EXIT_INVALID),
            };
        }
    };
    crate::logging::init(match cli.log_format {
        LogFormat::Text => crate::logging::LogFormat::Text,
        LogFormat::Json => crate::logging::LogFormat::Json,
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start the async runtime: {error}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let code = runtime.block_on(async move {
        match cli.command {
            Command::Validate { config } => validate(&config),
            Command::Inspect {
                config,
                topic,
                partition,
                offset,
                timestamp,
                from_end,
                limit,
                format,
            } => {
                let start = match (offset, timestamp, from_end) {
                    (Some(o), _, _) => Ok(crate::pool::Start::Offset(o)),
                    (_, Some(t), _) => parse_timestamp(&t).map(crate::pool::Start::Timestamp),
                    (_, _, Some(n)) => Ok(crate::pool::Start::FromEnd(n)),
                    _ => Err("give --offset, --timestamp or --from-end".into()),
                };
                match start {
                    Ok(start) => {
                        inspect::inspect(&config, &topic, partition, start, limit, format).await
                    }
                    Err(e) => {
                        eprintln!("{e}");
                        EXIT_INVALID
                    }
                }
            }
            Command::DryRun {
                config,
                connector,
                topic,
                partition,
                offset,
                dead_letters,
                limit,
                format,
            } => {
                let source = if dead_letters {
                    inspect::DryRunSource::DeadLetters
                } else {
                    inspect::DryRunSource::Topic {
                        topic,
                        partition: partition.unwrap_or(0),
                        offset,
                    }
                };
                inspect::dry_run(&config, &connector, source, limit, format).await
            }
            Command::Run { config } => run(&config).await,
            Command::Demo {
                config,
                records,
                partitions,
            } => demo::run(&config, records, partitions).await,
            Command::Offsets { action } => offsets(action).await,
            Command::Dlq {
                action:
                    DlqAction::Redrive {
                        config,
                        connector,
                        partition,
                        from_offset,
                        to_offset,
                        from_time,
                        to_time,
                    },
            } => {
                let times = (
                    from_time.as_deref().map(parse_timestamp).transpose(),
                    to_time.as_deref().map(parse_timestamp).transpose(),
                );
                match times {
                    (Ok(from_time), Ok(to_time)) => {
                        let range = crate::deliver::redrive_topic::Range {
                            partition,
                            start: match (from_offset, from_time) {
                                (Some(o), _) => crate::pool::Start::Offset(o),
                                (_, Some(t)) => crate::pool::Start::Timestamp(t),
                                // FromEnd of everything: the log's start.
                                _ => crate::pool::Start::FromEnd(i64::MAX),
                            },
                            to_offset,
                            to_time,
                        };
                        let ranged = partition.is_some()
                            || from_offset.is_some()
                            || to_offset.is_some()
                            || from_time.is_some()
                            || to_time.is_some();
                        redrive(&config, &connector, range, ranged).await
                    }
                    (Err(e), _) | (_, Err(e)) => {
                        eprintln!("{e}");
                        EXIT_INVALID
                    }
                }
            }
            Command::Plugin { action } => plugin(action),
            Command::Status { target } => control::status(&target).await,
            Command::Pause { name, target } => {
                control::act(&target, &name, control::Action::Pause).await
            }
            Command::Resume { name, target } => {
                control::act(&target, &name, control::Action::Resume).await
            }
            Command::Stop { name, target } => {
                control::act(&target, &name, control::Action::Stop).await
            }
            Command::Restart {
                name,
                tasks,
                only_failed,
                target,
            } => {
                control::act(
                    &target,
                    &name,
                    control::Action::Restart { tasks, only_failed },
                )
                .await
            }
        }
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    ExitCode::from(code)
}

/// Loads a file, printing its problems one per line on stderr.
pub fn load(path: &Path) -> Result<Config, u8> {
    config::load_file(path).map_err(|error| {
        print_config_error(path, &error);
        EXIT_INVALID
    })
}

fn print_config_error(path: &Path, error: &ConfigError) {
    write_config_error(&mut std::io::stderr(), path, error);
}

fn write_config_error(err: &mut dyn Write, path: &Path, error: &ConfigError) {
    for line in error.lines(&path.display().to_string()) {
        let _ = writeln!(err, "{line}");
    }
}

fn validate(path: &Path) -> u8 {
    validate_to(path, &mut std::io::stdout(), &mut std::io::stderr())
}

/// `sluice validate`, writing its summary to `out` and its problems to `err`. Secrets show
/// as `***`: URL passwords and secret query parameters, values of secret properties.
fn validate_to(path: &Path, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let checked = config::load_file(path)
        .map_err(|error| {
            write_config_error(err, path, &error);
            EXIT_INVALID
        })
        .and_then(|config| {
            if config.connectors.iter().all(|c| c.transforms.is_empty()) {
                return Ok(config);
            }
            let engine =
                sluice_transform::TransformEngine::new(sluice_transform::EngineOptions::default())
                    .map_err(|e| {
                        let _ = writeln!(
                            err,
                            "{}: cannot start the plugin engine: {e}",
                            path.display()
                        );
                        EXIT_FAILURE
                    })?;
            let problems = config::plugin_problems(&config, &engine);
            if problems.is_empty() {
                Ok(config)
            } else {
                write_config_error(err, path, &ConfigError::Invalid { problems });
                Err(EXIT_INVALID)
            }
        });
    let config = match checked {
        Ok(config) => config,
        Err(code) => return code,
    };
    let _ = writeln!(
        out,
        "{}: valid, {} connector(s)",
        path.display(),
        config.connectors.len()
    );
    let properties: Vec<String> = config
        .kafka
        .properties
        .redacted()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    let _ = writeln!(
        out,
        "  kafka: {}{}",
        config.kafka.brokers,
        if properties.is_empty() {
            String::new()
        } else {
            format!(" ({})", properties.join(", "))
        }
    );
    for c in &config.connectors {
        let _ = writeln!(
            out,
            "  {}: topics [{}] -> {} table {} ({:?}, {} column(s), {} task(s), group {})",
            c.name,
            c.topics.join(", "),
            c.sink.url,
            c.sink.table,
            c.sink.mode,
            c.sink.columns.0.len(),
            c.tasks,
            c.group_id()
        );
        for t in &c.transforms {
            let _ = writeln!(
                out,
                "    transform {}: {} (init ok)",
                t.name,
                t.plugin.display()
            );
        }
    }
    0
}

/// Starts the embedded cluster when the file asks for it; returns the bootstrap servers.
fn resolve_brokers(
    config: &Config,
    topic_partitions: i32,
) -> Result<(String, Option<EmbeddedKafka>), u8> {
    if !config.kafka.is_embedded() {
        return Ok((config.kafka.brokers.clone(), None));
    }
    let cluster = EmbeddedKafka::start(1).map_err(|e| {
        eprintln!("cannot start the embedded Kafka: {e}");
        EXIT_FAILURE
    })?;
    for topic in config.connectors.iter().flat_map(|c| &c.topics) {
        if let Err(e) = cluster.create_topic(topic, topic_partitions) {
            eprintln!("cannot create topic {topic} in the embedded Kafka: {e}");
            return Err(EXIT_FAILURE);
        }
    }
    tracing::info!(brokers = %cluster.bootstrap_servers(), "embedded Kafka started (in-process mock cluster; it forgets everything on exit)");
    Ok((cluster.bootstrap_servers(), Some(cluster)))
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn run(path: &Path) -> u8 {
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let (brokers, _embedded) = match resolve_brokers(&config, 4) {
        Ok(resolved) => resolved,
        Err(code) => return code,
    };
    let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
    let worker = crate::supervisor::worker_id(&config);
    let supervisor = match Supervisor::start_with(&config, &brokers, metrics, worker).await {
        Ok(supervisor) => std::sync::Arc::new(supervisor),
        Err(error) => {
            eprintln!("{error}");
            return EXIT_FAILURE;
        }
    };
    let (reload_tx, mut reload_rx) = tokio::sync::mpsc::channel::<ReloadRequest>(4);
    let mut admin = match start_admin(&config, &supervisor, &reload_tx).await {
        Ok(admin) => admin,
        Err(error) => {
            eprintln!("{error}");
            let _ = supervisor.shutdown().await;
            return EXIT_FAILURE;
        }
    };
    let mut hangups = hangup_signal();
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            () = supervisor.all_failed() => {
                tracing::error!("every connector failed permanently; exiting");
                break;
            }
            Some(()) = hangups.recv() => {
                tracing::info!("SIGHUP: reloading the configuration");
                // Its outcome is logged either way.
                let _ = reload(path, &brokers, &supervisor, &mut admin, &reload_tx).await;
            }
            Some(request) = reload_rx.recv() => {
                let result = reload(path, &brokers, &supervisor, &mut admin, &reload_tx).await;
                let _ = request.reply.send(result);
            }
        }
    }
    tracing::info!("stopping: finishing the batches in flight and leaving the group");
    // A stop that hangs (a broker or database that never answers a close) must not keep
    // the process: past the limit, or at a second signal, exit without the rest. Nothing is
    // lost: with exactly-once the batches not committed are read again from the stored
    // offsets; with at-least-once they are delivered again.
    let stopped = bounded_stop(supervisor.shutdown(), shutdown_signal(), SHUTDOWN_LIMIT).await;
    if let Some(admin) = admin {
        admin.stop().await;
    }
    let failures = match stopped {
        Stopped::Finished(failures) => failures,
        Stopped::SecondSignal => {
            tracing::error!("second signal: exiting without finishing the stop");
            return EXIT_FAILURE;
        }
        Stopped::OutOfTime => {
            tracing::error!(limit = ?SHUTDOWN_LIMIT, "the stop did not finish in time: exiting without the tasks still closing; their uncommitted batches are read again");
            return EXIT_FAILURE;
        }
    };
    for failure in &failures {
        eprintln!("{failure}");
    }
    if failures.is_empty() { 0 } else { EXIT_FAILURE }
}

/// Starts the admin server when the file asks for one.
async fn start_admin(
    config: &Config,
    supervisor: &std::sync::Arc<Supervisor>,
    reload: &tokio::sync::mpsc::Sender<ReloadRequest>,
) -> Result<Option<AdminServer>, crate::admin::AdminError> {
    match &config.admin {
        Some(admin) => AdminServer::start(
            &admin.listen,
            admin.token.clone(),
            supervisor.clone(),
            Some(reload.clone()),
        )
        .await
        .map(Some),
        None => Ok(None),
    }
}

/// Re-reads the file and applies it: every problem of a file that does not load is
/// logged and returned, and the running configuration stays. A change of `admin:`
/// rebinds the listener.
async fn reload(
    path: &Path,
    brokers: &str,
    supervisor: &std::sync::Arc<Supervisor>,
    admin: &mut Option<AdminServer>,
    reload_tx: &tokio::sync::mpsc::Sender<ReloadRequest>,
) -> Result<crate::supervisor::Reloaded, Vec<String>> {
    let config = match config::load_file(path) {
        Ok(config) => config,
        Err(error) => {
            let lines = error.lines(&path.display().to_string());
            for line in &lines {
                tracing::error!(problem = %line, "the new configuration is not valid; the old one runs on");
            }
            return Err(lines);
        }
    };
    // The embedded cluster lives as long as the process: a file that still says
    // `embedded` keeps it.
    let brokers = if config.kafka.is_embedded() {
        brokers.to_string()
    } else {
        config.kafka.brokers.clone()
    };
    let admin_changed =
        supervisor.config().admin != config.admin || (admin.is_none() && config.admin.is_some());
    let new_admin = config.admin.clone();
    let reloaded = supervisor
        .reload(config, &brokers)
        .await
        .map_err(|e| vec![e.to_string()])?;
    tracing::info!(started = ?reloaded.started, restarted = ?reloaded.restarted,
        stopped = ?reloaded.stopped, unchanged = ?reloaded.unchanged, "configuration reloaded");
    if admin_changed {
        match (admin.take(), new_admin) {
            // Same address: the token changes in place.
            (Some(server), Some(new)) if server.listen == new.listen => {
                server.set_token(new.token);
                *admin = Some(server);
            }
            (old, new) => {
                // The old server stops in the background: it may be serving this very
                // reload (POST /reload), whose answer comes after this returns.
                if let Some(old) = old {
                    tokio::spawn(old.begin_stop());
                }
                if let Some(new) = new {
                    match AdminServer::start(
                        &new.listen,
                        new.token,
                        supervisor.clone(),
                        Some(reload_tx.clone()),
                    )
                    .await
                    {
                        Ok(server) => *admin = Some(server),
                        Err(error) => {
                            tracing::error!(%error, "the admin API could not move to its new address; it is off until the next reload")
                        }
                    }
                }
            }
        }
    }
    Ok(reloaded)
}

/// SIGHUP, as a stream of reload requests (none where there are no signals).
fn hangup_signal() -> tokio::sync::mpsc::Receiver<()> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(mut hangup) => {
                tokio::spawn(async move {
                    while hangup.recv().await.is_some() {
                        if tx.send(()).await.is_err() {
                            break;
                        }
                    }
                });
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGHUP; reload through POST /reload")
            }
        }
    }
    #[cfg(not(unix))]
    drop(tx);
    rx
}

/// How a stop ended.
#[derive(Debug, PartialEq)]
enum Stopped {
    /// Every task closed; the failures of those that had failed.
    Finished(Vec<String>),
    /// Another SIGINT / SIGTERM came first.
    SecondSignal,
    /// The limit passed first.
    OutOfTime,
}

/// Runs `stop` until it finishes, `signal` resolves, or `limit` passes.
async fn bounded_stop(
    stop: impl std::future::Future<Output = Vec<String>>,
    signal: impl std::future::Future<Output = ()>,
    limit: std::time::Duration,
) -> Stopped {
    tokio::select! {
        failures = stop => Stopped::Finished(failures),
        () = signal => Stopped::SecondSignal,
        () = tokio::time::sleep(limit) => Stopped::OutOfTime,
    }
}

/// RFC 3339 (`2026-12-01T10:00:00Z`) or milliseconds since the epoch.
fn parse_timestamp(text: &str) -> Result<i64, String> {
    if let Ok(ms) = text.parse::<i64>() {
        // Negative values are Kafka's markers for "latest" and "earliest", not times.
        if ms < 0 {
            return Err(format!(
                "--timestamp {text}: a time before 1970 is no record's time"
            ));
        }
        return Ok(ms);
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|e| {
            format!("--timestamp {text}: {e}; write RFC 3339 (2026-12-01T10:00:00Z) or ms since the epoch")
        })
}

/// The file at `path`, and the index of its connector `name` (a clear error if it has
/// none).
fn load_connector(path: &Path, name: &str) -> Result<(Config, usize), u8> {
    let config = load(path)?;
    match config.connectors.iter().position(|c| c.name == name) {
        Some(index) => Ok((config, index)),
        None => {
            eprintln!("{}: no connector named {name}", path.display());
            Err(EXIT_INVALID)
        }
    }
}

/// The plugin engine a command needs to run `connector`'s transforms (none without them).
fn plugin_engine(
    connector: &config::ConnectorConfig,
) -> Result<Option<sluice_transform::TransformEngine>, u8> {
    if connector.transforms.is_empty() {
        return Ok(None);
    }
    sluice_transform::TransformEngine::new(sluice_transform::EngineOptions::default())
        .map(Some)
        .map_err(|e| {
            eprintln!("{e}");
            EXIT_FAILURE
        })
}

async fn redrive(
    path: &Path,
    name: &str,
    range: crate::deliver::redrive_topic::Range,
    ranged: bool,
) -> u8 {
    let (config, connector) = match load_connector(path, name) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let connector = &config.connectors[connector];
    let dlq_topic = match &connector.errors.dlq {
        Some(config::DeadLetterDestination::Table(_)) => {
            if ranged {
                eprintln!(
                    "connector {name}: --partition, --from-*, --to-* choose a range of a dead-letter topic; this connector's dead letters are in a table (errors.dlq.table), redriven whole"
                );
                return EXIT_INVALID;
            }
            None
        }
        Some(config::DeadLetterDestination::Topic(topic)) => Some(topic.clone()),
        None => {
            eprintln!(
                "connector {name}: it has no dead letters to redrive (errors.dlq is not set)"
            );
            return EXIT_INVALID;
        }
    };
    if dlq_topic.is_some() && config.kafka.is_embedded() {
        eprintln!(
            "{}: kafka.brokers is embedded, a cluster that lives inside `sluice run` only: there is no dead-letter topic to read",
            path.display()
        );
        return EXIT_INVALID;
    }
    let sink = match Sink::connect(connector).await {
        Ok(sink) => std::sync::Arc::new(sink),
        Err(e) => {
            eprintln!("connector {name}: {e}");
            return EXIT_FAILURE;
        }
    };
    if let Err(e) = sink.prepare().await {
        eprintln!("connector {name}: {e}");
        return EXIT_FAILURE;
    }
    let engine = match plugin_engine(connector) {
        Ok(engine) => engine,
        Err(code) => return code,
    };
    let code = match dlq_topic {
        None => {
            let result =
                crate::deliver::redrive::redrive(connector, sink.clone(), engine.as_ref()).await;
            match result {
                Ok(report) => {
                    println!(
                        "{name}: {} dead letter(s) read, {} redriven and removed, {} still failing and kept",
                        report.read, report.redriven, report.still_failing
                    );
                    0
                }
                Err(e) => {
                    eprintln!("connector {name}: {e}");
                    EXIT_FAILURE
                }
            }
        }
        Some(topic) => {
            let pool = crate::pool::ConsumerPool::new(
                &config.kafka,
                &config.kafka.brokers,
                &config.pool,
                &crate::metrics::Metrics::new(),
            );
            let result = crate::deliver::redrive_topic::redrive_topic(
                connector,
                sink.clone(),
                engine.as_ref(),
                pool.clone(),
                &topic,
                &range,
            )
            .await;
            pool.close();
            match result {
                Ok(report) => {
                    for line in &report.still_failing {
                        println!("still failing, stays in {topic}: {line}");
                    }
                    for line in &report.not_redrivable {
                        println!("not redriven: {line}");
                    }
                    println!(
                        "{name}: {} dead letter(s) read from {topic}, {} redriven, {} redriven before (passed over), {} still failing, {} not redrivable",
                        report.read,
                        report.redriven,
                        report.already,
                        report.still_failing.len(),
                        report.not_redrivable.len()
                    );
                    0
                }
                Err(e) => {
                    eprintln!("connector {name}: {e}");
                    if matches!(&e, crate::deliver::redrive::RedriveError::Read(r) if r.is_usage())
                    {
                        EXIT_INVALID
                    } else {
                        EXIT_FAILURE
                    }
                }
            }
        }
    };
    sink.close().await;
    code
}

async fn offsets(action: OffsetsAction) -> u8 {
    let (path, only, reset) = match &action {
        OffsetsAction::Show { config, connector } => (config, connector.clone(), false),
        OffsetsAction::Reset { config, connector } => (config, Some(connector.clone()), true),
    };
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let selected: Vec<_> = config
        .connectors
        .iter()
        .filter(|c| only.as_ref().is_none_or(|n| *n == c.name))
        .collect();
    if selected.is_empty() {
        eprintln!(
            "{}: no connector named {}",
            path.display(),
            only.unwrap_or_default()
        );
        return EXIT_INVALID;
    }
    for connector in selected {
        let sink = match Sink::connect(connector).await {
            Ok(sink) => sink,
            Err(e) => {
                eprintln!("connector {}: {e}", connector.name);
                return EXIT_FAILURE;
            }
        };
        for topic in &connector.topics {
            let result = if reset {
                sink.reset_offsets(topic).await.map(|n| {
                    println!(
                        "{} {topic}: forgot the offsets of {n} partition(s)",
                        connector.name
                    )
                })
            } else {
                sink.read_offsets(topic).await.map(|offsets| {
                    let mut offsets: Vec<_> = offsets.into_iter().collect();
                    offsets.sort();
                    for (partition, next) in offsets {
                        println!("{} {topic} {partition} {next}", connector.name);
                    }
                })
            };
            if let Err(e) = result {
                eprintln!("connector {}: {e}", connector.name);
                return EXIT_FAILURE;
            }
        }
        sink.close().await;
        // The group's committed offsets (a mirror for lag tools) go too; the embedded
        // cluster of another process is not reachable from here.
        if reset && !config.kafka.is_embedded() {
            let (kafka, connector_config) = (config.kafka.clone(), connector.clone());
            let moved = tokio::task::spawn_blocking(move || {
                crate::kafka::group::reset_group_offsets(&kafka, &kafka.brokers, &connector_config)
            })
            .await
            .unwrap_or_else(|_| Err(rdkafka::error::KafkaError::Canceled));
            match moved {
                Ok(n) => println!(
                    "{}: moved the Kafka group {}'s committed offsets of {n} partition(s) to where the connector starts",
                    connector.name,
                    connector.group_id()
                ),
                Err(e) => eprintln!(
                    "{}: the Kafka group {}'s committed offsets stay ({e}); stop the connector (sluice stop) and reset again to clear them",
                    connector.name,
                    connector.group_id()
                ),
            }
        }
    }
    0
}

fn plugin(action: PluginAction) -> u8 {
    use sluice_transform::{EngineOptions, Limits, PluginSpec, TransformEngine};
    match action {
        PluginAction::New { name, dir } => match sluice_transform::scaffold_plugin(&name, &dir) {
            Ok(created) => {
                println!(
                    "created {}: write your transform in src/lib.rs, then `sluice plugin build {}`",
                    created.display(),
                    created.display()
                );
                0
            }
            Err(e) => {
                eprintln!("{e}");
                EXIT_INVALID
            }
        },
        PluginAction::Build { dir } => match sluice_transform::build_plugin(&dir) {
            Ok(wasm) => {
                println!("{}", wasm.display());
                0
            }
            Err(e) => {
                eprintln!("{e}");
                EXIT_FAILURE
            }
        },
        PluginAction::Test {
            plugin,
            input,
            config,
            timeout,
            memory,
        } => {
            let mut entries = std::collections::BTreeMap::new();
            for entry in &config {
                let Some((key, value)) = entry.split_once('=') else {
                    eprintln!("--config {entry}: write key=value");
                    return EXIT_INVALID;
                };
                entries.insert(key.to_string(), value.to_string());
            }
            let (timeout, memory) = match (
                config::units::parse_duration(&timeout),
                config::units::parse_size(&memory),
            ) {
                (Ok(t), Ok(m)) => match (
                    config::check_plugin_timeout(t),
                    config::check_plugin_memory(m),
                ) {
                    (Ok(()), Ok(())) => (t, m),
                    (Err(e), _) => {
                        eprintln!("--timeout: {e}");
                        return EXIT_INVALID;
                    }
                    (_, Err(e)) => {
                        eprintln!("--memory: {e}");
                        return EXIT_INVALID;
                    }
                },
                (Err(e), _) => {
                    eprintln!("--timeout: {e}");
                    return EXIT_INVALID;
                }
                (_, Err(e)) => {
                    eprintln!("--memory: {e}");
                    return EXIT_INVALID;
                }
            };
            let name = plugin
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "plugin".into());
            let spec = PluginSpec {
                name,
                path: plugin,
                config: entries,
                limits: Limits {
                    memory_bytes: memory,
                    timeout,
                    ..Limits::default()
                },
            };
            let result = TransformEngine::new(EngineOptions::default())
                .and_then(|engine| sluice_transform::test_plugin(&engine, &spec, &input));
            match result {
                Ok(cases) => {
                    for case in &cases {
                        println!("{case}");
                    }
                    0
                }
                Err(e) => {
                    eprintln!("{e}");
                    EXIT_FAILURE
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::{pending, ready};
    use std::time::{Duration, Instant};

    use super::{EXIT_INVALID, Stopped, bounded_stop, validate_to};

    /// Runs `sluice validate` in-process on `text`: (exit code, stdout, stderr).
    fn validate_text(text: &str) -> (u8, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("connectors.yaml");
        std::fs::write(&path, text).unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = validate_to(&path, &mut out, &mut err);
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    const SECRETS: &str = r#"
kafka:
  brokers: localhost:9092
  properties:
    security.protocol: SASL_SSL
    sasl.username: app
    sasl.password: hunter2-sasl
    ssl.key.password: hunter2-key
connectors:
  - name: userinfo
    topics: [a]
    sink:
      url: postgres://app:hunter2-userinfo@db:5432/test?sslmode=require
      table: a
      columns: { v: { from: /v, type: text } }
  - name: query
    topics: [b]
    sink:
      url: postgres://app@db/test?sslkey=/etc/k.pem&password=hunter2-query
      table: b
      columns: { v: { from: /v, type: text } }
"#;

    fn assert_no_secret(text: &str) {
        assert!(!text.contains("hunter2"), "a secret is shown:\n{text}");
    }

    #[test]
    fn validate_prints_no_secret_of_a_good_file() {
        let (code, out, err) = validate_text(SECRETS);
        assert_eq!(code, 0, "{err}");
        assert_no_secret(&out);
        assert_no_secret(&err);
        assert!(out.contains("sasl.password=***"), "{out}");
        assert!(out.contains("sasl.username=app"), "{out}");
        assert!(
            out.contains("postgres://app:***@db:5432/test?sslmode=require"),
            "{out}"
        );
        assert!(out.contains("?sslkey=/etc/k.pem&password=***"), "{out}");
    }

    #[test]
    fn validate_prints_no_secret_of_a_bad_file() {
        for bad in [
            // A bad field next to the URL.
            SECRETS.replace("      table: a\n", "      table: a\n      tabel: x\n"),
            // A value that fails beside it, after the schema.
            SECRETS.replace("table: b", "table: \"b c\""),
            // An unsupported scheme: the URL is quoted in the message.
            SECRETS.replace("postgres://app@db", "oracle://app@db"),
            // The sink as a list: a schema error about the whole value.
            SECRETS.replace(
                "    sink:\n      url: postgres://app:",
                "    sink:\n    - url: postgres://app:",
            ),
            // connectors as a mapping: the schema's message would print all of it.
            SECRETS
                .replace(
                    "connectors:\n  - name: userinfo",
                    "connectors:\n  first:\n    name: userinfo",
                )
                .replace("  - name: query", "  second:\n    name: query"),
            // An unclosed ${ in the URL: the message quotes the string.
            SECRETS.replace("?sslmode=require", "?sslmode=${MODE"),
            // A secret property of the wrong type.
            SECRETS.replace(
                "sasl.password: hunter2-sasl",
                "sasl.password: [hunter2-sasl]",
            ),
        ] {
            let (code, out, err) = validate_text(&bad);
            assert_eq!(code, EXIT_INVALID, "{bad}\n{out}{err}");
            assert!(!err.is_empty());
            assert_no_secret(&out);
            assert_no_secret(&err);
        }
    }

    #[tokio::test]
    async fn a_stop_that_finishes_reports_its_failures() {
        let stopped = bounded_stop(
            ready(vec!["connector c task 0: boom".to_string()]),
            pending(),
            Duration::from_secs(60),
        )
        .await;
        assert_eq!(
            stopped,
            Stopped::Finished(vec!["connector c task 0: boom".into()])
        );
    }

    #[tokio::test]
    async fn a_stop_that_hangs_ends_at_the_limit() {
        let started = Instant::now();
        let stopped = bounded_stop(pending(), pending(), Duration::from_millis(100)).await;
        assert_eq!(stopped, Stopped::OutOfTime);
        assert!(started.elapsed() >= Duration::from_millis(100));
    }

    #[tokio::test]
    async fn a_second_signal_cuts_a_hanging_stop_short() {
        let stopped = bounded_stop(pending(), ready(()), Duration::from_secs(60)).await;
        assert_eq!(stopped, Stopped::SecondSignal);
    }
}

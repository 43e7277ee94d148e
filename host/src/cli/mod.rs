//! The `sluice` command line. Exit codes: 0 ok, 1 runtime failure, 2 invalid configuration
//! or usage. Errors go to stderr, one line per problem.

mod control;
pub mod demo;
mod inspect;
mod offsets;
mod plugin;
mod reach;
mod redrive;
mod validate;
mod verify;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{self, Config};
pub use crate::server::{EXIT_FAILURE, EXIT_INVALID, load};
use inspect::{DryRunFormat, InspectFormat};
use offsets::offsets;
use plugin::plugin;
use redrive::redrive;
use validate::validate;

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
        /// Records of this topic (default: the connector's first; required with topics_regex)...
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
    /// Check that a connector's table holds what its topics say: the log from its start up
    /// to the connector's stored offsets, folded as the connector writes it, compared with
    /// the table by key. Prints missing, extra and differing keys; exit 1 when there is a
    /// difference. Nothing of the connector's changes.
    Verify {
        #[arg(long, short, default_value = "connectors.yaml")]
        config: PathBuf,
        #[arg(long)]
        connector: String,
        /// How many keys of each kind (missing, extra, differing) the text lists.
        #[arg(short = 'n', long = "limit", default_value_t = 20)]
        limit: usize,
        /// `json`: the whole answer, every key, on stdout.
        #[arg(long, value_enum, default_value = "text")]
        format: verify::VerifyFormat,
    },
    /// Check a configuration file and print every problem, one per line.
    Validate {
        #[arg(long, short, default_value = "connectors.yaml")]
        config: PathBuf,
        /// Also reach what the file names: each connector's Kafka cluster and topics, its
        /// database and table (and, on PostgreSQL, the right to write it), its Schema
        /// Registry; a line each, exit 1 when one fails. Nothing is changed.
        #[arg(long)]
        connect: bool,
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
        /// `text`: a table; `json`: the admin API's answer (`GET /connectors?expand=status`).
        #[arg(long, value_enum, default_value = "text")]
        format: OutputFormat,
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
    /// Print a completion script for SHELL on stdout, e.g.
    /// `sluice completions bash > /etc/bash_completion.d/sluice`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print sluice's man page (roff) on stdout, e.g. `sluice man > sluice.1 && man ./sluice.1`.
    Man,
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

/// What a command that shows state prints: for people, or for scripts.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Text,
    Json,
}

/// A plugin's language, for `sluice plugin new --lang`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Language {
    Rust,
    Python,
    Js,
}

impl From<Language> for sluice_transform::PluginLanguage {
    fn from(lang: Language) -> Self {
        match lang {
            Language::Rust => sluice_transform::PluginLanguage::Rust,
            Language::Python => sluice_transform::PluginLanguage::Python,
            Language::Js => sluice_transform::PluginLanguage::Js,
        }
    }
}

#[derive(Subcommand, Debug)]
enum PluginAction {
    /// Create a plugin NAME (in the current directory) that builds as it is.
    New {
        name: String,
        /// Where to create it.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// The language to write it in.
        #[arg(long, value_enum, default_value_t = Language::Rust)]
        lang: Language,
    },
    /// Build a plugin into a WebAssembly component and print the component's path: a
    /// Rust crate (Cargo.toml) for wasm32-wasip2, a Python plugin (pyproject.toml and
    /// plugin.py) with componentize-py, a JavaScript plugin (package.json and plugin.js)
    /// with componentize-js.
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
        /// `text`: a line per input record; `json`: a JSON object per input record, with
        /// every output record in the form `--input` reads.
        #[arg(long, value_enum, default_value = "text")]
        format: OutputFormat,
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
        /// Topic only, without errors.dlq.signing_key: redrive a dead letter whose source
        /// record the log no longer holds as it is (by default it is refused, as it cannot be
        /// checked against its source).
        #[arg(long)]
        trust_unsigned: bool,
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
        /// `text`: `connector topic partition next_offset` lines; `json`: a JSON object per
        /// partition.
        #[arg(long, value_enum, default_value = "text")]
        format: OutputFormat,
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
    // The demo's terminal is its progress and verdict: its log shows warnings and errors
    // only (RUST_LOG=info shows the rest).
    let default_level = if matches!(cli.command, Command::Demo { .. }) {
        "warn"
    } else {
        "info"
    };
    crate::logging::init(
        match cli.log_format {
            LogFormat::Text => crate::logging::LogFormat::Text,
            LogFormat::Json => crate::logging::LogFormat::Json,
        },
        default_level,
    );
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
            Command::Validate { config, connect } => {
                off_the_runtime(move || validate(&config, connect)).await
            }
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
            Command::Verify {
                config,
                connector,
                limit,
                format,
            } => verify::verify(&config, &connector, limit, format).await,
            Command::Run { config } => crate::server::run(&config).await,
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
                        trust_unsigned,
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
                        redrive(&config, &connector, range, ranged, trust_unsigned).await
                    }
                    (Err(e), _) | (_, Err(e)) => {
                        eprintln!("{e}");
                        EXIT_INVALID
                    }
                }
            }
            Command::Plugin { action } => off_the_runtime(move || plugin(action)).await,
            Command::Status { target, format } => control::status(&target, format).await,
            Command::Completions { shell } => {
                use clap::CommandFactory;
                clap_complete::generate(
                    shell,
                    &mut Cli::command(),
                    "sluice",
                    &mut std::io::stdout(),
                );
                0
            }
            Command::Man => {
                use clap::CommandFactory;
                match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                    Ok(()) => 0,
                    Err(e) => {
                        eprintln!("cannot write the man page: {e}");
                        EXIT_FAILURE
                    }
                }
            }
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

/// Runs a command that calls plugins on a thread of the runtime's blocking pool, not on a
/// worker: WASI's synchronous stdio blocks on the runtime, which panics on a worker (a
/// plugin that prints would take `validate` or `plugin test` down).
async fn off_the_runtime(command: impl FnOnce() -> u8 + Send + 'static) -> u8 {
    match tokio::task::spawn_blocking(command).await {
        Ok(code) => code,
        // The panic hook has printed it.
        Err(_) => EXIT_FAILURE,
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn completions_and_the_man_page_cover_the_commands() {
        let mut bash = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut super::Cli::command(),
            "sluice",
            &mut bash,
        );
        let bash = String::from_utf8(bash).expect("UTF-8");
        for command in ["run", "validate", "dry-run", "status", "completions", "man"] {
            assert!(bash.contains(command), "{command} missing from:\n{bash}");
        }
        let mut man = Vec::new();
        clap_mangen::Man::new(super::Cli::command())
            .render(&mut man)
            .expect("render");
        let man = String::from_utf8(man).expect("UTF-8");
        assert!(man.contains(".TH sluice 1"), "{man}");
        assert!(man.contains("dry\\-run"), "{man}");
    }

    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }
}

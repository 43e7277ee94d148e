//! The matrix of runs: which `sluice run` configurations the benchmark measures, each a
//! [`Run`] (database, write mode, plugin, tasks, levers).

use crate::harness::Backend;

/// The language of a run's `word_parse`: the Rust plugin, or its twin in Python
/// (`plugins/python/word_parse`) or JavaScript (`plugins/js/word_parse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PluginLang {
    Rust,
    Python,
    Js,
}

impl PluginLang {
    /// The component of this language's `word_parse`, built first for a twin.
    pub(crate) fn word_parse(self) -> std::path::PathBuf {
        match self {
            PluginLang::Rust => sluice_transform::example_plugin_path("word_parse"),
            PluginLang::Python => sluice_transform::example_python_plugin("word_parse")
                .expect("build plugins/python/word_parse (scripts/setup.sh --plugins installs componentize-py)"),
            PluginLang::Js => sluice_transform::example_js_plugin("word_parse")
                .expect("build plugins/js/word_parse (scripts/setup.sh --plugins installs componentize-js)"),
        }
    }
}

/// A run of `sluice run`.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) name: String,
    pub(crate) db: Backend,
    pub(crate) mode: &'static str,
    pub(crate) plugin: bool,
    /// With `plugin`: which language's `word_parse` (the Rust plugin or one of its twins).
    pub(crate) plugin_lang: PluginLang,
    /// Values in Avro (`format: avro`, schemas from the bench's registry) instead of JSON.
    pub(crate) avro: bool,
    /// Values as Debezium change events (`envelope: debezium`, versioned by the lsn).
    pub(crate) debezium: bool,
    /// With `debezium`: the events of [`crate::backlog::DEBEZIUM_TABLES`] source tables,
    /// each written to its own table through `table: "…_{source.table}"`.
    pub(crate) many_tables: bool,
    /// With `many_tables`: each source table's events on a topic of its own (one
    /// partition each, as Debezium's connectors write a database by default), the
    /// connector subscribed to all of them, instead of one topic carrying all tables.
    pub(crate) many_topics: bool,
    pub(crate) tasks: u32,
    /// Every key is in the table before the run (an upsert that updates every row).
    pub(crate) keys_present: bool,
    /// `sluice run` processes in one group, each with the run's tasks.
    pub(crate) processes: u32,
    /// Environment of the process (a lever's switch).
    pub(crate) env: Vec<(&'static str, &'static str)>,
    /// More `kafka.properties`, indented for the scenario's YAML.
    pub(crate) kafka: String,
    /// More `sink:` keys, indented for the scenario's YAML.
    pub(crate) sink: String,
    pub(crate) max_records: usize,
    /// The connector is paused as the process starts and resumed once every task of every
    /// process holds its partitions, and the drain is timed from the resume: the group's
    /// join left out (the test broker answers one member of a new group about 3 s after
    /// the other, docs/performance.md).
    pub(crate) settle: bool,
}

pub(crate) fn matrix() -> Vec<Run> {
    let mut runs = Vec::new();
    let db_name = |db| match db {
        Backend::Postgres => "postgres",
        Backend::MariaDb => "mariadb",
        Backend::Sqlite => "sqlite",
    };
    for (db, modes) in [
        (Backend::Postgres, &["insert", "upsert"][..]),
        (Backend::MariaDb, &["upsert"][..]),
        (Backend::Sqlite, &["upsert"][..]),
    ] {
        for &mode in modes {
            for plugin in [true, false] {
                for tasks in [1, 2] {
                    runs.push(Run {
                        name: format!(
                            "{} {mode} {} {tasks}t",
                            db_name(db),
                            if plugin { "word_parse" } else { "json" }
                        ),
                        db,
                        mode,
                        plugin,
                        plugin_lang: PluginLang::Rust,
                        avro: false,
                        debezium: false,
                        many_tables: false,
                        many_topics: false,
                        tasks,
                        keys_present: false,
                        processes: 1,
                        env: Vec::new(),
                        kafka: String::new(),
                        sink: String::new(),
                        max_records: 5000,
                        settle: false,
                    });
                }
            }
        }
    }
    let base = |name: &str, mode: &'static str| Run {
        name: name.to_string(),
        db: Backend::Postgres,
        mode,
        plugin: true,
        plugin_lang: PluginLang::Rust,
        avro: false,
        debezium: false,
        many_tables: false,
        many_topics: false,
        tasks: 1,
        keys_present: false,
        processes: 1,
        env: Vec::new(),
        kafka: String::new(),
        sink: String::new(),
        max_records: 5000,
        settle: false,
    };
    // The Rust plugin's twins in the other plugin languages, beside the matrix's
    // `postgres insert word_parse 1t`: what the interpreter costs end to end.
    for (lang, name) in [
        (
            PluginLang::Python,
            "postgres insert word_parse in Python 1t",
        ),
        (
            PluginLang::Js,
            "postgres insert word_parse in JavaScript 1t",
        ),
    ] {
        runs.push(Run {
            plugin_lang: lang,
            ..base(name, "insert")
        });
    }
    // Upserts of keys all in the table already: the optimistic COPY meets them and falls
    // back to ON CONFLICT (it must not be slower than ON CONFLICT alone).
    runs.push(Run {
        keys_present: true,
        ..base("postgres upsert word_parse 1t, keys present", "upsert")
    });
    // The JSON run's records, in Avro as Confluent's serializer writes them: what decoding
    // on arrival costs.
    runs.push(Run {
        plugin: false,
        avro: true,
        ..base("postgres insert avro 1t", "insert")
    });
    // The upsert JSON run's records as Debezium change events: what reading the envelope
    // and writing by version (the conditional upsert, the tombstone lookup) cost.
    runs.push(Run {
        plugin: false,
        debezium: true,
        ..base("postgres upsert debezium 1t", "upsert")
    });
    // The same events from 20 source tables, one connector writing 20 tables: what a table
    // template (routing each record, a statement per table in each transaction) costs.
    runs.push(Run {
        plugin: false,
        debezium: true,
        many_tables: true,
        ..base("postgres upsert debezium 20 tables 1t", "upsert")
    });
    // The same events, each source table on a topic of its own: a batch holds runs of
    // one table's records, as librdkafka fetches them partition by partition.
    runs.push(Run {
        plugin: false,
        debezium: true,
        many_tables: true,
        many_topics: true,
        ..base("postgres upsert debezium 20 topics 20 tables 1t", "upsert")
    });
    // The same with batches four times as large: each table's share of a batch back to
    // about what one table's is in batches of 5,000 (a table's fixed cost per batch: its
    // tombstone question, savepoint and COPY).
    runs.push(Run {
        plugin: false,
        debezium: true,
        many_tables: true,
        max_records: 20000,
        ..base(
            "lever: postgres upsert debezium 20 tables 1t, batches of 20000",
            "upsert",
        )
    });
    runs.push(Run {
        env: vec![("SLUICE_PG_WRITE", "unnest")],
        ..base(
            "lever: postgres insert word_parse 1t, UNNEST not COPY",
            "insert",
        )
    });
    runs.push(Run {
        env: vec![("SLUICE_PG_UPSERT", "unnest")],
        ..base(
            "lever: postgres upsert word_parse 1t, ON CONFLICT not optimistic COPY",
            "upsert",
        )
    });
    runs.push(Run {
        env: vec![("SLUICE_PG_UPSERT", "unnest")],
        keys_present: true,
        ..base(
            "lever: postgres upsert word_parse 1t, keys present, ON CONFLICT not optimistic COPY",
            "upsert",
        )
    });
    // Two processes in one group, one task each: scaling out by processes.
    runs.push(Run {
        processes: 2,
        ..base("postgres insert word_parse 2 processes × 1t", "insert")
    });
    // The same three with the group settled before the drain is timed.
    for (tasks, processes, name) in [
        (1, 1, "postgres insert word_parse 1t, group settled"),
        (2, 1, "postgres insert word_parse 2t, group settled"),
        (
            1,
            2,
            "postgres insert word_parse 2 processes × 1t, group settled",
        ),
    ] {
        runs.push(Run {
            tasks,
            processes,
            settle: true,
            ..base(name, "insert")
        });
    }
    runs.push(Run {
        sink: "      synchronous_commit: off\n".into(),
        ..base(
            "lever: postgres insert word_parse 1t, synchronous_commit off",
            "insert",
        )
    });
    runs.push(Run {
        env: vec![("SLUICE_BACKPRESSURE", "pause")],
        ..base(
            "lever: postgres insert word_parse 1t, pause for backpressure",
            "insert",
        )
    });
    runs.push(Run {
        max_records: 20000,
        ..base(
            "lever: postgres insert word_parse 1t, batches of 20000",
            "insert",
        )
    });
    runs.push(Run {
        kafka: "    queued.min.messages: 1000000\n".into(),
        ..base(
            "lever: postgres insert word_parse 1t, queued.min.messages 1M",
            "insert",
        )
    });
    for tasks in [1, 2] {
        runs.push(Run {
            kafka: "    max.partition.fetch.bytes: 4194304\n".into(),
            tasks,
            ..base(
                &format!(
                    "lever: postgres insert word_parse {tasks}t, max.partition.fetch.bytes=4MiB"
                ),
                "insert",
            )
        });
    }
    runs.push(Run {
        kafka: "    fetch.queue.backoff.ms: 1000\n".into(),
        ..base(
            "lever: postgres insert word_parse 1t, fetch.queue.backoff.ms=1000",
            "insert",
        )
    });
    runs.push(Run {
        kafka: "    queued.max.messages.kbytes: 65536\n".into(),
        ..base(
            "lever: postgres insert word_parse 1t, queued.max.messages.kbytes=65536",
            "insert",
        )
    });
    runs
}

//! Loading configurations: defaults, every problem reported with its path, secrets hidden.

use super::load::*;
use super::schema_check::pointer_to_path;

const GOOD: &str = r#"
kafka: { brokers: "localhost:9092", properties: { session.timeout.ms: 10000 } }
connectors:
  - name: words
    topics: [words]
    sink:
      url: sqlite://words.db
      table: words
      mode: upsert
      key: [uid]
      columns:
        uid: { from: /uid, type: bigint }
        word: { from: /word, type: text }
"#;

fn no_env(_: &str) -> Option<String> {
    None
}

fn problems(text: &str) -> Vec<String> {
    match load_str(text, &no_env) {
        Ok(_) => Vec::new(),
        Err(ConfigError::Invalid { problems }) => problems.iter().map(|p| p.to_string()).collect(),
        Err(other) => vec![other.to_string()],
    }
}

#[test]
fn good_file_loads_with_defaults() {
    let config = load_str(GOOD, &no_env).expect("valid");
    let c = &config.connectors[0];
    assert_eq!(c.group_id(), "sluice-words");
    assert_eq!(c.tasks, 1);
    assert_eq!(c.sink.columns()[0].0, "uid");
    assert_eq!(config.kafka.properties["session.timeout.ms"], "10000");
}

#[test]
fn columns_keep_the_file_order() {
    let text = GOOD.replace("        uid: { from: /uid, type: bigint }\n        word: { from: /word, type: text }", "        word: { from: /word, type: text }\n        uid: { from: /uid, type: bigint }\n        a: { from: $offset, type: bigint }");
    let config = load_str(&text, &no_env).expect("valid");
    let names: Vec<&str> = config.connectors[0]
        .sink
        .columns()
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, ["word", "uid", "a"]);
}

#[test]
fn unknown_key_column_is_named() {
    let text = GOOD.replace("key: [uid]", "key: [id]");
    assert_eq!(
        problems(&text),
        vec!["connectors[0].sink.key[0]: column \"id\" is not defined in columns"]
    );
}

#[test]
fn every_problem_is_reported() {
    let text = GOOD
        .replace("key: [uid]", "key: [id, uid2]")
        .replace("sqlite://", "oracle://");
    let found = problems(&text);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[0].starts_with("connectors[0].sink.url: unsupported database \"oracle\""));
}

#[test]
fn passwords_stay_hidden() {
    let text = GOOD.replace("sqlite://words.db", "oracle://u:hunter2@h/db");
    let found = problems(&text).join("\n");
    assert!(!found.contains("hunter2"), "{found}");
}

const SECRETS: &str = r#"
kafka:
  brokers: localhost:9092
  properties: { sasl.username: app, sasl.password: hunter2-sasl, sasl.oauthbearer.client.secret: hunter2-oidc }
connectors:
  - name: words
    topics: [words]
    transforms:
      - name: t
        plugin: t.wasm
        config: { api_token: hunter2-token, field: uid }
    sink:
      url: postgres://app:hunter2-userinfo@db/test?password=hunter2-query&sslmode=require
      table: words
      columns: { uid: { from: /uid, type: bigint } }
"#;

#[test]
fn debug_of_a_config_shows_no_secret() {
    let config = load_str(SECRETS, &no_env).expect("valid");
    let shown = format!("{config:?} {config:#?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("postgres://app:***@db/test?password=***&sslmode=require"));
    assert!(shown.contains("sasl.username") && shown.contains("field"));
    // The values themselves are there for the clients that need them.
    assert_eq!(config.kafka.properties["sasl.password"], "hunter2-sasl");
    assert!(
        config.connectors[0]
            .sink
            .url
            .expose()
            .contains("hunter2-userinfo")
    );
    assert_eq!(
        config.connectors[0].transforms[0].spec().config["api_token"],
        "hunter2-token"
    );
}

#[test]
fn failed_loads_show_no_secret() {
    for bad in [
        SECRETS.replace("      table: words", "      table: words\n      tabel: x"),
        SECRETS.replace("table: words", "table: \"no good\""),
        SECRETS
            .replace("columns: {", "columns: [")
            .replace("bigint } }", "bigint } ]"),
        SECRETS.replace("sslmode=require", "sslmode=${MODE"),
        SECRETS.replace(
            "sasl.password: hunter2-sasl",
            "sasl.password: [hunter2-sasl]",
        ),
        SECRETS.replace("  - name: words", "  words:"),
    ] {
        let error = load_str(&bad, &no_env).expect_err(&bad);
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains("hunter2"), "{bad}\n{shown}");
    }
}

#[test]
fn merge_keys_share_settings_and_unknown_fields_still_fail() {
    let text = r#"
kafka: { brokers: localhost:9092 }
connectors:
  - name: a
    topics: [a]
    sink: &sink
      url: sqlite://x.db
      table: a
      columns: { uid: { from: /uid, type: bigint }, word: { from: /word, type: text } }
  - name: b
    topics: [b]
    sink:
      <<: *sink
      table: b
"#;
    let config = load_str(text, &no_env).expect("valid");
    let b = &config.connectors[1].sink;
    assert_eq!(b.table_label(), "b");
    assert_eq!(b.url.expose(), "sqlite://x.db");
    let names: Vec<&str> = b.columns().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["uid", "word"]);
    assert_eq!(
        problems(&text.replace("      table: b\n", "      table: b\n      tabel: c\n")),
        vec!["connectors[1].sink: unknown field tabel"]
    );
    assert_eq!(
        problems(&text.replace(
            "      <<: *sink",
            "      <<: 5\n      url: sqlite://y.db\n      columns: {}"
        )),
        vec![
            "connectors[1].sink.<<: the merge key << takes a mapping or a list of mappings (an alias such as *defaults, or [*a, *b]), not a number"
        ]
    );
}

#[test]
fn syntax_errors_keep_their_line() {
    let found = problems("kafka: { brokers: localhost:9092 }\nconnectors:\n  - name: [a\n");
    assert_eq!(found.len(), 1);
    assert!(found[0].starts_with("line "), "{found:?}");
}

#[test]
fn plugin_limits_are_range_checked() {
    let with = |limits: &str| {
        GOOD.replace(
            "    sink:",
            &format!(
                "    transforms: [{{ name: t, plugin: t.wasm, limits: {limits} }}]\n    sink:"
            ),
        )
    };
    assert!(problems(&with("{ timeout: 1ms, memory: 1MiB }")).is_empty());
    assert!(problems(&with("{ timeout: 5m, memory: 4GiB }")).is_empty());
    assert_eq!(
        problems(&with("{ timeout: 0.5ms }")),
        vec![
            "connectors[0].transforms[0].limits.timeout: 0.5ms is shorter than 1ms, the shortest deadline sluice can keep (epoch ticks are milliseconds)"
        ]
    );
    let found = problems(&with("{ timeout: 301s, memory: 4097MiB }"));
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].starts_with("connectors[0].transforms[0].limits.timeout: 301s is longer than 5m"),
        "{found:?}"
    );
    assert!(
        found[1]
            .starts_with("connectors[0].transforms[0].limits.memory: 4097MiB is more than 4GiB"),
        "{found:?}"
    );
    assert_eq!(
        problems(&with("{ memory: 1023KiB }")),
        vec![
            "connectors[0].transforms[0].limits.memory: 1023KiB is less than 1MiB, the least memory a component starts with"
        ]
    );
}

#[test]
fn isolation_defaults_and_checks() {
    let config = load_str(GOOD, &no_env).expect("valid");
    let isolation = &config.connectors[0].errors.isolation;
    assert_eq!(isolation.max_time.0, std::time::Duration::from_secs(300));
    assert_eq!(isolation.max_failed_calls, 64);
    let with = |isolation: &str| format!("{GOOD}    errors: {{ isolation: {isolation} }}\n");
    let config = load_str(&with("{ max_time: 30s, max_failed_calls: 8 }"), &no_env).expect("valid");
    let isolation = &config.connectors[0].errors.isolation;
    assert_eq!(isolation.max_time.0, std::time::Duration::from_secs(30));
    assert_eq!(isolation.max_failed_calls, 8);
    assert_eq!(
        problems(&with("{ max_time: 0s }")),
        vec![
            "connectors[0].errors.isolation.max_time: must be more than 0: it is the time allowed to find the records that fail a batch"
        ]
    );
    let found = problems(&with("{ max_failed_calls: 0 }"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with(
            "connectors[0].errors.isolation.max_failed_calls: 0 is less than the minimum of 1"
        ),
        "{found:?}"
    );
    assert_eq!(
        problems(&with("{ max_calls: 3 }")),
        vec!["connectors[0].errors.isolation: unknown field max_calls"]
    );
}

#[test]
fn paths() {
    assert_eq!(
        pointer_to_path("/connectors/1/sink/key/0"),
        "connectors[1].sink.key[0]"
    );
    assert_eq!(pointer_to_path(""), "");
}

#[test]
fn an_open_listener_needs_a_token_and_a_read_token_its_own_value() {
    let with = |admin: &str| problems(&format!("{GOOD}\nadmin: {admin}\n"));
    let open = with("{ listen: \"0.0.0.0:8083\" }");
    assert_eq!(open.len(), 1, "{open:?}");
    assert!(
        open[0].starts_with("admin.listen: 0.0.0.0:8083 is reachable"),
        "{open:?}"
    );
    assert!(with("{ listen: \"[::]:8083\" }")[0].starts_with("admin.listen"));
    assert!(with("{ listen: \"127.0.0.1:8083\" }").is_empty());
    assert!(with("{ listen: \"[::1]:8083\" }").is_empty());
    assert!(with("{ listen: \"0.0.0.0:8083\", token: t-0123456789abcdef }").is_empty());
    assert!(with("{ listen: \"0.0.0.0:8083\", read_token: r-0123456789abcdef }").is_empty());
    // Off loopback, a read token is as long as a token must be.
    assert_eq!(with("{ listen: \"0.0.0.0:8083\", read_token: r }").len(), 1);
    let same = with("{ listen: \"127.0.0.1:8083\", token: t, read_token: t }");
    assert!(
        same.len() == 1 && same[0].starts_with("admin.read_token: is the same"),
        "{same:?}"
    );
}

#[test]
fn envelopes_and_versions_are_checked() {
    // A Debezium connector versions by the source position, in _sluice_version.
    let debezium = GOOD.replace("    sink:", "    envelope: debezium\n    sink:");
    let config = load_str(&debezium, &no_env).expect("valid");
    let c = &config.connectors[0];
    let version = c.sink.versioning(c.envelope).expect("on by default");
    assert_eq!(
        (version.from.as_str(), version.column.as_str()),
        ("$position", "_sluice_version")
    );
    assert!(problems(&debezium).is_empty());

    let insert = debezium.replace("mode: upsert", "mode: insert");
    let found = problems(&insert);
    assert!(
        found.iter().any(|p| p.contains("needs mode: upsert")),
        "{found:?}"
    );

    let bytes = debezium.replace(
        "    envelope: debezium",
        "    envelope: debezium\n    format: bytes",
    );
    let found = problems(&bytes);
    assert!(
        found.iter().any(|p| p.contains("connectors[0].envelope")),
        "{found:?}"
    );

    let position = GOOD.replace(
        "      mode: upsert",
        "      mode: upsert\n      version: { from: $position }",
    );
    let found = problems(&position);
    assert!(
        found.iter().any(|p| p.contains("needs envelope: debezium")),
        "{found:?}"
    );

    let bad_from = GOOD.replace(
        "      mode: upsert",
        "      mode: upsert\n      version: { from: updated_at }",
    );
    assert!(!problems(&bad_from).is_empty());

    let clash = GOOD.replace(
        "      mode: upsert",
        "      mode: upsert\n      version: { from: $offset, column: word }",
    );
    let found = problems(&clash);
    assert!(
        found.iter().any(|p| p.contains("sink.version.column")),
        "{found:?}"
    );

    let truncate = GOOD.replace(
        "      mode: upsert",
        "      mode: upsert\n      on_truncate: truncate",
    );
    let found = problems(&truncate);
    assert!(found.iter().any(|p| p.contains("on_truncate")), "{found:?}");

    let unknown = debezium.replace("envelope: debezium", "envelope: maxwell");
    assert!(!problems(&unknown).is_empty());
}

#[test]
fn the_default_version_column_must_not_clash_either() {
    let clash = GOOD
        .replace("    sink:", "    envelope: debezium\n    sink:")
        .replace(
            "word: { from: /word, type: text }",
            "_SLUICE_VERSION: { from: /word, type: text }",
        );
    let found = problems(&clash);
    assert!(
        found.iter().any(|p| p.contains("sink.version.column")),
        "{found:?}"
    );
}

#[test]
fn routing_settings_are_checked_with_their_paths() {
    let regex = GOOD.replace("topics: [words]", "topics_regex: \"^shop\\\\..*\"");
    let config = load_str(&regex, &no_env).expect("valid");
    assert!(config.connectors[0].reads_topic("shop.orders"));
    assert!(!config.connectors[0].reads_topic("old.shop.orders"));
    assert_eq!(
        problems(&GOOD.replace(
            "topics: [words]",
            "topics: [words]\n    topics_regex: \"^w\""
        )),
        vec!["connectors[0].topics_regex: a connector has either topics or topics_regex, not both"]
    );
    assert_eq!(
        problems(&GOOD.replace("    topics: [words]\n", "")),
        vec![
            "connectors[0].topics: name the topics to consume: topics: [a, b], or topics_regex: \"^shop\\\\..*\""
        ]
    );
    let template = |table: &str| GOOD.replace("table: words", table);
    assert!(problems(&template("table: \"{topic}\"")).is_empty());
    assert_eq!(
        problems(&template("table: \"r_{1}\"")),
        vec![
            "connectors[0].sink.table: \"r_{1}\" reads a capture ({1}): captures come from sink.table_from: { topic: PATTERN, to: TEMPLATE }"
        ]
    );
    assert_eq!(
        problems(&template("table: \"{source.table}\"")),
        vec![
            "connectors[0].sink.table: \"{source.table}\" reads the source block of a change event: it needs envelope: debezium or opencdc"
        ]
    );
    assert_eq!(
        problems(&template("table: words\n      schema: s")),
        vec![
            "connectors[0].sink.schema: sink.schema goes with a table template; for one table write schema.table in sink.table (\"words\")"
        ]
    );
    let from = template("table_from: { topic: \"^(w)(o)rds$\", to: \"t_{3}\" }");
    assert_eq!(
        problems(&from),
        vec![
            "connectors[0].sink.table_from.to: \"t_{3}\" reads {3}, and \"^(w)(o)rds$\" has 2 capture group(s)"
        ]
    );
    let unmatched = template("table_from: { topic: \"^x\\\\.(.*)$\", to: \"t_{1}\" }");
    assert_eq!(
        problems(&unmatched),
        vec![
            "connectors[0].sink.table_from.topic: topic words does not match \"^x\\.(.*)$\": its records would have no table"
        ]
    );
    let meeting = GOOD
        .replace("topics: [words]", "topics: [Words, words]")
        .replace("table: words", "table: \"{topic}\"");
    assert_eq!(
        problems(&meeting),
        vec![
            "connectors[0].sink.table: topics Words and words both map to table words (names are compared without case): give each topic its own table"
        ]
    );
}

#[test]
fn synchronous_commit_off_is_postgres_and_exactly_once_only() {
    let postgres = GOOD.replace("sqlite://words.db", "postgres://app@localhost/test");
    let off = postgres.replace(
        "      mode: upsert",
        "      mode: upsert\n      synchronous_commit: off",
    );
    let config = load_str(&off, &no_env).expect("valid");
    assert_eq!(
        config.connectors[0].sink.synchronous_commit,
        super::SynchronousCommit::Off
    );
    let on = load_str(&postgres, &no_env).expect("valid");
    assert_eq!(
        on.connectors[0].sink.synchronous_commit,
        super::SynchronousCommit::On
    );
    let sqlite = GOOD.replace(
        "      mode: upsert",
        "      mode: upsert\n      synchronous_commit: off",
    );
    assert!(
        problems(&sqlite)
            .iter()
            .any(|p| p.contains("sink.synchronous_commit") && p.contains("another database")),
        "{:?}",
        problems(&sqlite)
    );
    let at_least_once = off.replace(
        "    sink:",
        "    delivery: { guarantee: at_least_once }\n    sink:",
    );
    assert!(
        problems(&at_least_once)
            .iter()
            .any(|p| p.contains("exactly_once")),
        "{:?}",
        problems(&at_least_once)
    );
}

#[test]
fn column_types_with_parameters_load_where_the_database_holds_them() {
    let typed = |url: &str, word_type: &str| {
        GOOD.replace("sqlite://words.db", url).replace(
            "{ from: /word, type: text }",
            &format!("{{ from: /word, type: '{word_type}' }}"),
        )
    };
    let config = load_str(&typed("postgres://h/db", "numeric(12,2)"), &no_env).expect("valid");
    assert_eq!(
        config.connectors[0].sink.columns()[1].1.column_type,
        super::ColumnType::Decimal {
            precision: 12,
            scale: 2
        }
    );
    assert!(problems(&typed("postgres://h/db", "text[]")).is_empty());
    assert!(problems(&typed("mariadb://h/db", "numeric(65,30)")).is_empty());
    assert!(problems(&typed("sqlite://x.db", "smallint")).is_empty());
    let wide = problems(&typed("mariadb://h/db", "numeric(66,2)"));
    assert!(
        wide.iter()
            .any(|p| p.contains("sink.columns.word.type") && p.contains("65 digits")),
        "{wide:?}"
    );
    let array = problems(&typed("sqlite://x.db", "int[]"));
    assert!(
        array.iter().any(|p| p.contains("PostgreSQL array")),
        "{array:?}"
    );
    let unknown = problems(&typed("sqlite://x.db", "numeric(3,4)"));
    assert!(!unknown.is_empty(), "a scale past the precision is refused");
}

#[test]
fn an_unquoted_reference_inside_braces_says_to_quote_it() {
    // The README's snippet as it once was: `{` `}` are YAML's flow mapping.
    let text = GOOD.replace(
        "kafka: {",
        "admin: { listen: \"127.0.0.1:8083\", token: ${SLUICE_ADMIN_TOKEN} }\nkafka: {",
    );
    let found = problems(&text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("must be quoted, as in token: \"${SLUICE_ADMIN_TOKEN}\""),
        "{found:?}"
    );
    // Quoted, it parses (what is left is the variable this test does not set); an error
    // elsewhere gets no such hint.
    let quoted = GOOD.replace(
        "kafka: {",
        "admin: { listen: \"127.0.0.1:8083\", token: \"${SLUICE_ADMIN_TOKEN}\" }\nkafka: {",
    );
    assert_eq!(
        problems(&quoted),
        [
            "admin.token: environment variable SLUICE_ADMIN_TOKEN is not set (write ${SLUICE_ADMIN_TOKEN:-default} to give a default)"
        ]
    );
    let broken = GOOD.replace("topics: [words]", "topics: [words");
    assert!(
        problems(&broken)
            .iter()
            .all(|p| !p.contains("must be quoted")),
        "{:?}",
        problems(&broken)
    );
}

/// `sink.evolve` takes a list of steps or one name (`none` is `[]`, `add_columns` is
/// `[add_columns]`), checked by the JSON Schema and by serde alike; `relax` is refused on
/// SQLite, which cannot make a column nullable in place.
#[test]
fn evolve_takes_a_list_or_a_name() {
    let derived = |evolve: &str, url: &str| {
        format!(
            "kafka: {{ brokers: \"localhost:9092\" }}\nconnectors:\n  - name: c\n    topics: [t]\n    format: connect_json\n    sink:\n      url: {url}\n      table: t\n      mode: upsert\n      key: [id]\n      evolve: {evolve}\n"
        )
    };
    let evolve = |text: &str| {
        load_str(text, &no_env)
            .map(|c| c.connectors[0].sink.evolve)
            .map_err(|e| e.to_string())
    };
    let pg = "postgres://localhost/db";
    assert_eq!(evolve(&derived("none", pg)), Ok(super::Evolve::NONE));
    let add = evolve(&derived("add_columns", pg)).expect("add_columns");
    assert_eq!(add.names(), ["add_columns"]);
    assert_eq!(evolve(&derived("[add_columns]", pg)), Ok(add));
    let all = evolve(&derived("[add_columns, widen, relax]", pg)).expect("a list");
    assert_eq!(all.names(), ["add_columns", "widen", "relax"]);
    assert_eq!(evolve(&derived("[]", pg)), Ok(super::Evolve::NONE));
    for wrong in ["widen_all", "widen", "[drop_columns]", "{ widen: true }"] {
        assert!(
            !problems(&derived(wrong, pg)).is_empty(),
            "{wrong} was taken"
        );
    }
    let sqlite = problems(&derived("[widen, relax]", "sqlite://x.db"));
    assert!(
        sqlite.len() == 1 && sqlite[0].contains("sink.evolve") && sqlite[0].contains("relax"),
        "{sqlite:?}"
    );
    assert!(problems(&derived("[widen]", "sqlite://x.db")).is_empty());
}

#[test]
fn source_transactions_ask_what_they_need() {
    let good = r#"
kafka: { brokers: "localhost:9092" }
connectors:
  - name: shop
    topics: [shop.public.orders, shop.public.order_lines, shop.transaction]
    format: connect_json
    key_format: connect_json
    envelope: debezium
    sink:
      url: sqlite://shop.db
      table: "{source.table}"
      mode: upsert
      key: record_key
      transactions: source
"#;
    let config = load_str(good, &no_env).expect("valid");
    assert_eq!(
        config.connectors[0].transaction_topic(),
        Some("shop.transaction")
    );
    let by_default = good.replace("      transactions: source\n", "");
    let config = load_str(&by_default, &no_env).expect("valid");
    assert_eq!(
        config.connectors[0].sink.transactions,
        super::Transactions::Batch
    );
    assert_eq!(config.connectors[0].transaction_topic(), None);
    let refused = |text: &str, wanted: &str| {
        let found = problems(text);
        assert!(
            found
                .iter()
                .any(|p| p.contains("sink.transactions") && p.contains(wanted)),
            "{wanted}: {found:?}"
        );
    };
    refused(
        &good.replace("    envelope: debezium\n", ""),
        "envelope: debezium",
    );
    refused(
        &good.replace(
            "    envelope: debezium\n",
            "    envelope: debezium\n    tasks: 2\n",
        ),
        "tasks: 1",
    );
    refused(
        &good.replace(
            "    envelope: debezium\n",
            "    envelope: debezium\n    delivery: { guarantee: at_least_once }\n",
        ),
        "exactly_once",
    );
    refused(
        &good.replace(", shop.transaction]", "]"),
        "transaction topic",
    );
    refused(
        &good.replace("shop.transaction]", "shop.transaction, other.transaction]"),
        "one transaction topic",
    );
    refused(
        &good.replace("shop.public.order_lines", "elsewhere.order_lines"),
        "does not start with shop.",
    );
    refused(
        &good.replace(
            "    topics: [shop.public.orders, shop.public.order_lines, shop.transaction]\n",
            "    topics_regex: \"^shop\\\\..*\"\n",
        ),
        "topics_regex",
    );
}

//! The changes a reload refuses, because applying them would rewrite or skip history in
//! silence. Each refusal names the change and the deliberate way to make it; the old
//! configuration runs on.
//!
//! - A rename: a connector that disappears while a new one appears with the same group, or
//!   with the same topics, database and table. It would start over from
//!   `auto.offset.reset` (writing the retained topic again, or skipping it) while the
//!   old name's positions are left behind. `renamed_from: OLD` makes it deliberate.
//! - A running connector's group, guarantee, database (the URL without its credentials and
//!   query parameters: a password rotation is not a change of database) or table.

use std::collections::BTreeSet;

use crate::config::{Config, ConnectorConfig, Guarantee};

/// The database a sink URL names: its scheme, host, port and path, without credentials and
/// query parameters.
pub fn database_of(url: &str) -> String {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.split(['?', '#']).next().unwrap_or(url).to_string();
    };
    // A password may hold `/`, `?` or `#` unencoded: the host follows the last `@`.
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    let (host, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    format!(
        "{}://{}{}",
        scheme.to_ascii_lowercase(),
        host.to_ascii_lowercase(),
        path
    )
}

fn guarantee(g: Guarantee) -> &'static str {
    match g {
        Guarantee::ExactlyOnce => "exactly_once",
        Guarantee::AtLeastOnce => "at_least_once",
    }
}

fn topics(c: &ConnectorConfig) -> BTreeSet<&str> {
    match &c.topics_regex {
        Some(pattern) => BTreeSet::from([pattern.as_str()]),
        None => c.topics.iter().map(String::as_str).collect(),
    }
}

/// The table (or the template, with `table_from`'s pattern and the schema) a connector
/// writes.
fn table_of(c: &ConnectorConfig) -> String {
    let sink = &c.sink;
    let mut table = sink.table_label();
    if let Some(from) = &sink.table_from {
        table = format!("{} from topics {}", table, from.topic.as_str());
    }
    if let Some(schema) = &sink.schema {
        table = format!("{table} in schema {schema}");
    }
    table
}

const RESTART_INSTEAD: &str = "to make it on purpose, stop the connector everywhere (sluice stop NAME) and restart the processes with the new file, which applies it at start";

/// The changes from `old` to `new` that a reload refuses, one line each.
pub fn refused(old: &Config, new: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    for (index, next) in new.connectors.iter().enumerate() {
        let at = format!("connectors[{index}] ({})", next.name);
        if let Some(running) = old.connectors.iter().find(|c| c.name == next.name) {
            let mut changed = |what: &str, from: String, to: String| {
                if from != to {
                    problems.push(format!(
                        "{at}: the {what} of a running connector changes from {from} to {to}; a reload does not change it, because the connector would resume from positions that belong to another {what} ({})",
                        RESTART_INSTEAD.replace("NAME", &next.name)
                    ));
                }
            };
            changed("group", running.group_id(), next.group_id());
            changed(
                "guarantee",
                guarantee(running.delivery.guarantee).into(),
                guarantee(next.delivery.guarantee).into(),
            );
            changed(
                "database",
                database_of(running.sink.url.expose()),
                database_of(next.sink.url.expose()),
            );
            changed("table", table_of(running), table_of(next));
            continue;
        }
        // A new connector: is it one of the disappearing ones under another name?
        for gone in old
            .connectors
            .iter()
            .filter(|c| !new.connectors.iter().any(|n| n.name == c.name))
        {
            if next.renamed_from.as_deref() == Some(gone.name.as_str()) {
                continue;
            }
            let same_group = gone.group_id() == next.group_id();
            let same_target = topics(gone) == topics(next)
                && table_of(gone) == table_of(next)
                && database_of(gone.sink.url.expose()) == database_of(next.sink.url.expose());
            if same_group || same_target {
                let why = if same_group {
                    format!("the same group {}", next.group_id())
                } else {
                    "the same topics and table".to_string()
                };
                problems.push(format!(
                    "{at}: looks like connector {} renamed ({why}); under a new name it would start over per auto.offset.reset while {}'s positions stay behind. Add `renamed_from: {}` to move its offsets, producer ids and markers to the new name, or give the new connector a group and table of its own",
                    gone.name, gone.name, gone.name
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_is_the_url_without_credentials_and_parameters() {
        assert_eq!(
            database_of("postgres://app:old-secret@DB.example:5432/shop?sslmode=require"),
            database_of("postgres://app:new-secret@db.example:5432/shop")
        );
        assert_ne!(
            database_of("postgres://app@db:5432/shop"),
            database_of("postgres://app@db:5432/other")
        );
        assert_ne!(
            database_of("postgres://db:5432/shop"),
            database_of("postgres://db2:5432/shop")
        );
        assert_eq!(
            database_of("sqlite:///var/lib/sluice/a.db?mode=rwc"),
            "sqlite:///var/lib/sluice/a.db"
        );
        assert_eq!(database_of("mysql://root@h/t"), "mysql://h/t");
        // Passwords with the URL's own punctuation never show.
        for url in [
            "postgres://app:hun/ter2@db/prod",
            "postgres://app:hun#ter2@db/prod",
            "postgres://app:hun?ter2@db/prod?sslmode=require",
        ] {
            assert_eq!(database_of(url), "postgres://db/prod", "{url}");
        }
    }

    fn config(text: &str) -> Config {
        crate::config::load_str(text, &|_| None).expect("valid")
    }

    fn file(connectors: &str) -> Config {
        config(&format!(
            "kafka: {{ brokers: k:9092 }}\nconnectors:\n{connectors}"
        ))
    }

    const WORDS: &str = "  - name: words\n    topics: [w]\n    sink: { url: \"postgres://u:p@db/app\", table: words, columns: { v: { from: /v, type: text } } }\n";

    #[test]
    fn a_rename_is_refused_unless_declared() {
        let old = file(WORDS);
        let renamed = file(&WORDS.replace("name: words", "name: words2"));
        let problems = refused(&old, &renamed);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("renamed_from: words"),
            "{}",
            problems[0]
        );
        let declared =
            file(&WORDS.replace("name: words\n", "name: words2\n    renamed_from: words\n"));
        assert!(refused(&old, &declared).is_empty());
        // Same group, other topics and table: still a rename.
        let same_group = file(
            &WORDS
                .replace("name: words\n", "name: other\n    group: sluice-words\n")
                .replace("[w]", "[x]")
                .replace("table: words", "table: x"),
        );
        assert_eq!(refused(&old, &same_group).len(), 1);
        // Another connector altogether.
        let other = file(
            &WORDS
                .replace("name: words", "name: other")
                .replace("[w]", "[x]"),
        );
        assert!(refused(&old, &other).is_empty());
    }

    #[test]
    fn a_running_connectors_identity_does_not_change_by_reload() {
        let old = file(WORDS);
        for (from, to, what) in [
            (
                "    topics: [w]\n",
                "    topics: [w]\n    group: g2\n",
                "group",
            ),
            (
                "    topics: [w]\n",
                "    topics: [w]\n    delivery: { guarantee: at_least_once }\n",
                "guarantee",
            ),
            ("db/app", "db/other", "database"),
            ("table: words", "table: words_v2", "table"),
        ] {
            let problems = refused(&old, &file(&WORDS.replace(from, to)));
            assert_eq!(problems.len(), 1, "{what}: {problems:?}");
            assert!(
                problems[0].contains(&format!("the {what} of a running connector")),
                "{}",
                problems[0]
            );
        }
        // A password rotation is not a change of database.
        assert!(refused(&old, &file(&WORDS.replace("u:p@", "u:rotated@"))).is_empty());
    }
}

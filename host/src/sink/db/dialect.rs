//! The SQL dialects: the statements sluice writes, put together from the words each
//! database spells its own way (quoting, placeholders, type names, its clock: each
//! folder's `words.rs`). The multi-row statements that write rows are in
//! `row_statements.rs`. Statement text is built here; binding and running it is in the
//! backend modules.

use std::borrow::Cow;

use crate::config::ColumnType;
use crate::db_kind::DbKind;

/// A database family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    MySql,
    Sqlite,
}

/// How a table's name is read when it is quoted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Naming {
    /// `table` or `schema.table`: a configured name, split at its dot.
    #[default]
    Split,
    /// One identifier, dots kept (a table a template made), in `schema` when set; `name`
    /// is then `schema.identifier` or the identifier.
    One {
        schema: Option<String>,
        identifier: String,
    },
}

/// The table a sink writes, as the statements need it.
#[derive(Debug, Clone)]
pub struct TableSpec {
    /// `table` or `schema.table`, unquoted: the name messages, logs and
    /// `sluice_tombstones` give it.
    pub name: String,
    /// How `name` is quoted.
    pub naming: Naming,
    /// Columns in order, with their types.
    pub columns: Vec<(String, ColumnType)>,
    /// Indices into `columns` of the key.
    pub key: Vec<usize>,
    /// With `sink.version`: the index into `columns` of the version column (the last).
    /// Upserts and deletes then change a row only if its stored version is older (or
    /// NULL), and a delete's key values are followed by its version.
    pub version: Option<usize>,
}

impl TableSpec {
    /// The same columns in the table a template made: `identifier`, in `schema` when set.
    pub fn routed(&self, schema: Option<&str>, identifier: &str) -> TableSpec {
        TableSpec {
            // A dot in the identifier is quoted in the name, so that table "app.users" is
            // not mistaken for table users in schema app (in messages, and in the
            // tombstones kept by table name).
            name: {
                let table = if identifier.contains('.') {
                    format!("\"{identifier}\"")
                } else {
                    identifier.to_string()
                };
                match schema {
                    Some(schema) => format!("{schema}.{table}"),
                    None => table,
                }
            },
            naming: Naming::One {
                schema: schema.map(str::to_string),
                identifier: identifier.to_string(),
            },
            columns: self.columns.clone(),
            key: self.key.clone(),
            version: self.version,
        }
    }

    /// The table's name quoted for `dialect`.
    pub fn quoted(&self, dialect: Dialect) -> String {
        match &self.naming {
            Naming::Split => dialect.quote_table(&self.name),
            Naming::One { schema, identifier } => {
                let table = dialect.quote_one(identifier);
                match schema {
                    Some(schema) => format!("{}.{table}", dialect.quote_one(schema)),
                    None => table,
                }
            }
        }
    }

    /// The schema (`None`: the connection's default) and the table's own identifier.
    pub fn schema_and_identifier(&self) -> (Option<String>, String) {
        match &self.naming {
            Naming::Split => match self.name.split_once('.') {
                Some((schema, table)) => (Some(schema.to_string()), table.to_string()),
                None => (None, self.name.clone()),
            },
            Naming::One { schema, identifier } => (schema.clone(), identifier.clone()),
        }
    }

    /// Indices of the columns that are not part of the key.
    pub fn value_columns(&self) -> Vec<usize> {
        (0..self.columns.len())
            .filter(|i| !self.key.contains(i))
            .collect()
    }

    /// The columns a delete binds, in order: the key, then the version if there is one.
    pub fn delete_columns(&self) -> Vec<usize> {
        self.key.iter().copied().chain(self.version).collect()
    }
}

impl Dialect {
    /// From a URL's scheme ([`DbKind::from_url`]); the configuration check has already
    /// refused the others.
    pub fn from_url(url: &str) -> Option<Self> {
        DbKind::from_url(url).map(Dialect::of)
    }

    /// The dialect of a database kind.
    pub fn of(kind: DbKind) -> Self {
        match kind {
            DbKind::Postgres => Dialect::Postgres,
            DbKind::MySql => Dialect::MySql,
            DbKind::Sqlite => Dialect::Sqlite,
        }
    }

    /// Quotes a table name given as text, each part of `schema.table` apart. Never for a
    /// column: a column name is one identifier, dots and all ([`Dialect::quote_one`]).
    pub fn quote_table(self, name: &str) -> String {
        name.split('.')
            .map(|part| self.quote_one(part))
            .collect::<Vec<_>>()
            .join(".")
    }

    /// Quotes one identifier as it is, dots and all.
    pub fn quote_one(self, identifier: &str) -> String {
        (super::of(self).words.quote_one)(identifier)
    }

    /// The `n`th (1-based) bind placeholder.
    pub fn param(self, n: usize) -> String {
        (super::of(self).words.param)(n)
    }

    /// The SQL type of a column; key columns in MySQL need a bounded length to be indexed.
    pub fn type_name(self, column_type: ColumnType, in_key: bool) -> Cow<'static, str> {
        (super::of(self).words.type_name)(column_type, in_key)
    }

    /// The statement that opens a batch's transaction (SQLite's takes the write lock at
    /// once).
    pub fn begin(self) -> &'static str {
        super::of(self).words.begin
    }

    /// The database's clock now, in milliseconds since the epoch, as an SQL expression:
    /// what `delivery.dedup.window` is measured on (never a process's clock, nor a
    /// record's timestamp).
    pub fn now_ms(self) -> &'static str {
        super::of(self).words.now_ms
    }

    /// Reads a connector's dead letters after a (topic, partition, offset), in that order:
    /// binds connector, topic, partition, offset.
    pub fn read_dead_letters(self, table: &str, limit: usize) -> String {
        let headers = super::of(self).words.headers_as_text;
        format!(
            "SELECT source_topic, source_partition, source_offset, record_key, record_value, {headers} \
             FROM {} WHERE connector = {} AND (source_topic, source_partition, source_offset) > ({}, {}, {}) \
             ORDER BY source_topic, source_partition, source_offset LIMIT {limit}",
            self.quote_table(table),
            self.param(1),
            self.param(2),
            self.param(3),
            self.param(4),
        )
    }

    /// `CREATE TABLE IF NOT EXISTS` for a sink table, the key as its primary key.
    pub fn create_table(self, table: &TableSpec) -> String {
        let mut parts: Vec<String> = table
            .columns
            .iter()
            .enumerate()
            .map(|(i, (name, ty))| {
                let in_key = table.key.contains(&i);
                let not_null = if in_key { " NOT NULL" } else { "" };
                format!(
                    "{} {}{not_null}",
                    self.quote_one(name),
                    self.type_name(*ty, in_key)
                )
            })
            .collect();
        if !table.key.is_empty() {
            parts.push(format!(
                "PRIMARY KEY ({})",
                self.column_list(table, &table.key)
            ));
        }
        format!(
            "CREATE TABLE IF NOT EXISTS {} ({})",
            table.quoted(self),
            parts.join(", ")
        )
    }

    fn now(self) -> &'static str {
        super::of(self).words.now
    }

    /// Binds, in this order (MySQL and SQLite number `?` by position): next_offset, cluster
    /// id and topic id (NULL keeps the stored one), connector, topic, partition, expected
    /// next_offset.
    pub fn advance_offset(self) -> String {
        let p = |n| self.param(n);
        format!(
            "UPDATE sluice_offsets SET next_offset = {}, cluster_id = COALESCE({}, cluster_id), \
             topic_id = COALESCE({}, topic_id), updated_at = {} \
             WHERE connector = {} AND topic = {} AND {} = {} AND next_offset = {}",
            p(1),
            p(2),
            p(3),
            self.now(),
            p(4),
            p(5),
            self.quote_one("partition"),
            p(6),
            p(7)
        )
    }

    /// Binds: connector, topic, partition, next_offset, cluster id, topic id. A duplicate key means
    /// another task stored an offset first.
    pub fn insert_offset(self) -> String {
        let p = |n| self.param(n);
        format!(
            "INSERT INTO sluice_offsets (connector, topic, {}, next_offset, cluster_id, topic_id) VALUES ({}, {}, {}, {}, {}, {})",
            self.quote_one("partition"),
            p(1),
            p(2),
            p(3),
            p(4),
            p(5),
            p(6)
        )
    }

    /// Binds: connector. Returns (topic, partition, next_offset) of every stored offset.
    pub fn all_offsets(self) -> String {
        format!(
            "SELECT topic, {}, next_offset FROM sluice_offsets WHERE connector = {} ORDER BY topic, {}",
            self.quote_one("partition"),
            self.param(1),
            self.quote_one("partition")
        )
    }

    /// Binds: connector, topic. Returns (partition, next_offset, cluster_id, topic_id).
    pub fn read_offsets(self) -> String {
        format!(
            "SELECT {}, next_offset, cluster_id, topic_id FROM sluice_offsets WHERE connector = {} AND topic = {}",
            self.quote_one("partition"),
            self.param(1),
            self.param(2)
        )
    }

    /// Binds: connector, topic.
    pub fn delete_offsets(self) -> String {
        format!(
            "DELETE FROM sluice_offsets WHERE connector = {} AND topic = {}",
            self.param(1),
            self.param(2)
        )
    }

    /// Binds: connector, topic, partition, offset: one dead letter's removal.
    pub fn delete_dead_letter(self, table: &str) -> String {
        format!(
            "DELETE FROM {} WHERE connector = {} AND source_topic = {} AND source_partition = {} AND source_offset = {}",
            self.quote_table(table),
            self.param(1),
            self.param(2),
            self.param(3),
            self.param(4)
        )
    }

    /// A query that fails when the table or one of its columns is missing.
    pub fn probe_table(self, table: &TableSpec) -> String {
        let all: Vec<usize> = (0..table.columns.len()).collect();
        format!(
            "SELECT {} FROM {} WHERE 1 = 0",
            self.column_list(table, &all),
            table.quoted(self)
        )
    }

    /// `"a", "b"` for the given column indices.
    pub fn column_list(self, table: &TableSpec, indices: &[usize]) -> String {
        indices
            .iter()
            .map(|&i| self.quote_one(&table.columns[i].0))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `YYYY-MM-DD HH:MM:SS.ffffff`, the form all three accept for a timestamp.
pub fn timestamp_text(t: &chrono::NaiveDateTime) -> String {
    TimestampText::of(t).as_str().to_owned()
}

/// A timestamp's text (`YYYY-MM-DD HH:MM:SS.ffffff`) without an allocation for years
/// 0..=9999 outside a leap second: the writes put it into a statement's arguments or a
/// `COPY` buffer once per row, so until then it lives on the stack.
pub enum TimestampText {
    /// Written directly: 26 ASCII bytes.
    Plain([u8; 26]),
    /// A sign before the year, or a 60th second: written by chrono.
    Other(String),
}

impl TimestampText {
    pub fn of(t: &chrono::NaiveDateTime) -> TimestampText {
        use chrono::{Datelike, Timelike};
        // chrono's formatter interprets the pattern for every value (it was a tenth of the
        // PostgreSQL sink's CPU); the common years are written directly.
        let year = t.year();
        let nanos = t.nanosecond();
        if !(0..=9999).contains(&year) || nanos >= 1_000_000_000 {
            return TimestampText::Other(t.format("%Y-%m-%d %H:%M:%S%.6f").to_string());
        }
        let mut out = *b"0000-00-00 00:00:00.000000";
        let mut put = |at: usize, value: u32, width: usize| {
            let mut v = value;
            for i in (0..width).rev() {
                out[at + i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        put(0, year as u32, 4);
        put(5, t.month(), 2);
        put(8, t.day(), 2);
        put(11, t.hour(), 2);
        put(14, t.minute(), 2);
        put(17, t.second(), 2);
        put(20, nanos / 1000, 6);
        TimestampText::Plain(out)
    }

    pub fn as_str(&self) -> &str {
        match self {
            TimestampText::Plain(bytes) => std::str::from_utf8(bytes)
                .expect("only ASCII digits and separators are written into a timestamp"),
            TimestampText::Other(text) => text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_text_is_what_chrono_writes() {
        let chrono_text = |t: &chrono::NaiveDateTime| t.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
        let mut times: Vec<chrono::NaiveDateTime> = [
            0i64,
            1,
            -1,
            999_999,
            1_704_164_645_123_456,
            -62_135_596_800_000_000, // 0001-01-01
            253_402_300_799_999_999, // 9999-12-31 23:59:59.999999
            253_402_300_800_000_000, // 10000-01-01: chrono's signed year
            -62_167_219_200_000_001, // before year 0
        ]
        .iter()
        .map(|&us| {
            chrono::DateTime::from_timestamp_micros(us)
                .expect("in range")
                .naive_utc()
        })
        .collect();
        // Nanoseconds are cut, and a leap second keeps chrono's spelling.
        times.push(
            chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
                .and_then(|d| d.and_hms_nano_opt(23, 59, 59, 1_999_999_999))
                .expect("leap second"),
        );
        times.push(
            chrono::NaiveDate::from_ymd_opt(2024, 2, 29)
                .and_then(|d| d.and_hms_nano_opt(1, 2, 3, 456_789_999))
                .expect("time"),
        );
        for t in &times {
            assert_eq!(timestamp_text(t), chrono_text(t), "{t:?}");
            // Years 0..=9999 outside a leap second are written without chrono, on the stack.
            let plain = (0..=9999).contains(&chrono::Datelike::year(t))
                && chrono::Timelike::nanosecond(t) < 1_000_000_000;
            assert_eq!(
                matches!(TimestampText::of(t), TimestampText::Plain(_)),
                plain,
                "{t:?}"
            );
        }
    }

    fn table() -> TableSpec {
        TableSpec {
            name: "app.words".into(),
            naming: Default::default(),
            columns: vec![
                ("uid".into(), ColumnType::Bigint),
                ("word".into(), ColumnType::Text),
            ],
            key: vec![0],
            version: None,
        }
    }

    fn versioned() -> TableSpec {
        let mut t = table();
        t.columns.push(("_v".into(), ColumnType::Text));
        t.version = Some(2);
        t
    }

    #[test]
    fn versioned_statements() {
        assert_eq!(
            Dialect::Sqlite.insert_values(&versioned(), 1, true),
            "INSERT INTO \"app\".\"words\" (\"uid\", \"word\", \"_v\") VALUES (?, ?, ?) ON CONFLICT (\"uid\") DO UPDATE SET \"word\" = excluded.\"word\", \"_v\" = excluded.\"_v\" WHERE \"app\".\"words\".\"_v\" IS NULL OR \"app\".\"words\".\"_v\" < excluded.\"_v\""
        );
        let mysql = Dialect::MySql.insert_values(&versioned(), 1, true);
        assert!(
            mysql.ends_with("`word` = IF(`_v` IS NULL OR `_v` < VALUES(`_v`), VALUES(`word`), `word`), `_v` = IF(`_v` IS NULL OR `_v` < VALUES(`_v`), VALUES(`_v`), `_v`)"),
            "{mysql}"
        );
        assert_eq!(
            Dialect::MySql.delete_values(&versioned(), 2),
            "DELETE t FROM `app`.`words` AS t JOIN (SELECT ? AS `uid`, ? AS `_v` UNION ALL SELECT ?, ?) AS d ON t.`uid` = d.`uid` WHERE t.`_v` IS NULL OR t.`_v` < d.`_v`"
        );
        assert_eq!(
            Dialect::Sqlite.delete_values(&versioned(), 1),
            "DELETE FROM \"app\".\"words\" WHERE (\"uid\") IN (SELECT \"app\".\"words\".\"uid\" FROM (VALUES (?, ?)) AS d JOIN \"app\".\"words\" ON \"app\".\"words\".\"uid\" = d.column1 WHERE \"app\".\"words\".\"_v\" IS NULL OR \"app\".\"words\".\"_v\" < d.column2)"
        );
        assert_eq!(
            Dialect::Postgres.truncate(&versioned()),
            "DELETE FROM \"app\".\"words\" WHERE \"_v\" IS NULL OR \"_v\" < $1"
        );
        assert_eq!(
            Dialect::MySql.truncate(&table()),
            "DELETE FROM `app`.`words`"
        );
    }

    #[test]
    fn ddl_per_dialect() {
        assert_eq!(
            Dialect::Postgres.create_table(&table()),
            "CREATE TABLE IF NOT EXISTS \"app\".\"words\" (\"uid\" BIGINT NOT NULL, \"word\" TEXT, PRIMARY KEY (\"uid\"))"
        );
        assert!(
            Dialect::MySql
                .create_table(&table())
                .contains("`uid` BIGINT NOT NULL")
        );
    }

    #[test]
    fn statements() {
        assert_eq!(
            Dialect::Sqlite.insert_values(&table(), 2, true),
            "INSERT INTO \"app\".\"words\" (\"uid\", \"word\") VALUES (?, ?), (?, ?) ON CONFLICT (\"uid\") DO UPDATE SET \"word\" = excluded.\"word\""
        );
        assert_eq!(
            Dialect::MySql.insert_values(&table(), 1, true),
            "INSERT INTO `app`.`words` (`uid`, `word`) VALUES (?, ?) ON DUPLICATE KEY UPDATE `word` = VALUES(`word`)"
        );
        assert_eq!(
            Dialect::MySql.delete_values(&table(), 3),
            "DELETE FROM `app`.`words` WHERE `uid` IN (?, ?, ?)"
        );
        let advance = Dialect::Postgres.advance_offset();
        assert!(advance.contains("next_offset = $7"), "{advance}");
        assert!(
            advance.contains("cluster_id = COALESCE($2, cluster_id)"),
            "{advance}"
        );
        assert!(
            advance.contains("topic_id = COALESCE($3, topic_id)"),
            "{advance}"
        );
        assert_eq!(Dialect::Sqlite.rows_per_statement(20), 1500);
    }
}

//! The versions of deleted rows (`sluice_tombstones`), for tables with `sink.version`.
//!
//! A versioned upsert changes a row only if the row's stored version is older. A deleted
//! row has no stored version left, so without a memory of the delete an older update
//! replayed after it (an offsets reset, a redrive, a late record) would bring the row
//! back. Each delete therefore stores its key's version here, in the batch's transaction:
//! `(table_name, row_key, version, deleted_at)`, `row_key` the SHA-256 of the key as the
//! database compares it. A write whose version is not newer than its key's tombstone is
//! dropped before the upsert runs. A truncate stores one tombstone for the whole table
//! (`row_key` empty): every write not newer than it is dropped.
//!
//! Tombstones older than `sink.version.remember_deletes` (7 days by default) are removed
//! by [`Maintenance::clean_tombstones`](super::Maintenance::clean_tombstones), which each connector's runner calls every minute. A
//! replay that reaches further back than that can bring back a row deleted before it, as a
//! compacted topic that dropped its tombstones would.

use sha2::{Digest, Sha256};
use sqlx::{AssertSqlSafe, Executor, IntoArguments};

use super::backend::Backend;
use super::db;
use super::dialect::{Dialect, TableSpec};
use super::runs::bound_key;
use crate::config::ColumnType;
use crate::map::SqlValue;

/// The `row_key` of a truncate: it stands for every key.
const WHOLE_TABLE: &str = "";
/// Keys looked up per statement.
const LOOKUP_CHUNK: usize = 1000;

/// The stored form of a key: the hex SHA-256 of the key in the form it is bound in (each
/// part's kind, length and bytes, so that no two keys write the same bytes). Exact, as
/// sluice's tables compare keys (binary collations on MySQL): in a table of your own whose
/// collation takes `A` and `a` for one key, a delete of one is not remembered for the other.
pub(super) fn row_key<'v>(
    dialect: Dialect,
    table: &TableSpec,
    key: impl IntoIterator<Item = &'v SqlValue>,
) -> String {
    use super::runs::Bound;
    let bound: Vec<_> = key
        .into_iter()
        .zip(table.key.iter().map(|&i| table.columns[i].1))
        .map(|(v, t)| bound_key(dialect, t, v))
        .collect();
    let mut hasher = Sha256::new();
    for part in &bound {
        let (kind, bytes): (u8, std::borrow::Cow<'_, [u8]>) = match part {
            Bound::Null => (0, (&[][..]).into()),
            Bound::Int(v) => (1, v.to_be_bytes().to_vec().into()),
            Bound::Double(v) => (2, v.to_be_bytes().to_vec().into()),
            Bound::Bool(v) => (3, vec![u8::from(*v)].into()),
            Bound::Text(v) => (4, v.as_bytes().into()),
            Bound::Bytes(v) => (5, v.as_slice().into()),
        };
        hasher.update([kind]);
        hasher.update((bytes.len() as u64).to_be_bytes());
        hasher.update(&bytes);
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(64);
    for byte in hasher.finalize() {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    text
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `rows` (whole rows, the version at `table.version`) without those whose key has a
/// tombstone at the same or a newer version, or that a truncate at the same or a newer
/// version covers.
pub(super) async fn drop_deleted<'a, DB>(
    conn: &mut DB::Connection,
    dialect: Dialect,
    table: &TableSpec,
    rows: Vec<&'a [SqlValue]>,
) -> Result<Vec<&'a [SqlValue]>, sqlx::Error>
where
    DB: Backend,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let Some(v) = table.version else {
        return Ok(rows);
    };
    // A table without tombstones (one that has seen no delete, or none within
    // `remember_deletes`) is asked once, not key by key: an index probe per key costs the
    // database about a microsecond, 5 ms for a batch of 5,000. Asked in the same
    // transaction as a lookup of every key would be, so nothing such a lookup would have
    // found is missed.
    let any_tombstone = format!(
        "SELECT 1 FROM sluice_tombstones WHERE table_name = {} LIMIT 1",
        dialect.param(1)
    );
    let query = DB::bind_value(
        sqlx::query::<DB>(AssertSqlSafe(any_tombstone)),
        &SqlValue::Text(table.name.clone()),
        ColumnType::Text,
    );
    if query.fetch_optional(&mut *conn).await?.is_none() {
        return Ok(rows);
    }
    let keys: Vec<String> = rows
        .iter()
        .map(|row| row_key(dialect, table, table.key.iter().map(|&i| &row[i])))
        .collect();
    let mut deleted: std::collections::HashMap<String, String> = Default::default();
    let mut lookup: Vec<&str> = keys.iter().map(String::as_str).collect();
    lookup.push(WHOLE_TABLE);
    for chunk in lookup.chunks(LOOKUP_CHUNK) {
        let marks: Vec<String> = (0..chunk.len()).map(|n| dialect.param(n + 2)).collect();
        let sql = format!(
            "SELECT row_key, version FROM sluice_tombstones WHERE table_name = {} AND row_key IN ({})",
            dialect.param(1),
            marks.join(", ")
        );
        let mut query = sqlx::query::<DB>(AssertSqlSafe(sql));
        query = DB::bind_value(query, &SqlValue::Text(table.name.clone()), ColumnType::Text);
        for key in chunk {
            query = DB::bind_value(query, &SqlValue::Text(key.to_string()), ColumnType::Text);
        }
        for row in query.fetch_all(&mut *conn).await? {
            if let (Some(key), Some(version)) = (DB::text_at(&row, 0)?, DB::text_at(&row, 1)?) {
                deleted.insert(key, version);
            }
        }
    }
    if deleted.is_empty() {
        return Ok(rows);
    }
    let whole = deleted.get(WHOLE_TABLE).cloned();
    Ok(rows
        .into_iter()
        .zip(keys)
        .filter(|(row, key)| {
            let SqlValue::Text(version) = &row[v] else {
                return true;
            };
            let newer = |tomb: &String| version > tomb;
            deleted.get(key).is_none_or(newer) && whole.as_ref().is_none_or(newer)
        })
        .map(|(row, _)| row)
        .collect())
}

/// Stores the tombstones of deleted keys (`keys`: each key's values, then its version),
/// keeping the newer version where one is stored. `None` as the key is a truncate.
pub(super) async fn remember<DB>(
    conn: &mut DB::Connection,
    dialect: Dialect,
    table: &TableSpec,
    deletes: &[(Option<&[SqlValue]>, &SqlValue)],
) -> Result<(), sqlx::Error>
where
    DB: Backend,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let now = now_ms();
    for chunk in deletes.chunks(LOOKUP_CHUNK) {
        let groups: Vec<String> = (0..chunk.len())
            .map(|n| {
                let p = |k: usize| dialect.param(n * 4 + k);
                format!("({}, {}, {}, {})", p(1), p(2), p(3), p(4))
            })
            .collect();
        let conflict = db::of(dialect).own_tables.keep_newer_tombstone;
        let sql = format!(
            "INSERT INTO sluice_tombstones (table_name, row_key, version, deleted_at) VALUES {}{conflict}",
            groups.join(", ")
        );
        let mut query = sqlx::query::<DB>(AssertSqlSafe(sql));
        // One statement must not name a key twice (PostgreSQL: "cannot affect row a
        // second time"): the runs hold each key once, and a batch one truncate per run.
        for (key, version) in chunk {
            let row_key = match key {
                Some(key) => row_key(dialect, table, key.iter()),
                None => WHOLE_TABLE.to_string(),
            };
            query = DB::bind_value(query, &SqlValue::Text(table.name.clone()), ColumnType::Text);
            query = DB::bind_value(query, &SqlValue::Text(row_key), ColumnType::Text);
            query = DB::bind_value(query, version, ColumnType::Text);
            query = DB::bind_value(query, &SqlValue::Int(now), ColumnType::Bigint);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> TableSpec {
        TableSpec {
            name: "t".into(),
            naming: Default::default(),
            columns: vec![
                ("k".into(), ColumnType::Text),
                ("_v".into(), ColumnType::Text),
            ],
            key: vec![0],
            version: Some(1),
        }
    }

    #[test]
    fn row_keys_follow_what_the_database_compares() {
        let key = |s: &str| row_key(Dialect::MySql, &table(), &[SqlValue::Text(s.into())]);
        // sluice's MySQL tables compare keys exactly (utf8mb4_bin): two keys, two tombstones.
        assert_ne!(key("Ab"), key("ab"));
        let other = |v: SqlValue| row_key(Dialect::Postgres, &table(), &[v]);
        // Parts of different kinds or lengths never write the same bytes.
        assert_ne!(other(SqlValue::Int(1)), other(SqlValue::Text("1".into())));
        assert_ne!(other(SqlValue::Null), other(SqlValue::Text(String::new())));
        let pg = |s: &str| row_key(Dialect::Postgres, &table(), &[SqlValue::Text(s.into())]);
        assert_ne!(pg("Ab"), pg("ab"));
        assert_eq!(pg("x").len(), 64);
        assert_ne!(pg("x"), WHOLE_TABLE);
    }
}

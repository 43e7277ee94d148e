//! PostgreSQL: its error codes (SQLSTATEs), its fast write path (`COPY` for inserts and
//! new keys, one `UNNEST` statement for the rest) and the catalog reads that decide which
//! tables take `COPY`.

pub(in crate::sink) mod catalog;
pub(in crate::sink) mod copy;
pub(in crate::sink) mod errors;
pub(in crate::sink) mod write;

pub(in crate::sink) use catalog::copy_choice;
pub(in crate::sink) mod migrations;
pub(in crate::sink) mod own_tables;
pub(in crate::sink) mod pool;
pub(in crate::sink) mod verify;
pub(in crate::sink) mod words;

use crate::sink::db::Database;

/// PostgreSQL, as the sink asks it.
pub(in crate::sink) static DATABASE: Database = Database {
    words: &words::WORDS,
    migrations: &migrations::MIGRATIONS,
    own_tables: &own_tables::OWN_TABLES,
    columns_query: catalog::columns_query,
    evolve_lock: catalog::evolve_lock,
    alter_column: catalog::alter_column,
    verifying: &verify::VERIFYING,
    portable_types: catalog::portable_types,
    column_names_fold_case: false,
    keys_compare_loosely: false,
    json_compares_as_value: true,
    typed_param: Some(catalog::typed_param),
    bigint_cast: "BIGINT",
    exact_names_since: 0,
    write_privileges: Some(catalog::write_privileges),
    exact_dead_letter_keys: None,
    probe_begins_with: Some("SET CONSTRAINTS ALL IMMEDIATE"),
    read_error: errors::read,
    write_error: errors::write,
};

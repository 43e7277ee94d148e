//! SQLite: its result codes.

pub(in crate::sink) mod catalog;
pub(in crate::sink) mod errors;
pub(in crate::sink) mod migrations;
pub(in crate::sink) mod own_tables;
pub(in crate::sink) mod pool;
pub(in crate::sink) mod verify;
pub(in crate::sink) mod words;

use crate::sink::db::{Database, EvolveLock};

/// SQLite, as the sink asks it.
pub(in crate::sink) static DATABASE: Database = Database {
    words: &words::WORDS,
    migrations: &migrations::MIGRATIONS,
    own_tables: &own_tables::OWN_TABLES,
    columns_query: catalog::columns_query,
    // The transaction's BEGIN IMMEDIATE holds the database's write lock.
    evolve_lock: |_| EvolveLock::Transaction,
    alter_column: catalog::alter_column,
    verifying: &verify::VERIFYING,
    portable_types: catalog::portable_types,
    column_names_fold_case: true,
    keys_compare_loosely: false,
    json_compares_as_value: false,
    typed_param: None,
    bigint_cast: "BIGINT",
    exact_names_since: 0,
    write_privileges: None,
    exact_dead_letter_keys: None,
    probe_begins_with: None,
    read_error: errors::read,
    // sqlx's words suit.
    write_error: |_, _| None,
};

//! MySQL and MariaDB: their error numbers.

pub(in crate::sink) mod catalog;
pub(in crate::sink) mod errors;
pub(in crate::sink) mod migrations;
pub(in crate::sink) mod own_tables;
pub(in crate::sink) mod pool;
pub(in crate::sink) mod verify;
pub(in crate::sink) mod words;

use crate::sink::db::Database;

/// MySQL and MariaDB, as the sink asks them.
pub(in crate::sink) static DATABASE: Database = Database {
    words: &words::WORDS,
    migrations: &migrations::MIGRATIONS,
    own_tables: &own_tables::OWN_TABLES,
    columns_query: catalog::columns_query,
    evolve_lock: |spec| catalog::evolve_lock(&spec.name),
    alter_column: catalog::alter_column,
    verifying: &verify::VERIFYING,
    portable_types: catalog::portable_types,
    column_names_fold_case: true,
    keys_compare_loosely: true,
    json_compares_as_value: false,
    typed_param: None,
    bigint_cast: "SIGNED",
    exact_names_since: 2,
    write_privileges: None,
    exact_dead_letter_keys: Some(&catalog::EXACT_DEAD_LETTER_KEYS),
    probe_begins_with: None,
    read_error: errors::read,
    // sqlx's words suit.
    write_error: |_, _| None,
};

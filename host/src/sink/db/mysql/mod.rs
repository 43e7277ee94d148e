//! MySQL and MariaDB: their error numbers.

pub(in crate::sink) mod catalog;
pub(in crate::sink) mod errors;
pub(in crate::sink) mod migrations;
pub(in crate::sink) mod own_tables;
pub(in crate::sink) mod pool;

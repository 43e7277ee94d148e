//! What names a database takes: the length of a table or column name, the characters
//! sluice puts in one, the system columns a table already has, and how many columns a
//! table may have. Table templates check the tables they make against these rules, and
//! derived columns the columns they make; a name that breaks one fails its record alone.
//! The names the file gives itself (configured columns, tables, schemas) follow a
//! stricter rule, [`valid_identifier`], checked when the file is loaded.

/// Whether `name` is a name sluice writes into SQL as the file gives it (a configured
/// column, table or schema): 1 to 63 ASCII letters, digits and `_`, not starting with a
/// digit, so that it needs no quoting rules of its own and fits every database.
pub(super) fn valid_identifier(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

/// Whether `name` is a configured table: an identifier ([`valid_identifier`]), or two
/// joined by a dot (`schema.table`).
pub(super) fn valid_table_name(name: &str) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    parts.len() <= 2 && parts.iter().all(|p| valid_identifier(p))
}

use crate::db_kind::DbKind;
pub use crate::db_kind::NameLimit;

/// The longest table name the database a sink URL's `scheme` names takes
/// ([`DbKind::name_limit`]); none for a scheme sluice does not write to.
pub fn name_limit(scheme: &str) -> Option<NameLimit> {
    DbKind::from_scheme(scheme).and_then(DbKind::name_limit)
}

/// `Err` says why a table name that a template made cannot be a table of this database:
/// empty, too long, or with a character that is not quoted safely everywhere (control
/// characters, quotes, backslashes; MySQL refuses a trailing space).
pub fn table_name_problem(name: &str, limit: Option<NameLimit>) -> Result<(), String> {
    if name.is_empty() {
        return Err("the table name is empty".into());
    }
    match limit {
        Some(NameLimit::Bytes(most)) if name.len() > most => {
            return Err(format!(
                "table name \"{name}\" is {} bytes long, and the database takes {most} at most",
                name.len()
            ));
        }
        Some(NameLimit::Chars(most)) if name.chars().count() > most => {
            return Err(format!(
                "table name \"{name}\" is {} characters long, and the database takes {most} at most",
                name.chars().count()
            ));
        }
        _ => {}
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_control() || matches!(c, '"' | '`' | '\\'))
    {
        return Err(format!(
            "table name \"{}\" has {c:?}, which sluice does not put in a table name",
            name.escape_debug()
        ));
    }
    // A template may read what producers write (`{source.table}`): sluice's own tables
    // (offsets, ids, tombstones) are never a record's table.
    if name
        .get(..7)
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case("sluice_"))
    {
        return Err(format!(
            "table name \"{name}\" starts with sluice_, which names sluice's own tables"
        ));
    }
    if name.ends_with(' ') || name.starts_with(' ') {
        return Err(format!("table name \"{name}\" starts or ends with a space"));
    }
    Ok(())
}

/// The rules a database puts on a column name: how long one may be, the names it keeps
/// for itself, whether a trailing space is refused, and how many columns a table takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnNameRules {
    limit: Option<NameLimit>,
    /// System columns every table has (PostgreSQL's `ctid`, `xmin`, …), compared exactly.
    reserved: &'static [&'static str],
    /// MySQL and MariaDB refuse a column name that ends with a space.
    no_trailing_space: bool,
    /// Most columns in one table: PostgreSQL 1,600, InnoDB 1,017, SQLite 2,000.
    most_columns: usize,
}

impl ColumnNameRules {
    /// The rules of the database a sink URL's `scheme` names; for a scheme sluice does
    /// not write to (a check that ran before the URL's), the loosest: SQLite's.
    pub fn for_scheme(scheme: &str) -> Self {
        ColumnNameRules::for_kind(DbKind::from_scheme(scheme).unwrap_or(DbKind::Sqlite))
    }

    /// The rules of `kind`.
    pub fn for_kind(kind: DbKind) -> Self {
        ColumnNameRules {
            limit: kind.name_limit(),
            reserved: kind.reserved_columns(),
            no_trailing_space: kind.refuses_trailing_space(),
            most_columns: kind.most_columns(),
        }
    }

    /// `Err` says why `name` cannot be a column of this database: empty, too long (the
    /// database would cut it short, and a later name could meet it), a control character
    /// (PostgreSQL refuses NUL in the protocol itself), a trailing space where the
    /// database refuses one, or a system column's name.
    pub fn problem(&self, name: &str) -> Result<(), String> {
        if name.is_empty() {
            return Err("a field has an empty name, which no column can have".into());
        }
        match self.limit {
            Some(NameLimit::Bytes(most)) if name.len() > most => {
                return Err(format!(
                    "column name \"{}\" is {} bytes long, and the database takes {most} at most (it would cut it short): rename the field with sink.derive.rename",
                    name.escape_debug(),
                    name.len()
                ));
            }
            Some(NameLimit::Chars(most)) if name.chars().count() > most => {
                return Err(format!(
                    "column name \"{}\" is {} characters long, and the database takes {most} at most: rename the field with sink.derive.rename",
                    name.escape_debug(),
                    name.chars().count()
                ));
            }
            _ => {}
        }
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            return Err(format!(
                "column name \"{}\" has the control character {c:?}, which sluice does not put in a column name",
                name.escape_debug()
            ));
        }
        if self.no_trailing_space && name.ends_with(' ') {
            return Err(format!(
                "column name \"{name}\" ends with a space, which the database refuses"
            ));
        }
        if self.reserved.contains(&name) {
            return Err(format!(
                "column name \"{name}\" is a system column of every table in this database: rename the field with sink.derive.rename"
            ));
        }
        Ok(())
    }

    /// `Err` when a table of `count` columns is more than the database takes.
    pub fn count_problem(&self, count: usize) -> Result<(), String> {
        if count > self.most_columns {
            return Err(format!(
                "the schema makes {count} columns, and a table of this database takes {} at most",
                self.most_columns
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_checked_against_the_database() {
        let pg = name_limit("postgres");
        let my = name_limit("mysql");
        assert!(table_name_problem(&"a".repeat(63), pg).is_ok());
        assert!(
            table_name_problem(&"a".repeat(64), pg)
                .unwrap_err()
                .contains("64 bytes")
        );
        assert!(table_name_problem(&"a".repeat(64), my).is_ok());
        assert!(table_name_problem(&"é".repeat(40), pg).is_err());
        assert!(table_name_problem(&"é".repeat(40), my).is_ok());
        assert!(table_name_problem(&"a".repeat(500), name_limit("sqlite")).is_ok());
        assert!(table_name_problem("shop.public.orders", pg).is_ok());
        for bad in [
            "a\"b",
            "a`b",
            "a\\b",
            "a\nb",
            "",
            "trailing ",
            "SLUICE_offsets",
        ] {
            assert!(table_name_problem(bad, my).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn column_names_are_checked_against_the_database() {
        let pg = ColumnNameRules::for_scheme("postgres");
        let my = ColumnNameRules::for_scheme("mariadb");
        let lite = ColumnNameRules::for_scheme("sqlite");
        // Dots are part of a column's name, not a schema's separator.
        for rules in [pg, my, lite] {
            assert!(rules.problem("a.b").is_ok());
            assert!(rules.problem("").is_err());
            assert!(
                rules
                    .problem("a\0b")
                    .unwrap_err()
                    .contains("control character")
            );
        }
        assert!(pg.problem(&"a".repeat(63)).is_ok());
        assert!(
            pg.problem(&"a".repeat(64))
                .unwrap_err()
                .contains("64 bytes")
        );
        assert!(my.problem(&"a".repeat(64)).is_ok());
        assert!(my.problem(&"a".repeat(65)).is_err());
        assert!(lite.problem(&"a".repeat(5000)).is_ok());
        assert!(
            my.problem("trailing ")
                .unwrap_err()
                .contains("ends with a space")
        );
        assert!(pg.problem("trailing ").is_ok());
        assert!(pg.problem("ctid").unwrap_err().contains("system column"));
        // Quoted, "CTID" is another name than ctid.
        assert!(pg.problem("CTID").is_ok());
        assert!(my.problem("ctid").is_ok());
        assert!(pg.count_problem(1600).is_ok());
        assert!(pg.count_problem(1601).is_err());
        assert!(my.count_problem(1700).is_err());
        assert!(lite.count_problem(1700).is_ok());
    }
}

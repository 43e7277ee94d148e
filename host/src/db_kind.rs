//! Which database a sink URL names, and what sluice knows of each kind before it
//! connects: its URL schemes, how long a name may be, the column names a table keeps for
//! itself, how many columns a table takes, how wide an exact decimal goes, whether it has
//! arrays.
//!
//! A leaf: it imports nothing of the crate, so the configuration check (`config`), the
//! mapper (`map`) and the sink all ask the same answers. The sink's own per-database code
//! (statements, catalogs, error codes) stays in `sink/`; what is here is only what must
//! be known without a connection.
//!
//! Adding a database starts here: a variant, its schemes, and an answer in every `match`
//! below (the compiler lists them).

use std::fmt;

/// A database sluice writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DbKind {
    /// PostgreSQL (`postgres://`, `postgresql://`).
    Postgres,
    /// MySQL and MariaDB (`mysql://`, `mariadb://`): one kind, as sluice speaks to both
    /// alike.
    MySql,
    /// SQLite (`sqlite://`), a file.
    Sqlite,
}

/// How long a name may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameLimit {
    /// At most this many bytes of UTF-8 (PostgreSQL cuts a longer name short).
    Bytes(usize),
    /// At most this many characters.
    Chars(usize),
}

impl DbKind {
    /// Every kind, in the order error messages list them.
    pub const ALL: [DbKind; 3] = [DbKind::Postgres, DbKind::MySql, DbKind::Sqlite];

    /// The URL schemes that name this kind; the first is the one messages suggest.
    pub fn schemes(self) -> &'static [&'static str] {
        match self {
            DbKind::Postgres => &["postgres", "postgresql"],
            DbKind::MySql => &["mysql", "mariadb"],
            DbKind::Sqlite => &["sqlite"],
        }
    }

    /// The kind a URL scheme names, if sluice writes to it.
    pub fn from_scheme(scheme: &str) -> Option<DbKind> {
        DbKind::ALL
            .into_iter()
            .find(|kind| kind.schemes().contains(&scheme))
    }

    /// The kind a database URL names (`scheme://…`), if sluice writes to it.
    pub fn from_url(url: &str) -> Option<DbKind> {
        let (scheme, _) = url.split_once("://")?;
        DbKind::from_scheme(scheme)
    }

    /// The schemes a message suggests, one per kind: `postgres://, mysql:// or sqlite://`.
    pub fn suggested_schemes() -> String {
        let first: Vec<String> = DbKind::ALL
            .iter()
            .map(|kind| format!("{}://", kind.schemes()[0]))
            .collect();
        match first.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => first.join(""),
        }
    }

    /// The longest table or column name the database takes: in bytes for PostgreSQL (63:
    /// longer names are cut short, so two long names could meet), in characters for
    /// MySQL and MariaDB (64); SQLite has none.
    pub fn name_limit(self) -> Option<NameLimit> {
        match self {
            DbKind::Postgres => Some(NameLimit::Bytes(63)),
            DbKind::MySql => Some(NameLimit::Chars(64)),
            DbKind::Sqlite => None,
        }
    }

    /// System columns every table has, compared exactly: a column of that name cannot be
    /// added (PostgreSQL's `ctid`, `xmin`, …).
    pub fn reserved_columns(self) -> &'static [&'static str] {
        match self {
            DbKind::Postgres => &["tableoid", "xmin", "cmin", "xmax", "cmax", "ctid", "oid"],
            DbKind::MySql | DbKind::Sqlite => &[],
        }
    }

    /// Whether a column name that ends with a space is refused (MySQL and MariaDB).
    pub fn refuses_trailing_space(self) -> bool {
        self == DbKind::MySql
    }

    /// Most columns in one table: PostgreSQL 1,600, InnoDB 1,017, SQLite 2,000.
    pub fn most_columns(self) -> usize {
        match self {
            DbKind::Postgres => 1600,
            DbKind::MySql => 1017,
            DbKind::Sqlite => 2000,
        }
    }

    /// Whether a column may be an array (PostgreSQL only).
    pub fn has_arrays(self) -> bool {
        self == DbKind::Postgres
    }

    /// Whether a transaction can commit without waiting for its log to reach disk
    /// (`sink.synchronous_commit: off`, PostgreSQL's `synchronous_commit`).
    pub fn commits_asynchronously(self) -> bool {
        self == DbKind::Postgres
    }

    /// Whether `ALTER TABLE` can make a `NOT NULL` column nullable in place
    /// (`evolve: relax`). SQLite cannot without rebuilding the table.
    pub fn relaxes_not_null(self) -> bool {
        self != DbKind::Sqlite
    }

    /// The widest exact decimal a column takes, as (precision, scale), where the database
    /// has a bound sluice must respect: MySQL's and MariaDB's `DECIMAL(65, 30)`. `None`
    /// where sluice's own bound applies (PostgreSQL's `numeric` goes far beyond it) or the
    /// database keeps decimals as text (SQLite).
    pub fn decimal_bound(self) -> Option<(u16, u16)> {
        match self {
            DbKind::MySql => Some((65, 30)),
            DbKind::Postgres | DbKind::Sqlite => None,
        }
    }
}

impl fmt::Display for DbKind {
    /// The name an operator knows the database by.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DbKind::Postgres => "PostgreSQL",
            DbKind::MySql => "MySQL/MariaDB",
            DbKind::Sqlite => "SQLite",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_names_its_kind_and_no_other() {
        for kind in DbKind::ALL {
            for scheme in kind.schemes() {
                assert_eq!(DbKind::from_scheme(scheme), Some(kind));
                assert_eq!(DbKind::from_url(&format!("{scheme}://host/db")), Some(kind));
            }
        }
        assert_eq!(
            DbKind::from_scheme("Postgres"),
            None,
            "schemes compare exactly"
        );
        assert_eq!(DbKind::from_scheme("oracle"), None);
        assert_eq!(DbKind::from_url("sqlite:x.db"), None, "no ://");
        assert_eq!(DbKind::from_url(""), None);
    }

    #[test]
    fn messages_suggest_one_scheme_per_kind() {
        assert_eq!(
            DbKind::suggested_schemes(),
            "postgres://, mysql:// or sqlite://"
        );
    }
}

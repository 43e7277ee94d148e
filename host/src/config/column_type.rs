//! The portable column vocabulary: the types a column of `sink.columns` or
//! `sink.derive.types` names, and the types derived from a record's schema. Each maps to
//! one SQL type per database (`sink::dialect`); docs/configuration.md has the table.
//!
//! Most names are plain words (`bigint`, `timestamptz`); two take parameters:
//! `numeric(p,s)`, an exact decimal of `p` digits of which `s` follow the point (a value
//! that does not fit is a per-record failure, never rounded), and `<element>[]`, a
//! PostgreSQL array of one scalar type (`int[]`, `text[]`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

/// Most digits PostgreSQL's `NUMERIC(p,s)` takes.
pub const MAX_DECIMAL_PRECISION: u16 = 1000;

/// A portable column type, mapped to each SQL dialect in `sink::dialect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// 16-bit integer (PostgreSQL `SMALLINT`, MySQL `SMALLINT`, SQLite `INTEGER`).
    Smallint,
    /// 32-bit integer.
    Int,
    /// 64-bit integer.
    Bigint,
    Double,
    /// An exact decimal of any size the database takes (PostgreSQL `NUMERIC`, MySQL
    /// `DECIMAL(65,30)`, SQLite `NUMERIC`).
    Numeric,
    /// An exact decimal of `precision` digits, `scale` of them after the point
    /// (`numeric(p,s)`): a value with more is refused, never rounded.
    Decimal {
        precision: u16,
        scale: u16,
    },
    Text,
    Bool,
    /// A date and time without a zone.
    Timestamp,
    /// An instant, stored in UTC.
    Timestamptz,
    Date,
    /// A time of day (PostgreSQL `TIME`, MySQL `TIME(6)`, SQLite `TEXT`): microseconds.
    Time,
    Json,
    Bytes,
    Uuid,
    /// A one-dimensional PostgreSQL array of one scalar type (`int[]`); elements may be
    /// null.
    Array(ElementType),
}

/// The type of an array's elements: the scalar types PostgreSQL arrays hold as sluice
/// writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    Smallint,
    Int,
    Bigint,
    Double,
    Numeric,
    Text,
    Bool,
    Timestamp,
    Timestamptz,
    Date,
    Time,
    Uuid,
}

/// Every element type, in the order the docs list them.
const ELEMENTS: [ElementType; 12] = [
    ElementType::Smallint,
    ElementType::Int,
    ElementType::Bigint,
    ElementType::Double,
    ElementType::Numeric,
    ElementType::Text,
    ElementType::Bool,
    ElementType::Timestamp,
    ElementType::Timestamptz,
    ElementType::Date,
    ElementType::Time,
    ElementType::Uuid,
];

impl ElementType {
    /// The scalar column type of one element.
    pub fn scalar(self) -> ColumnType {
        match self {
            ElementType::Smallint => ColumnType::Smallint,
            ElementType::Int => ColumnType::Int,
            ElementType::Bigint => ColumnType::Bigint,
            ElementType::Double => ColumnType::Double,
            ElementType::Numeric => ColumnType::Numeric,
            ElementType::Text => ColumnType::Text,
            ElementType::Bool => ColumnType::Bool,
            ElementType::Timestamp => ColumnType::Timestamp,
            ElementType::Timestamptz => ColumnType::Timestamptz,
            ElementType::Date => ColumnType::Date,
            ElementType::Time => ColumnType::Time,
            ElementType::Uuid => ColumnType::Uuid,
        }
    }

    /// The element type of arrays of `scalar`, if PostgreSQL arrays of it are in the
    /// vocabulary.
    pub fn of(scalar: ColumnType) -> Option<ElementType> {
        ELEMENTS.into_iter().find(|e| e.scalar() == scalar)
    }
}

impl ColumnType {
    /// The name as `connectors.yaml` spells it (`bigint`, `numeric(12,2)`, `int[]`).
    pub fn name(self) -> String {
        self.to_string()
    }

    /// The plain names, without parameters.
    const WORDS: [(&'static str, ColumnType); 14] = [
        ("smallint", ColumnType::Smallint),
        ("int", ColumnType::Int),
        ("bigint", ColumnType::Bigint),
        ("double", ColumnType::Double),
        ("numeric", ColumnType::Numeric),
        ("text", ColumnType::Text),
        ("bool", ColumnType::Bool),
        ("timestamp", ColumnType::Timestamp),
        ("timestamptz", ColumnType::Timestamptz),
        ("date", ColumnType::Date),
        ("time", ColumnType::Time),
        ("json", ColumnType::Json),
        ("bytes", ColumnType::Bytes),
        ("uuid", ColumnType::Uuid),
    ];

    /// Whether this is one of the integer types.
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            ColumnType::Smallint | ColumnType::Int | ColumnType::Bigint
        )
    }

    /// Whether this is an exact decimal (`numeric` or `numeric(p,s)`).
    pub fn is_decimal(self) -> bool {
        matches!(self, ColumnType::Numeric | ColumnType::Decimal { .. })
    }
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnType::Decimal { precision, scale } => write!(f, "numeric({precision},{scale})"),
            ColumnType::Array(element) => write!(f, "{}[]", element.scalar()),
            other => {
                let word = ColumnType::WORDS
                    .iter()
                    .find(|(_, t)| t == other)
                    .map_or("?", |(w, _)| w);
                f.write_str(word)
            }
        }
    }
}

/// Why a type name is not in the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnknownColumnType(String);

impl FromStr for ColumnType {
    type Err = UnknownColumnType;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let words = || {
            ColumnType::WORDS
                .iter()
                .map(|(w, _)| *w)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let unknown = || {
            UnknownColumnType(format!(
                "unknown column type {text:?}: use one of {}, numeric(p,s) or an array of a scalar type (int[], text[], …)",
                words()
            ))
        };
        let trimmed = text.trim();
        if let Some(element) = trimmed.strip_suffix("[]") {
            let scalar: ColumnType = element.trim().parse().map_err(|_| unknown())?;
            return ElementType::of(scalar).map(ColumnType::Array).ok_or_else(|| {
                UnknownColumnType(format!(
                    "{text:?}: arrays hold one of {} (a JSON array of anything else is a json column)",
                    ELEMENTS
                        .iter()
                        .map(|e| e.scalar().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            });
        }
        if let Some(parameters) = trimmed
            .strip_prefix("numeric")
            .map(str::trim_start)
            .and_then(|rest| rest.strip_prefix('('))
            .and_then(|rest| rest.strip_suffix(')'))
        {
            let bad = || {
                UnknownColumnType(format!(
                    "{text:?}: numeric(p,s) takes a precision p from 1 to {MAX_DECIMAL_PRECISION} and a scale s from 0 to p"
                ))
            };
            let (p, s) = parameters.split_once(',').unwrap_or((parameters, "0"));
            let precision: u16 = p.trim().parse().map_err(|_| bad())?;
            let scale: u16 = s.trim().parse().map_err(|_| bad())?;
            if precision == 0 || precision > MAX_DECIMAL_PRECISION || scale > precision {
                return Err(bad());
            }
            return Ok(ColumnType::Decimal { precision, scale });
        }
        ColumnType::WORDS
            .iter()
            .find(|(w, _)| *w == trimmed)
            .map(|(_, t)| *t)
            .ok_or_else(unknown)
    }
}

impl<'de> Deserialize<'de> for ColumnType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back() {
        let mut all: Vec<ColumnType> = ColumnType::WORDS.iter().map(|(_, t)| *t).collect();
        all.push(ColumnType::Decimal {
            precision: 12,
            scale: 2,
        });
        all.extend(ELEMENTS.iter().map(|e| ColumnType::Array(*e)));
        for column_type in all {
            let name = column_type.name();
            assert_eq!(name.parse::<ColumnType>(), Ok(column_type), "{name}");
        }
        assert_eq!(ColumnType::Int.name(), "int");
    }

    #[test]
    fn parameters() {
        assert_eq!(
            "numeric( 12 , 2 )".parse(),
            Ok(ColumnType::Decimal {
                precision: 12,
                scale: 2
            })
        );
        assert_eq!(
            "numeric(5)".parse(),
            Ok(ColumnType::Decimal {
                precision: 5,
                scale: 0
            })
        );
        assert_eq!(
            "bigint[]".parse(),
            Ok(ColumnType::Array(ElementType::Bigint))
        );
        for bad in [
            "numeric(0,0)",
            "numeric(3,4)",
            "numeric(1001,2)",
            "numeric(a,b)",
            "json[]",
            "int[][]",
            "varchar",
            "",
        ] {
            assert!(bad.parse::<ColumnType>().is_err(), "{bad}");
        }
        let message = "numeric(3,4)"
            .parse::<ColumnType>()
            .unwrap_err()
            .to_string();
        assert!(message.contains("scale s from 0 to p"), "{message}");
    }
}

//! Columns derived from a record's schema, when `sink.columns` is left out: each field of
//! the value's schema (under an envelope, of the row's schema) becomes a column of the
//! portable type its schema type maps to (docs/configuration.md has the table), adjusted
//! by `sink.derive`; the key is `sink.key` by name, or with `key: record_key` the fields
//! of the key's schema.
//!
//! One [`DerivedShape`] is made per schema (the decoders hand out one `Arc` per schema, so
//! a pointer finds it again) and carries its own [`RowMapper`]: a row maps to the shape's
//! columns in the shape's order, and the sink places them among the table's columns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::{
    ColumnNameRules, ColumnType, DeriveConfig, ElementType, Envelope, MAX_DECIMAL_PRECISION,
    SinkKey,
};
use crate::db_kind::DbKind;
use crate::format::RecordSchemas;
use crate::format::shape::{Field, FieldType};

use super::{Column, JsonPointer, MapError, RowMapper, Source};

/// Most shapes kept per connector task; past it the cache starts again (a schema seen
/// again is derived again, which is cheap).
const MAX_SHAPES: usize = 1024;

/// One column a schema derives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DerivedColumn {
    /// The column's name (the field's, or its `derive.rename`).
    pub name: String,
    /// The field it reads.
    pub field: String,
    pub column_type: ColumnType,
    /// The field may be null (or absent with a default): a column added for it later is
    /// nullable, and rows before it read NULL.
    pub optional: bool,
    /// The field is text holding a JSON document (Debezium's `Json`): a `json` column
    /// takes the document, not a JSON string of it.
    pub json_text: bool,
}

/// The columns of one schema, and the mapper that reads them.
#[derive(Debug)]
pub struct DerivedShape {
    /// In the schema's field order.
    pub columns: Vec<DerivedColumn>,
    /// Indices into `columns` of the key, in key order.
    pub key: Vec<usize>,
    /// Its columns are a row's (not only a tombstone's key): a table may be created from
    /// it.
    pub from_row: bool,
    pub(super) mapper: RowMapper,
}

impl PartialEq for DerivedShape {
    fn eq(&self, other: &Self) -> bool {
        self.columns == other.columns && self.key == other.key
    }
}

impl Eq for DerivedShape {}

impl DerivedShape {
    /// The mapper of this shape's rows.
    pub fn mapper(&self) -> &RowMapper {
        &self.mapper
    }

    /// The key columns' names, in key order.
    pub fn key_names(&self) -> Vec<&str> {
        self.key
            .iter()
            .map(|&i| self.columns[i].name.as_str())
            .collect()
    }
}

/// A key and a value schema, kept alive while their pointers key the cache.
type Entry = (RecordSchemas, Result<Arc<DerivedShape>, MapError>);

/// Derives shapes for one connector's records.
#[derive(Debug)]
pub struct Deriver {
    /// The connector's mapper, without columns: format, envelope, version, truncate.
    base: RowMapper,
    derive: DeriveConfig,
    key: SinkKey,
    envelope: Envelope,
    /// The version column sluice writes itself (`sink.version.column`), if any.
    version_column: Option<String>,
    /// What column names the sink's database takes.
    names: ColumnNameRules,
    /// What column types the sink's database holds.
    types: TypeRules,
    cache: Mutex<HashMap<(usize, usize), Entry>>,
}

fn pointer_of(schema: &Option<Arc<crate::format::WriterSchema>>) -> usize {
    schema.as_ref().map_or(0, |s| Arc::as_ptr(s) as usize)
}

impl Deriver {
    /// A deriver with `base`'s settings (its columns are not used); `version_column` is
    /// the column sluice keeps versions in, which no field may become.
    pub fn new(
        base: RowMapper,
        derive: DeriveConfig,
        key: SinkKey,
        envelope: Envelope,
        version_column: Option<String>,
    ) -> Self {
        Deriver {
            base,
            derive,
            key,
            envelope,
            version_column,
            names: ColumnNameRules::for_scheme(""),
            types: TypeRules::for_scheme(""),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// This deriver, checking column names against `names` and deriving types by
    /// `types` (the sink database's rules).
    pub fn for_database(mut self, names: ColumnNameRules, types: TypeRules) -> Self {
        self.names = names;
        self.types = types;
        self
    }

    /// The shape of a record with these schemas; `Err` says why its schema derives no
    /// columns: a per-record failure of class `schema_incompatible`, or `column_name` for
    /// a field whose name the database cannot take as a column.
    pub fn shape(&self, schemas: &RecordSchemas) -> Result<Arc<DerivedShape>, MapError> {
        let at = (pointer_of(&schemas.value), pointer_of(&schemas.key));
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, shape)) = cache.get(&at) {
            return shape.clone();
        }
        if cache.len() >= MAX_SHAPES {
            cache.clear();
        }
        let shape = self.derive(schemas).map(Arc::new);
        cache.insert(at, (schemas.clone(), shape.clone()));
        shape
    }

    fn derive(&self, schemas: &RecordSchemas) -> Result<DerivedShape, MapError> {
        let shape = self
            .derive_columns(schemas)
            .map_err(MapError::SchemaIncompatible)?;
        for column in &shape.columns {
            self.names.problem(&column.name).map_err(|why| {
                MapError::ColumnName(if column.name == column.field {
                    why
                } else {
                    format!("field {}: {why}", column.field.escape_debug())
                })
            })?;
        }
        let count = shape.columns.len() + usize::from(self.version_column.is_some());
        self.names
            .count_problem(count)
            .map_err(MapError::ColumnName)?;
        Ok(shape)
    }

    fn derive_columns(&self, schemas: &RecordSchemas) -> Result<DerivedShape, String> {
        if schemas.value.is_none() && self.envelope != Envelope::None {
            // A change event's tombstone: passed over (Debezium) or refused (OpenCDC)
            // by the mapping, which reads no column of it.
            let mut mapper = self.base.clone();
            mapper.columns = Vec::new();
            mapper.key = Vec::new();
            return Ok(DerivedShape {
                columns: Vec::new(),
                key: Vec::new(),
                from_row: false,
                mapper,
            });
        }
        let row_fields: Vec<Field> = match &schemas.value {
            Some(value) => self.row_fields(&value.shape)?,
            // A tombstone: its key is all there is to read.
            None => match &schemas.key {
                Some(key) => key.shape.fields().to_vec(),
                None => Vec::new(),
            },
        };
        let mut columns: Vec<DerivedColumn> = Vec::with_capacity(row_fields.len());
        for field in &row_fields {
            if !self.derive.include.is_empty() && !self.derive.include.contains(&field.name) {
                continue;
            }
            if self.derive.exclude.contains(&field.name) {
                continue;
            }
            let name = self
                .derive
                .rename
                .get(&field.name)
                .cloned()
                .unwrap_or_else(|| field.name.clone());
            let column_type = match self.derive.types.get(&name) {
                Some(&column_type) => column_type,
                None => match column_type_of(&field.field_type, self.types) {
                    Some(column_type) => column_type,
                    // A field that is always null has nothing to keep.
                    None => continue,
                },
            };
            if let Some(version) = &self.version_column
                && version.eq_ignore_ascii_case(&name)
            {
                return Err(format!(
                    "field {} would become column {name}, which keeps sluice's versions (sink.version.column): rename the field with sink.derive.rename, exclude it, or name another version column",
                    field.name
                ));
            }
            if let Some(twin) = columns.iter().find(|c| c.name.eq_ignore_ascii_case(&name)) {
                return Err(format!(
                    "fields {} and {} both become column {name} (column names are case-insensitive): rename one with sink.derive.rename",
                    twin.field, field.name
                ));
            }
            columns.push(DerivedColumn {
                name,
                field: field.name.clone(),
                column_type,
                optional: field.optional || field.default.is_some(),
                json_text: field.field_type == FieldType::JsonText,
            });
        }
        let key_names: Vec<String> = match &self.key {
            SinkKey::Columns(names) => names.clone(),
            SinkKey::RecordKey => {
                let Some(key) = &schemas.key else {
                    let why = "key: record_key reads the key's schema, and this record's key has none (a null key?)";
                    if self.envelope == Envelope::None {
                        return Err(why.into());
                    }
                    // A change event without a key: Debezium's truncate (op t) has a null
                    // key and no row. It reaches `on_truncate`; any other change of this
                    // shape fails alone, in order with its partition's other changes.
                    let mut mapper = self.base.clone();
                    mapper.columns = Vec::new();
                    mapper.key = Vec::new();
                    mapper.keyless = Some(why.into());
                    return Ok(DerivedShape {
                        columns: Vec::new(),
                        key: Vec::new(),
                        from_row: false,
                        mapper,
                    });
                };
                let fields = key.shape.fields();
                if fields.is_empty() {
                    return Err(format!(
                        "key: record_key needs a key schema with fields, and the key is {}",
                        type_label(&key.shape)
                    ));
                }
                fields
                    .iter()
                    .map(|f| {
                        self.derive
                            .rename
                            .get(&f.name)
                            .cloned()
                            .unwrap_or_else(|| f.name.clone())
                    })
                    .collect()
            }
        };
        let mut key = Vec::with_capacity(key_names.len());
        for name in &key_names {
            match columns.iter().position(|c| &c.name == name) {
                Some(index) => key.push(index),
                None if columns.is_empty() => {
                    return Err(format!(
                        "key column {name}: the record carries no schema to find it in"
                    ));
                }
                None => {
                    return Err(format!(
                        "key column {name} is not a field of the row's schema (fields: {})",
                        columns
                            .iter()
                            .map(|c| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
        }
        let mapper_columns = columns
            .iter()
            .map(|c| Column {
                name: c.name.clone(),
                source: Source::Pointer(JsonPointer::new(&format!(
                    "/{}",
                    c.field.replace('~', "~0").replace('/', "~1")
                ))),
                column_type: c.column_type,
                json_text: c.json_text,
            })
            .collect();
        let mut mapper = self.base.clone();
        mapper.columns = mapper_columns;
        mapper.key = key.clone();
        Ok(DerivedShape {
            columns,
            key,
            from_row: schemas.value.is_some(),
            mapper,
        })
    }

    /// The fields of the row a value's schema describes: the value's own, or under an
    /// envelope those of its row (`after`, else `before`; OpenCDC's `payload.after`).
    fn row_fields(&self, value: &FieldType) -> Result<Vec<Field>, String> {
        let row = match self.envelope {
            Envelope::None => value,
            Envelope::Debezium => field_of(value, "after")
                .or_else(|| field_of(value, "before"))
                .ok_or_else(|| {
                    format!(
                        "envelope: debezium: the value's schema ({}) has no after or before row",
                        type_label(value)
                    )
                })?,
            Envelope::Opencdc => field_of(value, "payload")
                .and_then(|payload| {
                    field_of(payload, "after").or_else(|| field_of(payload, "before"))
                })
                .ok_or_else(|| {
                    format!(
                        "envelope: opencdc: the value's schema ({}) has no payload.after row",
                        type_label(value)
                    )
                })?,
        };
        match row {
            FieldType::Record { fields, .. } => Ok(fields.clone()),
            other => Err(format!(
                "columns derive from a record's fields, and the row's schema is {}",
                type_label(other)
            )),
        }
    }
}

/// The type of field `name` of a record type (a union's one record branch included).
fn field_of<'t>(record: &'t FieldType, name: &str) -> Option<&'t FieldType> {
    let field = record.fields().iter().find(|f| f.name == name)?;
    match &field.field_type {
        FieldType::Union(branches) => branches
            .iter()
            .find(|b| matches!(b, FieldType::Record { .. })),
        other => Some(other),
    }
}

/// What the columns of a sink's database hold, for the types derived from a schema: the
/// same value must compare equal in the source and the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeRules {
    /// Arrays of scalars are arrays (PostgreSQL); elsewhere they are JSON.
    arrays: bool,
    /// The widest exact decimal a column holds, `(precision, scale)`: wider decimals
    /// are written to one this wide, and a value that does not fit it fails alone.
    /// `None`: any decimal fits an unconstrained column.
    max_decimal: Option<(u16, u16)>,
}

impl TypeRules {
    /// The rules of the database a sink URL's `scheme` names; for a scheme sluice does
    /// not write to, the loosest: SQLite's.
    pub fn for_scheme(scheme: &str) -> Self {
        TypeRules::for_kind(DbKind::from_scheme(scheme).unwrap_or(DbKind::Sqlite))
    }

    /// The rules of `kind`. A database without a decimal bound of its own writes a
    /// decimal without a precision as an unconstrained `numeric`, and one with a
    /// precision within sluice's own bound ([`MAX_DECIMAL_PRECISION`]).
    pub fn for_kind(kind: DbKind) -> Self {
        TypeRules {
            arrays: kind.has_arrays(),
            max_decimal: kind.decimal_bound(),
        }
    }

    /// An exact decimal of the schema's precision (unconstrained: `None`) and scale.
    fn decimal(self, precision: Option<u32>, scale: u32) -> ColumnType {
        let (max_precision, max_scale) = match self.max_decimal {
            Some(max) => max,
            None => {
                return match precision {
                    Some(p) => decimal(p, scale, MAX_DECIMAL_PRECISION, MAX_DECIMAL_PRECISION),
                    None => ColumnType::Numeric,
                };
            }
        };
        match precision {
            Some(p) => decimal(p, scale, max_precision, max_scale),
            // A variable scale: the database's widest DECIMAL is as near as it gets, with
            // the values past it failing alone.
            None => ColumnType::Decimal {
                precision: max_precision,
                scale: max_scale,
            },
        }
    }
}

/// `numeric(p,s)` within a database's bounds.
fn decimal(precision: u32, scale: u32, max_precision: u16, max_scale: u16) -> ColumnType {
    let scale = u16::try_from(scale).unwrap_or(u16::MAX).min(max_scale);
    let precision = u16::try_from(precision)
        .unwrap_or(u16::MAX)
        .clamp(1, max_precision)
        .max(scale);
    ColumnType::Decimal { precision, scale }
}

/// The portable column type of a schema type in a database of `rules`
/// (docs/configuration.md, "Columns from the schema"); `None` for a field that is always
/// null.
pub fn column_type_of(field_type: &FieldType, rules: TypeRules) -> Option<ColumnType> {
    Some(match field_type {
        FieldType::Null => return None,
        FieldType::Boolean => ColumnType::Bool,
        FieldType::Int16 => ColumnType::Smallint,
        FieldType::Int32 => ColumnType::Int,
        FieldType::Int64 => ColumnType::Bigint,
        FieldType::UInt64 => rules.decimal(Some(20), 0),
        FieldType::Decimal { precision, scale } => rules.decimal(*precision, *scale),
        FieldType::Float32 | FieldType::Float64 => ColumnType::Double,
        FieldType::String | FieldType::Enum { .. } => ColumnType::Text,
        FieldType::Bytes | FieldType::Fixed { .. } => ColumnType::Bytes,
        FieldType::Date => ColumnType::Date,
        FieldType::Time(_) => ColumnType::Time,
        FieldType::Timestamp(_) => ColumnType::Timestamptz,
        FieldType::LocalTimestamp(_) => ColumnType::Timestamp,
        FieldType::Uuid => ColumnType::Uuid,
        FieldType::JsonText => ColumnType::Json,
        FieldType::Array(items) if rules.arrays => match column_type_of(items, rules) {
            Some(element) if element.is_decimal() => ColumnType::Array(ElementType::Numeric),
            Some(element) => ElementType::of(element).map_or(ColumnType::Json, ColumnType::Array),
            None => ColumnType::Json,
        },
        FieldType::Record { .. }
        | FieldType::Array(_)
        | FieldType::Map(_)
        | FieldType::Union(_)
        | FieldType::Json => ColumnType::Json,
    })
}

/// A schema type for a message.
fn type_label(field_type: &FieldType) -> String {
    match field_type {
        FieldType::Record { name, .. } if !name.is_empty() => format!("record {name}"),
        FieldType::Record { .. } => "a record".into(),
        FieldType::Array(_) => "an array".into(),
        FieldType::Map(_) => "a map".into(),
        FieldType::Union(_) => "a union".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

#[cfg(test)]
#[path = "derive_tests.rs"]
mod tests;

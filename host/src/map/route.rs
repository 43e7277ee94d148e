//! Which table a record goes to, when a connector writes many: `sink.table` as a template
//! (`{topic}`, `{source.schema}`, `{source.table}`, `{source.db}`) or `sink.table_from`
//! (`{1}`, `{2}` … from the topic's name). A name the database cannot take, a field the
//! event lacks, or a second topic meeting the first in one table is the record's failure
//! (class `table_name`), never a table sluice makes up.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::config::{
    CapturePattern, ConnectorConfig, DeadLetterDestination, Envelope, NameLimit, SourceField,
    TableTemplate, TemplatePart, name_limit, table_name_problem,
};
use crate::record::Record;

/// Which topic first wrote each table (lower-cased), and the table's name as it spelled
/// it, per connector, shared by its tasks in this process.
type Claims = Arc<Mutex<HashMap<String, (String, String)>>>;

/// Names a router has made: per topic, per name (see [`TableRouter::table_for`]), the
/// table or why there is none.
type Made = HashMap<String, HashMap<String, Result<Arc<str>, String>>>;

static CLAIMS: LazyLock<Mutex<HashMap<String, Claims>>> = LazyLock::new(Default::default);

/// Makes each record's table name for one connector.
pub struct TableRouter {
    template: TableTemplate,
    from: Option<CapturePattern>,
    envelope: Envelope,
    limit: Option<NameLimit>,
    /// The dead-letter table (lower-cased, as configured): no record is routed into it.
    dead_letter_table: Option<String>,
    /// `sink.schema`: a made name is compared with the dead-letter table in it.
    schema: Option<String>,
    /// Names already made: per topic, per name (with a template that reads only the
    /// topic, the one name of each topic under the empty key).
    made: Mutex<Made>,
    claims: Claims,
}

impl std::fmt::Debug for TableRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableRouter")
            .field("template", &self.template)
            .finish_non_exhaustive()
    }
}

/// The names of a change event's source block that a template reads.
#[derive(Default)]
struct SourceNames<'a> {
    schema: Option<Cow<'a, str>>,
    table: Option<Cow<'a, str>>,
    db: Option<Cow<'a, str>>,
}

impl SourceNames<'_> {
    fn get(&self, field: SourceField) -> Option<&str> {
        match field {
            SourceField::Schema => self.schema.as_deref(),
            SourceField::Table => self.table.as_deref(),
            SourceField::Db => self.db.as_deref(),
        }
        .filter(|s| !s.is_empty())
    }
}

impl SourceNames<'_> {
    /// The names, no longer borrowed from the record's value.
    fn into_read(self) -> SourceRead {
        let owned = |name: Option<Cow<'_, str>>| name.map(|n| Cow::Owned(n.into_owned()));
        SourceRead(SourceNames {
            schema: owned(self.schema),
            table: owned(self.table),
            db: owned(self.db),
        })
    }
}

impl<'a> From<RawNames<'a>> for SourceNames<'a> {
    fn from(names: RawNames<'a>) -> Self {
        SourceNames {
            schema: names.schema,
            table: names.table,
            db: names.db,
        }
    }
}

/// A record's source names, read before it is mapped ([`TableRouter::read`]).
pub struct SourceRead(SourceNames<'static>);

/// A change event read only as far as its source names.
#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    source: Option<RawNames<'a>>,
    /// A Kafka Connect `{"schema","payload"}` wrapper left on a `format: json` value.
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
    #[serde(borrow, default)]
    metadata: Option<HashMap<Cow<'a, str>, Value>>,
}

#[derive(Deserialize)]
struct RawNames<'a> {
    #[serde(borrow, default)]
    schema: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    table: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    db: Option<Cow<'a, str>>,
}

/// OpenCDC names its table in this metadata key.
const OPENCDC_COLLECTION: &str = "opencdc.collection";

impl TableRouter {
    /// The router of `connector`, when its sink has a table template; `None` for one table.
    pub fn for_connector(connector: &ConnectorConfig) -> Option<Self> {
        let template = connector.sink.table_template()?.clone();
        let scheme = connector.sink.url.scheme();
        let claims = CLAIMS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(connector.name.clone())
            .or_default()
            .clone();
        Some(TableRouter {
            template,
            from: connector.sink.table_from.as_ref().map(|f| f.topic.clone()),
            envelope: connector.envelope,
            limit: name_limit(scheme),
            dead_letter_table: match &connector.errors.dlq {
                Some(DeadLetterDestination::Table(table)) => Some(table.to_lowercase()),
                _ => None,
            },
            schema: connector.sink.schema.as_ref().map(|s| s.to_lowercase()),
            made: Mutex::default(),
            claims,
        })
    }

    /// The same router, whose claims are a copy: a dry run sees which topic writes each
    /// table, and claims none for the running connector.
    pub fn dry(mut self) -> Self {
        let copy = self
            .claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.claims = Arc::new(Mutex::new(copy));
        self
    }

    /// The table of `record`, whose value is `event` when it was read already (a decoded
    /// value, or one the schema check parsed); otherwise the value's text is read as far
    /// as the source names. `Err` says why the record has no table.
    pub fn table_for(&self, record: &Record, event: Option<&Value>) -> Result<Arc<str>, String> {
        let names = self.read(record, event)?;
        self.table_with(record, names)
    }

    /// What the template reads of `record` beyond its topic (its source names), taken
    /// before the record is mapped (which consumes its decoded value): nothing for a
    /// template that reads the topic alone.
    pub fn read(&self, record: &Record, event: Option<&Value>) -> Result<SourceRead, String> {
        if !self.template.reads_source() {
            return Ok(SourceRead(SourceNames::default()));
        }
        Ok(self.source_names(record, event)?.into_read())
    }

    /// Whether the template reads a change event's source names (beyond the topic).
    pub fn reads_source(&self) -> bool {
        self.template.reads_source()
    }

    /// [`TableRouter::read`] from the text of `record`'s `source` block, which the mapper
    /// met while it read the event ([`super::RowMapper::map_parsed_with_source`]): the same
    /// names, without reading the whole value a second time. A block that does not read
    /// as names is read from the whole value, for the error that gives.
    pub fn read_source_block(
        &self,
        record: &Record,
        block: &RawValue,
    ) -> Result<SourceRead, String> {
        if !self.template.reads_source() || self.envelope == Envelope::Opencdc {
            return self.read(record, None);
        }
        match serde_json::from_str::<RawNames<'_>>(block.get()) {
            Ok(names) => Ok(SourceNames::from(names).into_read()),
            Err(_) => self.read(record, None),
        }
    }

    /// The table of `record`, from what [`TableRouter::read`] took of it: call it once the
    /// record mapped, so that a record that fails claims no table.
    pub fn table_with(&self, record: &Record, read: SourceRead) -> Result<Arc<str>, String> {
        let reads_source = self.template.reads_source();
        let names = read.0;
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if !reads_source && let Some(done) = made.get(&record.topic).and_then(|m| m.get("")) {
            return done.clone();
        }
        let name = match self.name(&record.topic, &names) {
            Ok(name) => name,
            // Kept only for a template that reads the topic alone: with source names,
            // the next record may lack another field.
            Err(why) if reads_source => return Err(why),
            Err(why) => {
                made.entry(record.topic.clone())
                    .or_default()
                    .insert(String::new(), Err(why.clone()));
                return Err(why);
            }
        };
        let key = if reads_source {
            name.clone()
        } else {
            String::new()
        };
        if let Some(done) = made.get(&record.topic).and_then(|m| m.get(&key)) {
            return done.clone();
        }
        let result = self.check(&record.topic, name);
        made.entry(record.topic.clone())
            .or_default()
            .insert(key, result.clone());
        result
    }

    /// The name the template makes for `topic`, before it is checked.
    fn name(&self, topic: &str, names: &SourceNames<'_>) -> Result<String, String> {
        let captures = match &self.from {
            Some(pattern) => Some(pattern.captures(topic).ok_or_else(|| {
                format!(
                    "topic {topic} does not match sink.table_from.topic \"{}\"",
                    pattern.as_str()
                )
            })?),
            None => None,
        };
        let mut name = String::new();
        for part in self.template.parts() {
            match part {
                TemplatePart::Literal(text) => name.push_str(text),
                TemplatePart::Topic => name.push_str(topic),
                TemplatePart::Capture(n) => {
                    let found = captures.as_ref().and_then(|c| c.get(*n)).ok_or_else(|| {
                        format!(
                            "sink.table_from.topic matched topic {topic} without capture {{{n}}}"
                        )
                    })?;
                    name.push_str(found.as_str());
                }
                TemplatePart::Source(field) => {
                    let found = names.get(*field).ok_or_else(|| {
                        format!(
                            "the table template \"{}\" reads source.{}, and the event has none",
                            self.template,
                            field.name()
                        )
                    })?;
                    name.push_str(found);
                }
            }
        }
        Ok(name)
    }

    /// A made name checked: one the database takes, not the dead-letter table, and no other
    /// topic's table.
    fn check(&self, topic: &str, name: String) -> Result<Arc<str>, String> {
        table_name_problem(&name, self.limit).map_err(|why| format!("topic {topic}: {why}"))?;
        let folded = name.to_lowercase();
        let qualified = match &self.schema {
            Some(schema) => format!("{schema}.{folded}"),
            None => folded.clone(),
        };
        let dead_letters = self.dead_letter_table.as_deref();
        // The dead-letter table as configured is `table` or `schema.table`.
        if dead_letters == Some(qualified.as_str())
            || (self.schema.is_none() && dead_letters == Some(folded.as_str()))
        {
            return Err(format!(
                "topic {topic} maps to table {name}, the connector's dead-letter table"
            ));
        }
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        match claims.get(&folded) {
            Some((first, _)) if first != topic => Err(format!(
                "topics {first} and {topic} both map to table {name} (names are compared without case): two topics are not written into one table by a template"
            )),
            // One topic's events that name one table in two spellings: in a database that
            // folds case (SQLite; MySQL with lower_case_table_names) they are one table,
            // written as two, in no order between them.
            Some((_, spelled)) if *spelled != name => Err(format!(
                "topic {topic} maps to table {name} and to table {spelled}, names that differ only in case"
            )),
            Some(_) => Ok(Arc::from(name)),
            None => {
                claims.insert(folded, (topic.to_string(), name.clone()));
                Ok(Arc::from(name))
            }
        }
    }

    /// The source block's names of a change event.
    fn source_names<'v>(
        &self,
        record: &'v Record,
        event: Option<&'v Value>,
    ) -> Result<SourceNames<'v>, String> {
        if let Some(event) = event {
            let event = super::envelope::unwrapped(event);
            let text = |v: Option<&'v Value>| v.and_then(Value::as_str).map(Cow::Borrowed);
            return Ok(match self.envelope {
                Envelope::Opencdc => SourceNames {
                    table: text(
                        event
                            .get("metadata")
                            .and_then(|m| m.get(OPENCDC_COLLECTION)),
                    ),
                    ..SourceNames::default()
                },
                _ => {
                    let source = event.get("source");
                    SourceNames {
                        schema: text(source.and_then(|s| s.get("schema"))),
                        table: text(source.and_then(|s| s.get("table"))),
                        db: text(source.and_then(|s| s.get("db"))),
                    }
                }
            });
        }
        let raw = record
            .value
            .as_deref()
            .ok_or("a record without a value names no source table")?;
        let mut event: RawEvent<'v> = serde_json::from_slice(raw)
            .map_err(|e| format!("the value is not a JSON change event: {e}"))?;
        if event.source.is_none()
            && event.metadata.is_none()
            && let Some(payload) = event.payload
        {
            event = serde_json::from_str(payload.get())
                .map_err(|e| format!("the value is not a JSON change event: {e}"))?;
        }
        Ok(match self.envelope {
            Envelope::Opencdc => SourceNames {
                table: event
                    .metadata
                    .as_ref()
                    .and_then(|m| m.get(OPENCDC_COLLECTION))
                    .and_then(Value::as_str)
                    .map(|s| Cow::Owned(s.to_string())),
                ..SourceNames::default()
            },
            _ => event.source.map(SourceNames::from).unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    fn router(name: &str, sink: &str, extra: &str) -> TableRouter {
        let text = format!(
            "kafka: {{ brokers: localhost:9092 }}\nconnectors:\n  - name: {name}\n    topics_regex: \"^shop\\\\..*\"\n{extra}    sink:\n      url: postgres://localhost/test\n{sink}      mode: upsert\n      key: [id]\n      columns:\n        id: {{ from: /id, type: bigint }}\n"
        );
        let config = load_str(&text, &|_| None).unwrap_or_else(|e| panic!("{e}\n{text}"));
        TableRouter::for_connector(&config.connectors[0]).unwrap()
    }

    fn record(topic: &str, value: &str) -> Record {
        Record {
            topic: topic.into(),
            value: Some(value.as_bytes().to_vec()),
            ..Default::default()
        }
    }

    #[test]
    fn a_topic_template_keeps_the_dots_and_resolves_once_per_topic() {
        let r = router("route_topic", "      table: \"{topic}\"\n", "");
        let t = r
            .table_for(&record("shop.public.orders", "{}"), None)
            .unwrap();
        assert_eq!(&*t, "shop.public.orders");
        let again = r
            .table_for(&record("shop.public.orders", "{}"), None)
            .unwrap();
        assert!(Arc::ptr_eq(&t, &again));
    }

    #[test]
    fn captures_of_table_from_name_the_table() {
        let r = router(
            "route_capture",
            "      table_from: { topic: \"^shop\\\\.public\\\\.(.*)$\", to: \"replica_{1}\" }\n",
            "",
        );
        let t = r
            .table_for(&record("shop.public.orders", "{}"), None)
            .unwrap();
        assert_eq!(&*t, "replica_orders");
        let why = r
            .table_for(&record("shop.other.orders", "{}"), None)
            .unwrap_err();
        assert!(why.contains("does not match"), "{why}");
    }

    #[test]
    fn source_names_come_from_the_event_text_or_its_document() {
        let r = router(
            "route_source",
            "      table: \"{source.schema}_{source.table}\"\n",
            "    envelope: debezium\n",
        );
        let event =
            r#"{"op":"c","after":{"id":1},"source":{"schema":"public","table":"orders","lsn":1}}"#;
        let t = r.table_for(&record("shop.a", event), None).unwrap();
        assert_eq!(&*t, "public_orders");
        let wrapped = format!(r#"{{"schema":{{"type":"struct"}},"payload":{event}}}"#);
        let t = r.table_for(&record("shop.a", &wrapped), None).unwrap();
        assert_eq!(&*t, "public_orders");
        let document: Value = serde_json::from_str(event).unwrap();
        let t = r
            .table_for(&record("shop.a", "x"), Some(&document))
            .unwrap();
        assert_eq!(&*t, "public_orders");
        let why = r
            .table_for(
                &record("shop.a", r#"{"op":"c","source":{"table":"t"}}"#),
                None,
            )
            .unwrap_err();
        assert!(why.contains("source.schema"), "{why}");
    }

    #[test]
    fn the_source_block_the_mapper_met_names_the_table_as_the_whole_value_does() {
        let r = router(
            "route_block",
            "      table: \"{source.schema}_{source.table}\"\n",
            "    envelope: debezium\n",
        );
        let event = r#"{"op":"c","after":{"id":1},"source":{"schema":"public","table":"orders"}}"#;
        let rec = record("shop.a", event);
        let block =
            RawValue::from_string(r#"{"schema":"public","table":"orders"}"#.into()).unwrap();
        let read = r.read_source_block(&rec, &block).unwrap();
        assert_eq!(&*r.table_with(&rec, read).unwrap(), "public_orders");
        // Escaped names (read into owned text) as the whole value gives them.
        let escaped = r#"{"schema":"p\u0075blic","table":"ord\u00e9rs"}"#;
        let rec = record(
            "shop.a",
            &format!(r#"{{"op":"c","after":{{"id":1}},"source":{escaped}}}"#),
        );
        let block = RawValue::from_string(escaped.into()).unwrap();
        let read = r.read_source_block(&rec, &block).unwrap();
        let from_block = r.table_with(&rec, read);
        assert_eq!(from_block, r.table_for(&rec, None));
        assert_eq!(&*from_block.unwrap(), "public_ordérs");
        // A block that is not names: read from the whole value, whose error it gives.
        let broken = record("shop.a", r#"{"op":"c","source":{"schema":1}}"#);
        let block = RawValue::from_string(r#"{"schema":1}"#.into()).unwrap();
        let why = r.read_source_block(&broken, &block).err().unwrap();
        assert!(why.contains("not a JSON change event"), "{why}");
        // A template that reads the topic alone reads nothing of the block.
        let topic_only = router("route_block_topic", "      table: \"{topic}\"\n", "");
        assert!(!topic_only.reads_source());
        let read = topic_only.read_source_block(&rec, &block).unwrap();
        assert_eq!(&*topic_only.table_with(&rec, read).unwrap(), "shop.a");
    }

    #[test]
    fn opencdc_names_its_table_in_its_metadata() {
        let r = router(
            "route_opencdc",
            "      table: \"{source.table}\"\n",
            "    envelope: opencdc\n",
        );
        let event = r#"{"operation":"create","metadata":{"opencdc.collection":"users"},"payload":{"after":{"id":1}}}"#;
        assert_eq!(
            &*r.table_for(&record("shop.u", event), None).unwrap(),
            "users"
        );
    }

    #[test]
    fn two_topics_never_meet_in_one_table() {
        let r = router("route_claims", "      table: \"{topic}\"\n", "");
        r.table_for(&record("shop.Orders", "{}"), None).unwrap();
        let why = r.table_for(&record("shop.orders", "{}"), None).unwrap_err();
        assert!(why.contains("both map to table"), "{why}");
        // Another task of the same connector sees the same claims.
        let other = router("route_claims", "      table: \"{topic}\"\n", "");
        assert!(other.table_for(&record("shop.orders", "{}"), None).is_err());
        assert!(other.table_for(&record("shop.Orders", "{}"), None).is_ok());
    }

    #[test]
    fn one_topic_naming_a_table_in_two_spellings_fails_the_second() {
        let r = router(
            "route_spellings",
            "      table: \"{source.table}\"\n",
            "    envelope: debezium\n",
        );
        let event = |table: &str| {
            format!(r#"{{"op":"c","after":{{"id":1}},"source":{{"table":"{table}","lsn":1}}}}"#)
        };
        assert!(
            r.table_for(&record("shop.a", &event("Orders")), None)
                .is_ok()
        );
        let why = r
            .table_for(&record("shop.a", &event("orders")), None)
            .unwrap_err();
        assert!(why.contains("differ only in case"), "{why}");
        assert!(
            r.table_for(&record("shop.a", &event("Orders")), None)
                .is_ok()
        );
    }

    #[test]
    fn names_the_database_cannot_take_fail_the_record() {
        let r = router("route_long", "      table: \"{topic}\"\n", "");
        let long = format!("shop.{}", "x".repeat(70));
        let why = r.table_for(&record(&long, "{}"), None).unwrap_err();
        assert!(why.contains("63 at most"), "{why}");
    }
}

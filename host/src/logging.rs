//! The process's log output on stderr: text for people, or JSON lines for log pipelines.
//!
//! Tasks log inside a `task` span (connector, task), so the log calls themselves name
//! only what is particular to them (topic, partition, offset, error). Text output shows
//! the span as `task{connector=… task=…}:`. JSON output puts the fields of every enclosing
//! span at the top level of the line beside the event's own fields, so a log pipeline
//! finds `connector`, `task`, `topic` and `partition` as plain keys:
//!
//! ```json
//! {"timestamp":"…","level":"WARN","target":"sluice::task::in_flight","span":"task",
//!  "connector":"words","task":0,"topic":"words","partition":3,"message":"offset conflict: …"}
//! ```
//!
//! An event's own field wins over a span's of the same name, an inner span's over an
//! outer one's; `timestamp`, `level`, `target` and `span` are always the line's own.

use std::fmt;
use std::io::IsTerminal;

use serde_json::{Map, Value};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines, coloured on a terminal.
    Text,
    /// One JSON object per line, span fields flattened to the top level.
    Json,
}

/// Installs the process's subscriber: level from `RUST_LOG` (default `info`), output on
/// stderr in `format`.
pub fn init(format: LogFormat, default_level: &str) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Colours only on a terminal: a log file or a journal gets plain text.
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .init(),
    }
}

/// A JSON line per event with span fields flattened (see the module's documentation). The
/// span fields are recorded by [`JsonFields`], so the subscriber must use it.
#[derive(Debug, Clone, Copy, Default)]
pub struct FlatJson;

impl<S> FormatEvent<S, JsonFields> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        let mut line = Map::new();
        let mut innermost = None;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                innermost = Some(span.name());
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<JsonFields>>() else {
                    continue;
                };
                // JsonFields records a span's fields as one JSON object.
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(fields) {
                    line.extend(fields);
                }
            }
        }
        event.record(&mut JsonVisitor(&mut line));
        // The line's own keys last: no field of a span or an event replaces them.
        line.insert(
            "timestamp".into(),
            Value::String(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        );
        line.insert("level".into(), Value::String(metadata.level().to_string()));
        line.insert(
            "target".into(),
            Value::String(metadata.target().to_string()),
        );
        match innermost {
            Some(name) => line.insert("span".into(), Value::String(name.to_string())),
            None => line.remove("span"),
        };
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// An event's fields into a JSON object: numbers and booleans stay typed, the rest are
/// strings.
struct JsonVisitor<'a>(&'a mut Map<String, Value>);

impl JsonVisitor<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        self.0.insert(field.name().to_string(), value);
    }
}

impl Visit for JsonVisitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, serde_json::json!(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_string()));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
}

/// How often a repeated warning is logged at its own level.
pub(crate) const QUIET_PERIOD: Duration = Duration::from_secs(30);

/// A message that repeats is logged at its level once per [`QUIET_PERIOD`] (with how many
/// were held back), at debug level in between. librdkafka reports a broker that is down on
/// every reconnect attempt, from several threads, a broker that skips records does so batch
/// after batch, and a stream of bad records fails record after record: an outage is a few
/// lines rather than hundreds.
#[derive(Default)]
pub(crate) struct Quiet {
    last: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
}

impl Quiet {
    /// `Some(n)` when this one is to be logged at its level (`n` were held back since the
    /// last one), `None` when it goes to debug.
    pub(crate) fn loud(&self) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| t.elapsed() < QUIET_PERIOD) {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *last = Some(Instant::now());
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer into a shared buffer, one per event.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn json_lines(log: impl FnOnce()) -> Vec<Map<String, Value>> {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|line| match serde_json::from_str(line) {
                Ok(Value::Object(map)) => map,
                other => panic!("not a JSON object: {line}: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn span_fields_are_top_level_fields_of_every_line() {
        let lines = json_lines(|| {
            let task = tracing::info_span!("task", connector = "words", task = 1);
            let _task = task.enter();
            let batch = tracing::info_span!("batch", topic = "events", partition = 3);
            let _batch = batch.enter();
            tracing::warn!(offset = 42_i64, error = %"refused", "record failed");
        });
        assert_eq!(lines.len(), 1);
        let line = &lines[0];
        assert_eq!(line["connector"], "words");
        assert_eq!(line["task"], 1);
        assert_eq!(line["topic"], "events");
        assert_eq!(line["partition"], 3);
        assert_eq!(line["offset"], 42);
        assert_eq!(line["error"], "refused");
        assert_eq!(line["message"], "record failed");
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["span"], "batch");
        assert!(line.contains_key("timestamp") && line.contains_key("target"));
    }

    #[test]
    fn an_events_own_field_wins_and_lines_outside_spans_have_none() {
        let lines = json_lines(|| {
            let task = tracing::info_span!("task", connector = "words", task = 0);
            task.in_scope(|| tracing::info!(task = 7, "inner"));
            tracing::info!("outside");
        });
        assert_eq!(lines[0]["task"], 7);
        assert_eq!(lines[0]["connector"], "words");
        assert!(!lines[1].contains_key("connector"));
        assert!(!lines[1].contains_key("span"));
        assert_eq!(lines[1]["message"], "outside");
    }

    #[test]
    fn the_lines_own_keys_are_never_replaced() {
        let lines = json_lines(|| {
            let span = tracing::info_span!("task", level = "mine", target = "mine");
            span.in_scope(|| tracing::warn!(timestamp = 1, span = "mine", "keys"));
        });
        assert_eq!(lines[0]["level"], "WARN");
        assert_eq!(lines[0]["span"], "task");
        assert_ne!(lines[0]["target"], "mine");
        assert!(lines[0]["timestamp"].is_string());
    }

    #[test]
    fn a_repeated_warning_is_loud_once_per_period_with_a_count() {
        let quiet = super::Quiet::default();
        assert_eq!(quiet.loud(), Some(0));
        for _ in 0..5 {
            assert_eq!(quiet.loud(), None);
        }
        // Past the period the next one is loud again and says how many were held back.
        *quiet.last.lock().expect("lock") = Some(std::time::Instant::now() - super::QUIET_PERIOD);
        assert_eq!(quiet.loud(), Some(5));
        assert_eq!(quiet.loud(), None);
    }
}

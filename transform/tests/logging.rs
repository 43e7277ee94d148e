//! Guest `log` calls reach `tracing` with connector, plugin and level fields, capped per call.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use sluice_transform::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record as SpanRecord};
use tracing::{Event, Metadata, Subscriber};

/// Collects events as `target level field=value...` strings.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={:?}", field.name(), value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push_str(&format!(" {}={}", field.name(), value));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &SpanRecord<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let meta = event.metadata();
        let mut fields = Fields(format!("{} {}", meta.target(), meta.level()));
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn guest_logs_are_tagged_and_capped() {
    let capture = Capture::default();
    let events = capture.0.clone();
    tracing::subscriber::with_default(capture, || {
        let mut chain = TransformChain::new(
            engine(),
            "words",
            &[hostile("log-spam", &[("count", "700")])],
        )
        .unwrap();
        chain.process(vec![rec(0, "a")]).unwrap();
    });
    let events = events.lock().unwrap();
    let guest: Vec<_> = events.iter().filter(|e| e.contains("spam line")).collect();
    assert_eq!(guest.len(), 500, "capped at 500 lines per call");
    for part in [
        "sluice::plugin WARN",
        "message=hostile: spam line 0",
        " connector=words",
        " plugin=hostile-log-spam",
        " level=warn",
    ] {
        assert!(
            guest[0].contains(part),
            "{part:?} missing in {:?}",
            guest[0]
        );
    }
    assert!(
        events
            .iter()
            .any(|e| e.contains("dropped=200") && e.contains("plugin=hostile-log-spam")),
        "{:?}",
        events
            .iter()
            .filter(|e| !e.contains("spam line"))
            .collect::<Vec<_>>()
    );
}

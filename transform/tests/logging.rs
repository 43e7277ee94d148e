//! Guest `log` calls reach `tracing` with connector, plugin and level fields, limited per
//! second per plugin, with control characters escaped.

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
fn guest_logs_are_tagged_and_limited_per_second() {
    let capture = Capture::default();
    let events = capture.0.clone();
    tracing::subscriber::with_default(capture, || {
        let mut chain = TransformChain::new(
            engine(),
            "words",
            &[hostile("log-spam", &[("count", "150")])],
        )
        .unwrap();
        // Two calls in the same second: 300 lines, 200 kept. A re-instantiated plugin
        // (after a failure) would share the same limit: it is the chain's, not the store's.
        chain.process(vec![rec(0, "a")]).unwrap();
        chain.process(vec![rec(1, "b")]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        // The next second: the drop is reported, and 150 more lines are kept.
        chain.process(vec![rec(2, "c")]).unwrap();
    });
    let events = events.lock().unwrap();
    let guest: Vec<_> = events.iter().filter(|e| e.contains("spam line")).collect();
    assert_eq!(guest.len(), 350, "200 in the first second, 150 in the next");
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
            .any(|e| e.contains("dropped=100") && e.contains("plugin=hostile-log-spam")),
        "{:?}",
        events
            .iter()
            .filter(|e| !e.contains("spam line"))
            .collect::<Vec<_>>()
    );
}

#[test]
fn guest_logs_cannot_forge_lines() {
    let capture = Capture::default();
    let events = capture.0.clone();
    let forged = "benign\nsluice::plugin ERROR forged connector=other\r\u{1b}[31mred";
    tracing::subscriber::with_default(capture, || {
        let mut chain =
            TransformChain::new(engine(), "words", &[hostile("log-text", &[("on", forged)])])
                .unwrap();
        chain.process(vec![rec(0, "a")]).unwrap();
    });
    let events = events.lock().unwrap();
    let line = events
        .iter()
        .find(|e| e.contains("benign"))
        .expect("the plugin's line");
    assert!(
        !line.contains('\n') && !line.contains('\r') && !line.contains('\u{1b}'),
        "{line:?}"
    );
    assert!(
        line.contains(r"benign\nsluice::plugin ERROR forged"),
        "{line:?}"
    );
}

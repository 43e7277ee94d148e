//! The Schema Registry's metrics. The registry's clients and their caches are the
//! process's (shared by every connector that names the same registry), so these families
//! are too: one set, registered in every [`super::Metrics`] the process makes.

use std::sync::{Arc, OnceLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

struct Families {
    requests: Family<OutcomeLabel, Counter>,
    seconds: Histogram,
    schemas: Gauge,
}

fn families() -> &'static Families {
    static FAMILIES: OnceLock<Families> = OnceLock::new();
    FAMILIES.get_or_init(|| Families {
        requests: Family::default(),
        seconds: super::seconds_histogram(),
        schemas: Gauge::default(),
    })
}

/// Registers the families in `registry`.
pub(super) fn register(registry: &mut Registry) {
    let f = families();
    registry.register(
        "schema_registry_requests",
        "Requests to the Schema Registry, by outcome: ok, not_found, unavailable (no answer or 5xx), denied (401/403), invalid",
        f.requests.clone(),
    );
    registry.register(
        "schema_registry_request_seconds",
        "Time each request to the Schema Registry took",
        f.seconds.clone(),
    );
    registry.register(
        "schema_registry_schemas",
        "Schemas the process holds from its Schema Registries (by id or GUID), cached for its life",
        f.schemas.clone(),
    );
}

/// What a registry client calls after each request: its outcome and how long it took.
pub fn schema_registry_observer() -> Arc<dyn Fn(&'static str, f64) + Send + Sync> {
    Arc::new(|outcome, seconds| {
        let f = families();
        f.requests
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
        f.seconds.observe(seconds);
    })
}

/// Sets how many schemas the registry caches hold, all registries together.
pub fn set_cached_schemas(count: usize) {
    families()
        .schemas
        .set(i64::try_from(count).unwrap_or(i64::MAX));
}

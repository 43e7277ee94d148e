//! A connector's `errors:` section: what happens to a record that fails
//! ([`ErrorPolicy`], with its dead-letter destination and signing keys from
//! `dead_letter.rs`), how transient failures are retried ([`RetryConfig`]), how far a
//! failing batch is searched for its failing records ([`IsolationConfig`]), and how a task
//! that failed transiently is started again ([`RestartConfig`]).

use serde::Deserialize;

use super::dead_letter::{DeadLetterDestination, DeadLetterSection, SigningKeys};
use super::defaults;
use super::units::HumanDuration;

/// Failure handling of one connector (read through `ErrorsSection`, which takes
/// `dlq.signing_key` apart from the destination).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(from = "ErrorsSection")]
pub struct ErrorsConfig {
    /// What happens to a record that fails for a reason retrying cannot help.
    #[serde(default)]
    pub policy: ErrorPolicy,
    /// Where dead letters go; required by `policy: dlq`.
    #[serde(default)]
    pub dlq: Option<DeadLetterDestination>,
    /// `dlq.signing_key`: the keys that sign the letters of a dead-letter topic (the first)
    /// and verify them on redrive (any); empty when not set.
    #[serde(default)]
    pub dlq_signing_key: SigningKeys,
    /// How transient failures (lost connections, deadlocks, broker transport errors) are
    /// retried.
    #[serde(default)]
    pub retry: RetryConfig,
    /// How far sluice goes to find the records that make a batch fail in a transform.
    #[serde(default)]
    pub isolation: IsolationConfig,
    /// How a task that failed for a transient reason (database or broker unreachable past
    /// `retry.max_elapsed`) is started again.
    #[serde(default)]
    pub restart: RestartConfig,
}

/// Capped exponential backoff between restarts of a task that failed transiently.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartConfig {
    /// First wait before a restart.
    #[serde(default = "restart_initial_default")]
    pub initial: HumanDuration,
    /// Longest wait between restarts.
    #[serde(default = "restart_max_default")]
    pub max: HumanDuration,
}

fn restart_initial_default() -> HumanDuration {
    HumanDuration(defaults::RESTART_INITIAL)
}
fn restart_max_default() -> HumanDuration {
    HumanDuration(defaults::RESTART_MAX)
}

impl Default for RestartConfig {
    fn default() -> Self {
        Self {
            initial: restart_initial_default(),
            max: restart_max_default(),
        }
    }
}

impl RestartConfig {
    /// The wait before restart `attempt + 1` (0-based), with up to 20 % jitter.
    pub fn backoff(&self, attempt: u32) -> std::time::Duration {
        let base = self
            .initial
            .0
            .saturating_mul(2u32.saturating_pow(attempt.min(30)))
            .min(self.max.0);
        base + base.mul_f64(rand::random::<f64>() * 0.2)
    }
}

/// The budget for isolating the records that make a batch fail in a transform (a trap, a
/// deadline, a memory or output limit). A batch that ran past its deadline is retried
/// record by record, other failures by halves. Records still unresolved when either
/// budget runs out become dead letters under `policy: dlq` (their cause says they were not
/// isolated); under `skip` and `fail` the task fails instead, so an innocent record is never
/// dropped.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IsolationConfig {
    /// Wall-clock budget of the whole search in one batch; more than 0.
    #[serde(default = "isolation_max_time_default")]
    pub max_time: HumanDuration,
    /// Failed transform calls allowed while isolating one batch; at least 1.
    #[serde(default = "isolation_max_failed_calls_default")]
    pub max_failed_calls: usize,
}

fn isolation_max_time_default() -> HumanDuration {
    HumanDuration(defaults::ISOLATION_MAX_TIME)
}
fn isolation_max_failed_calls_default() -> usize {
    defaults::ISOLATION_MAX_FAILED_CALLS
}

impl Default for IsolationConfig {
    fn default() -> Self {
        Self {
            max_time: isolation_max_time_default(),
            max_failed_calls: isolation_max_failed_calls_default(),
        }
    }
}

/// What happens to a failing record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorPolicy {
    /// The task stops in `Failed` with the record's coordinates and the cause; the records
    /// before it commit.
    #[default]
    Fail,
    /// The record is logged with its coordinates, counted and passed over.
    Skip,
    /// The record goes to the dead-letter topic or table, with the cause.
    Dlq,
}

impl ErrorPolicy {
    /// The name as `connectors.yaml` spells it.
    pub fn name(self) -> &'static str {
        match self {
            ErrorPolicy::Fail => "fail",
            ErrorPolicy::Skip => "skip",
            ErrorPolicy::Dlq => "dlq",
        }
    }
}

/// Capped exponential backoff with jitter.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// First wait.
    #[serde(default = "retry_initial_default")]
    pub initial: HumanDuration,
    /// Longest wait between two attempts.
    #[serde(default = "retry_max_default")]
    pub max: HumanDuration,
    /// After this long failing, the task fails with the cause.
    #[serde(default = "retry_max_elapsed_default")]
    pub max_elapsed: HumanDuration,
}

fn retry_initial_default() -> HumanDuration {
    HumanDuration(defaults::RETRY_INITIAL)
}
fn retry_max_default() -> HumanDuration {
    HumanDuration(defaults::RETRY_MAX)
}
fn retry_max_elapsed_default() -> HumanDuration {
    HumanDuration(defaults::RETRY_MAX_ELAPSED)
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            initial: retry_initial_default(),
            max: retry_max_default(),
            max_elapsed: retry_max_elapsed_default(),
        }
    }
}

impl RetryConfig {
    /// The wait before attempt `attempt + 1` (0-based), with up to 20 % jitter.
    pub fn backoff(&self, attempt: u32) -> std::time::Duration {
        let base = self
            .initial
            .0
            .saturating_mul(2u32.saturating_pow(attempt))
            .min(self.max.0);
        base + base.mul_f64(rand::random::<f64>() * 0.2)
    }
}

/// `errors` as written; see [`ErrorsConfig`] for what each field means.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ErrorsSection {
    #[serde(default)]
    policy: ErrorPolicy,
    #[serde(default)]
    dlq: Option<DeadLetterSection>,
    #[serde(default)]
    retry: RetryConfig,
    #[serde(default)]
    isolation: IsolationConfig,
    #[serde(default)]
    restart: RestartConfig,
}

impl From<ErrorsSection> for ErrorsConfig {
    fn from(section: ErrorsSection) -> Self {
        let (dlq, dlq_signing_key) = match section.dlq {
            Some(dlq) => (Some(dlq.destination), dlq.signing_key),
            None => (None, SigningKeys::default()),
        };
        ErrorsConfig {
            policy: section.policy,
            dlq,
            dlq_signing_key,
            retry: section.retry,
            isolation: section.isolation,
            restart: section.restart,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(yaml: &str) -> Result<ErrorsConfig, String> {
        serde_yaml_ng::from_str::<ErrorsConfig>(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn one_key_or_a_list() {
        let one =
            errors("{ policy: dlq, dlq: { topic: d, signing_key: 0123456789abcdef } }").unwrap();
        assert_eq!(one.dlq, Some(DeadLetterDestination::Topic("d".into())));
        assert_eq!(one.dlq_signing_key.keys().len(), 1);
        let two = errors(
            "{ policy: dlq, dlq: { topic: d, signing_key: [new-key-0123456789, old-key-0123456789] } }",
        )
        .unwrap();
        let keys: Vec<&str> = two
            .dlq_signing_key
            .keys()
            .iter()
            .map(|k| k.expose())
            .collect();
        assert_eq!(keys, ["new-key-0123456789", "old-key-0123456789"]);
        let none = errors("{ policy: dlq, dlq: { table: t } }").unwrap();
        assert!(none.dlq_signing_key.is_empty());
        assert_eq!(none.dlq, Some(DeadLetterDestination::Table("t".into())));
    }

    #[test]
    fn bad_keys_are_refused_without_printing_them() {
        let short = errors("{ dlq: { topic: d, signing_key: short-secret } }").unwrap_err();
        assert!(short.contains("fewer than the 16"), "{short}");
        assert!(!short.contains("short-secret"), "{short}");
        let empty = errors("{ dlq: { topic: d, signing_key: \"\" } }").unwrap_err();
        assert!(empty.contains("0 bytes"), "{empty}");
        let list = errors("{ dlq: { topic: d, signing_key: [] } }").unwrap_err();
        assert!(list.contains("empty list"), "{list}");
        let table = errors("{ dlq: { table: t, signing_key: 0123456789abcdef } }").unwrap_err();
        assert!(table.contains("remove signing_key"), "{table}");
        let both = errors("{ dlq: { topic: d, table: t } }").unwrap_err();
        assert!(both.contains("has both topic and table"), "{both}");
        let unknown = errors("{ dlq: { topic: d, sign: x } }").unwrap_err();
        assert!(unknown.contains("unknown field"), "{unknown}");
    }

    #[test]
    fn keys_are_redacted_in_printed_configuration() {
        let section = serde_json::json!({
            "errors": { "dlq": { "topic": "d",
                "signing_key": ["new-key-0123456789", "old-key-0123456789"] } }
        });
        let printed = super::super::redact_document(&section).to_string();
        assert!(!printed.contains("key-0123456789"), "{printed}");
        assert!(printed.contains("\"signing_key\":\"***\""), "{printed}");
        let one = serde_json::json!({ "dlq": { "signing_key": "0123456789abcdef" } });
        let printed = super::super::redact_document(&one).to_string();
        assert!(!printed.contains("0123456789abcdef"), "{printed}");
    }

    #[test]
    fn keys_debug_print_masked() {
        let config = errors("{ dlq: { topic: d, signing_key: 0123456789abcdef } }").unwrap();
        let printed = format!("{config:?}");
        assert!(!printed.contains("0123456789abcdef"), "{printed}");
    }
}

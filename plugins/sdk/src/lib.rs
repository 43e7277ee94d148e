//! # Writing a sluice transform plugin
//!
//! A sluice transform is a WebAssembly component that the sluice host runs between
//! Kafka and the SQL sink. It receives batches of records and answers, for each record,
//! zero or more output records or an error for that record alone. This crate hides the
//! component plumbing: **you write one function per record**, the SDK does the batch
//! loop, the bindings, the configuration map and the error conversion.
//!
//! ## The smallest complete plugin
//!
//! `Cargo.toml`:
//!
//! ```toml
//! [package]
//! name = "upper"
//! version = "0.1.0"
//! edition = "2024"
//!
//! [lib]
//! crate-type = ["cdylib"]          # a component, not a Rust library
//!
//! [dependencies]
//! # from inside the sluice repository (plugins/ workspace):
//! sluice-plugin-sdk = { path = "../sdk" }
//! # or from anywhere else:
//! # sluice-plugin-sdk = { git = "<sluice repository url>", package = "sluice-plugin-sdk" }
//! ```
//!
//! `src/lib.rs`:
//!
//! ```
//! use sluice_plugin_sdk::{Config, Error, Outcome, Record, Transform};
//!
//! /// Upper-cases the record value; drops tombstones; rejects non-UTF-8 values.
//! struct Upper {
//!     /// Optional prefix from the connector's `config: { prefix: ... }`.
//!     prefix: String,
//! }
//!
//! impl Transform for Upper {
//!     fn init(config: &Config) -> Result<Self, Error> {
//!         // A bad config is an `Err` here: the connector refuses to start and
//!         // `sluice validate` shows the message.
//!         Ok(Upper { prefix: config.get_or("prefix", "").to_owned() })
//!     }
//!
//!     fn transform(&mut self, record: Record) -> Result<Outcome, Error> {
//!         let Some(text) = record.value_str()? else {
//!             return Ok(Outcome::Discard); // filter: tombstones are dropped
//!         };
//!         let upper = format!("{}{}", self.prefix, text.to_uppercase());
//!         Ok(Outcome::Emit(record.with_value(upper)))
//!     }
//! }
//!
//! sluice_plugin_sdk::export_transform!(Upper);
//!
//! // Unit tests run natively with a plain `cargo test`:
//! let mut t = Upper::init(&Config::from_pairs([("prefix", ">")])).unwrap();
//! let out = t.transform(Record::from_value("hi")).unwrap();
//! assert_eq!(out.records()[0].value.as_deref(), Some(&b">HI"[..]));
//! ```
//!
//! Build it with `sluice plugin build <dir>` (or
//! `cargo build --release --target wasm32-wasip2`; run `rustup target add wasm32-wasip2`
//! once), try it on a JSON-lines file with `sluice plugin test`, then reference the
//! `.wasm` file from `connectors.yaml`:
//!
//! ```yaml
//! transforms:
//!   - name: upper
//!     plugin: target/wasm32-wasip2/release/upper.wasm
//!     config: { prefix: ">" }
//!     limits: { memory: 64MiB, timeout: 2s }
//! ```
//!
//! A stateless transform can be a plain function instead:
//! `fn my_fn(record: Record, config: &Config) -> Result<Outcome, Error>` exported with
//! [`export_fn!`]`(my_fn)`.
//!
//! ## What each record can become
//!
//! | you return                          | effect                                            |
//! |-------------------------------------|---------------------------------------------------|
//! | `Ok(Outcome::Emit(record))`         | map: one output record                            |
//! | `Ok(Outcome::Discard)`              | filter: the record is consumed, nothing is written|
//! | `Ok(Outcome::EmitMany(vec![..]))`   | flat-map: several output records (or none)        |
//! | `Err(Error::new("why"))`            | this record fails; the connector's error policy (`fail`, `skip`, `dlq`) decides |
//!
//! Any `std::error::Error` converts into [`Error`] with `?`, so
//! `let n: i64 = text.parse()?;` just works; use [`Error::new`] for your own messages and
//! make them say what was expected (they end up in the dead-letter table).
//!
//! ## Rules of the sandbox
//!
//! * No filesystem, no environment variables, no network, no stdin/stdout/stderr: those
//!   calls fail (`std::fs::File::open` returns an error). Clocks and randomness work;
//!   sleeping (`std::thread::sleep`) and `std::process::exit` trap.
//! * A memory cap (default 64 MiB) and a CPU deadline per batch (default 2 s). Exceeding
//!   either fails the **whole batch**; the host re-instantiates the plugin (calling
//!   [`Transform::init`] again) and isolates the bad record by splitting the batch.
//! * A **panic** is a trap: it fails the whole batch too. Prefer returning `Err` for bad
//!   input. The SDK reports the panic message through the host log before the trap.
//! * Output is capped per batch (records and bytes) so one record cannot explode.
//! * State in `self` lives as long as the instance: it survives between batches but is
//!   reset when the host re-instantiates. Do not rely on it for correctness.
//! * Use [`log`] (or the [`info!`]-style macros) to log: lines go to the host's log with
//!   the connector and plugin names attached.
//!
//! ## Output records
//!
//! Output records have the same shape as inputs ([`Record`]). The host sets every
//! output's topic/partition/offset to its input's (offset bookkeeping is the host's) and
//! passes outputs' `key`, `value`, `headers` and `timestamp` to the next plugin of the
//! chain (or the sink).
//! Building outputs from the input (`record.with_value(..)`) keeps the metadata.
//!
//! ## Going below the SDK
//!
//! [`bindings`] holds the raw `wit-bindgen` bindings of the `sluice:transform@0.1.0`
//! world (`plugins/wit/transform.wit`). Implement [`bindings::Guest`] yourself and call
//! [`bindings::export_raw!`] if you need to see a whole batch at once.

// Lets the generated bindings name this crate by its public path from inside it, too.
extern crate self as sluice_plugin_sdk;

use std::any::Any;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;
}

/// Raw bindings generated by `wit-bindgen` from `plugins/wit/transform.wit`.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "transform",
        pub_export_macro: true,
        export_macro_name: "export_raw",
        default_bindings_module: "sluice_plugin_sdk::bindings",
        runtime_path: "sluice_plugin_sdk::__private::wit_bindgen::rt",
        additional_derives: [PartialEq, Eq],
    });
    pub use self::sluice::transform::host::Level;
    /// The raw per-record answer (`records(..)` or `error(..)`).
    pub type WitOutcome = Outcome;
}

/// One Kafka record: the type of both inputs and outputs.
///
/// Fields: `topic`, `partition`, `offset`, `timestamp` (`Option<i64>`, ms since the
/// epoch), `key` and `value` (`Option<Vec<u8>>`; a `None` value is a tombstone) and
/// `headers` (`Vec<(String, Option<Vec<u8>>)>`, in wire order).
pub use bindings::Record;

impl Record {
    /// A record with this value and empty metadata (topic `test`, partition 0, offset 0):
    /// handy in unit tests.
    pub fn from_value(value: impl Into<Vec<u8>>) -> Record {
        Record {
            topic: "test".to_owned(),
            partition: 0,
            offset: 0,
            timestamp: None,
            key: None,
            value: Some(value.into()),
            headers: Vec::new(),
        }
    }

    /// The value as UTF-8 text; `Ok(None)` for a tombstone, `Err` if it is not UTF-8.
    pub fn value_str(&self) -> Result<Option<&str>, Error> {
        match &self.value {
            None => Ok(None),
            Some(bytes) => std::str::from_utf8(bytes)
                .map(Some)
                .map_err(|e| Error::new(format!("record value is not UTF-8 text: {e}"))),
        }
    }

    /// The key as UTF-8 text; `Ok(None)` for a null key, `Err` if it is not UTF-8.
    pub fn key_str(&self) -> Result<Option<&str>, Error> {
        match &self.key {
            None => Ok(None),
            Some(bytes) => std::str::from_utf8(bytes)
                .map(Some)
                .map_err(|e| Error::new(format!("record key is not UTF-8 text: {e}"))),
        }
    }

    /// The first header with this name (`Some(None)` when it exists with a null value).
    pub fn header(&self, name: &str) -> Option<Option<&[u8]>> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_deref())
    }

    /// This record with its value replaced (metadata, key and headers kept).
    pub fn with_value(mut self, value: impl Into<Vec<u8>>) -> Record {
        self.value = Some(value.into());
        self
    }

    /// This record with its key replaced.
    pub fn with_key(mut self, key: impl Into<Vec<u8>>) -> Record {
        self.key = Some(key.into());
        self
    }

    /// This record with one more header appended.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Record {
        self.headers.push((name.into(), Some(value.into())));
        self
    }
}

/// JSON helpers (feature `json`): most plugins read and write JSON values.
///
/// ```
/// # #[cfg(feature = "json")] {
/// use sluice_plugin_sdk::{Record, serde_json::json};
/// let r = Record::from_value(r#"{"n":1}"#);
/// let mut v = r.value_json().unwrap().unwrap();
/// v["n"] = json!(2);
/// assert_eq!(r.with_json(&v).value_str().unwrap(), Some(r#"{"n":2}"#));
/// # }
/// ```
#[cfg(feature = "json")]
impl Record {
    /// The value parsed as JSON; `Ok(None)` for a tombstone, an error naming the parse
    /// problem (line, column) if it is not JSON.
    pub fn value_json(&self) -> Result<Option<serde_json::Value>, Error> {
        match &self.value {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(bytes)
                .map(Some)
                .map_err(|e| Error::new(format!("record value is not JSON: {e}"))),
        }
    }

    /// This record with its value replaced by `value` serialized as compact JSON.
    pub fn with_json(self, value: &serde_json::Value) -> Record {
        self.with_value(value.to_string())
    }
}

#[cfg(feature = "json")]
pub use serde_json;

/// What one input record becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Filter the record out: it is consumed and nothing is written for it.
    Discard,
    /// Map: exactly one output record.
    Emit(Record),
    /// Flat-map: any number of output records (an empty vector is the same as `Discard`).
    EmitMany(Vec<Record>),
}

impl Outcome {
    /// The output records, in order (empty for `Discard`).
    pub fn records(&self) -> &[Record] {
        match self {
            Outcome::Discard => &[],
            Outcome::Emit(r) => std::slice::from_ref(r),
            Outcome::EmitMany(rs) => rs,
        }
    }

    /// The output records, by value.
    pub fn into_records(self) -> Vec<Record> {
        match self {
            Outcome::Discard => Vec::new(),
            Outcome::Emit(r) => vec![r],
            Outcome::EmitMany(rs) => rs,
        }
    }
}

impl From<Record> for Outcome {
    fn from(r: Record) -> Self {
        Outcome::Emit(r)
    }
}

impl From<Vec<Record>> for Outcome {
    fn from(rs: Vec<Record>) -> Self {
        Outcome::EmitMany(rs)
    }
}

/// A per-record failure (or, from [`Transform::init`], a rejected configuration).
///
/// The message ends up in logs and dead-letter rows: say what was expected and what was
/// found, e.g. `"expected #<uid>*<word>@<timestamp>, found no '@'"`.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
}

impl Error {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Error {
        Error {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.message, f)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Every standard error converts with `?` (its `Display` text becomes the message,
/// followed by its sources).
impl<E: std::error::Error> From<E> for Error {
    fn from(e: E) -> Self {
        let mut message = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        Error { message }
    }
}

/// The plugin's configuration: the `config:` map of the transform in `connectors.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    entries: BTreeMap<String, String>,
}

impl Config {
    /// A config from key/value pairs (for tests).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Config {
        Config {
            entries: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(String::as_str)
    }

    /// The value of `key`, or `default` when it is not set.
    pub fn get_or<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.get(key).unwrap_or(default)
    }

    /// The value of `key`, or an error naming the missing key.
    pub fn require(&self, key: &str) -> Result<&str, Error> {
        self.get(key)
            .ok_or_else(|| Error::new(format!("missing required config key `{key}`")))
    }

    /// The value of `key` parsed as `T`; `Ok(None)` when not set, an error naming the key
    /// and the bad value when it does not parse.
    pub fn parse<T>(&self, key: &str) -> Result<Option<T>, Error>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        match self.get(key) {
            None => Ok(None),
            Some(raw) => raw.parse().map(Some).map_err(|e| {
                // A secret's value never goes into an error (errors reach the host's logs).
                let shown = if looks_secret(key) {
                    "***".to_owned()
                } else {
                    format!("{raw:?}")
                };
                Error::new(format!("config key `{key}`: cannot parse {shown}: {e}"))
            }),
        }
    }

    /// All entries, sorted by key (values included: do not log them whole, see
    /// [`looks_secret`]).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Fails if any key is not in `known`: catches typos in `connectors.yaml` early.
    pub fn deny_unknown(&self, known: &[&str]) -> Result<(), Error> {
        match self.entries.keys().find(|k| !known.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => Err(Error::new(format!(
                "unknown config key `{k}` (known keys: {})",
                known.join(", ")
            ))),
        }
    }
}

/// A per-record transform: implement this and call [`export_transform!`].
pub trait Transform: Sized + 'static {
    /// Build the transform from its configuration. Called once per instance before any
    /// batch (and again if the host re-instantiates the plugin after a trap).
    fn init(config: &Config) -> Result<Self, Error>;

    /// Transform one record. Called once per input record, in order.
    fn transform(&mut self, record: Record) -> Result<Outcome, Error>;
}

/// Export a [`Transform`] implementation as the plugin's component interface.
///
/// Use it exactly once per plugin crate, at the crate root:
/// `sluice_plugin_sdk::export_transform!(MyTransform);`
#[macro_export]
macro_rules! export_transform {
    ($t:ty) => {
        #[doc(hidden)]
        type __SluiceTransformAdapter = $crate::Adapter<$t>;
        $crate::bindings::export_raw!(__SluiceTransformAdapter with_types_in $crate::bindings);
    };
}

/// Export a plain function `fn(Record, &Config) -> Result<Outcome, Error>` as the plugin,
/// for transforms that need no state and no config validation beyond the call itself.
///
/// ```
/// use sluice_plugin_sdk::{Config, Error, Outcome, Record};
///
/// /// Appends the configured suffix; records without a value are dropped.
/// fn suffix(record: Record, config: &Config) -> Result<Outcome, Error> {
///     let Some(text) = record.value_str()? else { return Ok(Outcome::Discard) };
///     let out = format!("{text}{}", config.get_or("suffix", "!"));
///     Ok(Outcome::Emit(record.with_value(out)))
/// }
///
/// sluice_plugin_sdk::export_fn!(suffix);
/// # let out = suffix(Record::from_value("hi"), &Config::default()).unwrap();
/// # assert_eq!(out.records()[0].value_str().unwrap(), Some("hi!"));
/// ```
#[macro_export]
macro_rules! export_fn {
    ($f:path) => {
        #[doc(hidden)]
        pub struct __SluiceFnTransform($crate::Config);

        impl $crate::Transform for __SluiceFnTransform {
            fn init(config: &$crate::Config) -> ::std::result::Result<Self, $crate::Error> {
                ::std::result::Result::Ok(__SluiceFnTransform(config.clone()))
            }

            fn transform(
                &mut self,
                record: $crate::Record,
            ) -> ::std::result::Result<$crate::Outcome, $crate::Error> {
                $f(record, &self.0)
            }
        }

        $crate::export_transform!(__SluiceFnTransform);
    };
}

thread_local! {
    /// The instance's transform, created by `init`. A component instance is
    /// single-threaded, so a thread-local is the instance's global.
    static STATE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// Glue between a [`Transform`] and the raw world exports. Used by [`export_transform!`].
#[doc(hidden)]
pub struct Adapter<T>(PhantomData<T>);

impl<T: Transform> bindings::Guest for Adapter<T> {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        install_panic_hook();
        let config = Config::from_pairs(config);
        let transform = T::init(&config).map_err(|e| e.message)?;
        STATE.with(|s| *s.borrow_mut() = Some(Box::new(transform)));
        Ok(())
    }

    fn process(batch: Vec<Record>) -> Vec<bindings::WitOutcome> {
        STATE.with(|s| {
            let mut state = s.borrow_mut();
            match state.as_mut().and_then(|b| b.downcast_mut::<T>()) {
                None => batch
                    .iter()
                    .map(|_| {
                        bindings::WitOutcome::Error(
                            "plugin not initialised: the host called process before init"
                                .to_owned(),
                        )
                    })
                    .collect(),
                Some(t) => process_batch(t, batch),
            }
        })
    }
}

/// The batch loop: one outcome per input record, in order.
fn process_batch<T: Transform>(t: &mut T, batch: Vec<Record>) -> Vec<bindings::WitOutcome> {
    batch
        .into_iter()
        .map(|record| match t.transform(record) {
            Ok(outcome) => bindings::WitOutcome::Records(outcome.into_records()),
            Err(e) => bindings::WitOutcome::Error(e.message),
        })
        .collect()
}

/// Routes panic messages to the host log (error level) before the trap, so that the
/// host's error names the panic. [`export_transform!`] plugins get it automatically;
/// raw [`bindings::Guest`] implementations should call it first thing in `init`.
pub fn install_panic_hook() {
    use std::sync::Once;
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            log::log(log::Level::Error, &format!("plugin panicked: {info}"));
        }));
    });
}

/// Logging through the host: lines carry the connector and plugin names.
///
/// In native unit tests (not `wasm32`) lines go to stderr instead.
pub mod log {
    pub use crate::bindings::Level;

    /// Log `message` at `level`.
    pub fn log(level: Level, message: &str) {
        #[cfg(target_arch = "wasm32")]
        crate::bindings::sluice::transform::host::log(level, message);
        #[cfg(not(target_arch = "wasm32"))]
        eprintln!("[{level:?}] {message}");
    }

    /// Log at trace level.
    pub fn trace(message: &str) {
        log(Level::Trace, message)
    }
    /// Log at debug level.
    pub fn debug(message: &str) {
        log(Level::Debug, message)
    }
    /// Log at info level.
    pub fn info(message: &str) {
        log(Level::Info, message)
    }
    /// Log at warn level.
    pub fn warn(message: &str) {
        log(Level::Warn, message)
    }
    /// Log at error level.
    pub fn error(message: &str) {
        log(Level::Error, message)
    }
}

/// `info!("x = {x}")`: format and log at info level through the host.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log::info(&::std::format!($($arg)*)) };
}

/// `warn!("...")`: format and log at warn level through the host.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log::warn(&::std::format!($($arg)*)) };
}

/// `debug!("...")`: format and log at debug level through the host.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log::debug(&::std::format!($($arg)*)) };
}

/// True when a config key's value must not be shown (in errors or logs): its name holds
/// `password`, `passwd`, `secret`, `token` or `passphrase`, in any case. The host hides the
/// same keys when it prints a connector's configuration.
pub fn looks_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "passwd", "secret", "token", "passphrase"]
        .iter()
        .any(|word| key.contains(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_never_quote_a_secret() {
        let config = Config::from_pairs([("api_token", "hunter2"), ("size", "big")]);
        let err = config.parse::<u32>("api_token").unwrap_err().to_string();
        assert!(!err.contains("hunter2") && err.contains("***"), "{err}");
        let err = config.parse::<u32>("size").unwrap_err().to_string();
        assert!(err.contains("\"big\""), "{err}");
    }

    struct Double;
    impl Transform for Double {
        fn init(config: &Config) -> Result<Self, Error> {
            config.deny_unknown(&[])?;
            Ok(Double)
        }
        fn transform(&mut self, record: Record) -> Result<Outcome, Error> {
            let n: i64 = record.value_str()?.unwrap_or("0").parse()?;
            if n < 0 {
                return Err(Error::new("negative"));
            }
            if n == 0 {
                return Ok(Outcome::Discard);
            }
            Ok(Outcome::EmitMany(vec![record.clone(), record]))
        }
    }

    #[test]
    fn batch_loop_keeps_one_outcome_per_record() {
        let mut t = Double::init(&Config::default()).unwrap();
        let batch = ["1", "0", "-1", "x"]
            .iter()
            .map(|v| Record::from_value(*v))
            .collect();
        let out = process_batch(&mut t, batch);
        assert_eq!(out.len(), 4);
        assert!(matches!(&out[0], bindings::WitOutcome::Records(r) if r.len() == 2));
        assert!(matches!(&out[1], bindings::WitOutcome::Records(r) if r.is_empty()));
        assert!(matches!(&out[2], bindings::WitOutcome::Error(m) if m == "negative"));
        assert!(matches!(&out[3], bindings::WitOutcome::Error(m) if m.contains("invalid digit")));
    }

    #[test]
    fn config_helpers() {
        let c = Config::from_pairs([("a", "1"), ("b", "x")]);
        assert_eq!(c.parse::<u32>("a").unwrap(), Some(1));
        assert!(c.parse::<u32>("b").unwrap_err().message().contains("`b`"));
        assert_eq!(c.get_or("z", "d"), "d");
        assert!(c.require("z").is_err());
        assert!(
            c.deny_unknown(&["a"])
                .unwrap_err()
                .message()
                .contains("`b`")
        );
    }
}

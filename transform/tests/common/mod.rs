//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use sluice_transform::*;

/// One engine per test binary, shared by all its tests (as in production), with a compile
/// cache under the target dir so plugins are compiled once across test runs.
///
/// Its bound on one compile is the engine's default: 60 s of the compile's CPU time, which
/// tests beside it on busy cores do not use up.
pub fn engine() -> &'static TransformEngine {
    static ENGINE: OnceLock<TransformEngine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("sluice-wasm-cache");
        TransformEngine::new(EngineOptions {
            cache_dir: Some(cache),
        })
        .expect("engine")
    })
}

pub fn spec(name: &str, plugin: &str, config: &[(&str, &str)]) -> PluginSpec {
    PluginSpec {
        name: name.to_owned(),
        path: example_plugin_path(plugin),
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        limits: Limits::default(),
    }
}

/// Runs one batch through a one-plugin chain of `spec`, expecting a batch error.
pub fn batch_error(spec: PluginSpec) -> TransformError {
    let name = spec.name.clone();
    let mut chain = TransformChain::new(engine(), "hostile", &[spec]).expect("chain starts");
    let err = chain
        .process(vec![rec(0, "a"), rec(1, "b")])
        .expect_err("batch must fail");
    assert_eq!(err.plugin(), Some(name.as_str()), "{err}");
    assert!(
        err.to_string().contains(&format!("plugin `{name}`")),
        "{err}"
    );
    assert!(err.is_batch_failure(), "{err}");
    // The same chain serves the next batch (it re-instantiates), and fails the same way
    // rather than wedging.
    let again = chain.process(vec![rec(2, "c")]).expect_err("still hostile");
    assert_eq!(
        std::mem::discriminant(&again),
        std::mem::discriminant(&err),
        "{again}"
    );
    assert_engine_healthy();
    err
}

pub fn hostile(mode: &str, extra: &[(&str, &str)]) -> PluginSpec {
    let mut s = spec(&format!("hostile-{mode}"), "hostile", extra);
    s.config.insert("mode".into(), mode.into());
    s
}

pub fn rec(offset: i64, value: &str) -> Record {
    Record::from_value("words", 0, offset, value)
}

pub fn values(outcome: &Outcome) -> Vec<String> {
    match outcome {
        Outcome::Records(rs) => rs
            .iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or(b"<null>")).into_owned())
            .collect(),
        Outcome::Failed { plugin, message } => {
            panic!("expected records, got failure in {plugin}: {message}")
        }
        Outcome::NotIsolated { plugin, reason } => {
            panic!("expected records, got not isolated in {plugin}: {reason}")
        }
    }
}

/// A well-behaved chain in the shared engine still works.
pub fn assert_engine_healthy() {
    let mut chain = TransformChain::new(engine(), "control", &[spec("parse", "word_parse", &[])])
        .expect("control chain");
    let out = chain
        .process(vec![rec(0, "#1*ok@2")])
        .expect("control batch");
    assert_eq!(
        values(&out[0]),
        vec![r#"{"uid":1,"word":"ok","produced_at":2}"#]
    );
}

pub mod handmade;

/// A spec for a hand-made plugin at `path`, with generous memory (its structures sit at
/// fixed addresses up to tens of MiB).
pub fn handmade_spec(name: &str, path: std::path::PathBuf) -> PluginSpec {
    PluginSpec {
        name: name.to_owned(),
        path,
        config: BTreeMap::new(),
        limits: Limits {
            memory_bytes: 256 << 20,
            ..Limits::default()
        },
    }
}

/// The inputs of the word_parse twin tests (Python, JavaScript): events as the field
/// writes them, and every way the Rust parser has to refuse one.
pub fn word_inputs() -> Vec<Option<Vec<u8>>> {
    let mut inputs: Vec<Option<Vec<u8>>> = [
        "#42*hello@1700000000123",
        "#0*a@0",
        "#+7*plus@+5",
        "#007*zeros@-12",
        "#1*at@in@the@word@99",
        "#1*line end@5\r\n",
        "#1*quote \" backslash \\ tab \t bell \u{7} nl \n@3",
        "#1*é ü 漢字 \u{2028}@4",
        "#18446744073709551615*max@9223372036854775807",
        "#1*min@-9223372036854775808",
        "#18446744073709551616*over@1",
        "#1*over@9223372036854775808",
        "#-1*neg@1",
        "# 1*space@1",
        "#1_0*underscore@1",
        "#1*@1",
        "#1*word@",
        "#1*word@1.5",
        "#1*noat",
        "1*nohash@1",
        "#*nouid@1",
        "#1nosep@1",
        "#١*arabic digit@1",
        // Python's int() refuses more than 4300 digits; Rust reads leading zeros of any
        // number.
        format!("#{}7*zeros@1", "0".repeat(5000)).as_str(),
        format!("#7*zeros@-{}5", "0".repeat(5000)).as_str(),
        format!("#{}*long@1", "9".repeat(5000)).as_str(),
        "",
    ]
    .iter()
    .map(|s| Some(s.as_bytes().to_vec()))
    .collect();
    inputs.push(Some(vec![b'#', b'1', b'*', 0xff, 0xfe, b'@', b'1']));
    inputs.push(None);
    inputs
}

/// One batch through a one-plugin chain of `spec`, expecting it to run.
pub fn run_batch(spec: PluginSpec, batch: Vec<Record>) -> Vec<Outcome> {
    let mut chain = TransformChain::new(engine(), "test", &[spec]).expect("chain starts");
    chain.process(batch).expect("batch runs")
}

/// The message of a record's error.
pub fn failure(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Failed { message, .. } => message,
        other => panic!("expected the record's error, got {other:?}"),
    }
}

/// A twin of the Rust `word_parse` (`twin(name, config)` makes its spec) answers what the
/// Rust plugin answers for [`word_inputs`] under three separators: the same records, and
/// for each refusal an error that starts with `error_type: ` and the Rust message's
/// words, and names the line in `file`; and it refuses the same configurations.
pub fn assert_word_parse_twin(
    twin: impl Fn(&str, &[(&str, &str)]) -> PluginSpec,
    error_type: &str,
    file: &str,
) {
    for separator in ["*", "|", "::"] {
        let batch: Vec<Record> = word_inputs()
            .into_iter()
            .enumerate()
            .map(|(i, value)| {
                let value = value.map(|v| {
                    String::from_utf8(v.clone())
                        .map(|s| s.replacen('*', separator, 1).into_bytes())
                        .unwrap_or(v)
                });
                Record {
                    value,
                    ..rec(i as i64, "")
                }
            })
            .collect();
        let config = [("separator", separator)];
        let rust = run_batch(spec("rust", "word_parse", &config), batch.clone());
        let other = run_batch(twin("twin", &config), batch.clone());
        assert_eq!(rust.len(), other.len());
        let mut failed = 0;
        for ((r, o), input) in rust.iter().zip(&other).zip(&batch) {
            match (r, o) {
                (Outcome::Records(r), Outcome::Records(o)) => assert_eq!(
                    r,
                    o,
                    "separator {separator:?}, input {:?}",
                    input.value.as_deref().map(String::from_utf8_lossy)
                ),
                (Outcome::Failed { message: r, .. }, Outcome::Failed { message: o, .. }) => {
                    failed += 1;
                    // The same words up to what each language adds after them (its number
                    // parser's detail, its quotes).
                    let head = |m: &str| m.split("): ").next().unwrap_or("").to_string();
                    assert!(
                        o.starts_with(&format!("{error_type}: {}", head(r))),
                        "rust {r:?}, twin {o:?}"
                    );
                    assert!(o.contains(&format!("({file}, line ")), "{o}");
                }
                (r, o) => panic!(
                    "separator {separator:?}, input {:?}: rust {r:?}, twin {o:?}",
                    input.value.as_deref().map(String::from_utf8_lossy)
                ),
            }
        }
        assert!(failed >= 12, "the inputs reach the refusals: {failed}");
    }
    // The configuration is refused alike.
    for bad in [
        &[("separator", "")][..],
        &[("separator", "#")],
        &[("sep", "*")],
    ] {
        let rust = check_plugin(engine(), &spec("rust", "word_parse", bad));
        let other = check_plugin(engine(), &twin("twin", bad));
        assert!(
            rust.is_err() && other.is_err(),
            "{bad:?}: {rust:?} {other:?}"
        );
    }
}

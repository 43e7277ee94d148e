//! Hand-made plugins: core WebAssembly modules written in WAT, embedded with the
//! `sluice:transform` world and encoded as components, for misbehaviour a Rust guest cannot
//! express (answers that point at the same bytes many times, a bad `cabi_realloc`, a trap
//! in `cabi_post_process`).
//!
//! Canonical ABI layouts used here (`plugins/wit/transform.wit`):
//! * `record` (size 72, align 8): topic `(ptr, len)` at 0, partition at 8, offset at 16,
//!   timestamp `option<s64>` at 24 (tag) / 32, key `option<list<u8>>` at 40 (tag) / 44 / 48,
//!   value at 52 (tag) / 56 / 60, headers `(ptr, len)` at 64.
//! * `outcome` (size 12, align 4): tag at 0 (0 records, 1 error), `(ptr, len)` at 4.
//! * header `tuple<string, option<list<u8>>>` (size 20, align 4).
//! * `process(ptr, len) -> ptr` to `(ptr, len)` of the outcome list; `init(ptr, len) -> ptr`
//!   to a `result<_, string>` (tag 0 is ok).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Where the answer's `(ptr, len)` is written.
pub const RET: u32 = 8;
/// The outcome list.
pub const OUTCOMES: u32 = 64 * 1024;
/// Records (72 bytes each).
pub const RECORDS: u32 = 1 << 20;
/// A value buffer the records point at.
pub const VALUE: u32 = 16 << 20;

/// What `process` answers.
pub enum Answer {
    /// One outcome per input, each `records(RECORDS, records)`; every record's value is the
    /// same `value_bytes` at `VALUE`. The host would copy `inputs × records × value_bytes`.
    Aliased { records: u32, value_bytes: u32 },
    /// One outcome per input; the first holds one record with `headers` empty headers
    /// (all pointing at zeroed memory), the others none.
    EmptyHeaders { headers: u32 },
    /// One outcome per input; the first holds `records` empty records, the others none.
    EmptyRecords { records: u32 },
    /// One record per input, echoing nothing but an empty value (a well-behaved answer).
    Empty,
    /// `error(TEXT)` for every input.
    Error(&'static str),
}

/// Options of a hand-made plugin.
pub struct HandMade {
    pub answer: Answer,
    /// Linear memory pages (64 KiB) at start; at least enough for the answer's structures.
    pub pages: u32,
    /// `cabi_realloc` returns this address instead of a valid one.
    pub bad_realloc: Option<u32>,
    /// `cabi_post_process` traps.
    pub trap_in_post_return: bool,
    /// A second, unexported linear memory of this many pages.
    pub extra_memory_pages: Option<u32>,
    /// `process` first calls `wasi:clocks/monotonic-clock@VERSION`'s `subscribe-duration`
    /// (a wait the CPU deadline cannot see), imported at this WASI 0.2 patch version.
    pub wait_on_clock: Option<&'static str>,
    /// An unexported function table of this many elements.
    pub table_elements: Option<u32>,
    /// `process` first calls `wasi:cli/stdout@0.2.0`'s `get-stdout` this many times,
    /// dropping none of the streams it gets.
    pub leak_stdout: Option<u32>,
}

impl HandMade {
    pub fn new(answer: Answer) -> Self {
        HandMade {
            answer,
            pages: 0,
            bad_realloc: None,
            trap_in_post_return: false,
            extra_memory_pages: None,
            wait_on_clock: None,
            leak_stdout: None,
            table_elements: None,
        }
    }

    /// The component, written to `dir/name.wasm`.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let wat = self.wat();
        let mut module = wat::parse_str(&wat).expect("hand-made WAT parses");
        let transform_wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/wit");
        let mut resolve = wit_parser::Resolve::default();
        let (package, world) = match (self.wait_on_clock, self.leak_stdout) {
            (None, Some(_)) => {
                let wit = dir.join(format!("{name}-wit"));
                stdout_world(&wit, &transform_wit);
                (
                    resolve
                        .push_dir(&wit)
                        .expect("the stdout world's WIT parses")
                        .0,
                    "leaks",
                )
            }
            (None, None) => (
                resolve
                    .push_dir(&transform_wit)
                    .expect("the world's WIT parses")
                    .0,
                "transform",
            ),
            (Some(version), _) => {
                let wit = dir.join(format!("{name}-wit"));
                clock_world(&wit, &transform_wit, version);
                (
                    resolve
                        .push_dir(&wit)
                        .expect("the clock world's WIT parses")
                        .0,
                    "waits",
                )
            }
        };
        let world = resolve
            .select_world(&[package], Some(world))
            .expect("the world");
        wit_component::embed_component_metadata(
            &mut module,
            &resolve,
            world,
            wit_component::StringEncoding::UTF8,
        )
        .expect("metadata embeds");
        let component = wit_component::ComponentEncoder::default()
            .module(&module)
            .expect("module accepted")
            .validate(true)
            .encode()
            .expect("component encodes");
        let path = dir.join(format!("{name}.wasm"));
        std::fs::write(&path, component).expect("write component");
        path
    }

    fn wat(&self) -> String {
        let first_only =
            |n: u32| format!("(select (i32.const {n}) (i32.const 0) (i32.eqz (local.get $i)))");
        let answer = match self.answer {
            Answer::Aliased {
                records,
                value_bytes,
            } => format!(
                r#"
    ;; records, all pointing at the same value
    (local.set $i (i32.const 0))
    (block $done (loop $fill
      (br_if $done (i32.ge_u (local.get $i) (i32.const {records})))
      (local.set $a (i32.add (i32.const {RECORDS}) (i32.mul (local.get $i) (i32.const 72))))
      (i32.store8 offset=52 (local.get $a) (i32.const 1))
      (i32.store offset=56 (local.get $a) (i32.const {VALUE}))
      (i32.store offset=60 (local.get $a) (i32.const {value_bytes}))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $fill)))
    ;; every outcome is the same list of records
    {}"#,
                each_outcome(0, RECORDS, &format!("(i32.const {records})"))
            ),
            Answer::EmptyHeaders { headers } => format!(
                r#"
    ;; one record whose headers are {headers} zeroed tuples at VALUE
    (i32.store offset=64 (i32.const {RECORDS}) (i32.const {VALUE}))
    (i32.store offset=68 (i32.const {RECORDS}) (i32.const {headers}))
    {}"#,
                each_outcome(0, RECORDS, &first_only(1))
            ),
            // Zeroed records at RECORDS.
            Answer::EmptyRecords { records } => each_outcome(0, RECORDS, &first_only(records)),
            Answer::Error(text) => format!(
                r#"
    ;; the error text at VALUE, then error(VALUE, len) for every input
    {}
    {}"#,
                text.bytes()
                    .enumerate()
                    .map(|(i, b)| format!(
                        "(i32.store8 (i32.const {}) (i32.const {b}))",
                        VALUE + i as u32
                    ))
                    .collect::<Vec<_>>()
                    .join(" "),
                each_outcome(1, VALUE, &format!("(i32.const {})", text.len()))
            ),
            // One zeroed record per input.
            Answer::Empty => each_outcome(0, RECORDS, "(i32.const 1)"),
        };
        let realloc = match self.bad_realloc {
            // Bad only for a real allocation (the batch), so that `init` gets its (empty)
            // config.
            Some(address) => format!(
                "(if (result i32) (i32.eqz (local.get $size)) (then (i32.const {RET})) (else (i32.const {address})))"
            ),
            None => r#"
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $p) (local.get $size)))
    (block $enough
      (br_if $enough (i32.le_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536))))
      (br_if $enough (i32.ne (memory.grow (i32.add (i32.shr_u (i32.sub (global.get $heap)
          (i32.mul (memory.size) (i32.const 65536))) (i32.const 16)) (i32.const 1))) (i32.const -1)))
      unreachable)
    (local.get $p)"#
                .to_owned(),
        };
        let post_return = if self.trap_in_post_return {
            r#"(func (export "cabi_post_process") (param i32) unreachable)"#
        } else {
            ""
        };
        let (clock_import, clock_call) = match self.wait_on_clock {
            Some(version) => (
                format!(
                    r#"(import "wasi:clocks/monotonic-clock@{version}" "subscribe-duration" (func $subscribe (param i64) (result i32)))"#
                ),
                "(drop (call $subscribe (i64.const 3600000000000)))".to_owned(),
            ),
            None => match self.leak_stdout {
                Some(times) => (
                    r#"(import "wasi:cli/stdout@0.2.0" "get-stdout" (func $stdout (result i32)))"#
                        .to_owned(),
                    format!(
                        r#"(local.set $i (i32.const 0))
    (block $done (loop $leak
      (br_if $done (i32.ge_u (local.get $i) (i32.const {times})))
      (drop (call $stdout))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $leak)))"#
                    ),
                ),
                None => (String::new(), String::new()),
            },
        };
        let extra_memory = self
            .extra_memory_pages
            .map(|pages| format!("(memory $extra {pages})"))
            .unwrap_or_default()
            + &self
                .table_elements
                .map(|n| format!("(table $big {n} funcref)"))
                .unwrap_or_default();
        format!(
            r#"(module
  {clock_import}
  (memory (export "memory") {pages})
  {extra_memory}
  ;; The guest's heap (arguments the host copies in) starts past everything above.
  (global $heap (mut i32) (i32.const {heap}))
  (func (export "cabi_realloc") (param $old i32) (param $old_size i32) (param $align i32) (param $size i32) (result i32)
    (local $p i32)
    {realloc})
  (func (export "init") (param i32 i32) (result i32)
    (i32.store8 (i32.const {RET}) (i32.const 0))
    (i32.const {RET}))
  (func (export "process") (param $ptr i32) (param $len i32) (result i32)
    (local $i i32) (local $a i32)
    {clock_call}
    {answer}
    (i32.store (i32.const {RET}) (i32.const {OUTCOMES}))
    (i32.store offset=4 (i32.const {RET}) (local.get $len))
    (i32.const {RET}))
  {post_return}
)"#,
            pages = self.pages_needed(),
            heap = self.heap(),
        )
    }

    /// The linear memory the plugin starts with, in pages.
    pub fn pages_needed(&self) -> u32 {
        self.pages.max(self.heap() / 65536 + 16)
    }

    /// Past every structure the answer uses, on a MiB boundary.
    fn heap(&self) -> u32 {
        let end = match self.answer {
            Answer::Aliased { value_bytes, .. } => VALUE + value_bytes,
            Answer::EmptyHeaders { headers } => VALUE + headers * 20,
            Answer::EmptyRecords { records } => RECORDS + records * 72,
            Answer::Empty => RECORDS + 72,
            Answer::Error(text) => VALUE + text.len() as u32,
        };
        (end.max(VALUE) >> 20 << 20) + (1 << 20)
    }
}

/// One outcome per input, each with tag `tag` (0 records, 1 error) and `(ptr, len)`, where
/// `len` is a WAT expression (it may read the input's index `$i`).
fn each_outcome(tag: u32, ptr: u32, len: &str) -> String {
    format!(
        r#"
    (local.set $i (i32.const 0))
    (block $done (loop $out
      (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
      (local.set $a (i32.add (i32.const {OUTCOMES}) (i32.mul (local.get $i) (i32.const 12))))
      (i32.store8 (local.get $a) (i32.const {tag}))
      (i32.store offset=4 (local.get $a) (i32.const {ptr}))
      (i32.store offset=8 (local.get $a) {len})
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $out)))"#
    )
}

/// A package whose world is the transform world plus `wasi:clocks/monotonic-clock` at
/// `version` (with the bits of `wasi:io/poll` it uses), written under `dir`.
fn clock_world(dir: &Path, transform_wit: &Path, version: &str) {
    extended_world(
        dir,
        transform_wit,
        "waits",
        &format!("wasi:clocks/monotonic-clock@{version}"),
        &[
            (
                "io/poll.wit",
                format!(
                    "package wasi:io@{version};\ninterface poll {{\n  resource pollable;\n}}\n"
                ),
            ),
            (
                "clocks/monotonic-clock.wit",
                format!(
                    "package wasi:clocks@{version};\ninterface monotonic-clock {{\n  use wasi:io/poll@{version}.{{pollable}};\n  type duration = u64;\n  subscribe-duration: func(when: duration) -> pollable;\n}}\n"
                ),
            ),
        ],
    );
}

/// A package whose world is the transform world plus `wasi:cli/stdout@0.2.0` (with the
/// bits of `wasi:io/streams` it uses), written under `dir`.
fn stdout_world(dir: &Path, transform_wit: &Path) {
    extended_world(
        dir,
        transform_wit,
        "leaks",
        "wasi:cli/stdout@0.2.0",
        &[
            (
                "io/streams.wit",
                "package wasi:io@0.2.0;\ninterface streams {\n  resource output-stream;\n}\n".into(),
            ),
            (
                "cli/stdout.wit",
                "package wasi:cli@0.2.0;\ninterface stdout {\n  use wasi:io/streams@0.2.0.{output-stream};\n  get-stdout: func() -> output-stream;\n}\n".into(),
            ),
        ],
    );
}

/// Writes under `dir` a package `test:WORLD` whose world `WORLD` includes the transform
/// world and imports `import`, with `deps` (path under `deps/`, WIT text) beside a copy of
/// the transform package.
fn extended_world(
    dir: &Path,
    transform_wit: &Path,
    world: &str,
    import: &str,
    deps: &[(&str, String)],
) {
    let transform = dir.join("deps/transform");
    std::fs::create_dir_all(&transform).expect("wit dirs");
    std::fs::copy(
        transform_wit.join("transform.wit"),
        transform.join("transform.wit"),
    )
    .expect("copy transform.wit");
    for (path, text) in deps {
        let path = dir.join("deps").join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("wit dirs");
        std::fs::write(&path, text).expect("write wit");
    }
    std::fs::write(
        dir.join(format!("{world}.wit")),
        format!(
            "package test:{world};\nworld {world} {{\n  include sluice:transform/transform@0.1.0;\n  import {import};\n}}\n"
        ),
    )
    .expect("world wit");
}

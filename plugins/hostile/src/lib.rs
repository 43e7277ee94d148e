//! `hostile`: a plugin that misbehaves on purpose, for the host's sandbox tests.
//!
//! It implements the raw world ([`sluice_plugin_sdk::bindings::Guest`]) rather than the
//! per-record trait so that it can also break the batch contract. `init` picks the
//! behaviour from config key `mode`:
//!
//! | mode          | `process` does                                                    |
//! |---------------|-------------------------------------------------------------------|
//! | `echo`        | returns every record unchanged (the well-behaved control)         |
//! | `loop`        | spins forever (CPU deadline); with `on = X` only when a record's value is `X` |
//! | `log-text`    | logs config `on` at warn level, then echoes                       |
//! | `grow`        | keeps `size` more bytes (default 1 MiB) at every call, then echoes |
//! | `init-loop-after` | `init` spins forever once the clock passes `after` (Unix ms); `process` as `panic` |
//! | `memory`      | allocates until the memory limit (OOM)                            |
//! | `panic`       | panics (a trap); with `on = X` only when a record's value is `X`  |
//! | `unreachable` | executes the `unreachable` instruction                            |
//! | `recursion`   | recurses without bound (stack overflow)                           |
//! | `file`        | opens `path` (default `/etc/passwd`): emits its content or errors |
//! | `env`         | emits one record whose value is the number of visible env vars    |
//! | `socket`      | connects to `addr` (default `127.0.0.1:5432`): emits or errors    |
//! | `flood`       | emits `count` (default 100000) copies of each record              |
//! | `big`         | emits one record with a `size`-byte value (default 8 MiB)         |
//! | `short`       | returns one outcome fewer than it was given records               |
//! | `print`       | prints to stdout and stderr, then echoes                          |
//! | `log-spam`    | logs `count` (default 100000) lines, then echoes                  |
//! | `sleep`       | sleeps for an hour (a wait the CPU deadline cannot see)           |
//! | `exit`        | calls `std::process::exit(3)`                                     |
//! | `rewrite-meta`| echoes records with topic/partition/offset rewritten              |
//! | `init-fail`   | `init` itself fails                                               |
//! | `init-loop`   | `init` spins forever                                              |

use std::cell::RefCell;
use std::hint::black_box;

use sluice_plugin_sdk::bindings::{self, Guest, Record, WitOutcome};

#[derive(Default)]
struct Settings {
    mode: String,
    on: Option<String>,
    path: String,
    addr: String,
    count: usize,
    size: usize,
}

thread_local! {
    static SETTINGS: RefCell<Settings> = RefCell::new(Settings::default());
    /// What `grow` keeps across calls.
    static HOARD: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

struct Hostile;

impl Guest for Hostile {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        sluice_plugin_sdk::install_panic_hook();
        let get = |k: &str| {
            config
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let mode = get("mode").ok_or("config `mode` is required")?;
        let num = |k: &str, d: usize| -> Result<usize, String> {
            get(k).map_or(Ok(d), |v| {
                v.parse().map_err(|e| format!("config `{k}`: {e}"))
            })
        };
        match mode.as_str() {
            "init-fail" => return Err("hostile: init refuses this config on purpose".into()),
            "init-loop" => loop {
                black_box(0);
            },
            "init-loop-after" => {
                let after: u128 = get("after")
                    .ok_or("config `after` is required")?
                    .parse()
                    .map_err(|e| format!("config `after`: {e}"))?;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_err(|e| e.to_string())?
                    .as_millis();
                if now >= after {
                    loop {
                        black_box(0);
                    }
                }
            }
            "echo" | "loop" | "memory" | "panic" | "unreachable" | "recursion" | "file" | "env"
            | "socket" | "flood" | "big" | "short" | "print" | "log-spam" | "sleep" | "exit"
            | "rewrite-meta" | "grow" | "log-text" => {}
            other => return Err(format!("config `mode`: unknown mode {other:?}")),
        }
        let default_size = if mode == "grow" { 1 << 20 } else { 8 << 20 };
        let settings = Settings {
            mode,
            on: get("on"),
            path: get("path").unwrap_or_else(|| "/etc/passwd".into()),
            addr: get("addr").unwrap_or_else(|| "127.0.0.1:5432".into()),
            count: num("count", 100_000)?,
            size: num("size", default_size)?,
        };
        SETTINGS.with(|s| *s.borrow_mut() = settings);
        Ok(())
    }

    fn process(batch: Vec<Record>) -> Vec<WitOutcome> {
        SETTINGS.with(|s| run(&s.borrow(), batch))
    }
}

fn echo(batch: Vec<Record>) -> Vec<WitOutcome> {
    batch
        .into_iter()
        .map(|r| WitOutcome::Records(vec![r]))
        .collect()
}

fn recurse(depth: u64) -> u64 {
    if black_box(depth) == u64::MAX {
        return 0;
    }
    let local = black_box([depth; 16]);
    black_box(recurse(black_box(depth + 1))) + local[3]
}

fn run(s: &Settings, batch: Vec<Record>) -> Vec<WitOutcome> {
    match s.mode.as_str() {
        "loop" => {
            let trigger = s.on.as_deref();
            if trigger.is_none()
                || batch
                    .iter()
                    .any(|r| r.value.as_deref() == trigger.map(str::as_bytes))
            {
                loop {
                    black_box(&batch);
                }
            }
            echo(batch)
        }
        "grow" => {
            HOARD.with(|h| h.borrow_mut().push(vec![1u8; s.size]));
            echo(batch)
        }
        "memory" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 1 << 20]);
                black_box(&hoard);
            }
        }
        "log-text" => {
            sluice_plugin_sdk::log::warn(s.on.as_deref().unwrap_or_default());
            echo(batch)
        }
        "panic" | "init-loop-after" => {
            let trigger = s.on.as_deref();
            if trigger.is_none()
                || batch
                    .iter()
                    .any(|r| r.value.as_deref() == trigger.map(str::as_bytes))
            {
                panic!("hostile: panic on purpose");
            }
            echo(batch)
        }
        "unreachable" => {
            #[cfg(target_arch = "wasm32")]
            core::arch::wasm32::unreachable();
            #[cfg(not(target_arch = "wasm32"))]
            unreachable!()
        }
        "recursion" => {
            black_box(recurse(0));
            echo(batch)
        }
        "file" => batch
            .into_iter()
            .map(|r| match std::fs::read(&s.path) {
                Ok(bytes) => WitOutcome::Records(vec![Record {
                    value: Some(bytes),
                    ..r
                }]),
                Err(e) => WitOutcome::Error(format!("open {} failed: {e}", s.path)),
            })
            .collect(),
        "env" => batch
            .into_iter()
            .map(|r| {
                let n = std::env::vars_os().count();
                let home = std::env::var("HOME").is_ok();
                WitOutcome::Records(vec![Record {
                    value: Some(format!("vars={n} home={home}").into_bytes()),
                    ..r
                }])
            })
            .collect(),
        "socket" => batch
            .into_iter()
            .map(|r| match std::net::TcpStream::connect(&s.addr) {
                Ok(_) => WitOutcome::Records(vec![r]),
                Err(e) => WitOutcome::Error(format!("connect {} failed: {e}", s.addr)),
            })
            .collect(),
        "flood" => batch
            .into_iter()
            .map(|r| WitOutcome::Records(vec![r; s.count]))
            .collect(),
        "big" => batch
            .into_iter()
            .map(|r| {
                WitOutcome::Records(vec![Record {
                    value: Some(vec![b'x'; s.size]),
                    ..r
                }])
            })
            .collect(),
        "short" => {
            let mut out = echo(batch);
            out.pop();
            out
        }
        "print" => {
            println!("hostile: hello on stdout");
            eprintln!("hostile: hello on stderr");
            echo(batch)
        }
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_secs(3600));
            echo(batch)
        }
        "exit" => std::process::exit(3),
        "rewrite-meta" => batch
            .into_iter()
            .map(|r| {
                WitOutcome::Records(vec![Record {
                    topic: "evil".into(),
                    partition: 99,
                    offset: -1,
                    ..r
                }])
            })
            .collect(),
        "log-spam" => {
            for i in 0..s.count {
                sluice_plugin_sdk::log::warn(&format!("hostile: spam line {i}"));
            }
            echo(batch)
        }
        _ => echo(batch),
    }
}

bindings::export_raw!(Hostile with_types_in sluice_plugin_sdk::bindings);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_validated() {
        assert!(Hostile::init(vec![]).is_err());
        assert!(Hostile::init(vec![("mode".into(), "nope".into())]).is_err());
        assert!(Hostile::init(vec![("mode".into(), "init-fail".into())]).is_err());
        assert!(Hostile::init(vec![("mode".into(), "short".into())]).is_ok());
        let out = Hostile::process(vec![Record::from_value("a"), Record::from_value("b")]);
        assert_eq!(out.len(), 1);
    }
}

//! `sluice verify`: the connector's table checked against its topics (`crate::verify`),
//! with a progress bar on a terminal.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::ValueEnum;

use super::{EXIT_FAILURE, EXIT_INVALID};

/// `sluice verify --format`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum VerifyFormat {
    /// A summary and the first keys of each kind, for people.
    Text,
    /// One JSON object: the whole answer, every key.
    Json,
}

pub async fn verify(path: &Path, name: &str, limit: usize, format: VerifyFormat) -> u8 {
    let (config, connector) = match super::load_connector(path, name) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let connector = &config.connectors[connector];
    let pool = match super::inspect::pool_for(path, &config) {
        Ok(pool) => pool,
        Err(code) => return code,
    };
    let engine = match super::plugin_engine(connector) {
        Ok(engine) => engine,
        Err(code) => return code,
    };
    let bar = Bar::new();
    let progress = |done: u64, total: u64| bar.show(done, total);
    let verified = crate::verify::verify(connector, &pool, engine.as_ref(), &progress).await;
    bar.finish();
    pool.close();
    let report = match verified {
        Ok(report) => report,
        Err(e) => {
            eprintln!("{e}");
            return if e.is_usage() {
                EXIT_INVALID
            } else {
                EXIT_FAILURE
            };
        }
    };
    match format {
        VerifyFormat::Text => print!("{}", report.text(limit)),
        VerifyFormat::Json => println!("{}", report.to_json()),
    }
    if report.equal() { 0 } else { EXIT_FAILURE }
}

/// A one-line progress bar on stderr, drawn only on a terminal, at most 10 times a second.
struct Bar {
    terminal: bool,
    last: Mutex<Option<Instant>>,
}

impl Bar {
    fn new() -> Bar {
        Bar {
            terminal: std::io::stderr().is_terminal(),
            last: Mutex::new(None),
        }
    }

    fn show(&self, done: u64, total: u64) {
        if !self.terminal {
            return;
        }
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        if last.is_some_and(|t| t.elapsed() < Duration::from_millis(100)) && done < total {
            return;
        }
        *last = Some(Instant::now());
        let width = 30usize;
        let filled = if total == 0 {
            width
        } else {
            (done.min(total) as u128 * width as u128 / total as u128) as usize
        };
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r[{}{}] {done}/{total} offsets read",
            "#".repeat(filled),
            " ".repeat(width - filled)
        );
        let _ = err.flush();
    }

    fn finish(&self) {
        if self.terminal && self.last.lock().is_ok_and(|l| l.is_some()) {
            eprintln!();
        }
    }
}

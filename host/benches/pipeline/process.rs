//! A sluice process, and what `/proc` says of it (CPU, the transform threads' share, RSS).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness;

/// What `/proc` says of a process.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ProcessUse {
    pub(crate) cpu_seconds: f64,
    pub(crate) transform_cpu_seconds: f64,
    pub(crate) peak_rss_mb: f64,
    pub(crate) rss_mb: f64,
}

pub(crate) fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of a `/proc/…/stat` line, in ticks, and the thread's name.
pub(crate) fn stat_ticks(stat: &str) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat[open + 1..close].to_string();
    let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
    // Fields after the name: state is index 0, utime 11, stime 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

pub(crate) fn process_use(pid: u32, ticks: f64) -> ProcessUse {
    let mut usage = ProcessUse::default();
    if let Some((_, total)) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| stat_ticks(&s))
    {
        usage.cpu_seconds = total as f64 / ticks;
    }
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Some((name, t)) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| stat_ticks(&s))
            && name.contains("-transf")
        {
            usage.transform_cpu_seconds += t as f64 / ticks;
        }
    }
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        for line in status.lines() {
            let mb = |kb: &str| {
                kb.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<f64>()
                    .unwrap_or(0.0)
                    / 1024.0
            };
            if let Some(kb) = line.strip_prefix("VmHWM:") {
                usage.peak_rss_mb = mb(kb);
            }
            if let Some(kb) = line.strip_prefix("VmRSS:") {
                usage.rss_mb = mb(kb);
            }
        }
    }
    usage
}

/// A sluice process and the scenario it runs.
pub(crate) struct Process {
    pub(crate) child: Child,
}

impl Process {
    pub(crate) fn start(sluice: &Path, config: &Path, env: &[(&str, &str)]) -> Process {
        let log = harness::log_dir().join(format!(
            "bench-{}-{:04x}.log",
            config.file_stem().unwrap_or_default().to_string_lossy(),
            rand::random::<u16>()
        ));
        let child = Command::new(sluice)
            .args(["run", "--config"])
            .arg(config)
            .env(
                "RUST_LOG",
                std::env::var("SLUICE_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("start sluice");
        Process { child }
    }

    pub(crate) fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status();
    }

    pub(crate) fn wait(mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

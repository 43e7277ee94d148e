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
    /// Its log (stderr).
    pub(crate) log: std::path::PathBuf,
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
            // The consumers' assignments at info level: when the group settled (below).
            .env(
                "RUST_LOG",
                std::env::var("SLUICE_BENCH_LOG")
                    .unwrap_or_else(|_| "warn,sluice::kafka::context=info".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("start sluice");
        Process { child, log }
    }

    /// The tasks whose consumers were given partitions (its log's "partitions assigned"
    /// lines), and when the last of them was: after it, the group held still.
    pub(crate) fn assignments(
        &self,
    ) -> (
        std::collections::BTreeSet<u32>,
        Option<std::time::SystemTime>,
    ) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut tasks = std::collections::BTreeSet::new();
        let mut last = None;
        for line in text.lines().filter(|l| l.contains("partitions assigned")) {
            if let Some(at) = line
                .split_whitespace()
                .next()
                .and_then(|stamp| chrono::DateTime::parse_from_rfc3339(stamp).ok())
                .map(std::time::SystemTime::from)
            {
                last = last.max(Some(at));
            }
            if let Some(at) = line.find(" task=") {
                let digits: String = line[at + " task=".len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                tasks.extend(digits.parse::<u32>().ok());
            }
        }
        (tasks, last)
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

/// A thread's nanoseconds on a CPU and waiting for one, from its `schedstat` (0 when it
/// ended meanwhile).
fn schedstat(thread: &Path) -> (u64, u64) {
    let sched = std::fs::read_to_string(thread.join("schedstat")).unwrap_or_default();
    let mut fields = sched
        .split_whitespace()
        .map(|f| f.parse::<u64>().unwrap_or(0));
    (fields.next().unwrap_or(0), fields.next().unwrap_or(0))
}

/// The servers whose CPU a run's note shows beside sluice's.
const SERVERS: [&str; 3] = ["tansu", "postgres", "mariadbd"];

/// Each thread's time on a CPU and waiting for one (`/proc/PID/task/TID/schedstat`, in
/// nanoseconds), keyed by thread id, with its name.
#[derive(Debug, Default, Clone)]
pub(crate) struct ThreadTimes {
    threads: std::collections::HashMap<(u32, u32), (String, u64, u64)>,
    /// The machine's idle and total jiffies (`/proc/stat`'s first line).
    machine: (u64, u64),
    /// The servers beside sluice (the broker, the databases): per process name, the
    /// nanoseconds on a CPU and waiting for one, summed over their threads.
    servers: std::collections::BTreeMap<String, (u64, u64)>,
    at: Option<Instant>,
}

impl ThreadTimes {
    pub(crate) fn read(pids: &[u32]) -> ThreadTimes {
        let mut times = ThreadTimes {
            at: Some(Instant::now()),
            ..ThreadTimes::default()
        };
        for &pid in pids {
            for entry in std::fs::read_dir(format!("/proc/{pid}/task"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
                    continue;
                };
                let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
                let (on_cpu, waiting) = schedstat(&entry.path());
                times
                    .threads
                    .insert((pid, tid), (name.trim().to_string(), on_cpu, waiting));
            }
        }
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            let name = name.trim();
            if !SERVERS.contains(&name) {
                continue;
            }
            for thread in std::fs::read_dir(entry.path().join("task"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let (on_cpu, waiting) = schedstat(&thread.path());
                let sum = times.servers.entry(name.to_string()).or_default();
                sum.0 += on_cpu;
                sum.1 += waiting;
            }
        }
        if let Some(line) = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| s.lines().next().map(str::to_string))
        {
            let jiffies: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|f| f.parse().ok())
                .collect();
            // idle + iowait
            let idle = jiffies.get(3).copied().unwrap_or(0) + jiffies.get(4).copied().unwrap_or(0);
            times.machine = (idle, jiffies.iter().sum());
        }
        times
    }

    /// From `self` (taken earlier) to `later`: per kind of thread (its name without the
    /// digits), the seconds on a CPU, waiting for one, and off it (sleeping: waiting on
    /// I/O, a lock, a channel), over the wall time between the two; and the machine's idle
    /// share. Threads that ended in between are left out.
    pub(crate) fn split_until(&self, later: &ThreadTimes) -> String {
        let wall = match (self.at, later.at) {
            (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
            _ => return String::new(),
        };
        let mut kinds: std::collections::BTreeMap<String, (u32, f64, f64)> = Default::default();
        for (key, (name, on_cpu, waiting)) in &later.threads {
            let (before_cpu, before_wait) =
                self.threads.get(key).map_or((0, 0), |(_, c, w)| (*c, *w));
            let kind: String = name.chars().filter(|c| !c.is_ascii_digit()).collect();
            let entry = kinds.entry(kind).or_default();
            entry.0 += 1;
            entry.1 += on_cpu.saturating_sub(before_cpu) as f64 / 1e9;
            entry.2 += waiting.saturating_sub(before_wait) as f64 / 1e9;
        }
        let mut parts: Vec<(f64, String)> = kinds
            .into_iter()
            .filter(|(_, (_, cpu, _))| *cpu > 0.01 * wall)
            .map(|(kind, (n, cpu, runqueue))| {
                let off = (n as f64 * wall - cpu - runqueue).max(0.0);
                (
                    cpu,
                    format!("{kind}×{n} cpu {cpu:.2} runq {runqueue:.2} off {off:.2}"),
                )
            })
            .collect();
        parts.sort_by(|a, b| b.0.total_cmp(&a.0));
        let idle = later.machine.0.saturating_sub(self.machine.0) as f64
            / (later.machine.1.saturating_sub(self.machine.1)).max(1) as f64;
        let servers: Vec<String> = later
            .servers
            .iter()
            .map(|(name, (cpu, runqueue))| {
                let (before_cpu, before_wait) = self.servers.get(name).copied().unwrap_or((0, 0));
                format!(
                    "{name} cpu {:.2} runq {:.2}",
                    cpu.saturating_sub(before_cpu) as f64 / 1e9,
                    runqueue.saturating_sub(before_wait) as f64 / 1e9
                )
            })
            .collect();
        format!(
            "over {wall:.2} s, machine idle {:.0} %: {}; beside it: {}",
            idle * 100.0,
            parts
                .into_iter()
                .map(|(_, p)| p)
                .collect::<Vec<_>>()
                .join(", "),
            servers.join(", ")
        )
    }
}

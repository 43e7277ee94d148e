//! Fault injection: `sluice run` processes against a real broker (Tansu) and a database,
//! with faults injected mid-run — SIGKILLs, a database outage, a broker outage at the
//! network, a broker killed and restarted, a rebalance storm — and afterwards exactly the
//! produced records in the table, each once. The SIGKILLs run on every database (each
//! rolls back the transaction a kill cut short its own way), the database outage on the two
//! with a network; the broker's faults each on one database, spread over the three.
//!
//! The sink tables here have no primary key (`mode: insert`): a record written twice is two
//! rows, so a duplicate shows in the counts instead of being folded away by an upsert.
//!
//! Each scenario prints one `FAULT-SUMMARY` line (run with `--no-capture` to see it) and
//! appends it to `target/tmp/fault-summary.txt`, so the figures can be quoted.

use crate::harness;

use std::ops::Range;
use std::time::{Duration, Instant};

use harness::proxy::Proxy;
use harness::{
    Backend, Broker, EVICTION_WAIT, Pipeline, Scenario, SluiceProcess, TestDb, free_port,
    produce_values, word_event,
};
use sluice::cli::demo::SequenceStats;

const PARTITIONS: i32 = 4;

/// What a scenario produces: how many records, and the value of each.
///
/// Poisoned records join here: a `value` that spoils some uids, the rows the table then
/// ends with, and the scenario's `extra_connector` with an `errors:` policy that routes
/// them to a dead-letter table (counted into `Summary::dead_letters`).
#[derive(Clone, Copy)]
struct Workload {
    records: u64,
    /// The record value for the `i`th record.
    value: fn(u64) -> String,
    /// Records that are poisoned (and end in the dead-letter table).
    poisoned: u64,
}

impl Workload {
    fn words(records: u64) -> Workload {
        Workload {
            records,
            value: word_event,
            poisoned: 0,
        }
    }

    /// `good` word events with ids `0..good`, and after every 100 of them one poisoned
    /// record (1 %): not JSON, or a uid that is not a number, in turn.
    fn words_with_poison(good: u64) -> Workload {
        Workload {
            records: good + good / 100,
            value: poisoned_word_event,
            poisoned: good / 100,
        }
    }

    /// Rows the sink table ends with: ids `0..n`, each once.
    fn expected_rows(&self) -> i64 {
        (self.records - self.poisoned) as i64
    }

    /// Produces `range` in the background, at about `per_second` records a second, or as
    /// fast as it goes.
    fn spawn(
        &self,
        run: &Pipeline,
        range: Range<u64>,
        per_second: Option<u64>,
    ) -> tokio::task::JoinHandle<Duration> {
        let bootstrap = run.broker.bootstrap.clone();
        let topic = run.scenario.topic.clone();
        let value = self.value;
        tokio::spawn(async move {
            let started = Instant::now();
            produce_values(&bootstrap, &topic, range, value, per_second).await;
            started.elapsed()
        })
    }
}

/// Record `i` of [`Workload::words_with_poison`]: each 101st is poisoned, the others are
/// word events numbered without gaps.
fn poisoned_word_event(i: u64) -> String {
    if !is_poisoned(i) {
        return word_event(i - i / 101);
    }
    match (i / 101) % 2 {
        0 => format!("{{\"uid\": {i}, not json"),
        _ => format!("{{\"uid\": \"poison-{i}\", \"word\": \"w\"}}"),
    }
}

/// Whether record `i` of [`Workload::words_with_poison`] is poisoned.
fn is_poisoned(i: u64) -> bool {
    i % 101 == 100
}

/// A scenario whose table shows duplicates: no key, plain inserts.
fn append_only(tasks: u32) -> Scenario {
    let mut scenario = Scenario::new(tasks);
    scenario.mode = "insert";
    scenario.key = "[]";
    scenario.max_records = 500;
    scenario
}

/// A run with `tasks` per process whose records flow from now on at `pace` a second: the
/// run, when it started, and the producer (how long it took).
async fn flowing(
    db: Backend,
    tasks: u32,
    work: &Workload,
    pace: u64,
) -> (Pipeline, Instant, tokio::task::JoinHandle<Duration>) {
    let run = Pipeline::new(db, append_only(tasks), PARTITIONS).await;
    let producer = work.spawn(&run, 0..work.records, Some(pace));
    (run, Instant::now(), producer)
}

/// The figures of one scenario run.
struct Summary {
    scenario: &'static str,
    db: &'static str,
    produced: u64,
    /// Rows in the dead-letter table (the SIGKILL scenario poisons 1 % of its records).
    dead_letters: i64,
    /// From the end of the fault until rows moved again (the slowest, where there were
    /// several).
    recovery: Option<Duration>,
    /// The scenario's own figures: kills, outage length, starts and stops.
    figures: Vec<(&'static str, String)>,
    started: Instant,
}

impl Summary {
    fn new(scenario: &'static str, run: &Pipeline, work: &Workload, started: Instant) -> Summary {
        Summary {
            scenario,
            db: run.db.name(),
            produced: work.records,
            dead_letters: 0,
            recovery: None,
            figures: Vec::new(),
            started,
        }
    }

    fn dead_letters(self, dead_letters: i64) -> Summary {
        Summary {
            dead_letters,
            ..self
        }
    }

    fn recovery(self, recovery: Duration) -> Summary {
        Summary {
            recovery: Some(recovery),
            ..self
        }
    }

    fn figure(mut self, name: &'static str, value: impl std::fmt::Display) -> Summary {
        self.figures.push((name, value.to_string()));
        self
    }

    /// An outage's measured length and the rows when it began and ended (rows written in
    /// between came from batches fetched before it).
    fn outage(self, length: Duration, rows_at_start: i64, rows_at_end: i64) -> Summary {
        self.figure("outage_s", format!("{:.1}", length.as_secs_f64()))
            .figure("rows_at_outage", rows_at_start)
            .figure("rows_written_during_outage", rows_at_end - rows_at_start)
    }

    /// How long producing took.
    fn produced_in(self, took: Duration) -> Summary {
        self.figure("produce_s", format!("{:.1}", took.as_secs_f64()))
    }

    fn line(&self, stats: &SequenceStats) -> String {
        let mut line = format!(
            "FAULT-SUMMARY scenario={} db={} produced={} rows={} duplicates={} gaps={} dead_letters={} recovery_ms={}",
            self.scenario,
            self.db,
            self.produced,
            stats.rows,
            stats.duplicates(),
            stats.gaps(),
            self.dead_letters,
            self.recovery
                .map_or("-".to_string(), |r| r.as_millis().to_string()),
        );
        for (name, value) in &self.figures {
            line.push_str(&format!(" {name}={value}"));
        }
        line.push_str(&format!(
            " wall_s={:.1}",
            self.started.elapsed().as_secs_f64()
        ));
        line
    }

    /// Prints and records the figures with the table's final `stats`, then checks them:
    /// exactly the expected rows, ids `0..n` each once.
    fn check(self, work: &Workload, stats: SequenceStats) {
        harness::record_summary(&self.line(&stats));
        harness::assert_exactly(stats, work.expected_rows());
    }
}

/// How long a run may go without a new row where one is due before the test stalls.
const ROWS_DUE_WITHIN: Duration = Duration::from_secs(60);

/// Waits until the table holds more than `rows` rows and says how long that took; after
/// [`ROWS_DUE_WITHIN`] the test fails as [`stalled`], saying that no row came `since`
/// (`"the broker's return"`, say).
async fn rows_move(run: &Pipeline, rows: i64, since: &str) -> Duration {
    let started = Instant::now();
    loop {
        if run.stats().await.rows > rows {
            return started.elapsed();
        }
        if started.elapsed() > ROWS_DUE_WITHIN {
            stalled(
                run,
                &format!("no new row within {ROWS_DUE_WITHIN:?} of {since}"),
            )
            .await
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Panics with where each partition stopped.
async fn stalled(run: &Pipeline, what: &str) -> ! {
    panic!(
        "{what}: {:?}\n{}",
        run.stats().await,
        run.scenario.diagnose(&run.broker.bootstrap, &run.db).await
    )
}

fn random_millis(range: Range<u64>) -> Duration {
    Duration::from_millis(rand::random_range(range))
}

/// SIGKILL at random moments, a restart after each: exactly the good records as rows, each
/// id once. PostgreSQL takes ten kills in a run of 100,000 records; MariaDB and SQLite,
/// whose concern here is only that each rolls back the transaction a kill cut short its own
/// way, five in 50,000 (a kill costs the test broker's eviction wait, about 11 s a cycle).
async fn sigkill(db: Backend) {
    // A soak sets more: SLUICE_FAULT_RECORDS=1000000 SLUICE_FAULT_KILLS=60 (docs/testing.md).
    let setting = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (records, kills) = match db {
        Backend::Postgres => (100_000, 10),
        _ => (50_000, 5),
    };
    let good = setting("SLUICE_FAULT_RECORDS", records);
    let kills = setting("SLUICE_FAULT_KILLS", kills) as u32;
    // Records keep coming through all the kills: each cycle is the eviction wait plus
    // 1-4 s of running, about 11 s (900 a second for 100,000 records and 10 kills).
    let pace = (good / (u64::from(kills) * 11)).max(900);
    // Good records and 1 % poisoned ones among them, kept in a dead-letter table.
    let work = Workload::words_with_poison(good);
    let mut scenario = append_only(2);
    scenario.extra_connector = format!(
        "    errors: {{ policy: dlq, dlq: {{ table: {} }} }}",
        harness::unique("dead")
    );
    let run = Pipeline::new(db, scenario, PARTITIONS).await;
    let producer = work.spawn(&run, 0..work.records, Some(pace));
    let started = Instant::now();
    let mut slowest_resume = Duration::ZERO;
    for kill in 1..=kills {
        let before = run.stats().await;
        assert_eq!(before.duplicates(), 0, "before restart {kill}: {before:?}");
        let sluice = run.start();
        // Kill it while it consumes: after its first row, if there are rows left to write.
        if before.rows < work.expected_rows() {
            let resumed = rows_move(&run, before.rows, &format!("restart {kill}")).await;
            slowest_resume = slowest_resume.max(resumed);
        }
        let running = random_millis(500..3000);
        tokio::time::sleep(running).await;
        sluice.kill();
        eprintln!(
            "kill {kill}: {running:?} after the first row; {} rows before the restart",
            before.rows
        );
        tokio::time::sleep(EVICTION_WAIT).await;
    }
    let last = run.start();
    let produced_in = producer.await.expect("producer");
    let stats = run.wait_for_rows(work.expected_rows(), 240).await;
    let dead_letters = run.wait_for_dead_letters(work.poisoned as i64, 30).await;
    // A stream of bad records is a warning per 30 s with a count, not one per record.
    let log = std::fs::read_to_string(&last.log).unwrap_or_default();
    let warned = log
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("record failed"))
        .count() as u64;
    assert!(
        warned <= 2 + started.elapsed().as_secs() / 30,
        "{warned} 'record failed' warnings in {:?}",
        started.elapsed()
    );
    let status = last.terminate();
    assert_eq!(dead_letters, work.poisoned as i64, "dead letters");
    // Exactly the poisoned records, each once (records are keyed by their index).
    let mut keys: Vec<u64> = run
        .dead_letter_keys()
        .await
        .iter()
        .map(|k| k.parse().expect("a record index"))
        .collect();
    keys.sort_unstable();
    let poisoned: Vec<u64> = (0..work.records).filter(|&i| is_poisoned(i)).collect();
    assert_eq!(
        keys, poisoned,
        "the dead letters are not exactly the poisoned records"
    );
    Summary::new("sigkill", &run, &work, started)
        .dead_letters(dead_letters)
        .recovery(slowest_resume)
        .figure("kills", kills)
        .produced_in(produced_in)
        .check(&work, stats);
    assert!(status.success(), "last sluice exited with {status}");
}
for_each_database!(sigkill);

/// The database unreachable for 20 s mid-run (its connections reset, new ones refused, by
/// a proxy between sluice and the database) while records keep coming: no loss, no
/// duplicate, and rows move again soon after the database is back. SQLite has no network,
/// so this runs for PostgreSQL and MariaDB.
async fn database_outage(db: Backend) {
    const OUTAGE: Duration = Duration::from_secs(20);
    let work = Workload::words(40_000);
    let direct = TestDb::new(db);
    let proxy = Proxy::start(&direct.server());
    let through = direct.through(&proxy);
    let mut scenario = append_only(2);
    // A member that stops polling for this long is put out of the group: sluice must
    // keep polling through the outage, and through the rebalance in its middle too.
    scenario.extra_kafka = "    max.poll.interval.ms: 10000".into();
    let run = Pipeline::assemble(
        Broker::start(),
        direct,
        Some(&through),
        scenario,
        PARTITIONS,
    )
    .await;
    let started = Instant::now();
    // 40 s of records: before, during and after the outage.
    let producer = work.spawn(&run, 0..work.records, Some(1000));
    let sluice = run.start();
    let leaving = run.start();
    rows_move(&run, 5000, "the start").await;
    // The stop below must not land mid-rebalance (see `rebalance_storm`).
    if let Err(held) = wait_until_settled(&run, &[&sluice, &leaving]).await {
        stalled(
            &run,
            &format!("the group did not settle before the outage: {held:?}"),
        )
        .await;
    }
    proxy.down();
    let down_at = Instant::now();
    // A commit already on its way may land just after the cut; after that nothing can.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = run.stats().await.rows;
    // Mid-outage, one process stops (its batch cannot commit: it must still exit
    // promptly) and the group rebalances while no stored offset can be read; then a
    // third process starts, and waits for the database before it joins.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stop_started = Instant::now();
    let left = leaving.terminate();
    let stop_took = stop_started.elapsed();
    assert!(
        left.success(),
        "the process stopped mid-outage exited with {left}"
    );
    // Promptly: the batch being written is waited for at most 5 s, then given up.
    assert!(
        stop_took < Duration::from_secs(10),
        "the stop mid-outage took {stop_took:?}"
    );
    let second = run.start();
    tokio::time::sleep_until((down_at + OUTAGE).into()).await;
    let at_up = run.stats().await.rows;
    assert_eq!(
        at_up, during,
        "rows changed while the database was unreachable: the proxy let something through"
    );
    proxy.up();
    let outage = down_at.elapsed();
    let recovery = rows_move(&run, at_up, "the database's return").await;
    let produced_in = producer.await.expect("producer");
    let stats = run.wait_for_rows(work.expected_rows(), 180).await;
    let logs = [sluice.log.clone(), second.log.clone()];
    let statuses = [sluice.terminate(), second.terminate()];
    Summary::new("database_outage", &run, &work, started)
        .recovery(recovery)
        .outage(outage, during, at_up)
        .figure("processes", 3)
        .figure("stop_during_outage_ms", stop_took.as_millis())
        .produced_in(produced_in)
        .check(&work, stats);
    for (log, status) in logs.iter().zip(statuses) {
        assert!(
            status.success(),
            "sluice exited with {status}: {}",
            log.display()
        );
        let text = std::fs::read_to_string(log).expect("sluice log");
        assert!(
            !text.to_lowercase().contains("poll interval"),
            "a task stopped polling long enough to leave its group: {}",
            log.display()
        );
    }
}
for_each_database!(database_outage: postgres = Postgres, mariadb = MariaDb);

/// The broker unreachable for 15 s mid-run, then back: no loss, no duplicate.
///
/// The outage is at the network (a partition, say), the broker itself keeps running:
/// Tansu advertises a proxy's address, every client (sluice and the test's producer)
/// reaches it only through the proxy, and the proxy resets all connections and refuses new
/// ones for the outage. [`broker_restart`] kills the broker process instead.
async fn broker_outage(db: Backend) {
    const OUTAGE: Duration = Duration::from_secs(15);
    if std::env::var_os("KAFKA_BROKERS").is_some() {
        eprintln!("broker_outage: skipped with KAFKA_BROKERS (it needs a Tansu of its own)");
        return;
    }
    let work = Workload::words(30_000);
    let port = free_port();
    let proxy = Proxy::start(&format!("127.0.0.1:{port}"));
    let broker = Broker::start_on(port, &proxy.addr());
    let run = Pipeline::assemble(broker, TestDb::new(db), None, append_only(2), PARTITIONS).await;
    let started = Instant::now();
    let half = work.records / 2;
    // The first half flows while sluice runs, and is all acknowledged before the outage: a
    // producer cut off mid-request may retry a record that did land, a duplicate the broker
    // holds, which is not what this test is about.
    let sluice = run.start();
    let first = work.spawn(&run, 0..half, Some(2000));
    let mut produced_in = first.await.expect("producer");
    proxy.down();
    let down_at = Instant::now();
    let at_down = run.stats().await.rows;
    tokio::time::sleep_until((down_at + OUTAGE).into()).await;
    let at_up = run.stats().await.rows;
    proxy.up();
    let outage = down_at.elapsed();
    let second = work.spawn(&run, half..work.records, Some(2000));
    let recovery = rows_move(&run, at_up, "the broker's return").await;
    produced_in += second.await.expect("producer");
    let stats = run.wait_for_rows(work.expected_rows(), 180).await;
    let status = sluice.terminate();
    Summary::new("broker_outage", &run, &work, started)
        .recovery(recovery)
        .outage(outage, at_down, at_up)
        .produced_in(produced_in)
        .check(&work, stats);
    assert!(status.success(), "sluice exited with {status}");
}
for_each_database!(broker_outage: mariadb = MariaDb);

/// The broker killed (SIGKILL) while sluice is in the middle of reading, and started again
/// 15 s later on the same port and storage, then more records: no loss, no duplicate, and
/// rows move again soon after the restart.
///
/// Tansu keeps its log in a SQLite file here (the `libsql` storage engine, which
/// `scripts/setup.sh` builds in), so it comes back with every record it acknowledged. The
/// producer is idle during the kill: one cut off mid-request may send again a record that
/// did land, a duplicate the broker holds, which is not what this test is about.
async fn broker_restart(db: Backend) {
    const OUTAGE: Duration = Duration::from_secs(15);
    if std::env::var_os("KAFKA_BROKERS").is_some() {
        eprintln!("broker_restart: skipped with KAFKA_BROKERS (it needs a Tansu of its own)");
        return;
    }
    let work = Workload::words(20_000);
    let storage = tempfile::tempdir().expect("broker storage dir");
    let broker = Broker::start_persistent(storage.path());
    let mut run =
        Pipeline::assemble(broker, TestDb::new(db), None, append_only(2), PARTITIONS).await;
    let started = Instant::now();
    let half = work.records / 2;
    let mut produced_in = work.spawn(&run, 0..half, None).await.expect("producer");
    let sluice = run.start();
    rows_move(&run, half as i64 / 4, "the start").await;
    run.broker.kill();
    let down_at = Instant::now();
    let at_down = run.stats().await.rows;
    tokio::time::sleep_until((down_at + OUTAGE).into()).await;
    let at_up = run.stats().await.rows;
    run.broker.restart();
    let outage = down_at.elapsed();
    let second = work.spawn(&run, half..work.records, Some(1000));
    let recovery = rows_move(&run, at_up, "the broker's restart").await;
    produced_in += second.await.expect("producer");
    let stats = run.wait_for_rows(work.expected_rows(), 180).await;
    let status = sluice.terminate();
    Summary::new("broker_restart", &run, &work, started)
        .recovery(recovery)
        .outage(outage, at_down, at_up)
        .produced_in(produced_in)
        .check(&work, stats);
    assert!(status.success(), "sluice exited with {status}");
}
for_each_database!(broker_restart: sqlite = Sqlite);

/// Three processes in one group, started and stopped (SIGTERM) at random while records
/// flow, at least one running at the end: exactly the records produced, each once.
async fn rebalance_storm(db: Backend) {
    const PROCESSES: usize = 3;
    // 40 s of records: each change waits about 3 s for the group to settle (Tansu makes
    // each follower's JoinGroup wait 3 s), so this is about ten changes.
    const PACE: u64 = 750;
    let work = Workload::words(30_000);
    let (run, started, producer) = flowing(db, 1, &work, PACE).await;
    let mut slots: Vec<Option<SluiceProcess>> = (0..PROCESSES).map(|_| None).collect();
    slots[0] = Some(run.start());
    let (mut starts, mut stops) = (1u32, 0u32);
    let mut slowest_settle = Duration::ZERO;
    // Storm while the records flow. Each change waits for the group to settle first:
    // Tansu 0.6.0 keeps a leader that leaves mid-rebalance as the group's leader for good
    // (its Forming-state LeaveGroup does not clear it, and it has no rebalance timeout), so
    // a stop during a rebalance stalls the whole group; Kafka ends such a rebalance by its
    // timeout. A stop still lands while batches are being written.
    let storm = Duration::from_secs(work.records / PACE);
    while started.elapsed() < storm {
        tokio::time::sleep(random_millis(300..1500)).await;
        let slot = rand::random_range(0..PROCESSES);
        match slots[slot].take() {
            Some(process) => {
                let status = process.terminate();
                assert!(status.success(), "process {slot} exited with {status}");
                stops += 1;
            }
            None => {
                slots[slot] = Some(run.start());
                starts += 1;
            }
        }
        let running: Vec<&SluiceProcess> = slots.iter().flatten().collect();
        match wait_until_settled(&run, &running).await {
            Ok(took) => slowest_settle = slowest_settle.max(took),
            Err(held) => {
                stalled(
                    &run,
                    &format!("the group did not settle within {SETTLE_TIMEOUT:?} of a change; the consumers hold {held:?}"),
                )
                .await
            }
        }
    }
    if slots.iter().all(Option::is_none) {
        slots[0] = Some(run.start());
        starts += 1;
    }
    let running = slots.iter().filter(|s| s.is_some()).count();
    assert!(
        starts >= 2 && stops >= 1,
        "no storm: {starts} starts, {stops} stops"
    );
    let produced_in = producer.await.expect("producer");
    let stats = run.wait_for_rows(work.expected_rows(), 180).await;
    for (slot, process) in slots.into_iter().enumerate() {
        if let Some(process) = process {
            let status = process.terminate();
            assert!(status.success(), "process {slot} exited with {status}");
        }
    }
    Summary::new("rebalance_storm", &run, &work, started)
        .figure("starts", starts)
        .figure("stops", stops)
        .figure("running_at_end", running)
        .figure("slowest_settle_ms", slowest_settle.as_millis())
        .produced_in(produced_in)
        .check(&work, stats);
}
for_each_database!(rebalance_storm: postgres = Postgres);

/// Longest wait for a group to settle after one process started or stopped.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Waits until each of the `run.scenario.tasks` consumers of every running process holds
/// an assignment and together they hold each of the [`PARTITIONS`] once (from the `partitions assigned` /
/// `partitions revoked` lines of their logs; eager rebalancing revokes everything first,
/// so a consumer's last such line is what it holds). Returns how long that took, or what
/// each consumer held at the timeout. With nothing running there is nothing to settle.
async fn wait_until_settled(
    run: &Pipeline,
    running: &[&SluiceProcess],
) -> Result<Duration, Vec<Vec<i32>>> {
    let (tasks, timeout) = (run.scenario.tasks as usize, SETTLE_TIMEOUT);
    let started = Instant::now();
    if running.is_empty() {
        return Ok(Duration::ZERO);
    }
    loop {
        let held: Vec<Vec<i32>> = running.iter().flat_map(|p| assignments(&p.log)).collect();
        let mut all: Vec<i32> = held.iter().flatten().copied().collect();
        all.sort_unstable();
        let consumers = held.iter().filter(|h| !h.is_empty()).count();
        if consumers == running.len() * tasks && all == (0..PARTITIONS).collect::<Vec<_>>() {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            return Err(held);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What each task of a process holds after the last rebalance its log reports.
fn assignments(log: &std::path::Path) -> Vec<Vec<i32>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut held: std::collections::BTreeMap<u32, Vec<i32>> = Default::default();
    for line in text.lines() {
        let assigned = line.contains("partitions assigned");
        if !assigned && !line.contains("partitions revoked") {
            continue;
        }
        let Some(task) = field(line, " task=").and_then(|t| t.parse().ok()) else {
            continue;
        };
        // `partitions=[("topic", 0), ("topic", 1)]`
        let partitions = line
            .split_once("partitions=[")
            .and_then(|(_, rest)| rest.split_once(']'))
            .map(|(list, _)| {
                list.split(')')
                    .filter_map(|entry| entry.rsplit_once(", ").map(|(_, n)| n.trim()))
                    .filter_map(|n| n.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        held.insert(task, if assigned { partitions } else { Vec::new() });
    }
    held.into_values().collect()
}

/// The value of `name` (` key=`) in a log line of the text format.
/// The value of `name` (`" task="`) in a text log line: an event's field (`task=1 `) or
/// its span's (`task{connector=c task=1}:`).
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let (_, rest) = line.split_once(name)?;
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '}')
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The proxy itself: it forwards, `down` cuts live connections and refuses new ones, `up`
/// serves again on the same port.
mod proxy {
    use std::io::{ErrorKind, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    use super::harness::proxy::{Proxy, url_authority, url_through};

    /// An upstream that echoes every connection's bytes back.
    fn echo_server() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind echo server");
        let addr = listener.local_addr().expect("echo address").to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 || stream.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn connect(proxy: &Proxy) -> std::io::Result<TcpStream> {
        let stream = TcpStream::connect(proxy.addr())?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(stream)
    }

    /// The connection ended: a reset or an end of stream, not data and not a hang.
    fn assert_cut(stream: &mut TcpStream) {
        let mut buf = [0u8; 8];
        match stream.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => panic!("read {n} bytes from a connection that should be cut"),
            Err(e) => assert!(
                !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                "the connection hung instead of ending: {e}"
            ),
        }
    }

    fn echo(stream: &mut TcpStream, text: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(text)?;
        let mut back = vec![0u8; text.len()];
        stream.read_exact(&mut back)?;
        Ok(back)
    }

    #[test]
    fn forwards_cuts_refuses_and_comes_back_on_the_same_port() {
        let proxy = Proxy::start(&echo_server());
        let port = proxy.port();
        let mut live = connect(&proxy).expect("connect through the proxy");
        assert_eq!(echo(&mut live, b"hello").expect("echo"), b"hello");
        assert_eq!(proxy.live(), 1);

        proxy.down();
        assert_eq!(proxy.live(), 0);
        assert_cut(&mut live);
        let refused = TcpStream::connect(proxy.addr()).expect_err("connect while down");
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);

        proxy.up();
        assert_eq!(proxy.port(), port);
        let mut again = connect(&proxy).expect("connect after up");
        assert_eq!(echo(&mut again, b"again").expect("echo"), b"again");
        assert_eq!(proxy.accepted(), 2);
    }

    #[test]
    fn upstream_gone_resets_the_client() {
        let gone = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = gone.local_addr().expect("address").to_string();
        drop(gone);
        let proxy = Proxy::start(&addr);
        let mut stream = connect(&proxy).expect("the proxy accepts");
        assert_cut(&mut stream);
    }

    #[test]
    fn database_urls_go_through_the_proxy() {
        assert_eq!(
            url_authority("postgres://postgres@127.0.0.1:5432/test"),
            "127.0.0.1:5432"
        );
        assert_eq!(url_authority("mysql://root:pw@db/test"), "db:3306");
        assert_eq!(
            url_through(
                "mysql://root:p@ss@127.0.0.1:3306/test?ssl-mode=disabled",
                "127.0.0.1:4000"
            ),
            "mysql://root:p@ss@127.0.0.1:4000/test?ssl-mode=disabled"
        );
        assert_eq!(
            url_through("postgres://127.0.0.1/test", "127.0.0.1:4000"),
            "postgres://127.0.0.1:4000/test"
        );
    }
}

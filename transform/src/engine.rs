//! The process-wide engine: wasmtime configuration, the epoch ticker, the linker and the
//! compiled-component caches (in memory and on disk).

use std::collections::HashMap;
use std::hash::Hasher;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

use crate::TransformError;
use crate::cache::{DiskCache, hex};
use crate::host::{HostState, bindings};

/// How often the ticker thread advances the engine's epoch; the CPU deadline of a call
/// is a number of these ticks, so deadlines are accurate to about this much.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Options for [`TransformEngine::new`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineOptions {
    /// Where compiled components are cached across restarts. `None`: the default,
    /// [`default_cache_dir`]. If the directory cannot be used safely (it cannot be
    /// created, is not owned by sluice's user, or is writable by group or others), sluice
    /// logs a warning and compiles in memory only.
    pub cache_dir: Option<PathBuf>,
}

/// The default cache directory: `$SLUICE_CACHE_DIR`, else `$XDG_CACHE_HOME/sluice`, else
/// `$HOME/.cache/sluice` (`XDG_CACHE_HOME` and `HOME` only when absolute). `None` when
/// none of them is set: sluice then compiles in memory only. There is deliberately no
/// fallback to a shared temporary directory, where another user could plant machine code.
pub fn default_cache_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = var("SLUICE_CACHE_DIR") {
        return Some(dir);
    }
    if let Some(dir) = var("XDG_CACHE_HOME").filter(|d| d.is_absolute()) {
        return Some(dir.join("sluice"));
    }
    var("HOME")
        .filter(|d| d.is_absolute())
        .map(|home| home.join(".cache").join("sluice"))
}

/// The shared WebAssembly engine. Cheap to clone (an `Arc`); create one per process.
///
/// It owns the wasmtime `Engine` (Cranelift, component model, epoch interruption), a
/// background thread that ticks the epoch every 10 ms (it stops when the last clone is
/// dropped), the linker with WASI and the `log` import, and the caches of compiled
/// components.
#[derive(Clone)]
pub struct TransformEngine {
    pub(crate) inner: Arc<EngineInner>,
}

/// One entry of the in-memory cache: filled by the first load of that content; concurrent
/// loads of the same content wait on its lock instead of compiling it again.
type Slot = Arc<Mutex<Option<Arc<Loaded>>>>;

pub(crate) struct EngineInner {
    pub(crate) engine: Engine,
    linker: Linker<HostState>,
    /// The on-disk cache, or `None` when caching on disk is off.
    disk_cache: Option<DiskCache>,
    /// Loaded components by content hash, shared by every chain of the process.
    loaded: Mutex<HashMap<[u8; 32], Slot>>,
    /// Compiles started (Cranelift runs, not cache hits).
    compiles: AtomicU64,
    cache_max_bytes: AtomicU64,
    max_wasm_bytes: AtomicU64,
    compile_timeout_nanos: AtomicU64,
}

/// A compiled, pre-linked plugin.
pub(crate) struct Loaded {
    pub(crate) pre: bindings::TransformPre<HostState>,
}

impl std::fmt::Debug for TransformEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransformEngine")
            .field("disk_cache", &self.cache_dir())
            .finish_non_exhaustive()
    }
}

/// Feeds `Hash` output into SHA-256, for a stable key of the engine's settings.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// A wasmtime error and its causes on one line (errors are printed one per line).
pub(crate) fn one_line(error: &wasmtime::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string().replace(['\n', '\r'], " ");
        // wasmtime repeats a cause's text in its context sometimes; keep one copy.
        if !parts.iter().any(|p| p.contains(text.trim())) {
            parts.push(text.trim().to_owned());
        }
    }
    parts.join(": ")
}

impl TransformEngine {
    /// Default cap on the total size of the on-disk compile cache (every engine version's
    /// subdirectory together): 512 MiB. After writing an entry, the least recently
    /// written entries are deleted until the total is under it.
    pub const DEFAULT_CACHE_MAX_BYTES: u64 = 512 << 20;
    /// Default cap on the size of a plugin's `.wasm` file: 64 MiB.
    pub const DEFAULT_MAX_WASM_BYTES: u64 = 64 << 20;
    /// Default bound on compiling one plugin: 60 s of the compile's CPU time (on Linux;
    /// wall-clock time elsewhere). Cranelift cannot be interrupted, so the compile runs on
    /// a helper thread; past this the load fails and the compile's result, when it comes,
    /// is dropped. CPU time, not wall time: a machine busy with other work compiles as
    /// much of the plugin in a second of CPU as an idle one, so a load that passes on an
    /// idle machine passes on one that gives the compile a tenth of a core or more (wall
    /// time failed a JavaScript plugin's cold compile beside five other processes on two
    /// cores).
    pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(60);
    /// A compile that has not used its CPU bound after this many times the bound in wall
    /// time (and at least a second more than the bound) fails all the same: the machine
    /// gives it less than a tenth of a core.
    pub const COMPILE_WALL_FACTOR: u32 = 10;

    /// Creates the engine and starts its epoch ticker thread.
    pub fn new(options: EngineOptions) -> Result<Self, TransformError> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        // A build with `guest-profiling` names the guests' functions for `perf`
        // (/tmp/perf-<pid>.map) when asked: docs/plugins.md, "Profiling a plugin".
        #[cfg(feature = "guest-profiling")]
        if std::env::var_os("SLUICE_WASM_PERFMAP").is_some_and(|v| v == "1") {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&config).map_err(|e| TransformError::Engine(one_line(&e)))?;

        let mut linker = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| TransformError::Engine(format!("cannot link WASI: {e:#}")))?;
        deny_blocking_clocks(&mut linker)
            .map_err(|e| TransformError::Engine(format!("cannot link the clock guard: {e:#}")))?;
        bindings::Transform::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(
            &mut linker,
            |state| state,
        )
        .map_err(|e| TransformError::Engine(format!("cannot link the host interface: {e:#}")))?;

        // Engine key: wasmtime's own compatibility hash (its version and every setting
        // that affects compiled code) plus our WIT version.
        let mut hasher = ShaHasher(Sha256::new());
        std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut hasher);
        hasher.write(crate::WIT_PACKAGE.as_bytes());
        let engine_key = hex(&hasher.0.finalize()[..12]);

        let disk_cache = match options.cache_dir.or_else(default_cache_dir) {
            None => {
                tracing::warn!(
                    "no plugin compile cache directory (set SLUICE_CACHE_DIR, XDG_CACHE_HOME or HOME); plugins will be compiled in memory at every start"
                );
                None
            }
            Some(root) => match DiskCache::open(&root, &format!("wasmtime-{engine_key}")) {
                Ok(cache) => Some(cache),
                Err(why) => {
                    tracing::warn!(
                        cache_dir = %root.display(),
                        reason = %why,
                        "not using the plugin compile cache; plugins will be compiled in memory at every start"
                    );
                    None
                }
            },
        };

        let weak = engine.weak();
        std::thread::Builder::new()
            .name("sluice-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })
            .map_err(|e| TransformError::Engine(format!("cannot start the epoch thread: {e}")))?;

        Ok(TransformEngine {
            inner: Arc::new(EngineInner {
                engine,
                linker,
                disk_cache,
                loaded: Mutex::new(HashMap::new()),
                compiles: AtomicU64::new(0),
                cache_max_bytes: AtomicU64::new(Self::DEFAULT_CACHE_MAX_BYTES),
                max_wasm_bytes: AtomicU64::new(Self::DEFAULT_MAX_WASM_BYTES),
                compile_timeout_nanos: AtomicU64::new(
                    Self::DEFAULT_COMPILE_TIMEOUT.as_nanos() as u64
                ),
            }),
        })
    }

    /// The on-disk cache directory in use (`None`: compiling in memory only).
    pub fn cache_dir(&self) -> Option<&Path> {
        self.inner.disk_cache.as_ref().map(|c| c.dir.as_path())
    }

    /// How many times this engine has compiled a plugin (cache hits not counted).
    #[doc(hidden)]
    pub fn compile_count(&self) -> u64 {
        self.inner.compiles.load(Ordering::Relaxed)
    }

    /// Overrides [`Self::DEFAULT_CACHE_MAX_BYTES`] (for tests; not a stable API).
    #[doc(hidden)]
    pub fn set_cache_max_bytes(&self, bytes: u64) {
        self.inner.cache_max_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Overrides [`Self::DEFAULT_MAX_WASM_BYTES`] (for tests; not a stable API).
    #[doc(hidden)]
    pub fn set_max_wasm_bytes(&self, bytes: u64) {
        self.inner.max_wasm_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Overrides [`Self::DEFAULT_COMPILE_TIMEOUT`] (for tests; not a stable API).
    #[doc(hidden)]
    pub fn set_compile_timeout(&self, timeout: Duration) {
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        self.inner
            .compile_timeout_nanos
            .store(nanos, Ordering::Relaxed);
    }

    /// Loads a plugin: from the in-memory cache, else the disk cache, else by compiling
    /// it (and writing the disk cache). Checks that it implements the world. Concurrent
    /// loads of the same content compile it once: the others wait for the first.
    pub(crate) fn load(&self, plugin: &str, path: &Path) -> Result<Arc<Loaded>, TransformError> {
        let bytes = read_plugin(
            plugin,
            path,
            self.inner.max_wasm_bytes.load(Ordering::Relaxed),
        )?;
        let digest: [u8; 32] = Sha256::digest(&bytes).into();
        let slot = self.lock_loaded().entry(digest).or_default().clone();
        // A panic while holding this lock leaves `None` (the next load compiles again).
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(hit) = slot.as_ref() {
            return Ok(hit.clone());
        }

        let component = self.compile_cached(plugin, path, bytes, &digest)?;
        let incompatible = |reason: String| TransformError::Incompatible {
            plugin: plugin.to_owned(),
            path: path.to_owned(),
            reason,
        };
        let instance_pre = self
            .inner
            .linker
            .instantiate_pre(&component)
            .map_err(|e| incompatible(one_line(&e)))?;
        let pre =
            bindings::TransformPre::new(instance_pre).map_err(|e| incompatible(one_line(&e)))?;
        let loaded = Arc::new(Loaded { pre });
        *slot = Some(loaded.clone());
        Ok(loaded)
    }

    fn lock_loaded(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Slot>> {
        // A panic while holding this lock cannot leave the map inconsistent.
        self.inner.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn compile_cached(
        &self,
        plugin: &str,
        path: &Path,
        bytes: Vec<u8>,
        digest: &[u8; 32],
    ) -> Result<Component, TransformError> {
        let engine = &self.inner.engine;
        let cache = self.inner.disk_cache.as_ref();
        let cap = self.inner.cache_max_bytes.load(Ordering::Relaxed);
        if let Some(cache) = cache {
            match cache.read(digest, cap) {
                Ok(None) => {}
                Ok(Some(image)) => {
                    // SAFETY: the image's HMAC, under this installation's key, binds it to
                    // the source's SHA-256 (and was checked before this call); it was
                    // written by `Component::serialize` of an engine with the same
                    // compatibility hash (in the directory name), and wasmtime checks the
                    // header, version and settings again. It was read into memory rather
                    // than mapped, so a file truncated or rewritten meanwhile cannot SIGBUS.
                    match unsafe { Component::deserialize(engine, &image) } {
                        Ok(component) => {
                            tracing::debug!(plugin, path = %path.display(), cache = %cache.entry(digest).display(), "loaded compiled plugin from cache");
                            return Ok(component);
                        }
                        Err(e) => {
                            tracing::warn!(plugin, cache = %cache.entry(digest).display(), error = %one_line(&e), "ignoring unusable compiled-plugin cache entry");
                        }
                    }
                }
                Err(why) => {
                    tracing::warn!(plugin, cache = %cache.entry(digest).display(), reason = %why, "ignoring and deleting a refused compiled-plugin cache entry");
                    cache.remove(digest);
                }
            }
        }

        let started = std::time::Instant::now();
        let component = self.compile_bounded(plugin, path, bytes)?;
        tracing::info!(plugin, path = %path.display(), elapsed_ms = started.elapsed().as_millis() as u64, "compiled plugin");
        if let Some(cache) = cache {
            match component.serialize() {
                Ok(image) => {
                    if let Err(e) = cache.write(digest, &image, cap) {
                        tracing::warn!(plugin, cache = %cache.entry(digest).display(), error = %e, "cannot write the compiled-plugin cache");
                    }
                }
                Err(e) => {
                    tracing::warn!(plugin, error = %one_line(&e), "cannot serialize the compiled plugin for the cache");
                }
            }
        }
        Ok(component)
    }

    /// Compiles on a helper thread and waits until the compile has used the compile
    /// timeout in CPU time, or ten times it in wall time (Cranelift cannot be
    /// interrupted; an abandoned compile finishes in the background and is dropped).
    fn compile_bounded(
        &self,
        plugin: &str,
        path: &Path,
        bytes: Vec<u8>,
    ) -> Result<Component, TransformError> {
        let timeout =
            Duration::from_nanos(self.inner.compile_timeout_nanos.load(Ordering::Relaxed));
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let engine = self.inner.engine.clone();
        self.inner.compiles.fetch_add(1, Ordering::Relaxed);
        let compiling = std::thread::Builder::new()
            .name("sluice-compile".into())
            .spawn(move || {
                // The receiver is gone if the load gave up waiting.
                let _ = tx.send(Component::new(&engine, &bytes));
            })
            .map_err(|source| TransformError::Io {
                context: format!("plugin `{plugin}`: cannot start a compile thread"),
                source,
            })?;
        let wall_bound = timeout
            .saturating_mul(Self::COMPILE_WALL_FACTOR)
            .max(timeout.saturating_add(Duration::from_secs(1)));
        let reason = match thread_cpu::wait(&rx, &compiling, timeout, wall_bound) {
            thread_cpu::Waited::Done(result) => {
                return result.map_err(|e| TransformError::Invalid {
                    plugin: plugin.to_owned(),
                    path: path.to_owned(),
                    reason: one_line(&e),
                });
            }
            thread_cpu::Waited::Gone => {
                return Err(TransformError::Invalid {
                    plugin: plugin.to_owned(),
                    path: path.to_owned(),
                    reason: "the compiler panicked".to_owned(),
                });
            }
            thread_cpu::Waited::OverBound { cpu } => format!(
                "compiling it took longer than {timeout:?}{}, the limit for one plugin compile (compile time grows with code size: make the plugin smaller)",
                if cpu { " of CPU time" } else { "" }
            ),
            thread_cpu::Waited::Starved { used } => format!(
                "compiling it took longer than {wall_bound:?} while it had used only {used:?} of CPU time: the machine gives the compile too little CPU (the limit for one plugin compile is {timeout:?} of CPU time, within {} times that in all)",
                Self::COMPILE_WALL_FACTOR
            ),
        };
        Err(TransformError::LoadLimit {
            plugin: plugin.to_owned(),
            path: path.to_owned(),
            reason,
        })
    }
}

/// Reads a plugin file, refusing one over `cap` bytes: by its length before reading, and
/// by reading at most `cap + 1` bytes (a file that grows meanwhile cannot get past).
fn read_plugin(plugin: &str, path: &Path, cap: u64) -> Result<Vec<u8>, TransformError> {
    let read_error = |source| TransformError::Read {
        plugin: plugin.to_owned(),
        path: path.to_owned(),
        source,
    };
    let too_large = |size: u64| TransformError::LoadLimit {
        plugin: plugin.to_owned(),
        path: path.to_owned(),
        reason: format!(
            "the file is {size} bytes, over the limit of {cap} bytes for a plugin file"
        ),
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let len = file.metadata().map_err(read_error)?.len();
    if len > cap {
        return Err(too_large(len));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    let mut limited = (&file).take(cap.saturating_add(1));
    limited.read_to_end(&mut bytes).map_err(read_error)?;
    if bytes.len() as u64 > cap {
        let now = file.metadata().map(|m| m.len()).unwrap_or(0);
        return Err(too_large(now.max(bytes.len() as u64)));
    }
    Ok(bytes)
}

/// The `wasi:clocks` version that wasmtime-wasi 48 links (see its `p2/wit/deps/clocks.wit`).
const WASI_MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// A guest attempted something the sandbox forbids at run time; reported as a trap.
#[derive(Debug)]
pub(crate) struct Denied(pub(crate) &'static str);

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Denied {}

/// Replaces the two WASI functions that let a guest *wait* (`subscribe-duration`,
/// `subscribe-instant`: what `std::thread::sleep` uses) with ones that trap. A wait
/// blocks inside the host, where epoch interruption cannot reach it, so a sleeping plugin
/// would stall its task for as long as it liked; with nothing else granted (no sockets,
/// closed stdin) the clocks are the only thing a plugin could wait on.
fn deny_blocking_clocks(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime_wasi::p2::DynPollable;
    const WHY: &str = "the plugin tried to sleep or wait on a clock; plugins must not block (they run under a CPU deadline)";
    linker.allow_shadowing(true);
    let mut clock = linker.instance(WASI_MONOTONIC_CLOCK)?;
    clock.func_wrap(
        "subscribe-duration",
        |_, (_,): (u64,)| -> wasmtime::Result<(Resource<DynPollable>,)> {
            Err(wasmtime::Error::new(Denied(WHY)))
        },
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |_, (_,): (u64,)| -> wasmtime::Result<(Resource<DynPollable>,)> {
            Err(wasmtime::Error::new(Denied(WHY)))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// The CPU time one thread has used, read from another thread: how a compile is bounded
/// by the work it did rather than by how long a busy machine took to give it the CPU.
mod thread_cpu {
    use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
    use std::time::{Duration, Instant};

    /// How a wait for a thread's one message ended.
    pub(super) enum Waited<T> {
        /// The thread sent it.
        Done(T),
        /// The thread ended without sending (it panicked).
        Gone,
        /// The thread used `bound` of CPU time without sending (`cpu`: as its CPU clock
        /// read; without one, as wall time).
        OverBound { cpu: bool },
        /// `wall_bound` passed before the thread had used `bound` of CPU time.
        Starved { used: Duration },
    }

    /// Waits for `thread`'s message on `rx` until the thread has used `bound` of CPU time
    /// (wall time where its CPU clock cannot be read), or `wall_bound` has passed. The
    /// thread's work runs on that one thread, so its CPU time grows no faster than wall
    /// time: waiting for what is left of `bound` cannot overshoot it.
    pub(super) fn wait<T, H>(
        rx: &Receiver<T>,
        thread: &std::thread::JoinHandle<H>,
        bound: Duration,
        wall_bound: Duration,
    ) -> Waited<T> {
        let clock = Clock::of(thread);
        let started = Instant::now();
        loop {
            let used = clock.as_ref().map_or(started.elapsed(), Clock::used);
            let Some(left) = bound.checked_sub(used).filter(|d| !d.is_zero()) else {
                // A thread that ended as its clock was read is not over the bound (and an
                // ended thread's clock id may name another thread by now).
                return match rx.try_recv() {
                    Ok(message) => Waited::Done(message),
                    Err(TryRecvError::Disconnected) => Waited::Gone,
                    Err(TryRecvError::Empty) => Waited::OverBound {
                        cpu: clock.is_some(),
                    },
                };
            };
            let Some(wall_left) = wall_bound
                .checked_sub(started.elapsed())
                .filter(|d| !d.is_zero())
            else {
                return Waited::Starved { used };
            };
            match rx.recv_timeout(left.min(wall_left)) {
                Ok(message) => return Waited::Done(message),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Waited::Gone,
            }
        }
    }

    /// A running thread's CPU clock (`pthread_getcpuclockid`).
    #[cfg(target_os = "linux")]
    pub(super) struct Clock(libc::clockid_t);

    #[cfg(target_os = "linux")]
    impl Clock {
        /// The clock of `thread`, while it runs; `None` where it cannot be had.
        pub(super) fn of<T>(thread: &std::thread::JoinHandle<T>) -> Option<Clock> {
            use std::os::unix::thread::JoinHandleExt;
            let mut clock: libc::clockid_t = 0;
            // SAFETY: the handle names a thread that is not yet joined (and is not
            // detached: the JoinHandle is alive), so its pthread_t is valid; `clock` is a
            // valid place to write the id.
            let rc = unsafe { libc::pthread_getcpuclockid(thread.as_pthread_t(), &mut clock) };
            (rc == 0).then_some(Clock(clock))
        }

        /// The CPU time the thread has used. A thread that has ended reads as no time
        /// (its clock id is gone), or, were its id reused, as another thread's: the
        /// caller reads the compile's channel before it believes a reading over the
        /// bound.
        pub(super) fn used(&self) -> Duration {
            let mut now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `now` is a valid timespec to write; an ended thread's clock id makes
            // the call fail (EINVAL), which is handled, not undefined.
            if unsafe { libc::clock_gettime(self.0, &mut now) } != 0 {
                return Duration::ZERO;
            }
            Duration::new(
                u64::try_from(now.tv_sec).unwrap_or(0),
                u32::try_from(now.tv_nsec).unwrap_or(0),
            )
        }
    }

    #[cfg(all(test, target_os = "linux"))]
    mod tests {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::{Duration, Instant};

        use super::Clock;

        /// A thread that waits uses no CPU however long it waits, and one that works
        /// shows its work: the compile bound counts the second, not the first.
        #[test]
        fn a_thread_clock_counts_work_not_waiting() {
            let stop = Arc::new(AtomicBool::new(false));
            let spin = {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n = std::hint::black_box(n.wrapping_add(1));
                    }
                })
            };
            let (wake, asleep) = std::sync::mpsc::channel::<()>();
            let sleep = std::thread::spawn(move || {
                let _ = asleep.recv();
            });
            let (spinning, sleeping) = (
                Clock::of(&spin).expect("clock"),
                Clock::of(&sleep).expect("clock"),
            );
            let deadline = Instant::now() + Duration::from_secs(30);
            while spinning.used() < Duration::from_millis(200) {
                assert!(
                    Instant::now() < deadline,
                    "the spinning thread shows no CPU"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            let slept = sleeping.used();
            stop.store(true, Ordering::Relaxed);
            let _ = wake.send(());
            spin.join().expect("spin");
            sleep.join().expect("sleep");
            assert!(
                slept < Duration::from_millis(50),
                "a waiting thread used {slept:?}"
            );
        }

        /// A thread that takes three times the bound in wall time but little CPU (it
        /// waits, as a compile waits for a busy machine's cores) is waited for; one that
        /// works past the bound is not, and one that never gets going ends at the wall
        /// bound. With a bound of wall time the first would fail.
        #[test]
        fn a_wait_is_bounded_by_the_cpu_the_thread_uses() {
            use super::{Waited, wait};
            let bound = Duration::from_millis(100);
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            let slow = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                let _ = tx.send(42);
            });
            let waited = wait(&rx, &slow, bound, Duration::from_secs(30));
            assert!(
                matches!(waited, Waited::Done(42)),
                "a waiting thread was given up"
            );
            slow.join().expect("slow");

            let stop = Arc::new(AtomicBool::new(false));
            let (tx, rx) = std::sync::mpsc::sync_channel::<u32>(1);
            let busy = {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n = std::hint::black_box(n.wrapping_add(1));
                    }
                    drop(tx);
                })
            };
            let waited = wait(&rx, &busy, bound, Duration::from_secs(30));
            stop.store(true, Ordering::Relaxed);
            busy.join().expect("busy");
            assert!(matches!(waited, Waited::OverBound { cpu: true }));

            let (wake, asleep) = std::sync::mpsc::channel::<()>();
            let (tx, rx) = std::sync::mpsc::sync_channel::<u32>(1);
            let idle = std::thread::spawn(move || {
                let _ = asleep.recv();
                drop(tx);
            });
            let started = Instant::now();
            let waited = wait(&rx, &idle, bound, Duration::from_millis(500));
            assert!(matches!(waited, Waited::Starved { .. }));
            assert!(started.elapsed() >= Duration::from_millis(500));
            let _ = wake.send(());
            idle.join().expect("idle");
        }
    }

    /// Elsewhere the compile is bounded by wall time.
    #[cfg(not(target_os = "linux"))]
    pub(super) struct Clock;

    #[cfg(not(target_os = "linux"))]
    impl Clock {
        pub(super) fn of<T>(_: &std::thread::JoinHandle<T>) -> Option<Clock> {
            None
        }

        pub(super) fn used(&self) -> Duration {
            Duration::ZERO
        }
    }
}

//! The process-wide engine: wasmtime configuration, the epoch ticker, the linker and the
//! compiled-component caches (in memory and on disk).

use std::collections::HashMap;
use std::hash::Hasher;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

use crate::TransformError;
use crate::host::{HostState, bindings};

/// How often the ticker thread advances the engine's epoch; the CPU deadline of a call
/// is a number of these ticks, so deadlines are accurate to about this much.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Options for [`TransformEngine::new`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineOptions {
    /// Where compiled components are cached across restarts. `None`: the default,
    /// [`default_cache_dir`]. If the directory cannot be created or written, sluice logs a
    /// warning and compiles in memory only.
    pub cache_dir: Option<PathBuf>,
}

/// The default cache directory: `$SLUICE_CACHE_DIR`, else `$XDG_CACHE_HOME/sluice`, else
/// `$HOME/.cache/sluice`, else `<tmp>/sluice-cache`.
pub fn default_cache_dir() -> PathBuf {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = var("SLUICE_CACHE_DIR") {
        return dir;
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return dir.join("sluice");
    }
    if let Some(home) = var("HOME") {
        return home.join(".cache").join("sluice");
    }
    std::env::temp_dir().join("sluice-cache")
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

pub(crate) struct EngineInner {
    pub(crate) engine: Engine,
    linker: Linker<HostState>,
    /// `<cache root>/<engine key>`, or `None` when caching on disk is off.
    disk_cache: Option<PathBuf>,
    /// Loaded components by content hash, shared by every chain of the process.
    loaded: Mutex<HashMap<[u8; 32], Arc<Loaded>>>,
}

/// A compiled, pre-linked plugin.
pub(crate) struct Loaded {
    pub(crate) pre: bindings::TransformPre<HostState>,
}

impl std::fmt::Debug for TransformEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransformEngine")
            .field("disk_cache", &self.inner.disk_cache)
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl TransformEngine {
    /// Creates the engine and starts its epoch ticker thread.
    pub fn new(options: EngineOptions) -> Result<Self, TransformError> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
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

        let root = options.cache_dir.unwrap_or_else(default_cache_dir);
        let dir = root.join(format!("wasmtime-{engine_key}"));
        let disk_cache = match std::fs::create_dir_all(&dir) {
            Ok(()) => Some(dir),
            Err(e) => {
                tracing::warn!(
                    cache_dir = %dir.display(),
                    error = %e,
                    "cannot create the plugin compile cache; plugins will be compiled at every start"
                );
                None
            }
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
            }),
        })
    }

    /// The on-disk cache directory in use (`None`: compiling in memory only).
    pub fn cache_dir(&self) -> Option<&Path> {
        self.inner.disk_cache.as_deref()
    }

    /// Loads a plugin: from the in-memory cache, else the disk cache, else by compiling
    /// it (and writing the disk cache). Checks that it implements the world.
    pub(crate) fn load(&self, plugin: &str, path: &Path) -> Result<Arc<Loaded>, TransformError> {
        let bytes = std::fs::read(path).map_err(|source| TransformError::Read {
            plugin: plugin.to_owned(),
            path: path.to_owned(),
            source,
        })?;
        let digest: [u8; 32] = Sha256::digest(&bytes).into();
        if let Some(hit) = self.lock_loaded().get(&digest) {
            return Ok(hit.clone());
        }

        let component = self.compile_cached(plugin, path, &bytes, &digest)?;
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
        self.lock_loaded().insert(digest, loaded.clone());
        Ok(loaded)
    }

    fn lock_loaded(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Arc<Loaded>>> {
        // A panic while holding this lock cannot leave the map inconsistent.
        self.inner.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn compile_cached(
        &self,
        plugin: &str,
        path: &Path,
        bytes: &[u8],
        digest: &[u8; 32],
    ) -> Result<Component, TransformError> {
        let engine = &self.inner.engine;
        let cached = self
            .inner
            .disk_cache
            .as_ref()
            .map(|dir| dir.join(format!("{}.cwasm", hex(digest))));
        if let Some(file) = cached.as_ref().filter(|f| f.is_file()) {
            // Read into memory rather than `deserialize_file`'s mmap: a cache file that is
            // truncated or rewritten in place (by a cleaner, an operator) while mapped would
            // kill the process with SIGBUS.
            let loaded = std::fs::read(file)
                .map_err(wasmtime::Error::new)
                .and_then(|image| {
                    // SAFETY: the file was written by `Component::serialize` of an engine with
                    // the same compatibility hash (it is in the directory name), under a name
                    // that is the SHA-256 of its source; wasmtime checks the header, version
                    // and settings again. The cache directory must be as trusted as the sluice
                    // binary itself (as for wasmtime's own cache).
                    unsafe { Component::deserialize(engine, &image) }
                });
            match loaded {
                Ok(component) => {
                    tracing::debug!(plugin, path = %path.display(), cache = %file.display(), "loaded compiled plugin from cache");
                    return Ok(component);
                }
                Err(e) => {
                    tracing::warn!(plugin, cache = %file.display(), error = %e, "ignoring unusable compiled-plugin cache entry");
                }
            }
        }

        let started = std::time::Instant::now();
        let component = Component::new(engine, bytes).map_err(|e| TransformError::Invalid {
            plugin: plugin.to_owned(),
            path: path.to_owned(),
            reason: one_line(&e),
        })?;
        tracing::info!(plugin, path = %path.display(), elapsed_ms = started.elapsed().as_millis() as u64, "compiled plugin");
        if let Some(file) = cached
            && let Err(e) = write_atomically(&file, &component)
        {
            tracing::warn!(plugin, cache = %file.display(), error = %e, "cannot write the compiled-plugin cache");
        }
        Ok(component)
    }
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

/// Writes the serialized component to a temporary file next to `file`, then renames it, so
/// a concurrent reader never sees half a file.
fn write_atomically(file: &Path, component: &Component) -> Result<(), String> {
    let bytes = component.serialize().map_err(|e| one_line(&e))?;
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = file.with_extension(format!("tmp{}-{seq}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, file)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e| e.to_string())
}

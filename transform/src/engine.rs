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
    disk_cache: Option<disk::DiskCache>,
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl TransformEngine {
    /// Default cap on the total size of the on-disk compile cache (every engine version's
    /// subdirectory together): 512 MiB. After writing an entry, the least recently
    /// written entries are deleted until the total is under it.
    pub const DEFAULT_CACHE_MAX_BYTES: u64 = 512 << 20;
    /// Default cap on the size of a plugin's `.wasm` file: 64 MiB.
    pub const DEFAULT_MAX_WASM_BYTES: u64 = 64 << 20;
    /// Default bound on compiling one plugin: 60 s. Cranelift cannot be interrupted, so
    /// the compile runs on a helper thread; past this the load fails and the compile's
    /// result, when it comes, is dropped.
    pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(60);

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

        let disk_cache = match options.cache_dir.or_else(default_cache_dir) {
            None => {
                tracing::warn!(
                    "no plugin compile cache directory (set SLUICE_CACHE_DIR, XDG_CACHE_HOME or HOME); plugins will be compiled in memory at every start"
                );
                None
            }
            Some(root) => match disk::DiskCache::open(&root, &format!("wasmtime-{engine_key}")) {
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

    /// Compiles on a helper thread and waits at most the compile timeout (Cranelift cannot
    /// be interrupted; an abandoned compile finishes in the background and is dropped).
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
        std::thread::Builder::new()
            .name("sluice-compile".into())
            .spawn(move || {
                // The receiver is gone if the load gave up waiting.
                let _ = tx.send(Component::new(&engine, &bytes));
            })
            .map_err(|source| TransformError::Io {
                context: format!("plugin `{plugin}`: cannot start a compile thread"),
                source,
            })?;
        match rx.recv_timeout(timeout) {
            Ok(result) => result.map_err(|e| TransformError::Invalid {
                plugin: plugin.to_owned(),
                path: path.to_owned(),
                reason: one_line(&e),
            }),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(TransformError::LoadLimit {
                plugin: plugin.to_owned(),
                path: path.to_owned(),
                reason: format!(
                    "compiling it took longer than {timeout:?}, the limit for one plugin compile (compile time grows with code size: make the plugin smaller)"
                ),
            }),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(TransformError::Invalid {
                plugin: plugin.to_owned(),
                path: path.to_owned(),
                reason: "the compiler panicked".to_owned(),
            }),
        }
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

/// HMAC-SHA256 (RFC 2104) of the concatenated `parts` under a 32-byte key.
fn hmac_sha256(key: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    for part in parts {
        inner.update(part);
    }
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// Compares without an early exit, so the time taken does not tell how much matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The on-disk cache of compiled components.
///
/// Layout: `<root>/cache.key` (this installation's 32-byte HMAC key, mode 0600) and
/// `<root>/wasmtime-<engine key>/<sha256 of the .wasm>.cwasm`, each entry being
/// `MAGIC || HMAC-SHA256(key, DOMAIN || sha256 || image) || image`. Compiled code is
/// trusted code: the root and the engine directory must be owned by sluice's user and
/// not writable by group or others; entries must be regular files (never followed
/// through a link) with a valid HMAC, or they are deleted and the plugin recompiled.
#[cfg(unix)]
mod disk {
    use std::fs::{self, File, Metadata, OpenOptions};
    use std::hash::{BuildHasher, Hasher};
    use std::io::{self, Read, Write};
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
    use std::path::{Path, PathBuf};
    use std::time::SystemTime;

    use super::{constant_time_eq, hex, hmac_sha256};

    /// First bytes of every entry: format version 1.
    const MAGIC: &[u8; 8] = b"SLUICEC\x01";
    /// MAGIC and the HMAC.
    const HEADER: usize = MAGIC.len() + 32;
    /// What the HMAC covers besides the source digest and the image.
    const DOMAIN: &[u8] = b"sluice compiled plugin v1\0";
    const KEY_FILE: &str = "cache.key";
    const ENGINE_DIR_PREFIX: &str = "wasmtime-";

    // `O_NOFOLLOW` for `open(2)`: std has `custom_flags` but not the constant, and this
    // crate does not depend on `libc`. Values from the kernel's `fcntl.h` headers (a unit
    // test checks that opening a symlink with it fails).
    #[cfg(all(
        any(target_os = "linux", target_os = "android"),
        any(
            target_arch = "aarch64",
            target_arch = "arm",
            target_arch = "powerpc",
            target_arch = "powerpc64",
            target_arch = "m68k"
        )
    ))]
    pub(super) const O_NOFOLLOW: Option<i32> = Some(0o100000);
    // asm-generic: x86, x86_64, riscv, s390x, loongarch, mips, sparc.
    #[cfg(all(
        any(target_os = "linux", target_os = "android"),
        not(any(
            target_arch = "aarch64",
            target_arch = "arm",
            target_arch = "powerpc",
            target_arch = "powerpc64",
            target_arch = "m68k"
        ))
    ))]
    pub(super) const O_NOFOLLOW: Option<i32> = Some(0o400000);
    #[cfg(any(
        target_vendor = "apple",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "dragonfly"
    ))]
    pub(super) const O_NOFOLLOW: Option<i32> = Some(0x0100);
    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_vendor = "apple",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "dragonfly"
    )))]
    pub(super) const O_NOFOLLOW: Option<i32> = None;

    // The C library std itself links on every Unix; `geteuid` cannot fail and `uid_t` is
    // 32 bits on the platforms above.
    unsafe extern "C" {
        safe fn geteuid() -> u32;
    }

    pub(crate) struct DiskCache {
        root: PathBuf,
        /// `<root>/wasmtime-<engine key>`.
        pub(crate) dir: PathBuf,
        key: [u8; 32],
        euid: u32,
        nofollow: i32,
    }

    impl DiskCache {
        /// Creates (mode 0700) or checks `root` and `root/engine_dir`, and reads or
        /// creates the key. `Err` says why the cache must not be used.
        pub(crate) fn open(root: &Path, engine_dir: &str) -> Result<Self, String> {
            let nofollow = O_NOFOLLOW.ok_or(
                "the on-disk cache is not supported on this platform (no known O_NOFOLLOW)",
            )?;
            let euid = geteuid();
            // The root may be a symlink (e.g. SLUICE_CACHE_DIR): its target is checked.
            secure_dir(root, true, euid)?;
            let dir = root.join(engine_dir);
            secure_dir(&dir, false, euid)?;
            let key_file = root.join(KEY_FILE);
            let key = load_or_create_key(&key_file, root, euid, nofollow)
                .map_err(|e| format!("{}: {e}", key_file.display()))?;
            Ok(DiskCache {
                root: root.to_owned(),
                dir,
                key,
                euid,
                nofollow,
            })
        }

        /// Where the entry for this source digest lives.
        pub(crate) fn entry(&self, digest: &[u8; 32]) -> PathBuf {
            self.dir.join(format!("{}.cwasm", hex(digest)))
        }

        fn tag(&self, digest: &[u8; 32], image: &[u8]) -> [u8; 32] {
            hmac_sha256(&self.key, &[DOMAIN, digest, image])
        }

        /// The verified image of the entry: `Ok(None)` if there is none, `Err(why)` if
        /// there is one that must not be used (not a regular file, foreign owner,
        /// writable by others, too large, bad header or HMAC).
        pub(crate) fn read(&self, digest: &[u8; 32], cap: u64) -> Result<Option<Vec<u8>>, String> {
            let (file, meta) = match open_regular(&self.entry(digest), self.nofollow) {
                Ok(opened) => opened,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e.to_string()),
            };
            check_owner_and_mode(&meta, self.euid, 0o022)?;
            if meta.len() > cap {
                return Err(format!(
                    "it is {} bytes, over the cache's cap of {cap} bytes",
                    meta.len()
                ));
            }
            let mut image = Vec::with_capacity(meta.len() as usize);
            (&file)
                .take(cap.saturating_add(1))
                .read_to_end(&mut image)
                .map_err(|e| format!("cannot read it: {e}"))?;
            if image.len() < HEADER || &image[..MAGIC.len()] != MAGIC {
                return Err("it is not a sluice cache entry (unknown header)".into());
            }
            if !constant_time_eq(
                &image[MAGIC.len()..HEADER],
                &self.tag(digest, &image[HEADER..]),
            ) {
                return Err(
                    "its HMAC does not match: it was altered, or written for other code or under another key"
                        .into(),
                );
            }
            image.drain(..HEADER);
            Ok(Some(image))
        }

        /// Deletes the entry (best effort; a directory in its place stays).
        pub(crate) fn remove(&self, digest: &[u8; 32]) {
            let _ = fs::remove_file(self.entry(digest));
        }

        /// Writes the entry through an exclusive temporary file (mode 0600, no link
        /// followed) renamed into place, then prunes the cache to `cap` bytes.
        pub(crate) fn write(&self, digest: &[u8; 32], image: &[u8], cap: u64) -> io::Result<()> {
            let size = (HEADER + image.len()) as u64;
            if size > cap {
                return Err(io::Error::other(format!(
                    "the entry ({size} bytes) is larger than the cache's cap ({cap} bytes)"
                )));
            }
            let (mut file, tmp) = create_temp(&self.dir, &hex(digest), self.nofollow)?;
            let tag = self.tag(digest, image);
            let result = file
                .write_all(MAGIC)
                .and_then(|()| file.write_all(&tag))
                .and_then(|()| file.write_all(image))
                .and_then(|()| file.sync_all())
                .and_then(|()| fs::rename(&tmp, self.entry(digest)));
            if result.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            result?;
            self.prune(cap);
            Ok(())
        }

        /// Deletes the least recently written files of every `wasmtime-*` directory of the
        /// root (older sluice or wasmtime versions included) until the total is `cap`
        /// bytes or less. Other files of the root are never touched.
        fn prune(&self, cap: u64) {
            let mut files: Vec<(SystemTime, PathBuf, u64)> = Vec::new();
            let Ok(dirs) = fs::read_dir(&self.root) else {
                return;
            };
            for dir in dirs.flatten() {
                // `DirEntry::metadata` does not follow symlinks.
                let ours = dir
                    .file_name()
                    .to_string_lossy()
                    .starts_with(ENGINE_DIR_PREFIX)
                    && dir
                        .metadata()
                        .is_ok_and(|m| m.is_dir() && m.uid() == self.euid);
                let Some(entries) = ours.then(|| fs::read_dir(dir.path()).ok()).flatten() else {
                    continue;
                };
                for entry in entries.flatten() {
                    if let Ok(meta) = entry.metadata()
                        && meta.is_file()
                    {
                        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                        files.push((modified, entry.path(), meta.len()));
                    }
                }
            }
            let mut total: u64 = files.iter().map(|f| f.2).sum();
            if total <= cap {
                return;
            }
            files.sort();
            let mut removed = 0u32;
            for (_, path, len) in files {
                if total <= cap {
                    break;
                }
                if fs::remove_file(&path).is_ok() {
                    total -= len;
                    removed += 1;
                }
            }
            tracing::info!(
                cache_dir = %self.root.display(),
                removed,
                total_bytes = total,
                cap_bytes = cap,
                "pruned the plugin compile cache to its size cap"
            );
        }
    }

    /// Creates `dir` (mode 0700, parents too) if missing, then checks that it is a
    /// directory owned by `euid` and not writable by group or others.
    fn secure_dir(dir: &Path, follow_link: bool, euid: u32) -> Result<(), String> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let meta = if follow_link {
            fs::metadata(dir)
        } else {
            fs::symlink_metadata(dir)
        }
        .map_err(|e| format!("cannot inspect {}: {e}", dir.display()))?;
        if meta.file_type().is_symlink() {
            return Err(format!("{} is a symbolic link", dir.display()));
        }
        if !meta.is_dir() {
            return Err(format!("{} is not a directory", dir.display()));
        }
        check_owner_and_mode(&meta, euid, 0o022).map_err(|why| format!("{}: {why}", dir.display()))
    }

    fn check_owner_and_mode(meta: &Metadata, euid: u32, forbidden: u32) -> Result<(), String> {
        if meta.uid() != euid {
            return Err(format!(
                "it is owned by uid {}, not by sluice's user (uid {euid})",
                meta.uid()
            ));
        }
        let mode = meta.mode() & 0o7777;
        if mode & forbidden != 0 {
            return Err(if forbidden == 0o022 {
                format!("it is writable by group or others (mode {mode:o}); `chmod go-w` it")
            } else {
                format!("its mode is {mode:o}, it must be 600")
            });
        }
        Ok(())
    }

    /// Opens a regular file for reading without following a link; refuses anything else
    /// (symlink, directory, FIFO, device) before opening it.
    fn open_regular(path: &Path, nofollow: i32) -> io::Result<(File, Metadata)> {
        let refuse = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("it is {what}, not a regular file"),
            )
        };
        let kind = fs::symlink_metadata(path)?.file_type();
        if kind.is_symlink() {
            return Err(refuse("a symbolic link"));
        }
        if !kind.is_file() {
            return Err(refuse("a directory or special file"));
        }
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(nofollow)
            .open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(refuse("a special file"));
        }
        Ok((file, meta))
    }

    /// Creates a new file next to where it will be renamed to: exclusively (`O_EXCL`, no
    /// link followed), mode 0600, under an unpredictable name.
    fn create_temp(dir: &Path, stem: &str, nofollow: i32) -> io::Result<(File, PathBuf)> {
        let random = std::collections::hash_map::RandomState::new();
        for attempt in 0u32..16 {
            let mut hasher = random.build_hasher();
            hasher.write_u32(attempt);
            hasher.write_u128(
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos(),
            );
            let path = dir.join(format!(
                ".{stem}.{}-{:016x}.tmp",
                std::process::id(),
                hasher.finish()
            ));
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(nofollow)
                .open(&path)
            {
                Ok(file) => return Ok((file, path)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "no free temporary file name",
        ))
    }

    /// Reads the installation's key, or makes one (from `/dev/urandom`) if there is none.
    /// Two processes racing both write a complete key to a temporary file; the hard link
    /// into place lets only one win, and the other reads the winner's.
    fn load_or_create_key(
        path: &Path,
        root: &Path,
        euid: u32,
        nofollow: i32,
    ) -> io::Result<[u8; 32]> {
        match read_key(path, euid, nofollow) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => return other,
        }
        let mut key = [0u8; 32];
        File::open("/dev/urandom")?.read_exact(&mut key)?;
        let (mut file, tmp) = create_temp(root, KEY_FILE, nofollow)?;
        let result = match file.write_all(&key).and_then(|()| file.sync_all()) {
            Err(e) => Err(e),
            Ok(()) => match fs::hard_link(&tmp, path) {
                Ok(()) => Ok(key),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    read_key(path, euid, nofollow)
                }
                // No hard links on this file system: last writer wins; entries written
                // under a losing key fail their HMAC later and are recompiled.
                Err(_) => fs::rename(&tmp, path).map(|()| key),
            },
        };
        let _ = fs::remove_file(&tmp);
        result
    }

    fn read_key(path: &Path, euid: u32, nofollow: i32) -> io::Result<[u8; 32]> {
        let (mut file, meta) = open_regular(path, nofollow)?;
        let invalid = |why: String| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("refusing the cache key: {why}; delete it to make a new one"),
            )
        };
        check_owner_and_mode(&meta, euid, 0o077).map_err(invalid)?;
        if meta.len() != 32 {
            return Err(invalid(format!("it is {} bytes, not 32", meta.len())));
        }
        let mut key = [0u8; 32];
        file.read_exact(&mut key)?;
        Ok(key)
    }
}

/// No on-disk cache off Unix: the ownership, mode and no-follow checks it relies on are
/// Unix ones.
#[cfg(not(unix))]
mod disk {
    use std::path::{Path, PathBuf};

    pub(crate) struct DiskCache {
        pub(crate) dir: PathBuf,
        never: std::convert::Infallible,
    }

    impl DiskCache {
        pub(crate) fn open(_root: &Path, _engine_dir: &str) -> Result<Self, String> {
            Err("the on-disk compile cache is supported on Unix only".into())
        }
        pub(crate) fn entry(&self, _digest: &[u8; 32]) -> PathBuf {
            match self.never {}
        }
        pub(crate) fn read(&self, _: &[u8; 32], _: u64) -> Result<Option<Vec<u8>>, String> {
            match self.never {}
        }
        pub(crate) fn remove(&self, _: &[u8; 32]) {
            match self.never {}
        }
        pub(crate) fn write(&self, _: &[u8; 32], _: &[u8], _: u64) -> std::io::Result<()> {
            match self.never {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 2: key "Jefe" (HMAC zero-pads keys, so 28 more zero bytes change nothing).
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        let mac = hmac_sha256(&key, &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[cfg(unix)]
    #[test]
    fn o_nofollow_refuses_a_symlink() {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let flag = disk::O_NOFOLLOW.expect("a known O_NOFOLLOW on this platform");
        let open = |p: &Path| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(flag)
                .open(p)
        };
        assert!(open(&target).is_ok());
        // Without the flag, the link would open its (existing) target.
        assert!(open(&link).is_err(), "O_NOFOLLOW must refuse a symlink");
    }
}

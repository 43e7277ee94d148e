//! The compile cache is trusted code: where it may live, who may own it, what entries are
//! refused, its size cap, and the bounds on loading (file size, compile time, one compile
//! per content).

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime};

use common::{rec, spec, values};
use sha2::{Digest, Sha256};
use sluice_transform::*;

const MAGIC: &[u8] = b"SLUICEC\x01";

fn engine_in(root: &Path) -> TransformEngine {
    TransformEngine::new(EngineOptions {
        cache_dir: Some(root.to_owned()),
    })
    .expect("engine")
}

fn load(engine: &TransformEngine, plugin: &str) {
    check_plugin(engine, &spec(plugin, plugin, &[])).expect("plugin loads");
}

/// The cache entry of an example plugin: `<cache dir>/<sha256 of the .wasm>.cwasm`.
fn entry_of(engine: &TransformEngine, plugin: &str) -> PathBuf {
    let wasm = fs::read(example_plugin_path(plugin)).unwrap();
    let digest: String = Sha256::digest(&wasm)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    engine
        .cache_dir()
        .expect("disk cache in use")
        .join(format!("{digest}.cwasm"))
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn set_age(path: &Path, age: Duration) {
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(SystemTime::now() - age)
        .unwrap();
}

/// A sparse file of `len` bytes (takes no disk space).
fn sparse(path: &Path, len: u64) {
    fs::File::create(path).unwrap().set_len(len).unwrap();
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
}

/// Runs `f` on a thread and fails the test if it does not finish in time (instead of
/// hanging the test binary).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("did not finish within {limit:?}"))
}

#[test]
fn cache_dirs_are_created_0700_and_entries_0600_with_a_checksum_header() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("a").join("cache");
    let engine = engine_in(&root);
    let dir = engine.cache_dir().expect("disk cache in use").to_owned();
    assert_eq!(dir.parent(), Some(root.as_path()));
    assert_eq!(mode(&root), 0o700);
    assert_eq!(mode(&dir), 0o700);
    let key = root.join("cache.key");
    assert_eq!(mode(&key), 0o600);
    assert_eq!(fs::metadata(&key).unwrap().len(), 32);

    load(&engine, "word_parse");
    let entry = entry_of(&engine, "word_parse");
    assert_eq!(mode(&entry), 0o600);
    let bytes = fs::read(&entry).unwrap();
    assert_eq!(&bytes[..MAGIC.len()], MAGIC);
    // No temporary file left behind.
    assert_eq!(
        names(&dir),
        vec![entry.file_name().unwrap().to_string_lossy().into_owned()]
    );
}

#[test]
fn group_or_world_writable_cache_dirs_are_refused() {
    // 1777 is /tmp's mode: sticky does not make a shared directory safe for code.
    for bad in [0o777, 0o770, 0o720, 0o702, 0o1777] {
        let root = tempfile::tempdir().unwrap();
        chmod(root.path(), bad);
        let engine = engine_in(root.path());
        assert_eq!(engine.cache_dir(), None, "mode {bad:o} must be refused");
        load(&engine, "word_parse");
        assert_eq!(engine.compile_count(), 1);
        assert!(
            names(root.path()).is_empty(),
            "nothing written into a refused dir (mode {bad:o})"
        );
    }

    // The root is fine but the engine's subdirectory is group-writable.
    let root = tempfile::tempdir().unwrap();
    let dir = engine_in(root.path()).cache_dir().unwrap().to_owned();
    chmod(&dir, 0o770);
    let engine = engine_in(root.path());
    assert_eq!(engine.cache_dir(), None);
    load(&engine, "word_parse");
    assert!(names(&dir).is_empty());

    // A symlink in place of the engine's subdirectory is refused too (even to a good dir).
    let root = tempfile::tempdir().unwrap();
    let dir = engine_in(root.path()).cache_dir().unwrap().to_owned();
    let elsewhere = tempfile::tempdir().unwrap();
    fs::remove_dir(&dir).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), &dir).unwrap();
    let engine = engine_in(root.path());
    assert_eq!(engine.cache_dir(), None);
    load(&engine, "word_parse");
    assert!(names(elsewhere.path()).is_empty());
}

#[test]
fn cache_dirs_owned_by_another_user_are_refused() {
    let probe = tempfile::tempfile().unwrap();
    if probe.metadata().unwrap().uid() != 0 {
        eprintln!(
            "SKIPPED: making a directory owned by another user needs root (this test runs as uid {})",
            probe.metadata().unwrap().uid()
        );
        return;
    }
    const NOBODY: u32 = 65534;

    let root = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(root.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let engine = engine_in(root.path());
    assert_eq!(engine.cache_dir(), None, "a root owned by uid {NOBODY}");
    load(&engine, "word_parse");
    assert!(names(root.path()).is_empty());

    // Our root, someone else's engine subdirectory.
    let root = tempfile::tempdir().unwrap();
    let dir = engine_in(root.path()).cache_dir().unwrap().to_owned();
    std::os::unix::fs::chown(&dir, Some(NOBODY), None).unwrap();
    let engine = engine_in(root.path());
    assert_eq!(
        engine.cache_dir(),
        None,
        "an engine dir owned by uid {NOBODY}"
    );

    // Our dirs, someone else's entry: recompiled, not loaded.
    let root = tempfile::tempdir().unwrap();
    let first = engine_in(root.path());
    load(&first, "word_parse");
    let entry = entry_of(&first, "word_parse");
    std::os::unix::fs::chown(&entry, Some(NOBODY), None).unwrap();
    let second = engine_in(root.path());
    load(&second, "word_parse");
    assert_eq!(second.compile_count(), 1);
    assert_eq!(fs::metadata(&entry).unwrap().uid(), 0, "entry replaced");
}

/// With no SLUICE_CACHE_DIR, XDG_CACHE_HOME or HOME, sluice compiles in memory only: it
/// never falls back to the (shared) temporary directory. Runs in a child process with a
/// cleared environment and TMPDIR pointing at an empty directory.
#[test]
fn no_cache_dir_configured_means_memory_only_never_tmp() {
    let tmp = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "no_cache_dir_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_clear()
        .env("SLUICE_CACHE_TEST_CHILD", "1")
        .env("TMPDIR", tmp.path())
        .current_dir(tmp.path())
        // Relative XDG_CACHE_HOME and HOME are ignored (the XDG spec says so).
        .env("XDG_CACHE_HOME", "relative/cache")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child test ran: {text}");
    assert!(
        names(tmp.path()).is_empty(),
        "nothing written to TMPDIR: {:?}",
        names(tmp.path())
    );
}

#[test]
#[ignore = "run by no_cache_dir_configured_means_memory_only_never_tmp, in a clean environment"]
fn no_cache_dir_child() {
    if std::env::var_os("SLUICE_CACHE_TEST_CHILD").is_none() {
        return;
    }
    assert_eq!(default_cache_dir(), None);
    let engine = TransformEngine::new(EngineOptions::default()).unwrap();
    assert_eq!(engine.cache_dir(), None);
    load(&engine, "word_parse");
}

#[test]
fn a_tampered_entry_is_recompiled_not_loaded() {
    let root = tempfile::tempdir().unwrap();
    let first = engine_in(root.path());
    load(&first, "word_parse");
    assert_eq!(first.compile_count(), 1);
    let entry = entry_of(&first, "word_parse");

    // Flip one byte in the middle of the compiled code.
    let mut bytes = fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    fs::write(&entry, &bytes).unwrap();
    chmod(&entry, 0o600);

    let second = engine_in(root.path());
    let mut chain = TransformChain::new(&second, "t", &[spec("parse", "word_parse", &[])]).unwrap();
    assert_eq!(second.compile_count(), 1, "recompiled, not deserialized");
    let out = chain.process(vec![rec(0, "#1*ok@2")]).unwrap();
    assert_eq!(
        values(&out[0]),
        vec![r#"{"uid":1,"word":"ok","produced_at":2}"#]
    );
    let rewritten = fs::read(&entry).unwrap();
    assert_ne!(rewritten, bytes, "the tampered entry was replaced");

    // The replacement is good: the next start loads it without compiling.
    let third = engine_in(root.path());
    load(&third, "word_parse");
    assert_eq!(third.compile_count(), 0);

    // A different key (another installation's entries, or a replaced key) is refused too.
    fs::remove_file(root.path().join("cache.key")).unwrap();
    let fourth = engine_in(root.path());
    load(&fourth, "word_parse");
    assert_eq!(fourth.compile_count(), 1);
}

#[test]
fn an_entry_copied_under_another_plugins_name_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let first = engine_in(root.path());
    load(&first, "word_parse");
    load(&first, "account_parse");
    // Valid, correctly keyed code, but for other source bytes than the name says.
    fs::copy(
        entry_of(&first, "word_parse"),
        entry_of(&first, "account_parse"),
    )
    .unwrap();

    let second = engine_in(root.path());
    load(&second, "account_parse");
    assert_eq!(second.compile_count(), 1, "recompiled, not deserialized");
    let mut chain =
        TransformChain::new(&second, "t", &[spec("acct", "account_parse", &[])]).unwrap();
    assert_eq!(chain.process(vec![rec(0, "x")]).unwrap().len(), 1);
}

#[test]
fn a_symlinked_entry_is_not_followed() {
    let root = tempfile::tempdir().unwrap();
    let first = engine_in(root.path());
    load(&first, "word_parse");
    let entry = entry_of(&first, "word_parse");
    // A perfectly valid entry, moved out of the cache and linked back in.
    let outside = root.path().join("elsewhere.bin");
    fs::rename(&entry, &outside).unwrap();
    let original = fs::read(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, &entry).unwrap();

    let second = engine_in(root.path());
    load(&second, "word_parse");
    assert_eq!(second.compile_count(), 1, "the link was not followed");
    let meta = fs::symlink_metadata(&entry).unwrap();
    assert!(meta.is_file(), "the link was replaced by a regular file");
    assert_eq!(fs::read(&outside).unwrap(), original, "target untouched");
}

#[test]
fn entries_that_are_not_regular_files_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let probe = engine_in(root.path());
    let entry = entry_of(&probe, "word_parse");

    // A directory where the entry should be: compiled in memory, loads fine.
    fs::create_dir(&entry).unwrap();
    let engine = engine_in(root.path());
    load(&engine, "word_parse");
    assert_eq!(engine.compile_count(), 1);
    fs::remove_dir(&entry).unwrap();

    // A FIFO would block an open for reading forever; it must be refused before that.
    mkfifo(&entry);
    let root_path = root.path().to_owned();
    let engine = within(Duration::from_secs(120), move || {
        let engine = engine_in(&root_path);
        load(&engine, "word_parse");
        engine
    });
    assert_eq!(engine.compile_count(), 1);
    assert!(fs::symlink_metadata(&entry).unwrap().is_file());
}

#[test]
fn the_cache_is_pruned_to_its_size_cap_oldest_first() {
    const MIB: u64 = 1 << 20;
    let root = tempfile::tempdir().unwrap();
    let engine = engine_in(root.path());
    let dir = engine.cache_dir().unwrap().to_owned();

    // An older engine version's entry (oldest), an old entry of this engine, and a file
    // of the root that is not the cache's.
    let stale_dir = root.path().join("wasmtime-000000000000000000000000");
    fs::create_dir(&stale_dir).unwrap();
    chmod(&stale_dir, 0o700);
    let stale = stale_dir.join("stale.cwasm");
    sparse(&stale, 64 * MIB);
    set_age(&stale, Duration::from_secs(2 * 86400));
    let old = dir.join("old.cwasm");
    sparse(&old, 64 * MIB);
    set_age(&old, Duration::from_secs(86400));
    let foreign = root.path().join("notes.txt");
    sparse(&foreign, 512 * MIB);
    set_age(&foreign, Duration::from_secs(3 * 86400));

    // 64 + 64 MiB + the new entry > 96 MiB: only the oldest entry goes.
    engine.set_cache_max_bytes(96 * MIB);
    load(&engine, "word_parse");
    let word_parse = entry_of(&engine, "word_parse");
    assert!(!stale.exists(), "the oldest entry was deleted");
    assert!(old.exists());
    assert!(word_parse.exists());
    assert!(
        foreign.exists(),
        "files outside wasmtime-* dirs are not the cache's"
    );
    assert!(root.path().join("cache.key").exists());

    // 64 MiB + two entries > 64 MiB: the next oldest goes, the new entries stay.
    engine.set_cache_max_bytes(64 * MIB);
    load(&engine, "account_parse");
    assert!(!old.exists());
    assert!(word_parse.exists());
    assert!(entry_of(&engine, "account_parse").exists());
}

#[test]
fn concurrent_loads_of_one_plugin_compile_it_once() {
    let root = tempfile::tempdir().unwrap();
    let engine = engine_in(root.path());
    let threads = 6;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let engine = engine.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let mut chain =
                    TransformChain::new(&engine, "c", &[spec("parse", "word_parse", &[])])
                        .expect("chain");
                chain.process(vec![rec(0, "#1*ok@2")]).expect("batch");
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(engine.compile_count(), 1);

    // Same in memory only (no disk cache to share through).
    let root = tempfile::tempdir().unwrap();
    chmod(root.path(), 0o777);
    let engine = engine_in(root.path());
    assert_eq!(engine.cache_dir(), None);
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let engine = engine.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                load(&engine, "account_parse");
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(engine.compile_count(), 1);
}

#[test]
fn oversized_wasm_files_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let engine = engine_in(root.path());

    // Over the default cap, refused from its length alone (a sparse file: nothing read).
    let big = root.path().join("big.wasm");
    let size = TransformEngine::DEFAULT_MAX_WASM_BYTES + 1;
    sparse(&big, size);
    let mut s = spec("big", "word_parse", &[]);
    s.path = big.clone();
    let err = check_plugin(&engine, &s).unwrap_err();
    assert!(matches!(err, TransformError::LoadLimit { .. }), "{err}");
    assert_eq!(err.plugin(), Some("big"));
    let text = err.to_string();
    assert!(text.contains("plugin `big`"), "{text}");
    assert!(text.contains(&size.to_string()), "{text}");
    assert!(
        text.contains(&TransformEngine::DEFAULT_MAX_WASM_BYTES.to_string()),
        "{text}"
    );
    assert!(!err.is_batch_failure());

    // A lowered cap applies to a real plugin.
    engine.set_max_wasm_bytes(1000);
    let err = check_plugin(&engine, &spec("parse", "word_parse", &[])).unwrap_err();
    let len = fs::metadata(example_plugin_path("word_parse"))
        .unwrap()
        .len();
    assert!(
        err.to_string().contains(&format!("{len} bytes")) && err.to_string().contains("1000"),
        "{err}"
    );
    assert_eq!(engine.compile_count(), 0);

    // A file whose length says nothing (a FIFO fed without end) is read only up to the cap.
    engine.set_max_wasm_bytes(1 << 20);
    let fifo = root.path().join("endless.wasm");
    mkfifo(&fifo);
    let writer_path = fifo.clone();
    std::thread::spawn(move || {
        use std::io::Write;
        let mut w = fs::OpenOptions::new()
            .write(true)
            .open(writer_path)
            .unwrap();
        let chunk = vec![0u8; 64 << 10];
        // Ends with EPIPE once the reader gives up.
        while w.write_all(&chunk).is_ok() {}
    });
    let mut s = spec("endless", "word_parse", &[]);
    s.path = fifo;
    let engine2 = engine.clone();
    let err = within(Duration::from_secs(60), move || {
        check_plugin(&engine2, &s).unwrap_err()
    });
    assert!(matches!(err, TransformError::LoadLimit { .. }), "{err}");
    assert!(err.to_string().contains(&(1u64 << 20).to_string()), "{err}");
}

#[test]
fn compile_time_is_bounded() {
    let root = tempfile::tempdir().unwrap();
    let engine = engine_in(root.path());
    engine.set_compile_timeout(Duration::from_millis(1));
    let started = Instant::now();
    let err = check_plugin(&engine, &spec("parse", "word_parse", &[])).unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(err, TransformError::LoadLimit { .. }), "{err}");
    assert_eq!(err.plugin(), Some("parse"));
    assert!(
        err.to_string()
            .contains("compiling it took longer than 1ms"),
        "{err}"
    );
    assert!(waited < Duration::from_secs(5), "{waited:?}");

    // Nothing was cached for a failed load; with the default bound the plugin loads.
    assert!(names(engine.cache_dir().unwrap()).is_empty());
    engine.set_compile_timeout(TransformEngine::DEFAULT_COMPILE_TIMEOUT);
    load(&engine, "word_parse");
    assert_eq!(engine.compile_count(), 2);
}

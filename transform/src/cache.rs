//! The on-disk cache of compiled plugins. What it holds is machine code that sluice runs
//! as its own, so it is treated as trusted code: directories 0700 and owned by the user,
//! entries written exclusively without following links and checked with an HMAC (a key per
//! installation) before they are deserialized, and a size cap. See `docs/plugins.md`,
//! *Compile cache*.

use sha2::{Digest, Sha256};

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

pub(crate) use disk::DiskCache;

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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

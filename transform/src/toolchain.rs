//! Toolchain probes shared by `build.rs` (included with `#[path]`) and the plugin CLI.
//! Only `std` here: build scripts have no dependencies.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Rust target plugins are built for.
pub const WASM_TARGET: &str = "wasm32-wasip2";

/// The advice printed whenever the target is missing.
pub const INSTALL_HINT: &str = "the Rust target wasm32-wasip2 is not installed; run `rustup target add wasm32-wasip2` (once per toolchain) and build again";

/// Checks that the standard library for `wasm32-wasip2` is installed in the sysroot of
/// `rustc` (the `RUSTC` environment variable, else `rustc` on `PATH`).
///
/// Returns a message that says what to run when it is not.
pub fn check_wasm_target() -> Result<(), String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    check_wasm_target_with(Path::new(&rustc))
}

/// [`check_wasm_target`] for a given `rustc`.
pub fn check_wasm_target_with(rustc: &Path) -> Result<(), String> {
    let out = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", rustc.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`{} --print sysroot` failed: {}",
            rustc.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let lib = sysroot.join("lib/rustlib").join(WASM_TARGET).join("lib");
    if lib.is_dir() {
        Ok(())
    } else {
        Err(format!("{INSTALL_HINT} (looked for {})", lib.display()))
    }
}

/// The `cargo` to run: the one running us (`CARGO`) when there is one.
pub fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// A `cargo` command for building plugins, scrubbed of the variables that the outer
/// cargo (or clippy) sets for its own build and that would leak into the nested one.
pub fn nested_cargo() -> Command {
    let mut cmd = Command::new(cargo());
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_PKG_NAME",
        "OUT_DIR",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_installed_toolchain_has_the_target() {
        check_wasm_target().unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_missing_target_says_what_to_run() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sluice-fake-rustc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("rustc");
        std::fs::write(&fake, format!("#!/bin/sh\necho {}\n", dir.display())).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = check_wasm_target_with(&fake).unwrap_err();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(err.contains("rustup target add wasm32-wasip2"), "{err}");
        let err = check_wasm_target_with(Path::new("/nonexistent/rustc")).unwrap_err();
        assert!(err.contains("cannot run"), "{err}");
    }
}

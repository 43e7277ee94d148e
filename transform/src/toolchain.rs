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
    let out = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&rustc).display()))?;
    if !out.status.success() {
        return Err(format!(
            "`{} --print sysroot` failed: {}",
            Path::new(&rustc).display(),
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

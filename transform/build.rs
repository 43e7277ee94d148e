//! Builds the plugins workspace (`plugins/`) for `wasm32-wasip2`, so that example and
//! test plugins are part of the normal build and never checked in as binaries.
//!
//! The nested cargo uses its own target dir, `<root>/target/plugins` (or
//! `$CARGO_TARGET_DIR/plugins`), so it never waits on the outer build's lock. The built
//! directory is exported as `SLUICE_PLUGIN_DIR`.

#[path = "src/toolchain.rs"]
#[allow(dead_code)]
mod toolchain;

use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let root = manifest_dir
        .parent()
        .expect("transform/ has a parent")
        .to_path_buf();
    let plugins = root.join("plugins");
    let target_dir = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("plugins"),
        None => root.join("target").join("plugins"),
    };
    let out_dir = target_dir.join(toolchain::WASM_TARGET).join("release");
    println!("cargo:rustc-env=SLUICE_PLUGIN_DIR={}", out_dir.display());
    println!("cargo:rustc-env=SLUICE_PLUGINS_SRC={}", plugins.display());
    println!("cargo:rerun-if-env-changed=SLUICE_SKIP_PLUGIN_BUILD");
    rerun_if_changed(&plugins);

    if std::env::var_os("SLUICE_SKIP_PLUGIN_BUILD").is_some() {
        println!(
            "cargo:warning=SLUICE_SKIP_PLUGIN_BUILD is set: plugins in {} were not rebuilt",
            out_dir.display()
        );
        return;
    }
    if let Err(message) = toolchain::check_wasm_target() {
        fail(&message);
    }
    let status = toolchain::nested_cargo()
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            toolchain::WASM_TARGET,
            "--manifest-path",
        ])
        .arg(plugins.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        // Our stdout is cargo's instruction channel: keep the nested build's off it.
        .stdout(std::io::stderr())
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => fail(&format!(
            "building the plugins workspace failed ({s}); run `cargo build --release --target wasm32-wasip2 --manifest-path {}` to see why",
            plugins.join("Cargo.toml").display()
        )),
        Err(e) => fail(&format!("cannot run cargo to build the plugins: {e}")),
    }
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1);
}

/// Watch every source file of the plugins workspace, but not any `target` dir in it.
fn rerun_if_changed(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            rerun_if_changed(&path);
        } else {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

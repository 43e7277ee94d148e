//! The crate's sources: every `.rs` file under `host/src`, its module path (from where it
//! sits, or from the `#[path]` that places it), its room and the paths it writes.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

use super::lex::{Tok, Token, lex};
use super::paths::{Written, written_paths};

/// The workspace's root (the parent of `host/`), against which files are named.
pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ sits inside the workspace")
        .to_path_buf()
}

/// `host/src`.
pub(crate) fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// One source file of the crate.
pub(crate) struct SourceFile {
    /// The file, relative to the workspace (`host/src/config/files.rs`).
    pub(crate) name: String,
    /// Its module path (`["config", "files"]`; `[]` for `lib.rs`).
    pub(crate) module: Vec<String>,
    /// Its room, if it belongs to one.
    pub(crate) room: Option<String>,
    /// The paths it writes that name a module of the crate.
    pub(crate) paths: Vec<Written>,
}

/// All of `host/src`: its files and which file each module path is.
pub(crate) struct Crate {
    pub(crate) files: Vec<SourceFile>,
    /// Module path to the file that is that module (`#[path]` targets outside `host/src`
    /// included, though they are not read).
    pub(crate) modules: BTreeMap<Vec<String>, String>,
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        fs::read_dir(dir).unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()))
            .path();
        if path.is_dir() {
            rs_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `path` with `.` and `..` worked out lexically, relative to the workspace.
fn workspace_name(path: &Path) -> String {
    let mut parts: Vec<Component> = Vec::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir if matches!(parts.last(), Some(Component::Normal(_))) => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    let normal: PathBuf = parts.iter().collect();
    let root = workspace();
    normal
        .strip_prefix(&root)
        .unwrap_or(&normal)
        .to_string_lossy()
        .replace('\\', "/")
}

/// The module path of a file from where it sits under `host/src`.
fn module_of(relative: &Path) -> Vec<String> {
    let mut segments: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = segments.pop().unwrap_or_default();
    match last.as_str() {
        "mod.rs" | "lib.rs" => {}
        _ => segments.push(last.trim_end_matches(".rs").to_string()),
    }
    segments
}

/// `#[path = "…"] mod name;` items of a file: the module each declares and its file.
fn path_attributes(
    file: &Path,
    module: &[String],
    tokens: &[Token],
) -> Vec<(Vec<String>, PathBuf)> {
    let mut found = Vec::new();
    let is_mod_rs = matches!(
        file.file_name().and_then(|n| n.to_str()),
        Some("mod.rs" | "lib.rs" | "main.rs")
    );
    for (i, window) in tokens.windows(5).enumerate() {
        let [hash, open, key, eq, value] = window else {
            continue;
        };
        let (Tok::Punct('#'), Tok::Punct('['), Tok::Word(key), Tok::Punct('='), Tok::Str(value)) =
            (&hash.tok, &open.tok, &key.tok, &eq.tok, &value.tok)
        else {
            continue;
        };
        if key != "path" {
            continue;
        }
        // The `mod name` that follows, before the item ends.
        let mut j = i + 5;
        while let Some(token) = tokens.get(j) {
            match &token.tok {
                Tok::Punct(';') | Tok::Punct('{') => break,
                Tok::Word(w) if w == "mod" => {
                    if let Some(Tok::Word(name)) = tokens.get(j + 1).map(|t| &t.tok) {
                        let inline = inline_modules_at(tokens, i);
                        let mut dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
                        if !inline.is_empty() && !is_mod_rs {
                            dir.push(file.file_stem().unwrap_or_default());
                        }
                        dir.extend(&inline);
                        let mut declared: Vec<String> = module.to_vec();
                        declared.extend(inline);
                        declared.push(name.clone());
                        found.push((declared, dir.join(value)));
                    }
                    break;
                }
                _ => j += 1,
            }
        }
    }
    found
}

/// The names of the inline modules open at token `at`.
fn inline_modules_at(tokens: &[Token], at: usize) -> Vec<String> {
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    for i in 0..at {
        match &tokens[i].tok {
            Tok::Punct('{') => {
                depth += 1;
                if i >= 2
                    && tokens[i - 2].tok == Tok::Word("mod".into())
                    && let Tok::Word(name) = &tokens[i - 1].tok
                {
                    inline.push((name.clone(), depth));
                }
            }
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            _ => {}
        }
    }
    inline.into_iter().map(|(name, _)| name).collect()
}

/// Reads `host/src`. `main.rs` is left out: it is the binary's crate root, where `crate::`
/// means the binary, and it is exempt anyway.
pub(crate) fn read_crate(rooms: &[String]) -> Crate {
    let src = src_dir();
    let mut paths = Vec::new();
    rs_files(&src, &mut paths);
    paths.sort();
    let mut files = Vec::new();
    let mut declared = Vec::new();
    for path in paths {
        let relative = path.strip_prefix(&src).expect("found under host/src");
        if relative == Path::new("main.rs") {
            continue;
        }
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
        let tokens = lex(&text);
        let module = module_of(relative);
        declared.extend(path_attributes(&path, &module, &tokens));
        files.push(SourceFile {
            name: workspace_name(&path),
            module,
            room: None,
            paths: written_paths(&tokens),
        });
    }
    // A file that a `#[path]` places is the module that declares it, not the one its
    // location suggests (`map/derive_tests.rs` is `map::derive::tests`).
    for (module, target) in &declared {
        let name = workspace_name(target);
        if let Some(file) = files.iter_mut().find(|f| f.name == name) {
            file.module = module.clone();
        }
    }
    for file in &mut files {
        file.room = file
            .module
            .first()
            .filter(|first| rooms.contains(first))
            .cloned();
    }
    let mut modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|f| (f.module.clone(), f.name.clone()))
        .collect();
    for (module, target) in declared {
        modules
            .entry(module)
            .or_insert_with(|| workspace_name(&target));
    }
    Crate { files, modules }
}

impl Crate {
    /// The file of the deepest module that `path` (absolute) names.
    pub(crate) fn file_of(&self, path: &[String]) -> Option<&str> {
        (0..=path.len())
            .rev()
            .find_map(|n| self.modules.get(&path[..n]))
            .map(String::as_str)
    }
}

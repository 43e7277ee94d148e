//! The crate's rooms and the order they import each other in, checked against the code.
//!
//! `docs/architecture.md` lists the rooms of `host/src` (its first fenced block) and says
//! that each room imports only rooms listed before it. This test reads that list and every
//! `.rs` file under `host/src`, finds each path that names a module of the crate, and
//! checks three things:
//!
//! - **Rule (a), the order.** A file of room R may name `crate::S::…` only when S is R or
//!   is listed before R. `super::…` is resolved first, so a path that climbs out of a room
//!   counts as naming the room it lands in. Files at the top of `host/src` that are not
//!   rooms (`lib.rs`, `main.rs`) may import anything, and a top-level item that is not a
//!   room (something `lib.rs` itself declares) may be named by anyone.
//! - **Rule (b), no circle inside a room.** Within one room, file A has an edge to file B
//!   when A names a path that lands in B's module. A path lands in the deepest module file
//!   it names: `crate::sink::write::WriteBatch` in `sink/write.rs`, `crate::sink::Sink` in
//!   `sink/mod.rs`. A child naming its parent (`use super::Config;` in `config/load.rs`) is
//!   an edge like any other; a parent's `mod child;` is not. The edges must form no cycle.
//! - **The list is complete.** Every listed room exists as `host/src/<room>.rs` or
//!   `host/src/<room>/mod.rs`, and every module `lib.rs` declares is listed, so a new room
//!   has to be placed (and described) before it compiles into a green build.
//!
//! What counts as a path: `crate::…`, `$crate::…` (a macro's) and `super::…`, in `use` items
//! (grouped trees `use crate::{a::b, c::{d, e}}` expanded leaf by leaf, trees spread over
//! many lines) and inline in expressions and types (`crate::format::Decoders::new()`).
//! Comments, doc comments and string literals are skipped by a small lexer (so a path an
//! attribute quotes, `#[serde(from = "…")]`, is not read either); code inside an inline
//! `mod tests { … }` is its file's code, with `super` resolved from inside it.
//! Relative paths (`child::Item`, `self::…`) are not read: they cannot leave the module
//! that declares the child, so they never cross a room, and a parent reaching into its own
//! children is how a room is put together, not a circle.
//!
//! The test uses plain `std` and none of the crate's code: it reads the sources as text.
//! Its parts sit in `layering/`: the lexer (`lex.rs`), the paths (`paths.rs`), the files and
//! their modules (`sources.rs`) and the cycle search (`cycles.rs`).

// The scanner's parts, in `host/tests/layering/` (a plain `mod` here would name files in
// `host/tests/`, which cargo takes for test binaries of their own).
#[path = "layering/cycles.rs"]
mod cycles;
#[path = "layering/lex.rs"]
mod lex;
#[path = "layering/paths.rs"]
mod paths;
#[path = "layering/sources.rs"]
mod sources;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

use cycles::{elementary_cycles, strongly_connected};
use lex::{Tok, lex};
use paths::{Written, absolute, written_paths};
use sources::{Crate, read_crate, src_dir, workspace};

// ---------------------------------------------------------------------------------------
// The room order.

/// The rooms of the first fenced block of `text`, in order.
///
/// A line of the block that starts at column 0 names one room or several (`record,
/// failure` is two rooms, `record` first); the words after the names describe the room,
/// as do the indented lines that follow. A trailing `/` (`format/`) is dropped.
fn room_order(text: &str) -> Result<Vec<String>, String> {
    let mut lines = text.lines();
    lines
        .by_ref()
        .find(|line| line.trim_start().starts_with("```"))
        .ok_or("docs/architecture.md has no fenced block")?;
    let mut rooms = Vec::new();
    for line in lines {
        if line.trim_start().starts_with("```") {
            if rooms.is_empty() {
                return Err("the first fenced block of docs/architecture.md names no room".into());
            }
            return Ok(rooms);
        }
        if line.is_empty() || line.starts_with(char::is_whitespace) {
            continue;
        }
        // `record, failure      the types…`: words while the previous one ends in a comma.
        for word in line.split_whitespace() {
            let more = word.ends_with(',');
            for name in word.split(',').filter(|name| !name.is_empty()) {
                let name = name.trim_end_matches('/');
                if !is_identifier(name) {
                    return Err(format!(
                        "docs/architecture.md: `{name}` in the room list is not a module name \
                         (line `{line}`)"
                    ));
                }
                rooms.push(name.to_string());
            }
            if !more {
                break;
            }
        }
    }
    Err("the first fenced block of docs/architecture.md is not closed".into())
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The room order of `docs/architecture.md`, read for the test.
fn rooms() -> Vec<String> {
    let path = workspace().join("docs/architecture.md");
    let text = fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    room_order(&text).unwrap_or_else(|problem| panic!("{problem}"))
}

// ---------------------------------------------------------------------------------------
// The checks.

/// Rule (a): every path a room's file writes that names a room listed after it.
fn order_violations(krate: &Crate, rooms: &[String]) -> Vec<String> {
    let position = |room: &str| rooms.iter().position(|r| r == room);
    let mut problems = Vec::new();
    for file in &krate.files {
        let Some(room) = &file.room else { continue };
        let own = position(room).expect("a file's room is listed");
        for written in &file.paths {
            let Some(target) = absolute(&file.module, written) else {
                problems.push(format!(
                    "{}:{}: `{}` climbs above the crate's root",
                    file.name,
                    written.line,
                    written.text()
                ));
                continue;
            };
            let Some(first) = target.first() else {
                continue;
            };
            let Some(theirs) = position(first) else {
                continue;
            };
            if theirs > own {
                let resolved = if written.segments[0] == "super" {
                    format!(" (that is `crate::{}`)", target.join("::"))
                } else {
                    String::new()
                };
                let allowed = if own == 0 {
                    "no other room".to_string()
                } else {
                    rooms[..own].join(", ")
                };
                problems.push(format!(
                    "{}:{}: `{}`{resolved} imports room `{first}`, which comes after `{room}` in \
                     docs/architecture.md. Rule (a): a room imports only itself and the rooms \
                     listed before it; `{room}` may import {allowed}",
                    file.name,
                    written.line,
                    written.text(),
                ));
            }
        }
    }
    problems
}

/// One file-to-file edge of a room: the first path that makes it.
#[derive(Debug, Clone)]
struct Edge {
    line: usize,
    path: String,
}

/// Rule (b): each cycle among the files of one room, with the path behind every step.
fn room_cycles(krate: &Crate) -> Vec<String> {
    // room -> file -> file it imports -> the first path that does.
    let mut graphs: BTreeMap<&str, BTreeMap<&str, BTreeMap<&str, Edge>>> = BTreeMap::new();
    for file in &krate.files {
        let Some(room) = &file.room else { continue };
        let graph = graphs.entry(room).or_default();
        let edges = graph.entry(&file.name).or_default();
        for written in &file.paths {
            let Some(target) = absolute(&file.module, written) else {
                continue;
            };
            if target.first() != Some(room) {
                continue;
            }
            let Some(to) = krate.file_of(&target) else {
                continue;
            };
            if to == file.name {
                continue;
            }
            edges.entry(to).or_insert(Edge {
                line: written.line,
                path: written.text(),
            });
        }
    }
    let mut problems = Vec::new();
    for (room, graph) in &graphs {
        for component in strongly_connected(graph) {
            let cycles = elementary_cycles(graph, &component);
            for cycle in &cycles {
                let mut text = format!(
                    "room `{room}`: a cycle of {} files. Rule (b): the files of one room \
                     import each other without a circle; move what they share into a file both \
                     can import",
                    cycle.len()
                );
                for (k, from) in cycle.iter().enumerate() {
                    let to = cycle[(k + 1) % cycle.len()];
                    let edge = &graph[from][to];
                    text.push_str(&format!(
                        "\n    {from}:{}: `{}` -> {to}",
                        edge.line, edge.path
                    ));
                }
                problems.push(text);
            }
        }
    }
    problems
}

/// Fails with every problem, numbered, under a heading.
fn report(heading: &str, problems: &[String]) {
    if problems.is_empty() {
        return;
    }
    let mut text = format!("{heading}: {} problem(s)\n", problems.len());
    for (k, problem) in problems.iter().enumerate() {
        text.push_str(&format!("\n{}. {problem}\n", k + 1));
    }
    panic!("{text}");
}

#[test]
fn rooms_import_only_rooms_listed_before_them() {
    let rooms = rooms();
    let krate = read_crate(&rooms);
    report(
        "rooms importing a room listed after them (docs/architecture.md's order)",
        &order_violations(&krate, &rooms),
    );
}

#[test]
fn files_of_a_room_import_each_other_without_a_cycle() {
    let rooms = rooms();
    let krate = read_crate(&rooms);
    report("import cycles within a room", &room_cycles(&krate));
}

#[test]
fn every_room_exists_and_every_module_is_a_listed_room() {
    let rooms = rooms();
    let src = src_dir();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for room in &rooms {
        if !seen.insert(room) {
            problems.push(format!(
                "room `{room}` is listed twice in docs/architecture.md"
            ));
        }
        if !src.join(format!("{room}.rs")).is_file() && !src.join(room).join("mod.rs").is_file() {
            problems.push(format!(
                "room `{room}` of docs/architecture.md is neither host/src/{room}.rs nor \
                 host/src/{room}/mod.rs"
            ));
        }
    }
    let lib = src.join("lib.rs");
    let text = fs::read_to_string(&lib)
        .unwrap_or_else(|error| panic!("reading {}: {error}", lib.display()));
    let tokens = lex(&text);
    let mut depth = 0;
    for (i, token) in tokens.iter().enumerate() {
        match &token.tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => depth -= 1,
            Tok::Word(w) if w == "mod" && depth == 0 => {
                if let Some(Tok::Word(name)) = tokens.get(i + 1).map(|t| &t.tok)
                    && !rooms.contains(name)
                {
                    problems.push(format!(
                        "host/src/lib.rs:{}: module `{name}` is not a room of \
                         docs/architecture.md: list it there, in the place its imports allow, \
                         and say what it holds",
                        token.line
                    ));
                }
            }
            _ => {}
        }
    }
    report("the room list against host/src", &problems);
}

// ---------------------------------------------------------------------------------------
// The scanner's own tests: what it reads and what it leaves out.

fn scanned(source: &str) -> Vec<String> {
    written_paths(&lex(source))
        .iter()
        .map(Written::text)
        .collect()
}

#[test]
fn grouped_and_multi_line_use_trees_are_read_leaf_by_leaf() {
    let source =
        "use crate::{a::b, c::{d, e as f}, g::*};\nuse crate::h::{\n    self,\n    I,\n};\n";
    assert_eq!(
        scanned(source),
        [
            "crate::a::b",
            "crate::c::d",
            "crate::c::e",
            "crate::g",
            "crate::h",
            "crate::h::I"
        ]
    );
    let lines: Vec<usize> = written_paths(&lex(source)).iter().map(|w| w.line).collect();
    assert_eq!(lines, [1, 1, 1, 1, 3, 4]);
}

#[test]
fn inline_paths_are_read_and_comments_strings_and_chars_are_not() {
    let source = r##"
        // crate::one::X
        /// [`crate::two::Y`]
        /* crate::three /* nested crate::four */ crate::five */
        fn f<'a>(x: &'a str) -> char {
            let _ = "crate::six::Z";
            let _ = r#"crate::seven "quoted" "#;
            let _ = b"crate::eight";
            let _ = crate::format::Decoders::<u8>::new();
            let _ = $crate::sink::Pool::Postgres;
            '{'
        }
        pub(crate) fn g() {}
        pub(in crate::nine) fn h() {}
    "##;
    assert_eq!(
        scanned(source),
        ["crate::format::Decoders", "crate::sink::Pool::Postgres"]
    );
}

#[test]
fn super_resolves_from_the_file_and_its_inline_modules() {
    let module: Vec<String> = ["config", "dead_letter"].map(String::from).to_vec();
    let source = "use super::scrub::S;\nmod tests {\n    use super::*;\n    fn f() { super::super::redact(); }\n}\nuse super::super::format::F;\n";
    let found = written_paths(&lex(source));
    let resolved: Vec<Option<String>> = found
        .iter()
        .map(|w| absolute(&module, w).map(|p| p.join("::")))
        .collect();
    assert_eq!(
        resolved,
        [
            Some("config::scrub::S".to_string()),
            Some("config::dead_letter".to_string()),
            Some("config::redact".to_string()),
            Some("format::F".to_string()),
        ]
    );
}

#[test]
fn the_room_list_is_the_first_fenced_block() {
    let text = "intro\n```\nlogging     output\n            more words\nrecord, failure   types\nformat/     decode\n```\n```\nother\n```\n";
    assert_eq!(
        room_order(text).unwrap_or_else(|problem| panic!("{problem}")),
        ["logging", "record", "failure", "format"]
    );
}

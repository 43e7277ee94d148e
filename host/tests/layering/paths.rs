//! The paths a file writes that name a module of the crate (`crate::…`, `$crate::…`,
//! `super::…`), grouped `use` trees expanded leaf by leaf, and where each lands.

use super::lex::{Tok, Token};

/// A path naming a module of the crate, as written (`super::scrub::Scrubber`, one leaf of a
/// grouped `use`), with where it was found.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    pub(crate) segments: Vec<String>,
    pub(crate) line: usize,
    /// The inline modules (`mod tests { … }`) around it, outermost first.
    pub(crate) inline: Vec<String>,
}

impl Written {
    pub(crate) fn text(&self) -> String {
        self.segments.join("::")
    }
}

/// Every `crate::`, `$crate::` and `super::` path of a file's tokens, grouped `use` trees
/// expanded into their leaves.
pub(crate) fn written_paths(tokens: &[Token]) -> Vec<Written> {
    let word = |i: usize| match tokens.get(i).map(|t| &t.tok) {
        Some(Tok::Word(w)) => Some(w.as_str()),
        _ => None,
    };
    let is = |i: usize, tok: Tok| tokens.get(i).map(|t| &t.tok) == Some(&tok);
    let mut found = Vec::new();
    // Inline modules around the current token: name and the brace depth inside them.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].tok {
            Tok::Punct('{') => {
                depth += 1;
                if i >= 2
                    && word(i - 2) == Some("mod")
                    && let Some(name) = word(i - 1)
                {
                    inline.push((name.to_string(), depth));
                }
                i += 1;
            }
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Tok::Word(w)
                if (w == "crate" || w == "super")
                    && is(i + 1, Tok::Sep)
                    && !(i > 0 && is(i - 1, Tok::Sep))
                    // `pub(in crate::x)` is a visibility, not an import.
                    && !(i > 0 && word(i - 1) == Some("in")) =>
            {
                let (leaves, next) = use_tree(tokens, i, Vec::new());
                let names: Vec<String> = inline.iter().map(|(name, _)| name.clone()).collect();
                for (segments, line) in leaves {
                    found.push(Written {
                        segments,
                        line,
                        inline: names.clone(),
                    });
                }
                i = next;
            }
            _ => i += 1,
        }
    }
    found
}

/// The leaves of the path or `use` tree starting at `i`, each with its line, and the index
/// after the tree. `prefix` is the path of the enclosing group.
pub(crate) fn use_tree(
    tokens: &[Token],
    mut i: usize,
    prefix: Vec<String>,
) -> (Vec<(Vec<String>, usize)>, usize) {
    let mut segments = prefix;
    let mut line = tokens.get(i).map_or(0, |t| t.line);
    loop {
        match tokens.get(i).map(|t| &t.tok) {
            Some(Tok::Word(w)) => {
                if w != "self" || segments.is_empty() {
                    segments.push(w.clone());
                }
                line = tokens[i].line;
                i += 1;
                if tokens.get(i).map(|t| &t.tok) == Some(&Tok::Sep) {
                    i += 1;
                    continue;
                }
                // `use crate::a::B as C;`
                if tokens.get(i).map(|t| &t.tok) == Some(&Tok::Word("as".into())) {
                    i += 2;
                }
                return (vec![(segments, line)], i);
            }
            Some(Tok::Punct('*')) => {
                line = tokens[i].line;
                return (vec![(segments, line)], i + 1);
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                let mut leaves = Vec::new();
                loop {
                    match tokens.get(i).map(|t| &t.tok) {
                        None => return (leaves, i),
                        Some(Tok::Punct('}')) => return (leaves, i + 1),
                        Some(Tok::Punct(',')) => i += 1,
                        Some(_) => {
                            let before = i;
                            let (more, next) = use_tree(tokens, i, segments.clone());
                            leaves.extend(more);
                            // A token the tree grammar does not know: step over it.
                            i = if next == before { next + 1 } else { next };
                        }
                    }
                }
            }
            // `crate::a::B::<T>::new`, or the end of the path.
            _ => return (vec![(segments, line)], i),
        }
    }
}

/// The module path a written path lands in, from the module it is written in: `crate`
/// dropped, each `super` one step up, `self` left out. `None` for a `super` above the
/// crate's root.
pub(crate) fn absolute(module: &[String], written: &Written) -> Option<Vec<String>> {
    let mut base: Vec<String> = module.iter().chain(&written.inline).cloned().collect();
    let mut rest = written.segments.as_slice();
    if rest.first().is_some_and(|s| s == "crate") {
        base.clear();
        rest = &rest[1..];
    } else {
        while rest.first().is_some_and(|s| s == "super") {
            base.pop()?;
            rest = &rest[1..];
        }
    }
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(base)
}

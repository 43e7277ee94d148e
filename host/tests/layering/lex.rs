//! A lexer that keeps what matters for paths and module blocks: identifiers, `::`, string
//! literals (their text, for `#[path = "…"]`) and single characters of code, each with its
//! line. Comments (doc comments too), character literals and lifetimes are left out, so a
//! path quoted in a comment or a string is never read as an import.

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// An identifier or keyword (numbers come out as one too: harmless).
    Word(String),
    /// A string literal's text, escapes left as written (only `#[path = "…"]` reads it).
    Str(String),
    /// `::`.
    Sep,
    /// Any other character of code.
    Punct(char),
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) line: usize,
}

/// The tokens of `source`, with comments (doc comments too), character literals and
/// lifetimes left out and each string literal reduced to one `Str` token.
pub(crate) fn lex(source: &str) -> Vec<Token> {
    let c: Vec<char> = source.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            // Block comments nest in Rust.
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            let start_line = line;
            let (text, next) = quoted(&c, i, &mut line);
            out.push(Token {
                tok: Tok::Str(text),
                line: start_line,
            });
            i = next;
        } else if ch == '\'' {
            i = char_or_lifetime(&c, i);
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let start_line = line;
            match (word.as_str(), at(i)) {
                ("r" | "br" | "cr", '"') | ("r" | "br" | "cr", '#') if raw_string_at(&c, i) => {
                    let (text, next) = raw(&c, i, &mut line);
                    out.push(Token {
                        tok: Tok::Str(text),
                        line: start_line,
                    });
                    i = next;
                }
                ("r", '#') => {
                    // A raw identifier, `r#type`: the word after the `#`.
                    i += 1;
                    let start = i;
                    while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                        i += 1;
                    }
                    out.push(Token {
                        tok: Tok::Word(c[start..i].iter().collect()),
                        line,
                    });
                }
                ("b" | "c", '"') => {
                    let (text, next) = quoted(&c, i, &mut line);
                    out.push(Token {
                        tok: Tok::Str(text),
                        line: start_line,
                    });
                    i = next;
                }
                ("b", '\'') => i = char_or_lifetime(&c, i),
                _ => out.push(Token {
                    tok: Tok::Word(word),
                    line,
                }),
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Token {
                tok: Tok::Sep,
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                tok: Tok::Punct(ch),
                line,
            });
            i += 1;
        }
    }
    out
}

/// The text of the string literal whose opening quote is at `i`, and the index after it.
pub(crate) fn quoted(c: &[char], mut i: usize, line: &mut usize) -> (String, usize) {
    let mut text = String::new();
    i += 1;
    while i < c.len() {
        match c[i] {
            '\\' => {
                text.push('\\');
                if let Some(&next) = c.get(i + 1) {
                    text.push(next);
                    if next == '\n' {
                        *line += 1;
                    }
                }
                i += 2;
            }
            '"' => return (text, i + 1),
            other => {
                if other == '\n' {
                    *line += 1;
                }
                text.push(other);
                i += 1;
            }
        }
    }
    (text, i)
}

/// Whether `#`s then `"` start at `i` (a raw string after its `r`, `br` or `cr`).
pub(crate) fn raw_string_at(c: &[char], mut i: usize) -> bool {
    while c.get(i) == Some(&'#') {
        i += 1;
    }
    c.get(i) == Some(&'"')
}

/// The text of the raw string whose `#`s or quote start at `i`, and the index after it.
pub(crate) fn raw(c: &[char], mut i: usize, line: &mut usize) -> (String, usize) {
    let mut hashes = 0;
    while c.get(i) == Some(&'#') {
        hashes += 1;
        i += 1;
    }
    i += 1; // the opening quote
    let start = i;
    while i < c.len() {
        if c[i] == '"' && (1..=hashes).all(|k| c.get(i + k) == Some(&'#')) {
            return (c[start..i].iter().collect(), i + 1 + hashes);
        }
        if c[i] == '\n' {
            *line += 1;
        }
        i += 1;
    }
    (c[start..].iter().collect(), i)
}

/// Skips the character literal at `i` (`'x'`, `'\n'`, `'\u{7f}'`, `'{'`), or only the quote
/// of a lifetime or label (`'a`, `'static`), whose name then lexes as a word.
pub(crate) fn char_or_lifetime(c: &[char], i: usize) -> usize {
    if c.get(i + 1) == Some(&'\\') {
        let mut j = i + 3; // past the quote, the backslash and the escaped character
        while j < c.len() && c[j] != '\'' {
            j += 1;
        }
        j + 1
    } else if c.get(i + 2) == Some(&'\'') {
        i + 3
    } else {
        i + 1
    }
}

//! Just enough PromQL to say what a query reads: the metric of every selector with its
//! label matchers, and the labels of every `by (…)`, `without (…)`, `on (…)`,
//! `ignoring (…)` and `group_left/right (…)`, with the selectors each grouping applies to.
//! Then a check of those names against a scrape of `/metrics`.
//!
//! The tokenizer knows PromQL's aggregators, keywords and the shape of a function call
//! (an identifier followed by `(`); every other identifier is a metric name. Strings and
//! range brackets (`[5m]`, `[$__rate_interval]`) are skipped, so Grafana's variables there
//! need no handling. What it cannot read is an error, never a silent pass.

use std::collections::{BTreeMap, BTreeSet};

/// Labels Prometheus adds to every series of a target when it scrapes it.
pub const TARGET_LABELS: &[&str] = &["instance", "job"];

/// Series Prometheus makes itself for each target, never in a scrape.
pub const PROMETHEUS_SERIES: &[&str] = &["up"];

const AGGREGATORS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
    "atan2",
    "inf",
    "nan",
];

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Number,
    Range,
    Op(String),
    LParen,
    RParen,
    LBrace,
    RBrace,
    Comma,
}

/// One label matcher of a selector: `label op "value"`.
#[derive(Debug, Clone, PartialEq)]
pub struct Matcher {
    pub label: String,
    pub op: String,
    pub value: String,
}

/// A selector: a metric and its matchers.
#[derive(Debug, Clone, PartialEq)]
pub struct Selector {
    pub metric: String,
    pub matchers: Vec<Matcher>,
}

/// The labels of a `by (…)` (they must be on every selector it aggregates), or of a
/// `without`, `on`, `ignoring` or `group_*` (on at least one selector of the expression).
#[derive(Debug, Clone, PartialEq)]
pub struct Grouping {
    pub keyword: String,
    pub labels: Vec<String>,
    /// Indices in [`Query::selectors`].
    pub selectors: Vec<usize>,
}

/// What one expression reads.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Query {
    pub selectors: Vec<Selector>,
    pub groupings: Vec<Grouping>,
}

fn lex(expr: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    let ident_start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == ':';
    let ident_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '"' | '\'' | '`' => {
                let mut value = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(format!("unterminated string in {expr}")),
                        Some('\\') if c != '`' => {
                            if let Some(&next) = chars.get(i + 1) {
                                value.push(next);
                            }
                            i += 2;
                        }
                        Some(&q) if q == c => {
                            i += 1;
                            break;
                        }
                        Some(&other) => {
                            value.push(other);
                            i += 1;
                        }
                    }
                }
                tokens.push(Token::Str(value));
            }
            '[' => {
                let mut depth = 0;
                while i < chars.len() {
                    match chars[i] {
                        '[' => depth += 1,
                        ']' => depth -= 1,
                        _ => {}
                    }
                    i += 1;
                    if depth == 0 {
                        break;
                    }
                }
                if depth != 0 {
                    return Err(format!("unclosed [ in {expr}"));
                }
                tokens.push(Token::Range);
            }
            '(' | ')' | '{' | '}' | ',' => {
                tokens.push(match c {
                    '(' => Token::LParen,
                    ')' => Token::RParen,
                    '{' => Token::LBrace,
                    '}' => Token::RBrace,
                    _ => Token::Comma,
                });
                i += 1;
            }
            c if c.is_ascii_digit()
                || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
                tokens.push(Token::Number);
            }
            c if ident_start(c) => {
                let start = i;
                while i < chars.len() && ident_char(chars[i]) {
                    i += 1;
                }
                tokens.push(Token::Ident(chars[start..i].iter().collect()));
            }
            _ => {
                let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
                if ["==", "!=", ">=", "<=", "=~", "!~"].contains(&two.as_str()) {
                    tokens.push(Token::Op(two));
                    i += 2;
                } else if "+-*/%^<>=@".contains(c) {
                    tokens.push(Token::Op(c.to_string()));
                    i += 1;
                } else {
                    return Err(format!("unexpected {c:?} in {expr}"));
                }
            }
        }
    }
    Ok(tokens)
}

/// The index of the `)` that closes the `(` at `open`.
fn closing(tokens: &[Token], open: usize) -> Result<usize, String> {
    let mut depth = 0;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
    }
    Err("unbalanced parentheses".into())
}

/// The label list `( a, b )` at `open`; returns the labels and the index after `)`.
fn label_list(tokens: &[Token], open: usize) -> Result<(Vec<String>, usize), String> {
    if tokens.get(open) != Some(&Token::LParen) {
        return Err("a label list must follow by/without/on/ignoring/group_*".into());
    }
    let close = closing(tokens, open)?;
    let mut labels = Vec::new();
    for token in &tokens[open + 1..close] {
        match token {
            Token::Ident(label) => labels.push(label.clone()),
            Token::Comma => {}
            other => return Err(format!("{other:?} in a label list")),
        }
    }
    Ok((labels, close + 1))
}

/// Reads what `expr` reads.
pub fn parse(expr: &str) -> Result<Query, String> {
    let tokens = lex(expr)?;
    let mut query = Query::default();
    // (keyword, labels, token range it covers); resolved to selectors at the end.
    let mut groupings: Vec<(String, Vec<String>, std::ops::Range<usize>)> = Vec::new();
    let mut at: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let Token::Ident(name) = &tokens[i] else {
            if tokens[i] == Token::LBrace {
                return Err(format!("a selector without a metric name in {expr}"));
            }
            i += 1;
            continue;
        };
        let next = tokens.get(i + 1);
        let name = name.as_str();
        if AGGREGATORS.contains(&name) {
            match next {
                Some(Token::Ident(k)) if k == "by" || k == "without" => {
                    let (labels, after) = label_list(&tokens, i + 2)?;
                    if tokens.get(after) != Some(&Token::LParen) {
                        return Err(format!("{name} {k} (…) without its argument in {expr}"));
                    }
                    let close = closing(&tokens, after)?;
                    groupings.push((k.clone(), labels, after..close));
                    i = after;
                }
                Some(Token::LParen) => {
                    let close = closing(&tokens, i + 1)?;
                    if let Some(Token::Ident(k)) = tokens.get(close + 1)
                        && (k == "by" || k == "without")
                    {
                        let (labels, _) = label_list(&tokens, close + 2)?;
                        groupings.push((k.clone(), labels, i + 1..close));
                    }
                    i += 1;
                }
                _ => return Err(format!("{name} without its argument in {expr}")),
            }
            continue;
        }
        if KEYWORDS.contains(&name) {
            if ["by", "without"].contains(&name) {
                // A grouping after its aggregation's argument: read above.
                let (_, after) = label_list(&tokens, i + 1)?;
                i = after;
            } else if ["on", "ignoring", "group_left", "group_right"].contains(&name)
                && next == Some(&Token::LParen)
            {
                let (labels, after) = label_list(&tokens, i + 1)?;
                groupings.push((name.to_string(), labels, 0..tokens.len()));
                i = after;
            } else {
                i += 1;
            }
            continue;
        }
        if next == Some(&Token::LParen) {
            // A function call; its arguments are read as the loop goes on.
            i += 1;
            continue;
        }
        let mut selector = Selector {
            metric: name.to_string(),
            matchers: Vec::new(),
        };
        i += 1;
        if tokens.get(i) == Some(&Token::LBrace) {
            i += 1;
            loop {
                match (tokens.get(i), tokens.get(i + 1), tokens.get(i + 2)) {
                    (Some(Token::RBrace), ..) => {
                        i += 1;
                        break;
                    }
                    (Some(Token::Comma), ..) => i += 1,
                    (Some(Token::Ident(label)), Some(Token::Op(op)), Some(Token::Str(value))) => {
                        selector.matchers.push(Matcher {
                            label: label.clone(),
                            op: op.clone(),
                            value: value.clone(),
                        });
                        i += 3;
                    }
                    _ => return Err(format!("cannot read the matchers of {name} in {expr}")),
                }
            }
        }
        at.push(i - 1);
        query.selectors.push(selector);
    }
    query.groupings = groupings
        .into_iter()
        .map(|(keyword, labels, range)| Grouping {
            keyword,
            labels,
            selectors: (0..at.len()).filter(|&s| range.contains(&at[s])).collect(),
        })
        .collect();
    Ok(query)
}

/// A Grafana variable's query: `label_values(selector, label)` reads as
/// `count by (label) (selector)`; anything else as PromQL.
pub fn variable_query(query: &str) -> String {
    let trimmed = query.trim();
    if let Some(inner) = trimmed
        .strip_prefix("label_values(")
        .and_then(|s| s.strip_suffix(')'))
        && let Some((selector, label)) = inner.rsplit_once(',')
    {
        return format!("count by ({}) ({selector})", label.trim());
    }
    trimmed.to_string()
}

/// What a scrape holds: each sample name, with each label's values.
#[derive(Debug, Default)]
pub struct Scrape {
    pub series: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

impl Scrape {
    /// Reads the samples of a text exposition (comments skipped).
    pub fn parse(text: &str) -> Scrape {
        let mut scrape = Scrape::default();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            let labels = scrape.series.entry(line[..end].to_string()).or_default();
            if line[end..].starts_with('{') {
                for (label, value) in labels_of(&line[end + 1..]) {
                    labels.entry(label).or_default().insert(value);
                }
            }
        }
        scrape
    }
}

/// The `name="value"` pairs of a sample's label set, from after its `{` to its `}`.
fn labels_of(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|&c| c != '=').collect();
        let name = name.trim_start_matches([',', ' ']).to_string();
        if name.is_empty() || name.starts_with('}') || chars.next() != Some('"') {
            return pairs;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(escaped) = chars.next() {
                        value.push(if escaped == 'n' { '\n' } else { escaped });
                    }
                }
                '"' => break,
                other => value.push(other),
            }
        }
        pairs.push((name, value));
        if chars.peek() != Some(&',') {
            return pairs;
        }
    }
}

/// Every name `query` (from `source`) uses that `scrape` lacks, one line each.
pub fn missing(source: &str, query: &Query, scrape: &Scrape) -> Vec<String> {
    let mut problems = Vec::new();
    let labels_of = |metric: &str| -> Option<BTreeSet<&str>> {
        if PROMETHEUS_SERIES.contains(&metric) {
            return Some(TARGET_LABELS.iter().copied().collect());
        }
        let labels = scrape.series.get(metric)?;
        Some(
            labels
                .keys()
                .map(String::as_str)
                .chain(TARGET_LABELS.iter().copied())
                .collect(),
        )
    };
    for selector in &query.selectors {
        let Some(labels) = labels_of(&selector.metric) else {
            problems.push(format!(
                "{source}: metric {} is not in the scrape",
                selector.metric
            ));
            continue;
        };
        for matcher in &selector.matchers {
            if !labels.contains(matcher.label.as_str()) {
                problems.push(format!(
                    "{source}: label {} of {} is not in the scrape",
                    matcher.label, selector.metric
                ));
                continue;
            }
            let values = scrape
                .series
                .get(&selector.metric)
                .and_then(|l| l.get(&matcher.label));
            let Some(values) = values else { continue };
            let literal =
                |v: &str| !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            let wanted: Vec<&str> = match matcher.op.as_str() {
                "=" if literal(&matcher.value) => vec![matcher.value.as_str()],
                "=~" if matcher.value.split('|').all(literal) => matcher.value.split('|').collect(),
                _ => Vec::new(),
            };
            for value in wanted {
                if !values.contains(value) {
                    problems.push(format!(
                        "{source}: {}{{{}=\"{value}\"}} is not in the scrape",
                        selector.metric, matcher.label
                    ));
                }
            }
        }
    }
    for grouping in &query.groupings {
        let known: Vec<BTreeSet<&str>> = grouping
            .selectors
            .iter()
            .filter_map(|&s| labels_of(&query.selectors[s].metric))
            .collect();
        for label in &grouping.labels {
            let ok = if grouping.keyword == "by" {
                known.iter().all(|l| l.contains(label.as_str()))
            } else {
                // Unknown metrics are reported above, not once more here.
                known.is_empty() || known.iter().any(|l| l.contains(label.as_str()))
            };
            if !ok {
                let metrics: Vec<&str> = grouping
                    .selectors
                    .iter()
                    .map(|&s| query.selectors[s].metric.as_str())
                    .collect();
                problems.push(format!(
                    "{source}: label {label} of {} ({}) is not in the scrape",
                    grouping.keyword,
                    metrics.join(", ")
                ));
            }
        }
    }
    problems
}

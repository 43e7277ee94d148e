//! Many topics and many tables in one connector: `topics_regex`, and `sink.table` as a
//! template (`{topic}`, `{source.schema}`, `{source.table}`, `{source.db}`) or
//! `sink.table_from` (a topic pattern whose captures `{1}`, `{2}` … the table name reads).
//!
//! Templates use braces because `${…}` is environment interpolation, done before any of
//! this is read. A template yields one identifier: dots in a topic name stay in the table
//! name; `sink.schema` names the schema the tables are in.

use std::fmt;

use regex::Regex;

use super::names::{name_limit, table_name_problem};
use serde::Deserialize;

/// `topics_regex`: a pattern of topic names. It is matched from the start of a name (as
/// librdkafka's `^` subscription matches it); `$` anchors the end.
#[derive(Clone)]
pub struct TopicPattern {
    text: String,
    regex: Regex,
}

impl TopicPattern {
    /// The pattern as the file spells it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The subscription librdkafka takes: a topic string that starts with `^` is a
    /// pattern, matched against the cluster's topics, new ones included.
    pub fn subscription(&self) -> String {
        anchored(&self.text)
    }

    /// Whether `topic` is one the pattern takes.
    pub fn matches(&self, topic: &str) -> bool {
        self.regex.is_match(topic)
    }
}

/// `^…` as written, or the whole pattern behind one: a group, so that `a|b` stays one
/// alternative anchored at the start (a plain group: not every regex engine librdkafka is
/// built with reads `(?:…)`).
fn anchored(text: &str) -> String {
    if text.starts_with('^') {
        text.to_string()
    } else {
        format!("^({text})")
    }
}

impl TryFrom<String> for TopicPattern {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let regex = portable_regex(&text, &anchored(&text))?;
        Ok(TopicPattern { text, regex })
    }
}

impl<'de> Deserialize<'de> for TopicPattern {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        TopicPattern::try_from(text).map_err(serde::de::Error::custom)
    }
}

impl fmt::Debug for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicPattern({:?})", self.text)
    }
}

impl PartialEq for TopicPattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

/// A pattern both regex engines read alike: librdkafka's (which subscribes) and sluice's
/// own (which lists, routes and checks). Class escapes such as `\d`, `\w`, `\s` and `\b`
/// are Perl's, unknown to librdkafka's engine, so they are refused with the portable
/// spelling; an escaped punctuation character (`\.`) is the character itself in both.
fn portable_regex(text: &str, compiled: &str) -> Result<Regex, String> {
    if text.is_empty() {
        return Err("an empty pattern matches every topic: write the pattern, e.g. \"^shop\\\\.public\\\\..*\"".into());
    }
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(next) = chars.next()
            && next.is_ascii_alphanumeric()
        {
            return Err(format!(
                "\"{text}\": \\{next} is not read alike by librdkafka's pattern engine and sluice's: use a class such as [0-9] or [A-Za-z0-9_], and escape only punctuation (\\.)"
            ));
        }
    }
    if text.contains("(?") {
        return Err(format!(
            "\"{text}\": (?…) groups and flags are not read by librdkafka's pattern engine: use plain ( ) groups"
        ));
    }
    Regex::new(compiled).map_err(|e| format!("\"{text}\" is not a pattern: {e}"))
}

/// One piece of a table template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplatePart {
    /// Text as written.
    Literal(String),
    /// `{topic}`: the record's topic.
    Topic,
    /// `{source.schema}`, `{source.table}`, `{source.db}`: a field of a change event's
    /// source block (OpenCDC's `metadata.opencdc.collection` is its `table`).
    Source(SourceField),
    /// `{1}`, `{2}` …: a capture of `sink.table_from.topic` in the topic.
    Capture(usize),
}

/// A field of a change event's source block that a template reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceField {
    Schema,
    Table,
    Db,
}

impl SourceField {
    /// The field's name in the source block.
    pub fn name(self) -> &'static str {
        match self {
            SourceField::Schema => "schema",
            SourceField::Table => "table",
            SourceField::Db => "db",
        }
    }
}

/// `sink.table` or `sink.table_from.to`: a table name, with `{…}` placeholders or without.
#[derive(Clone, PartialEq, Eq)]
pub struct TableTemplate {
    text: String,
    parts: Vec<TemplatePart>,
}

impl TableTemplate {
    /// The template as the file spells it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its pieces, in order.
    pub fn parts(&self) -> &[TemplatePart] {
        &self.parts
    }

    /// Whether it has placeholders: a name without any is one table (`schema.table`
    /// splits then, as it always did).
    pub fn is_template(&self) -> bool {
        self.parts
            .iter()
            .any(|p| !matches!(p, TemplatePart::Literal(_)))
    }

    /// Whether it reads a change event's source block.
    pub fn reads_source(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, TemplatePart::Source(_)))
    }

    /// The highest capture it reads (0 for none).
    pub fn max_capture(&self) -> usize {
        self.parts
            .iter()
            .filter_map(|p| match p {
                TemplatePart::Capture(n) => Some(*n),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }
}

impl TryFrom<String> for TableTemplate {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find(['{', '}']) {
            literal.push_str(&rest[..at]);
            if rest[at..].starts_with('}') {
                return Err(format!(
                    "\"{text}\": a '}}' without its '{{': placeholders are {{topic}}, {{source.schema}}, {{source.table}}, {{source.db}} and {{1}}, {{2}} …"
                ));
            }
            let Some(end) = rest[at..].find('}') else {
                return Err(format!("\"{text}\": a '{{' without its '}}'"));
            };
            let name = &rest[at + 1..at + end];
            let part = match name {
                "topic" => TemplatePart::Topic,
                "source.schema" => TemplatePart::Source(SourceField::Schema),
                "source.table" => TemplatePart::Source(SourceField::Table),
                "source.db" => TemplatePart::Source(SourceField::Db),
                digits if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                    match digits.parse::<usize>() {
                        Ok(n) if (1..=99).contains(&n) => TemplatePart::Capture(n),
                        _ => {
                            return Err(format!(
                                "\"{text}\": {{{digits}}} is not a capture: captures are {{1}} to {{99}}"
                            ));
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "\"{text}\": {{{other}}} is not a placeholder: use {{topic}}, {{source.schema}}, {{source.table}}, {{source.db}}, or {{1}}, {{2}} … with sink.table_from (${{…}} is an environment variable)"
                    ));
                }
            };
            if !literal.is_empty() {
                parts.push(TemplatePart::Literal(std::mem::take(&mut literal)));
            }
            parts.push(part);
            rest = &rest[at + end + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(TemplatePart::Literal(literal));
        }
        if parts.is_empty() {
            return Err("an empty table name".into());
        }
        Ok(TableTemplate { text, parts })
    }
}

impl<'de> Deserialize<'de> for TableTemplate {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        TableTemplate::try_from(text).map_err(serde::de::Error::custom)
    }
}

impl fmt::Debug for TableTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TableTemplate({:?})", self.text)
    }
}

impl fmt::Display for TableTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `sink.table_from`: the table of a record is `to`, with `{1}`, `{2}` … the captures of
/// `topic` in the record's topic.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableFrom {
    /// A pattern of the topic name (matched from its start; `$` anchors the end): a record
    /// of a topic it does not match fails with class `table_name`.
    pub topic: CapturePattern,
    /// The table name, reading the pattern's captures as `{1}`, `{2}` …, and `{topic}`,
    /// `{source.…}` as `sink.table` does.
    pub to: TableTemplate,
}

/// `sink.table_from.topic`: a pattern with captures, matched from the topic's start.
#[derive(Clone)]
pub struct CapturePattern {
    text: String,
    regex: Regex,
}

impl CapturePattern {
    /// The pattern as the file spells it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// How many capture groups it has.
    pub fn captures_len(&self) -> usize {
        self.regex.captures_len().saturating_sub(1)
    }

    /// The captures of `topic` (index 0 the whole match), or `None` when it does not match.
    pub fn captures<'t>(&self, topic: &'t str) -> Option<regex::Captures<'t>> {
        self.regex.captures(topic)
    }
}

impl<'de> Deserialize<'de> for CapturePattern {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        // Anchored at the start as a whole (`a|b` is two alternatives, both anchored),
        // in a group that captures nothing, so `{1}` is the first group the user wrote.
        // Only sluice reads this pattern: `(?:…)` is safe here.
        let compiled = if text.starts_with('^') {
            text.clone()
        } else {
            format!("^(?:{text})")
        };
        let regex = portable_regex(&text, &compiled).map_err(serde::de::Error::custom)?;
        Ok(CapturePattern { text, regex })
    }
}

impl fmt::Debug for CapturePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CapturePattern({:?})", self.text)
    }
}

impl PartialEq for CapturePattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

/// The checks of `topics`/`topics_regex` and `sink.table`/`table_from`/`schema` that the
/// JSON Schema cannot make. With a list of topics, a template that reads only the topic is
/// tried on each of them here: a name the database cannot take, or two topics meeting in
/// one table, is an error now rather than a failed record later.
pub(super) fn routing_problems(
    connector: &super::ConnectorConfig,
    scheme: Option<&str>,
    at: &dyn Fn(&str) -> String,
) -> Vec<super::Problem> {
    use super::Problem;
    let mut problems = Vec::new();
    match (connector.topics.is_empty(), &connector.topics_regex) {
        (true, None) => problems.push(Problem::new(
            at("topics"),
            "name the topics to consume: topics: [a, b], or topics_regex: \"^shop\\\\..*\"",
        )),
        (false, Some(_)) => problems.push(Problem::new(
            at("topics_regex"),
            "a connector has either topics or topics_regex, not both",
        )),
        _ => {}
    }
    let sink = &connector.sink;
    let template = match (&sink.table, &sink.table_from) {
        (None, None) => {
            problems.push(Problem::new(
                at("sink.table"),
                "name the table: sink.table (a name or a template such as \"{topic}\"), or sink.table_from",
            ));
            return problems;
        }
        (Some(_), Some(_)) => {
            problems.push(Problem::new(
                at("sink.table_from"),
                "a sink has either table or table_from, not both",
            ));
            return problems;
        }
        (Some(table), None) if !table.is_template() => {
            if !super::names::valid_table_name(table.as_str()) {
                problems.push(Problem::new(
                    at("sink.table"),
                    format!("\"{table}\" is not a table name: use letters, digits and _, optionally schema.table; or a template such as \"{{topic}}\""),
                ));
            }
            if sink.schema.is_some() {
                problems.push(Problem::new(
                    at("sink.schema"),
                    format!("sink.schema goes with a table template; for one table write schema.table in sink.table (\"{table}\")"),
                ));
            }
            return problems;
        }
        (Some(table), None) => {
            if table.max_capture() > 0 {
                problems.push(Problem::new(
                    at("sink.table"),
                    format!("\"{table}\" reads a capture ({{{}}}): captures come from sink.table_from: {{ topic: PATTERN, to: TEMPLATE }}", table.max_capture()),
                ));
                return problems;
            }
            table
        }
        (None, Some(from)) => {
            let groups = from.topic.captures_len();
            if from.to.max_capture() > groups {
                problems.push(Problem::new(
                    at("sink.table_from.to"),
                    format!(
                        "\"{}\" reads {{{}}}, and \"{}\" has {groups} capture group(s)",
                        from.to,
                        from.to.max_capture(),
                        from.topic.as_str()
                    ),
                ));
                return problems;
            }
            &from.to
        }
    };
    let template_at = if sink.table_from.is_some() {
        "sink.table_from.to"
    } else {
        "sink.table"
    };
    if let Some(schema) = &sink.schema
        && !super::names::valid_identifier(schema)
    {
        problems.push(Problem::new(
            at("sink.schema"),
            format!("\"{schema}\" is not a schema name: letters, digits and _, not starting with a digit"),
        ));
    }
    if template.reads_source() {
        match connector.envelope {
            super::Envelope::None => problems.push(Problem::new(
                at(template_at),
                format!("\"{template}\" reads the source block of a change event: it needs envelope: debezium or opencdc"),
            )),
            super::Envelope::Opencdc
                if template
                    .parts()
                    .iter()
                    .any(|p| matches!(p, TemplatePart::Source(f) if *f != SourceField::Table)) =>
            {
                problems.push(Problem::new(
                    at(template_at),
                    format!("\"{template}\": an OpenCDC record names its table only (metadata opencdc.collection, read as {{source.table}})"),
                ))
            }
            _ => {}
        }
    }
    if connector.topics_regex.is_some() || template.reads_source() {
        return problems;
    }
    // Every table the listed topics make.
    let limit = scheme.and_then(name_limit);
    let mut tables: std::collections::HashMap<String, &str> = Default::default();
    for topic in &connector.topics {
        let captures = match &sink.table_from {
            Some(from) => {
                match from.topic.captures(topic) {
                    Some(captures) => Some(captures),
                    None => {
                        problems.push(Problem::new(
                        at("sink.table_from.topic"),
                        format!("topic {topic} does not match \"{}\": its records would have no table", from.topic.as_str()),
                    ));
                        continue;
                    }
                }
            }
            None => None,
        };
        let mut complete = true;
        let mut name = String::new();
        for part in template.parts() {
            match part {
                TemplatePart::Literal(text) => name.push_str(text),
                TemplatePart::Topic => name.push_str(topic),
                TemplatePart::Capture(n) => match captures.as_ref().and_then(|c| c.get(*n)) {
                    Some(found) => name.push_str(found.as_str()),
                    None => {
                        problems.push(Problem::new(
                                at("sink.table_from.topic"),
                                format!("topic {topic} matches without capture {{{n}}}: its records would have no table"),
                            ));
                        complete = false;
                        break;
                    }
                },
                TemplatePart::Source(_) => {}
            }
        }
        if !complete {
            continue;
        }
        if let Err(why) = table_name_problem(&name, limit) {
            problems.push(Problem::new(
                at(template_at),
                format!("topic {topic}: {why}"),
            ));
            continue;
        }
        if let Some(other) = tables.insert(name.to_lowercase(), topic) {
            problems.push(Problem::new(
                at(template_at),
                format!("topics {other} and {topic} both map to table {name} (names are compared without case): give each topic its own table"),
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(text: &str) -> Result<TableTemplate, String> {
        TableTemplate::try_from(text.to_string())
    }

    #[test]
    fn templates_parse_into_their_parts() {
        let t = template("replica_{source.schema}_{1}").unwrap();
        assert_eq!(
            t.parts(),
            &[
                TemplatePart::Literal("replica_".into()),
                TemplatePart::Source(SourceField::Schema),
                TemplatePart::Literal("_".into()),
                TemplatePart::Capture(1),
            ]
        );
        assert!(t.is_template() && t.reads_source());
        assert_eq!(t.max_capture(), 1);
        let plain = template("public.orders").unwrap();
        assert!(!plain.is_template());
        assert_eq!(template("{topic}").unwrap().parts(), &[TemplatePart::Topic]);
    }

    #[test]
    fn bad_templates_say_what_is_wrong() {
        assert!(
            template("{tpoic}")
                .unwrap_err()
                .contains("{tpoic} is not a placeholder")
        );
        assert!(
            template("a_{topic")
                .unwrap_err()
                .contains("without its '}'")
        );
        assert!(template("a}").unwrap_err().contains("without its '{'"));
        assert!(
            template("{0}")
                .unwrap_err()
                .contains("captures are {1} to {99}")
        );
        assert!(template("{}").unwrap_err().contains("is not a placeholder"));
        assert!(template("").is_err());
    }

    #[test]
    fn topic_patterns_anchor_at_the_start_as_librdkafka_does() {
        let p = TopicPattern::try_from("shop\\.public\\..*".to_string()).unwrap();
        assert_eq!(p.subscription(), "^(shop\\.public\\..*)");
        assert!(p.matches("shop.public.orders"));
        assert!(!p.matches("old.shop.public.orders"));
        let alternatives = TopicPattern::try_from("a|b".to_string()).unwrap();
        assert!(alternatives.matches("a1") && alternatives.matches("b1"));
        assert!(!alternatives.matches("cb"));
        let anchored = TopicPattern::try_from("^orders$".to_string()).unwrap();
        assert_eq!(anchored.subscription(), "^orders$");
        assert!(!anchored.matches("orders2"));
    }

    #[test]
    fn patterns_that_the_two_engines_read_apart_are_refused() {
        for bad in ["^t\\d+", "^(?i)orders", "", "^(unclosed"] {
            assert!(TopicPattern::try_from(bad.to_string()).is_err(), "{bad}");
        }
    }
}

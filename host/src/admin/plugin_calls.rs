//! Each transform plugin's calls, read from the process's own metrics (the families
//! `sluice_plugin_call_seconds` and `sluice_plugin_failures`), so that the status answer
//! shows the very figures Prometheus scrapes. The metrics keep those families to
//! themselves; their text exposition, read once per answer, is the interface.

use std::collections::BTreeMap;

/// One plugin's calls so far.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PluginCalls {
    /// Calls of `process` (`sluice_plugin_call_seconds_count`).
    pub calls: u64,
    /// Their wall time added up, in seconds (`sluice_plugin_call_seconds_sum`).
    pub seconds: f64,
    /// Failed calls, all kinds (`sluice_plugin_failures_total`).
    pub failures: u64,
}

/// Every plugin's calls, by (connector, plugin).
pub type AllPluginCalls = BTreeMap<(String, String), PluginCalls>;

/// Reads the plugin families out of a text exposition.
pub fn parse(exposition: &str) -> AllPluginCalls {
    let mut all = AllPluginCalls::new();
    for line in exposition.lines() {
        let Some((name, labels, value)) = sample(line) else {
            continue;
        };
        let field: fn(&mut PluginCalls, f64) = match name {
            "sluice_plugin_call_seconds_count" => |c, v| c.calls = v as u64,
            "sluice_plugin_call_seconds_sum" => |c, v| c.seconds = v,
            "sluice_plugin_failures_total" => |c, v| c.failures += v as u64,
            _ => continue,
        };
        let (Some(connector), Some(plugin)) = (labels.get("connector"), labels.get("plugin"))
        else {
            continue;
        };
        field(
            all.entry((connector.clone(), plugin.clone())).or_default(),
            value,
        );
    }
    all
}

/// A sample line's name, labels and value; `None` for comments and lines it cannot read.
fn sample(line: &str) -> Option<(&str, BTreeMap<String, String>, f64)> {
    if line.starts_with('#') {
        return None;
    }
    let (name, rest) = line.split_once('{')?;
    let (labels, rest) = labels(rest)?;
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some((name, labels, value))
}

/// The labels up to the closing brace (values in quotes, with `\\`, `\"` and `\n`
/// escaped), and the text after it.
fn labels(text: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches(',');
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.to_string(), value);
        rest = after.get(end + 1..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_plugin_families_of_a_real_exposition() {
        let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
        let connector = metrics.connector("we\"ird\\name");
        let observe = connector.plugin_observer();
        observe("parse", std::time::Duration::from_millis(250), None);
        observe("parse", std::time::Duration::from_millis(750), Some("trap"));
        observe(
            "mask",
            std::time::Duration::from_millis(100),
            Some("timeout"),
        );
        observe("mask", std::time::Duration::from_millis(100), Some("trap"));
        let all = parse(&metrics.render());
        let key = |plugin: &str| ("we\"ird\\name".to_string(), plugin.to_string());
        assert_eq!(
            all.get(&key("parse")),
            Some(&PluginCalls {
                calls: 2,
                seconds: 1.0,
                failures: 1
            }),
            "{all:?}"
        );
        let mask = all.get(&key("mask")).expect("mask");
        assert_eq!((mask.calls, mask.failures), (2, 2));
        assert!((mask.seconds - 0.2).abs() < 1e-9);
        assert_eq!(all.len(), 2);
    }

    #[test]
    fn lines_it_cannot_read_are_passed_over() {
        let text = "# HELP x\nsluice_plugin_call_seconds_count{connector=\"a\",plugin=\"p\"} 3\n\
                    sluice_plugin_call_seconds_count{connector=\"a\" 4\n\
                    sluice_plugin_call_seconds_count{plugin=\"q\"} 5\n\
                    sluice_plugin_call_seconds_sum{connector=\"a\",plugin=\"p\"} zero\n\
                    sluice_rows_written_total{connector=\"a\"} 9\n";
        let all = parse(text);
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(
            all.get(&("a".to_string(), "p".to_string()))
                .map(|c| c.calls),
            Some(3)
        );
    }
}

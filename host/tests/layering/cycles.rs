//! Cycles in a graph of files: the strongly connected components of more than one file
//! (each holds at least one cycle), and the elementary cycles within one, so that a report
//! names every circle and each step of it.

use std::collections::{BTreeMap, BTreeSet};

/// Files and, for each, the files it imports with what the edge carries (`E`: the path
/// that makes it, for the report).
pub(crate) type Graph<'a, E> = BTreeMap<&'a str, BTreeMap<&'a str, E>>;

/// The strongly connected components of more than one file (Tarjan's algorithm).
pub(crate) fn strongly_connected<'a, E>(graph: &Graph<'a, E>) -> Vec<Vec<&'a str>> {
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<&'a str>>,
    }
    fn visit<'a, E>(node: &'a str, graph: &Graph<'a, E>, s: &mut State<'a>) {
        s.index.insert(node, s.next);
        s.low.insert(node, s.next);
        s.next += 1;
        s.stack.push(node);
        s.on_stack.insert(node);
        for &to in graph.get(node).into_iter().flat_map(BTreeMap::keys) {
            if !s.index.contains_key(to) {
                visit(to, graph, s);
                let low = s.low[node].min(s.low[to]);
                s.low.insert(node, low);
            } else if s.on_stack.contains(to) {
                let low = s.low[node].min(s.index[to]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut component = Vec::new();
            while let Some(top) = s.stack.pop() {
                s.on_stack.remove(top);
                component.push(top);
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for &node in graph.keys() {
        if !state.index.contains_key(node) {
            visit(node, graph, &mut state);
        }
    }
    state.found.sort();
    state.found
}

/// The elementary cycles within one component, each once, starting at its least file; at
/// most `LIMIT` of them (a component with more is reported with the ones found).
pub(crate) fn elementary_cycles<'a, E>(
    graph: &Graph<'a, E>,
    component: &[&'a str],
) -> Vec<Vec<&'a str>> {
    const LIMIT: usize = 100;
    fn walk<'a, E>(
        path: &mut Vec<&'a str>,
        start: &'a str,
        allowed: &BTreeSet<&'a str>,
        graph: &Graph<'a, E>,
        out: &mut Vec<Vec<&'a str>>,
    ) {
        let last = *path.last().expect("a walk starts somewhere");
        for &to in graph.get(last).into_iter().flat_map(BTreeMap::keys) {
            if out.len() >= LIMIT {
                return;
            }
            if to == start {
                out.push(path.clone());
            } else if allowed.contains(to) && !path.contains(&to) {
                path.push(to);
                walk(path, start, allowed, graph, out);
                path.pop();
            }
        }
    }
    let mut out = Vec::new();
    for (k, &start) in component.iter().enumerate() {
        // Cycles through `start` and later files only: each cycle is found once.
        let allowed: BTreeSet<&str> = component[k + 1..].iter().copied().collect();
        walk(&mut vec![start], start, &allowed, graph, &mut out);
    }
    out
}

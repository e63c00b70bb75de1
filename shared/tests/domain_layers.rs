//! The domain's floor plan, read from its source: the domain knows no AWS and none of the floors
//! above it (ports, adapters, services), and its modules import one another one way only — no
//! circle, so each can be read, tested and moved without the others it does not name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each domain module's source up to its unit tests, comment lines dropped (a doc link is not an
/// import).
fn domain_modules() -> BTreeMap<String, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/domain");
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let name = path.file_stem().and_then(|s| s.to_str()).expect("a UTF-8 file name").to_owned();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let code: Vec<&str> = text
            .lines()
            .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        modules.insert(name, code.join("\n"));
    }
    modules
}

/// The sibling modules `code` names (`super::x`, `crate::domain::x`), itself left out.
fn imports(name: &str, code: &str, siblings: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for prefix in ["super::", "crate::domain::"] {
        for (at, _) in code.match_indices(prefix) {
            let rest = &code[at + prefix.len()..];
            let word: String = rest.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
            if word != name && siblings.contains(&word) {
                out.insert(word);
            }
        }
        // `use super::{a, b::C}`: every sibling named in the braces.
        for (at, _) in code.match_indices(&format!("{prefix}{{")) {
            let rest = &code[at + prefix.len() + 1..];
            let inner = &rest[..rest.find("};").unwrap_or(rest.len())];
            for part in inner.split(',') {
                let word: String = part.trim().chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
                if word != name && siblings.contains(&word) {
                    out.insert(word);
                }
            }
        }
    }
    out
}

/// A circle in `graph`, if there is one, as the modules along it.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut found = path[i..].to_vec();
            found.push(at.to_owned());
            return Some(found);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_owned());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(at.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_domain_modules_import_one_another_one_way_only() {
    let modules = domain_modules();
    let siblings: BTreeSet<String> = modules.keys().filter(|m| *m != "mod").cloned().collect();
    let graph: BTreeMap<String, BTreeSet<String>> =
        modules.iter().map(|(name, code)| (name.clone(), imports(name, code, &siblings))).collect();
    assert!(graph.get("sweep").is_some_and(|d| d.contains("intent")), "the reader sees imports: {graph:?}");
    if let Some(found) = circle(&graph) {
        panic!("the domain imports in a circle: {}", found.join(" → "));
    }
}

#[test]
fn the_domain_names_no_aws_sdk_and_no_floor_above_it() {
    for (name, code) in domain_modules() {
        for above in ["aws_", "crate::ports", "crate::adapters", "crate::services", "crate::config", "tokio::"] {
            assert!(!code.contains(above), "domain/{name}.rs names `{above}`: the domain is pure, no AWS, no I/O");
        }
    }
}

#[test]
fn a_circle_is_found_when_there_is_one() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["c".to_owned()])),
        ("c".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]
    .into();
    assert_eq!(circle(&graph).map(|c| c.join(" → ")), Some("a → b → c → a".to_owned()));
    let line: BTreeMap<String, BTreeSet<String>> =
        [("a".to_owned(), BTreeSet::from(["b".to_owned()])), ("b".to_owned(), BTreeSet::new())].into();
    assert_eq!(circle(&line), None);
}

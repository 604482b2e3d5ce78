//! The module graph, checked against the layers the docs describe: reads
//! the source tree, collects every `crate::<module>` path per top-level
//! module (and every `super::<file>` path per file of `session`), and
//! fails on a cycle or on a use that goes up the documented order. A new
//! module not yet placed in the docs is held to acyclicity alone.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Module name to the modules it uses.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Every `.rs` file at or under `path`.
fn rust_files(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut files = Vec::new();
    let Ok(entries) = fs::read_dir(path) else {
        return files;
    };
    for entry in entries.flatten() {
        let p = entry.path();
        if p.is_dir() {
            files.extend(rust_files(&p));
        } else if p.extension().is_some_and(|e| e == "rs") {
            files.push(p);
        }
    }
    files
}

/// Source text with comments, string literals and character literals
/// blanked out, so prose and messages that name a module are not uses.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(b.len());
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == b'r' && (i == 0 || !ident(b[i - 1]) || b[i - 1] == b'b') && {
            let hashes = b[i + 1..].iter().take_while(|&&h| h == b'#').count();
            b.get(i + 1 + hashes) == Some(&b'"')
        } {
            let hashes = b[i + 1..].iter().take_while(|&&h| h == b'#').count();
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            i += 2 + hashes;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A character literal ('a', '\n', '"'), or else a lifetime.
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|p| i + 2 + p)
            } else {
                let width = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + width) == Some(&b'\'')).then_some(i + 1 + width)
            };
            match end {
                Some(end) => {
                    i = end + 1;
                    out.push_str("' '");
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The first segment of every path that follows `prefix` in `code`:
/// `crate::a::B` gives `a`, `crate::{a, b::C}` gives `a` and `b`.
fn heads(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices(prefix) {
        // Not the tail of a longer path (`super::super::`, `$crate::`).
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$') {
            continue;
        }
        collect_heads(&code[at + prefix.len()..], &mut found);
    }
    found
}

fn collect_heads(after: &str, found: &mut BTreeSet<String>) {
    let after = after.trim_start();
    if let Some(group) = after.strip_prefix('{') {
        // Split the group at its top-level commas.
        let mut depth = 0;
        let mut item = String::new();
        for c in group.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    found.extend(first_ident(&item));
                    item.clear();
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        found.extend(first_ident(&item));
    } else {
        found.extend(first_ident(after));
    }
}

fn first_ident(s: &str) -> Option<String> {
    let id: String = s
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!id.is_empty() && id != "self" && id != "super" && id != "crate").then_some(id)
}

/// Modules declared (`mod name;`) in a file.
fn declared_modules(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = ["pub(crate) ", "pub(super) ", "pub "]
                .iter()
                .find_map(|p| line.strip_prefix(p))
                .unwrap_or(line);
            let name = line.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect()
}

/// The layers a doc lists, top (0) to bottom: list items (`1. ` or `- `)
/// that open with backticked names followed by a colon.
fn documented_layers(text: &str) -> BTreeMap<String, usize> {
    let mut layers = BTreeMap::new();
    let mut index = 0;
    for line in text.lines() {
        let Some(doc) = line.trim_start().strip_prefix("//!") else {
            continue;
        };
        let doc = doc.trim_start();
        let item = match doc.strip_prefix("- ") {
            Some(item) => item,
            None => {
                let digits = doc.chars().take_while(char::is_ascii_digit).count();
                match doc[digits..].strip_prefix(". ") {
                    Some(item) if digits > 0 => item,
                    _ => continue,
                }
            }
        };
        let Some((names, _)) = item.split_once(':') else {
            continue;
        };
        let names: Vec<&str> = names.split(',').map(str::trim).collect();
        if names
            .iter()
            .all(|n| n.len() > 2 && n.starts_with('`') && n.ends_with('`'))
        {
            for n in names {
                layers.insert(n.trim_matches('`').to_string(), index);
            }
            index += 1;
        }
    }
    layers
}

/// A cycle of `graph`, if it has one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

/// What is wrong with `graph` against the order `doc` lists (empty: all
/// is well).
fn check(graph: &Graph, doc: &BTreeMap<String, usize>, what: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    if let Some(cycle) = find_cycle(graph) {
        wrong.push(format!("{what} has a cycle: {}", cycle.join(" -> ")));
    }
    for name in doc.keys() {
        if !graph.contains_key(name) {
            wrong.push(format!(
                "{what}: the docs list `{name}`, which does not exist"
            ));
        }
    }
    for (from, uses) in graph {
        for to in uses {
            if let (Some(a), Some(b)) = (doc.get(from), doc.get(to))
                && a >= b
            {
                wrong.push(format!(
                    "{what}: `{from}` uses `{to}`, which its docs do not list below it"
                ));
            }
        }
    }
    wrong
}

/// Top-level modules of the library and the other ones each uses.
fn crate_graph() -> Graph {
    let root = src();
    let modules = declared_modules(&code_only(&read(&root.join("lib.rs"))));
    let mut graph = Graph::new();
    for m in &modules {
        let mut uses = BTreeSet::new();
        for path in [root.join(format!("{m}.rs")), root.join(m)] {
            for file in rust_files(&path) {
                uses.extend(heads(&code_only(&read(&file)), "crate::"));
            }
        }
        uses.retain(|u| u != m && modules.contains(u));
        graph.insert(m.clone(), uses);
    }
    graph
}

/// The files of `session` and the other ones each uses, directly or
/// through a name `session/mod.rs` re-exports.
fn session_graph() -> Graph {
    let dir = src().join("session");
    let module = code_only(&read(&dir.join("mod.rs")));
    let files = declared_modules(&module);
    let mut exported = BTreeMap::new();
    for line in module.split(';') {
        let Some(path) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((file, names)) = path.split_once("::") else {
            continue;
        };
        let mut items = BTreeSet::new();
        collect_heads(names, &mut items);
        for item in items {
            exported.insert(item, file.trim().to_string());
        }
    }
    let mut graph = Graph::new();
    for f in &files {
        // A file split into a folder of its own is checked with its parts.
        let code: String = std::iter::once(dir.join(format!("{f}.rs")))
            .chain(rust_files(&dir.join(f)))
            .map(|file| code_only(&read(&file)))
            .collect();
        let mut named = heads(&code, "super::");
        named.extend(heads(&code, "crate::session::"));
        let uses = named
            .into_iter()
            .filter_map(|n| {
                if files.contains(&n) {
                    Some(n)
                } else {
                    exported.get(&n).cloned()
                }
            })
            .filter(|n| n != f)
            .collect();
        graph.insert(f.clone(), uses);
    }
    graph
}

#[test]
fn modules_depend_one_way_in_the_documented_layer_order() {
    let graph = crate_graph();
    assert!(graph.len() > 1, "no modules found in lib.rs: {graph:?}");
    let doc = documented_layers(&read(&src().join("lib.rs")));
    assert!(!doc.is_empty(), "lib.rs lists no layers");
    let wrong = check(&graph, &doc, "the crate");
    assert!(wrong.is_empty(), "{}\ngraph: {graph:#?}", wrong.join("\n"));
}

#[test]
fn session_files_depend_one_way_in_the_documented_order() {
    let graph = session_graph();
    assert!(graph.len() > 1, "no files found in session/mod.rs");
    let doc = documented_layers(&read(&src().join("session").join("mod.rs")));
    assert!(!doc.is_empty(), "session/mod.rs lists no files");
    let wrong = check(&graph, &doc, "session");
    assert!(wrong.is_empty(), "{}\ngraph: {graph:#?}", wrong.join("\n"));
}

/// The rules of the permission table.
const RULES: &[&str] = &[
    "read_only",
    "plan_mode",
    "deny_writes",
    "allow_writes",
    "guard_patterns",
    "ask_writes",
    "ask_commands",
    "ask_tools",
    "plan_files",
];

/// Every read of a permission rule's field in `code` (comments and
/// strings blanked).
fn rule_reads(code: &str) -> Vec<&'static str> {
    let mut reads = Vec::new();
    for rule in RULES {
        let field = format!(".{rule}");
        let mut from = 0;
        while let Some(at) = code[from..].find(&field) {
            let end = from + at + field.len();
            let next = code[end..].chars().next().unwrap_or(' ');
            if !(next.is_ascii_alphanumeric() || next == '_') {
                reads.push(*rule);
            }
            from = end;
        }
    }
    reads
}

/// Permissions are decided in `policy` alone: outside it, no code reads a
/// rule of the permission table. `convert` carries rules across the wire,
/// the session's record across a restart, and `cli` prints them; everyone
/// else asks the policy (`check_write`, `check_command`, ...).
#[test]
fn permissions_are_decided_in_the_policy_module_alone() {
    const CARRIERS: &[&str] = &[
        "policy/",
        "convert.rs",
        "session/records.rs",
        "cli/",
        "layers.rs",
    ];
    let root = src();
    let mut reads = Vec::new();
    for file in rust_files(&root) {
        let rel = file.strip_prefix(&root).unwrap().display().to_string();
        if CARRIERS.iter().any(|c| rel.starts_with(c)) {
            continue;
        }
        for rule in rule_reads(&code_only(&read(&file))) {
            reads.push(format!("{rel}: reads .{rule}"));
        }
    }
    assert!(
        reads.is_empty(),
        "permission rules read outside the policy module: {reads:#?}"
    );
    let sample = code_only(
        "if s.rules.read_only { } // .plan_files\nlet p = r.plan_files_x; f(&x.ask_tools);",
    );
    assert_eq!(rule_reads(&sample), vec!["read_only", "ask_tools"]);
}

#[test]
fn the_checker_sees_uses_and_cycles() {
    let code = code_only(
        "use crate::{a, b::{C, D}};\n// crate::comment\nlet s = \"crate::text\";\n\
         let c = '\"'; fn f<'x>() { crate::e::g(); }",
    );
    let found: Vec<String> = heads(&code, "crate::").into_iter().collect();
    assert_eq!(found, ["a", "b", "e"]);
    let graph: Graph = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(x, y)| (x.to_string(), BTreeSet::from([y.to_string()])))
        .collect();
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let doc = documented_layers("//! 1. `a`, `b`: top.\n//! 2. `c`: below.\n//! - not a layer");
    assert_eq!(doc.get("a"), Some(&0));
    assert_eq!(doc.get("c"), Some(&1));
    let upward = check(
        &Graph::from([("c".to_string(), BTreeSet::from(["a".to_string()]))]),
        &doc,
        "t",
    );
    assert!(
        upward.iter().any(|w| w.contains("`c` uses `a`")),
        "{upward:?}"
    );
}

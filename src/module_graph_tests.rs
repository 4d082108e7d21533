//! The crate's top-level modules form a ladder: every `crate::` path in
//! `src/` (tests included, comments and string literals not) is an edge
//! from the module its file belongs to to the module it names, and the
//! graph of those edges has no circle. So each module can be read, and
//! tested, knowing only the ones below it. The measuring floor (`stats`)
//! and the time and atomics shims below it import nothing above them.
//!
//! This reads the source as text (a small lexer for comments, strings and
//! character literals; no parser), which is enough for the one thing it
//! checks: which top-level module a file names.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The ground floors: each may import only the modules listed.
const FLOORS: [(&str, &[&str]); 3] = [
    ("sync", &[]),
    ("clock", &["sync"]),
    ("stats", &["clock", "sync"]),
];

/// from → to → the files (relative to `src/`) whose code makes that edge.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable source directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` with comments, string literals and character literals replaced
/// by spaces (newlines kept), so only code is left to search.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }))
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let after_ident = i > 0 && ident(b[i - 1]);
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, i);
            loop {
                if j >= b.len() {
                    break j;
                } else if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break j;
                    }
                } else {
                    j += 1;
                }
            }
        } else if !after_ident && raw_string_start(rest).is_some() {
            let (open, hashes) = raw_string_start(rest).expect("checked");
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let body = i + open;
            body + b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len() - body, |p| p + close.len())
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            (j + 1).min(b.len())
        } else if rest[0] == b'\'' && !after_ident {
            // A character literal ('a', '\n', '\u{..}') or a lifetime ('a).
            if rest.get(1) == Some(&b'\\') {
                i + 2
                    + rest[2..]
                        .iter()
                        .position(|&c| c == b'\'')
                        .map_or(0, |p| p + 1)
            } else {
                let ch = std::str::from_utf8(&rest[1..])
                    .ok()
                    .and_then(|s| s.chars().next());
                match ch {
                    Some(c) if rest.get(1 + c.len_utf8()) == Some(&b'\'') => i + 2 + c.len_utf8(),
                    _ => i + 1,
                }
            }
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        blank(&mut out, &b[i..end]);
        i = end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// If `s` opens a raw string (`r"`, `r#"`, `br"`...): the length of the
/// opening and the number of `#`.
fn raw_string_start(s: &[u8]) -> Option<(usize, usize)> {
    let s0 = if s.first() == Some(&b'b') { &s[1..] } else { s };
    if s0.first() != Some(&b'r') {
        return None;
    }
    let hashes = s0[1..].iter().take_while(|&&c| c == b'#').count();
    (s0.get(1 + hashes) == Some(&b'"')).then_some((s.len() - s0.len() + 2 + hashes, hashes))
}

/// The top-level modules `code` names through `crate::` paths, both
/// `crate::a::B` and `crate::{a::B, b}`.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let first_ident = |s: &str| -> Option<String> {
        let s = s.trim_start_matches(|c: char| c.is_whitespace() || c == '{');
        let name: String = s.chars().take_while(|&c| ident(c)).collect();
        (!name.is_empty() && name != "self").then_some(name)
    };
    let mut refs = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| ident(c) || c == '$' || c == ':') {
            continue; // `$crate::`, `other_crate::`, `x::crate::`
        }
        let rest = code[at + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut item) = (1usize, String::new());
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => {
                        refs.extend(first_ident(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                item.push(c);
            }
            refs.extend(first_ident(&item));
        } else {
            refs.extend(first_ident(rest));
        }
    }
    refs
}

/// The graph of `src/`: top-level module (`src/x.rs` and everything in
/// `src/x/`) to the top-level modules its code names. `lib.rs`, which
/// declares them all, is no module's.
fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g = Graph::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a component");
        let first = first.as_os_str().to_str().expect("UTF-8 path");
        let from = first.strip_suffix(".rs").unwrap_or(first);
        if from == "lib" {
            continue;
        }
        let text = fs::read_to_string(&file).expect("readable source file");
        for to in crate_refs(&code_only(&text)) {
            if to != from {
                g.entry(from.to_owned())
                    .or_default()
                    .entry(to)
                    .or_default()
                    .insert(rel.display().to_string());
            }
        }
    }
    g
}

/// The graph's circles: its strongly connected components of more than
/// one module (Tarjan's algorithm).
fn circles(g: &Graph) -> Vec<Vec<String>> {
    struct Search<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, (usize, usize)>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Search<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.g.get(v).into_iter().flat_map(|m| m.keys()) {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.index[w].1.min(self.index[v].1);
                    self.index.get_mut(v).expect("visited").1 = low;
                } else if self.on_stack.contains(w) {
                    let low = self.index[w].0.min(self.index[v].1);
                    self.index.get_mut(v).expect("visited").1 = low;
                }
            }
            let (number, low) = self.index[v];
            if number == low {
                let mut component = Vec::new();
                loop {
                    let w = self.stack.pop().expect("on the stack");
                    self.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut s = Search {
        g,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            s.visit(v);
        }
    }
    s.found
}

fn describe(g: &Graph, circle: &[String]) -> String {
    let mut text = format!("circle among {circle:?}:\n");
    for from in circle {
        for (to, files) in g.get(from).into_iter().flatten() {
            if circle.contains(to) {
                text += &format!("  {from} -> {to}: {files:?}\n");
            }
        }
    }
    text
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_import_circle_among_the_top_level_modules() {
    let g = graph(&src());
    assert!(
        g.contains_key("queueset") && g.contains_key("dispatcher"),
        "read src/"
    );
    let found = circles(&g);
    let report: Vec<String> = found.iter().map(|c| describe(&g, c)).collect();
    assert!(found.is_empty(), "{}", report.join(""));
}

#[test]
fn the_ground_floors_import_nothing_above_them() {
    let g = graph(&src());
    for (floor, allowed) in FLOORS {
        for (to, files) in g.get(floor).into_iter().flatten() {
            assert!(
                allowed.contains(&to.as_str()),
                "{floor} may import only {allowed:?} but names {to} in {files:?}"
            );
        }
    }
}

// The checker itself: it must see what it looks for, and only that.

#[test]
fn refs_are_found_in_paths_and_groups_not_in_comments_or_strings() {
    let code = code_only(
        r##"use crate::a::X;
use crate::{b::{Y, Z}, c, self};
fn f<'l>(x: &'l str) -> char { let _ = crate::d::g(); '"' }
// crate::e
/* crate::f /* nested */ crate::g */
let s = "crate::h \" crate::i"; let r = r#"crate::j"#; let q = '\'';
macro_rules! m { () => { $crate::k::Z } }
let t = my_crate::l::Z;
"##,
    );
    let refs: Vec<String> = crate_refs(&code).into_iter().collect();
    assert_eq!(refs, ["a", "b", "c", "d"]);
}

#[test]
fn a_circle_is_reported_and_a_ladder_is_not() {
    let edge = |g: &mut Graph, a: &str, b: &str| {
        g.entry(a.into())
            .or_default()
            .entry(b.into())
            .or_default()
            .insert("f.rs".into());
    };
    let mut g = Graph::new();
    edge(&mut g, "dispatcher", "queueset");
    edge(&mut g, "queueset", "stats");
    edge(&mut g, "borrowing", "stats");
    assert!(circles(&g).is_empty());
    edge(&mut g, "stats", "borrowing");
    edge(&mut g, "queueset", "dispatcher");
    assert_eq!(
        circles(&g),
        [
            vec!["borrowing".to_owned(), "stats".to_owned()],
            vec!["dispatcher".to_owned(), "queueset".to_owned()]
        ]
    );
}

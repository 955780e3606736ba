//! The operator's layering, computed from its sources: no import cycle between the files of
//! `operator/src`, and `controllers/` holding exactly one module per controller.
//!
//! A file depends on another when its code (comments and its `#[cfg(test)]` modules left out)
//! names a path `crate::a::b::…` whose longest module prefix is that other file. `use` trees
//! (`crate::{a, b::{c, d}}`) count path by path. `super::` and a parent's `mod child;` are the
//! nesting itself, not a dependency, so a helper nested under its controller may use it freely;
//! what must not happen is that two floors name each other through `crate::`.
//!
//! Each check has a small test of its own on a made-up tree, so a check that finds nothing
//! because it reads nothing cannot pass unnoticed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use etcd_operator::controller::ControllerName;

/// Source files by module path (`["controllers", "defrag"]` → `controllers/defragmentation.rs`).
type Modules = BTreeMap<Vec<String>, PathBuf>;

/// The module declarations of a file (`mod x;`, with a `#[path]`), tests left out.
fn declared(text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut path_attr = None;
    let mut test_only = false;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("#[path = \"") {
            path_attr = rest.strip_suffix("\"]").map(str::to_owned);
            continue;
        }
        if line.starts_with("#[cfg(test)]") {
            test_only = true;
            continue;
        }
        let decl = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("pub(crate) mod "))
            .or_else(|| line.strip_prefix("mod "));
        if let Some(name) = decl.and_then(|d| d.strip_suffix(';'))
            && !test_only
        {
            out.push((name.to_owned(), path_attr.clone()));
        }
        if !line.starts_with("#[") {
            path_attr = None;
            test_only = false;
        }
    }
    out
}

/// A tree of source files: a file's text, `None` where there is no such file.
type Read<'a> = &'a dyn Fn(&Path) -> Option<String>;

/// Every module file of the crate rooted at `lib`, read through `read`.
fn modules(root: &Path, read: Read<'_>) -> Modules {
    let mut found = Modules::new();
    let mut todo = vec![(Vec::<String>::new(), root.join("lib.rs"))];
    while let Some((path, file)) = todo.pop() {
        let text = read(&file).unwrap_or_else(|| panic!("{}: declared, not found", file.display()));
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let dir = file.parent().unwrap().to_path_buf();
        let child_dir = if ["lib", "main", "mod"].contains(&stem.as_str()) {
            dir.clone()
        } else {
            dir.join(&stem)
        };
        for (name, attr) in declared(&text) {
            let child = match attr {
                Some(p) => dir.join(p),
                None => {
                    let flat = child_dir.join(format!("{name}.rs"));
                    if read(&flat).is_some() {
                        flat
                    } else {
                        child_dir.join(&name).join("mod.rs")
                    }
                }
            };
            let mut child_path = path.clone();
            child_path.push(name);
            todo.push((child_path, child));
        }
        found.insert(path, file);
    }
    found
}

/// The code of a file: comments and the trailing `#[cfg(test)]` module left out.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim().starts_with("mod ") && next.ends_with('{'))
        {
            break;
        }
        let line = line.split("//").next().unwrap_or("");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The paths a `use` tree names, from just after `crate::` (`a::{b, c::d}` → `a::b`, `a::c::d`).
fn tree(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    prefix: &[String],
) -> Vec<Vec<String>> {
    let mut path = prefix.to_vec();
    let mut ident = String::new();
    loop {
        match chars.peek().copied() {
            Some(c) if c.is_alphanumeric() || c == '_' => {
                ident.push(c);
                chars.next();
            }
            Some(':') => {
                chars.next();
                if chars.peek() == Some(&':') {
                    chars.next();
                    path.push(std::mem::take(&mut ident));
                }
            }
            Some('{') => {
                chars.next();
                let mut all = Vec::new();
                loop {
                    while chars.peek().is_some_and(|c| c.is_whitespace()) {
                        chars.next();
                    }
                    all.extend(tree(chars, &path));
                    match chars.next() {
                        Some(',') => continue,
                        _ => return all,
                    }
                }
            }
            _ => {
                if !ident.is_empty() {
                    path.push(ident);
                }
                return vec![path];
            }
        }
    }
}

/// The files `text` depends on through `crate::` paths.
fn depends(text: &str, modules: &Modules) -> BTreeSet<PathBuf> {
    let code = code(text);
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // `etcd_operator_crate::`, not this crate
        }
        let mut chars = code[i + "crate::".len()..].chars().peekable();
        for path in tree(&mut chars, &[]) {
            let hit = (0..=path.len()).rev().find_map(|n| modules.get(&path[..n]));
            if let Some(file) = hit {
                out.insert(file.clone());
            }
        }
    }
    out
}

/// The strongly connected components of more than one file (Tarjan), each sorted.
fn cycles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct T<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on: BTreeSet<&'a PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    impl<'a> T<'a> {
        fn visit(&mut self, v: &'a PathBuf) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.edges.contains_key(w) {
                    continue;
                }
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    comp.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out.sort();
    t.out
}

fn graph(root: &Path, read: Read<'_>) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let modules = modules(root, read);
    modules
        .values()
        .map(|file| {
            let mut deps = depends(&read(file).unwrap_or_default(), &modules);
            deps.remove(file);
            (file.clone(), deps)
        })
        .collect()
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn read_disk(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[test]
fn operator_src_has_no_import_cycle() {
    let edges = graph(&src(), &read_disk);
    assert!(edges.len() > 50, "read only {} files", edges.len());
    let found = cycles(&edges);
    let shown: Vec<String> = found
        .iter()
        .map(|c| {
            let files: Vec<String> = c
                .iter()
                .map(|f| f.strip_prefix(src()).unwrap().display().to_string())
                .collect();
            let rel = |f: &PathBuf| f.strip_prefix(src()).unwrap().display().to_string();
            let inside: Vec<String> = c
                .iter()
                .flat_map(|f| {
                    edges[f]
                        .iter()
                        .filter(|g| c.contains(g))
                        .map(move |g| format!("  {} -> {}", rel(f), rel(g)))
                })
                .collect();
            format!(
                "{} files: {}\n{}",
                files.len(),
                files.join(" "),
                inside.join("\n")
            )
        })
        .collect();
    assert!(found.is_empty(), "import cycles:\n{}", shown.join("\n"));
}

/// The module each controller lives in under `controllers/`.
fn module_of(c: ControllerName) -> &'static str {
    match c {
        ControllerName::CertSigner => "cert_signer",
        ControllerName::EtcdObserver => "etcd_observer",
        ControllerName::Membership => "membership",
        ControllerName::LearnerPromotion => "learner_promotion",
        ControllerName::TargetConfig => "target_config",
        ControllerName::Revision => "revision",
        ControllerName::Installer => "installer",
        ControllerName::Endpoints => "host_endpoints",
        ControllerName::Defrag => "defragmentation",
        ControllerName::CorruptionCheck => "corruption_check",
        ControllerName::Backup => "backup",
        ControllerName::QuorumGuard => "quorum_guard",
    }
}

#[test]
fn controllers_holds_exactly_the_controllers() {
    let text = read_disk(&src().join("controllers/mod.rs")).expect("controllers/mod.rs");
    let found: BTreeSet<String> = declared(&text).into_iter().map(|(n, _)| n).collect();
    let expected: BTreeSet<String> = ControllerName::ALL
        .iter()
        .map(|c| module_of(*c).to_owned())
        .collect();
    assert_eq!(found, expected, "controllers/mod.rs declares other modules");
}

// ---------------------------------------------------------------------------------------------
// The checks on made-up trees
// ---------------------------------------------------------------------------------------------

fn fake(files: &[(&str, &str)]) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let files: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(p, t)| (Path::new("/nowhere").join(p), (*t).to_owned()))
        .collect();
    graph(Path::new("/nowhere"), &|p: &Path| files.get(p).cloned())
}

#[test]
fn a_cycle_through_a_use_tree_is_found() {
    let edges = fake(&[
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("a.rs", "use crate::{b::{X, Y}, c};\n"),
        ("b.rs", "fn f() -> crate::c::Z { todo!() }\n"),
        (
            "c.rs",
            "// crate::b::X in a comment counts for nothing\nuse crate::a::W;\n",
        ),
    ]);
    let names = |c: &[PathBuf]| -> Vec<String> {
        c.iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    let found = cycles(&edges);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(names(&found[0]), ["a.rs", "b.rs", "c.rs"]);
}

#[test]
fn nesting_and_tests_are_no_cycle() {
    let edges = fake(&[
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        (
            "a.rs",
            "mod inner;\nuse inner::X;\n#[cfg(test)]\nmod tests;\n",
        ),
        ("a/inner.rs", "use super::Y;\nuse crate::b::Z;\n"),
        ("a/tests.rs", "use crate::b::Z;\n"),
        (
            "b.rs",
            "pub struct Z;\n#[cfg(test)]\nmod tests {\n    use crate::a::Y;\n}\n",
        ),
    ]);
    assert!(cycles(&edges).is_empty(), "{edges:?}");
    assert!(!edges.contains_key(Path::new("/nowhere/a/tests.rs")));
}

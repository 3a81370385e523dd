//! Dependencies point one way inside each crate: no top-level module reaches, through
//! `crate::` paths in its code, a module that reaches it back. Test modules
//! (`#[cfg(test)] mod ...`) and comments do not count; a name re-exported by the crate root
//! (`crate::PlanError`) counts as the module it comes from.
//!
//! On failure the message names the modules of each cycle and, for each, the modules it
//! uses inside the cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level module -> the top-level modules its code uses.
type Deps = BTreeMap<String, BTreeSet<String>>;

const CRATES: [&str; 4] = [
    "crates/sgc-ir/src",
    "crates/sgc-plan/src",
    "crates/sgc-exec/src",
    "src",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without comment lines and without its test modules.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        if t.starts_with("#[cfg(test)]") {
            let next = lines.peek().map_or("", |l| l.trim_start());
            if next.starts_with("mod ") || next.starts_with("pub mod ") {
                break; // test modules come last
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Every name a `crate::` path of `code` starts with (`crate::{a, b::c}` gives a and b).
fn crate_names(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if i > 0 && code[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `sgc_crate::`, not `crate::`
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            names.extend(inner.split(',').map(|p| ident(p.trim()).to_string()));
        } else {
            names.push(ident(rest).to_string());
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// Names the crate root re-exports (`pub use module::{A, b}`), by the module they come from.
fn root_exports(root: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in code(root).split(';') {
        let Some(path) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = ident(path);
        if !modules.contains(module) {
            continue;
        }
        let tail = &path[module.len()..];
        let names: Vec<&str> = match (tail.find('{'), tail.rfind('}')) {
            (Some(a), Some(b)) => tail[a + 1..b].split(',').collect(),
            _ => vec![tail.rsplit("::").next().unwrap_or("")],
        };
        for n in names {
            let n = n.trim().rsplit("::").next().unwrap_or("").trim();
            if !n.is_empty() && n != "self" {
                out.insert(n.to_string(), module.to_string());
            }
        }
    }
    out
}

/// The module graph of the crate whose sources are in `src`.
fn deps_of(src: &Path) -> Deps {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let module_of = |p: &Path| -> Option<String> {
        let rel = p.strip_prefix(src).ok()?;
        let first = rel.components().next()?.as_os_str().to_string_lossy();
        let name = first.trim_end_matches(".rs").to_string();
        (name != "lib" && name != "main").then_some(name)
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|p| module_of(p)).collect();
    let root = ["lib.rs", "main.rs"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(src.join(f)).ok())
        .collect::<Vec<_>>()
        .join("\n");
    let exports = root_exports(&root, &modules);
    let mut deps = Deps::new();
    for p in &files {
        let Some(m) = module_of(p) else { continue };
        let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let used = deps.entry(m.clone()).or_default();
        for name in crate_names(&code(&text)) {
            let target = if modules.contains(&name) {
                Some(name)
            } else {
                exports.get(&name).cloned()
            };
            if let Some(t) = target.filter(|t| *t != m) {
                used.insert(t);
            }
        }
    }
    deps
}

/// The cycles of a module graph: its strongly connected components of two or more modules
/// (Tarjan), each sorted, in a stable order.
fn cycles(deps: &Deps) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        deps: &'a Deps,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for w in self.deps.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.deps.contains_key(w) {
                    continue;
                }
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.stack.contains(&w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    comp.push(w.to_string());
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
    let mut t = Tarjan {
        deps,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in deps.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out.sort();
    t.out
}

fn describe(deps: &Deps, cycle: &[String]) -> String {
    cycle
        .iter()
        .map(|m| {
            let inside: Vec<&str> = deps[m]
                .iter()
                .filter(|d| cycle.contains(d))
                .map(String::as_str)
                .collect();
            format!("{m} -> {}", inside.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for c in CRATES {
        let deps = deps_of(&root.join(c));
        assert!(deps.len() > 3, "{c}: found only {} modules", deps.len());
        for cycle in cycles(&deps) {
            found.push(format!("{c}: {}", describe(&deps, &cycle)));
        }
    }
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

/// The checker sees what it must: a `use crate::` edge, a grouped one, a re-exported name,
/// a fully qualified path in code; and not a comment or a test module.
#[test]
fn the_checker_finds_a_cycle_through_each_kind_of_path() {
    let dir = std::env::temp_dir().join(format!("sgc-module-graph-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    let files = [
        ("lib.rs", "mod a; mod b; mod c; mod d;\npub use c::Thing;\n"),
        ("a.rs", "use crate::{b, x};\n// crate::d in a comment\n"),
        ("b.rs", "fn f() -> crate::Thing { todo!() }\n"),
        ("c.rs", "pub struct Thing;\nfn g() { crate::a::h() }\n"),
        (
            "d/mod.rs",
            "#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n",
        ),
    ];
    for (f, text) in files {
        std::fs::write(src.join(f), text).unwrap();
    }
    let deps = deps_of(&src);
    let found = cycles(&deps);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found, vec![vec!["a", "b", "c"]], "{deps:?}");
    assert!(deps["d"].is_empty(), "a test module counted: {deps:?}");
    assert!(!deps["a"].contains("d"), "a comment counted: {deps:?}");
}

//! Dependencies point one way inside each crate.
//! - No top-level module reaches, through `crate::` paths in its code, a module that
//!   reaches it back (no cycles).
//! - No module reaches up into its crate root: the root (`lib.rs`, `main.rs`) declares
//!   modules and re-exports, and a module never uses an item the root itself defines.
//!   sgc-plan's root defines none at all.
//! - sgc-plan's modules stand in a declared order of layers ([`PLAN_LAYERS`]), and the
//!   files of its sublinear search in the order of its phases ([`SUBLINEAR_LAYERS`]): a
//!   module uses only modules of lower layers.
//!
//! Test modules (`#[cfg(test)] mod ...`) and comments do not count; a name re-exported by
//! the crate root (`crate::PlanError`) counts as the module it comes from.
//!
//! On failure the message names the modules of each cycle and, for each, the modules it
//! uses inside the cycle; or each arrow that points up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level module -> the top-level modules its code uses.
type Deps = BTreeMap<String, BTreeSet<String>>;

const CRATES: [&str; 5] = [
    "crates/sgc-ir/src",
    "crates/sgc-plan-format/src",
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

/// Every name that follows `prefix` (a path ending in `::`) in `code`.
fn path_names(code: &str, prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (i, _) in code.match_indices(prefix) {
        if i > 0 && code[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            continue; // `sgc_crate::` or `a::crate::`, not `crate::`
        }
        let rest = &code[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            names.extend(inner.split(',').map(|p| ident(p.trim()).to_string()));
        } else {
            names.push(ident(rest).to_string());
        }
    }
    names.retain(|n| !n.is_empty() && n != "self");
    names
}

/// The names of the items a file defines at its top level (functions, types, constants,
/// statics, traits, macros), not its modules or re-exports.
fn items(text: &str) -> BTreeSet<String> {
    const KINDS: [&str; 9] = [
        "fn ",
        "struct ",
        "enum ",
        "union ",
        "const ",
        "static ",
        "type ",
        "trait ",
        "macro_rules! ",
    ];
    let mut out = BTreeSet::new();
    for line in code(text).lines() {
        let mut rest = line;
        if let Some(r) = rest.strip_prefix("pub") {
            rest = r.strip_prefix(' ').unwrap_or(r);
            if rest.starts_with('(') {
                rest = rest[rest.find(')').map_or(0, |i| i + 1)..].trim_start();
            }
        }
        if let Some(r) = KINDS.iter().find_map(|k| rest.strip_prefix(k)) {
            out.insert(ident(r).to_string());
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

/// Names the crate root re-exports (`pub use module::{A, b}`), by the module they come from.
fn root_exports(root: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in code(root).split(';') {
        let Some(at) = stmt.find("pub use ") else {
            continue;
        };
        let path = &stmt[at + "pub use ".len()..];
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

/// The module graph of the crate whose sources are in `src`; a module that uses an item the
/// crate root defines has an arrow to [`ROOT`].
fn deps_of(src: &Path) -> Deps {
    deps_in(src, &["crate::"], &["lib.rs", "main.rs"], ROOT)
}

/// The pseudo-module of the items a crate root (`lib.rs`, `main.rs`) defines.
const ROOT: &str = "(crate root)";

/// The graph of the modules in folder `dir` (each file or subfolder one module), as named
/// after any of the path `prefixes` (`crate::`, or `crate::sublinear::` and `super::` for
/// a folder module). The files in `roots` declare the folder's modules: names they re-export
/// count as their module, and a use of an item they define is an arrow to `root`.
fn deps_in(dir: &Path, prefixes: &[&str], roots: &[&str], root: &str) -> Deps {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let module_of = |p: &Path| -> Option<String> {
        let rel = p.strip_prefix(dir).ok()?;
        let first = rel.components().next()?.as_os_str().to_string_lossy();
        let name = first.trim_end_matches(".rs").to_string();
        (!roots.contains(&first.as_ref())).then_some(name)
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|p| module_of(p)).collect();
    let root_text = roots
        .iter()
        .filter_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .collect::<Vec<_>>()
        .join("\n");
    let exports = root_exports(&root_text, &modules);
    let defined = items(&root_text);
    let mut deps = Deps::new();
    for p in &files {
        let Some(m) = module_of(p) else { continue };
        let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let code = code(&text);
        let used = deps.entry(m.clone()).or_default();
        for name in prefixes.iter().flat_map(|pre| path_names(&code, pre)) {
            let target = if modules.contains(&name) {
                Some(name)
            } else if let Some(module) = exports.get(&name) {
                Some(module.clone())
            } else {
                defined.contains(&name).then(|| root.to_string())
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

/// sgc-plan-format's modules, bottom layer first: the names of option values, what the
/// verifier reports and the stream replay; the options; errors; offload timing; the plan;
/// the verifier on top.
const FORMAT_LAYERS: &[&[&str]] = &[
    &["names"],
    &["violation", "streams"],
    &["options"],
    &["error"],
    &["offload"],
    &["plan"],
    &["verify"],
];

/// sgc-plan's top-level modules, bottom layer first: the allocator and run options, the
/// per-graph context, the arena, the methods, the exchange refinement of a split plan and the
/// least-peak bound (its tests plan with the methods), the partition's kept sets, the choice
/// under a budget (among the other methods' plans and the partition's), the strategies (one
/// file each, behind one trait), the entry points, and the batch fit on top.
/// (The plan itself and its verifier are sgc-plan-format's, below all of them.)
const PLAN_LAYERS: &[&[&str]] = &[
    &["alloc", "maxflow", "options"],
    &["error"],
    &["offload", "context"],
    &["arena", "schedule", "bound"],
    &["device", "dtr"],
    &["sublinear"],
    &["exchange", "least_peak", "squeeze"],
    &["partition"],
    &["budget", "optimal"],
    &["offload_search"],
    &["strategies"],
    &["planner"],
    &["fit"],
];

/// The files of sgc-plan's `sublinear/`, bottom layer first: a candidate and its
/// evaluation, then the phases of the search in the order a plan is made, and `mod.rs`
/// (`mod`: its driver) on top.
const SUBLINEAR_LAYERS: &[&[&str]] = &[
    &["fingerprint"],
    &["genome"],
    &["discard"],
    &["recompute", "profile"],
    &["evaluate"],
    &["search", "chen"],
    &["thresholds", "genetic", "relax"],
    &["polish"],
    &["fixed_peak"],
    &["mod"],
];

/// Every arrow of `deps` that does not point to a lower layer of `layers`, and every module
/// missing from them, in words.
fn upward(deps: &Deps, layers: &[&[&str]]) -> Vec<String> {
    let layer = |m: &str| layers.iter().position(|l| l.contains(&m));
    let mut out = Vec::new();
    for (m, used) in deps {
        let Some(lm) = layer(m) else {
            out.push(format!("{m}: in no layer"));
            continue;
        };
        for u in used {
            match layer(u) {
                Some(lu) if lu < lm => {}
                Some(_) => out.push(format!("{m} -> {u}: not a lower layer")),
                None => out.push(format!("{m} -> {u}: {u} in no layer")),
            }
        }
    }
    out
}

#[test]
fn no_module_reaches_up_into_its_crate_root() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for c in CRATES {
        for (m, used) in deps_of(&root.join(c)) {
            if used.contains(ROOT) {
                found.push(format!("{c}: {m} uses an item the crate root defines"));
            }
        }
    }
    assert!(found.is_empty(), "arrows up:\n{}", found.join("\n"));
    let lib = std::fs::read_to_string(root.join("crates/sgc-plan/src/lib.rs")).unwrap();
    let defined = items(&lib);
    assert!(
        defined.is_empty(),
        "sgc-plan's lib.rs defines {defined:?}: move them into a module and re-export them"
    );
}

#[test]
fn sgc_plan_format_modules_use_only_lower_layers() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/sgc-plan-format/src");
    let found = upward(&deps_of(&src), FORMAT_LAYERS);
    assert!(
        found.is_empty(),
        "arrows that do not point down:\n{}",
        found.join("\n")
    );
}

/// The executor runs plans and makes none: its library depends on the plan format and the
/// verifier (`sgc-plan-format`), never on the planner (its tests may, to make plans).
#[test]
fn the_executor_does_not_depend_on_the_planner() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/sgc-exec");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let deps = manifest
        .split("\n[")
        .find(|section| section.starts_with("dependencies]"))
        .expect("sgc-exec has a [dependencies] section");
    let named: Vec<&str> = deps
        .lines()
        .filter_map(|l| l.split(['=', '.', ' ']).next())
        .filter(|name| *name == "sgc-plan")
        .collect();
    assert!(named.is_empty(), "sgc-exec's [dependencies] name sgc-plan");
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let reaching: Vec<String> = files
        .iter()
        .filter(|f| code(&std::fs::read_to_string(f).unwrap()).contains("sgc_plan::"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        reaching.is_empty(),
        "sgc-exec's code names sgc_plan: {reaching:?}"
    );
}

/// The CUDA backend's files (`crates/sgc-exec/src/cuda_backend/`), as named through
/// `super::` and `crate::cuda_backend::`: no file reaches one that reaches it back (the op
/// families share their launch helpers through `launch.rs`, not through each other), and
/// only the device layer names `cudarc`: no op file knows which device runs it.
#[test]
fn cuda_backend_files_form_no_cycle_and_only_the_device_layer_names_cudarc() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/sgc-exec/src/cuda_backend");
    let deps = deps_in(
        &dir,
        &["super::", "crate::cuda_backend::"],
        &["mod.rs"],
        ROOT,
    );
    assert!(deps.len() > 10, "found only {} files", deps.len());
    let found: Vec<String> = cycles(&deps).iter().map(|c| describe(&deps, c)).collect();
    assert!(
        found.is_empty(),
        "cuda_backend cycles:\n{}",
        found.join("\n")
    );
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let naming: Vec<String> = files
        .iter()
        .filter(|f| code(&std::fs::read_to_string(f).unwrap()).contains("cudarc"))
        .filter_map(|f| Some(f.strip_prefix(&dir).ok()?.display().to_string()))
        .filter(|f| {
            !DEVICE_LAYER
                .iter()
                .any(|d| f == d || f.starts_with(&format!("{d}/")))
        })
        .collect();
    assert!(
        naming.is_empty(),
        "files outside the device layer {DEVICE_LAYER:?} name cudarc: {naming:?}"
    );
}

/// The CUDA backend's device layer: the only files that may name `cudarc`.
const DEVICE_LAYER: &[&str] = &[
    "device.rs",
    "device",
    "loader.rs",
    "host_pool.rs",
    "runtime.rs",
    "mod.rs",
];

#[test]
fn sgc_plan_modules_use_only_lower_layers() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/sgc-plan/src");
    let mut found = upward(&deps_of(&src), PLAN_LAYERS);
    let sub = deps_in(
        &src.join("sublinear"),
        &["crate::sublinear::", "super::"],
        &["mod.rs"],
        "mod",
    );
    let mut sub_up = upward(&sub, SUBLINEAR_LAYERS);
    found.extend(sub_up.drain(..).map(|f| format!("sublinear/{f}")));
    assert!(
        found.is_empty(),
        "arrows that do not point down:\n{}",
        found.join("\n")
    );
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

/// The layer and root checks see an arrow up: a module using an item its crate root defines,
/// a module using one of a higher layer, a folder's file using an item of its `mod.rs`.
#[test]
fn the_checker_finds_arrows_up() {
    let dir = std::env::temp_dir().join(format!("sgc-module-layers-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("folder")).unwrap();
    let files = [
        (
            "lib.rs",
            "mod folder; mod high; mod low;\npub fn helper() {}\npub use high::Top;\n",
        ),
        (
            "low.rs",
            "fn f() -> crate::Top { crate::helper(); todo!() }\n",
        ),
        ("high.rs", "pub struct Top;\nuse crate::low;\n"),
        (
            "folder/mod.rs",
            "mod a;\nmod b;\npub(crate) fn driver() {}\n",
        ),
        ("folder/a.rs", "use super::driver;\n"),
        ("folder/b.rs", "use crate::folder::a;\n"),
    ];
    for (f, text) in files {
        std::fs::write(src.join(f), text).unwrap();
    }
    let deps = deps_of(&src);
    let folder = deps_in(
        &src.join("folder"),
        &["crate::folder::", "super::"],
        &["mod.rs"],
        "mod",
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(deps["low"].contains(ROOT), "{deps:?}");
    assert_eq!(
        upward(&deps, &[&["low", ROOT], &["high"], &["folder"]]),
        vec![
            "low -> (crate root): not a lower layer",
            "low -> high: not a lower layer"
        ],
        "{deps:?}"
    );
    assert_eq!(
        upward(&folder, &[&["a"], &["b"], &["mod"]]),
        vec!["a -> mod: not a lower layer"],
        "{folder:?}"
    );
}

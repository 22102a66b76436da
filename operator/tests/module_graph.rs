//! The operator's modules import downwards only. Between its crates the compiler keeps the
//! layers (an upward import does not build); inside each crate, among the children of any
//! module (the crate root's top-level modules, the files of `distribution/`, …) the graph of
//! "uses something of" has no cycle. The graph is read from the source: every `crate::…` and `super::…` path
//! outside `#[cfg(test)]` code, including the `use` trees, counted as an edge from the file's
//! module to the sibling subtree it names.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

type ModPath = Vec<String>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The module a file is, as a path from the crate root.
fn module_of(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).expect("file under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The text before the first `#[cfg(test)]`, without line comments.
fn code_of(text: &str) -> String {
    let code = text.split("\n#[cfg(test)]").next().unwrap_or("");
    code.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Expands a `use` tree body (`a::{b, c::d}, e`) into paths.
fn expand(prefix: &[String], body: &str) -> Vec<ModPath> {
    let mut items = Vec::new();
    let (mut depth, mut cur) = (0, String::new());
    for c in body.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            items.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    items.push(cur);
    let mut out = Vec::new();
    for item in items {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        if let Some(open) = item.find('{') {
            let head: Vec<String> = item[..open]
                .split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            let inner = item[open + 1..].trim_end().trim_end_matches('}');
            let mut p = prefix.to_vec();
            p.extend(head);
            out.extend(expand(&p, inner));
        } else {
            let name = item.split(" as ").next().unwrap_or(item);
            let mut p = prefix.to_vec();
            p.extend(
                name.split("::")
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            );
            out.push(p);
        }
    }
    out
}

/// Paths `code` names after `anchor` (`crate::` or `super::`), `use` trees expanded.
fn paths_after(code: &str, anchor: &str) -> Vec<ModPath> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(pos) = code[at..].find(anchor) {
        let start = at + pos;
        at = start + anchor.len();
        if start > 0 && code[..start].ends_with(|c: char| is_ident(c) || c == ':') {
            continue;
        }
        let rest = &code[at..];
        if rest.starts_with('{') {
            let mut depth = 0;
            let mut end = 0;
            for (i, c) in rest.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            out.extend(expand(&[], &rest[1..end]));
        } else {
            let end = rest
                .find(|c: char| !(is_ident(c) || c == ':'))
                .unwrap_or(rest.len());
            let path: ModPath = rest[..end]
                .split("::")
                .filter(|s| !s.is_empty() && *s != "*")
                .map(String::from)
                .collect();
            if !path.is_empty() {
                out.push(path);
            }
        }
    }
    out
}

/// parent module → (child → children it uses).
fn sibling_graph(src: &Path) -> BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in files {
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let me = module_of(src, &file);
        let text = std::fs::read_to_string(&file).expect("readable source");
        let code = code_of(&text);
        let mut named = paths_after(&code, "crate::");
        let parent: ModPath = me[..me.len().saturating_sub(1)].to_vec();
        for p in paths_after(&code, "super::") {
            let mut full = parent.clone();
            full.extend(p);
            named.push(full);
        }
        for target in named {
            let common = me.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common >= me.len() || common >= target.len() {
                continue; // an ancestor or a descendant, not a sibling subtree
            }
            graph
                .entry(me[..common].to_vec())
                .or_default()
                .entry(me[common].clone())
                .or_default()
                .insert(target[common].clone());
        }
    }
    graph
}

/// A cycle through the graph, if any (names in order, first repeated at the end).
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        v: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(v.to_string(), 1);
        stack.push(v.to_string());
        for w in g.get(v).into_iter().flatten() {
            match state.get(w.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|s| s == w).unwrap_or(0);
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(w.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(w, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(v.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for v in g.keys() {
        if state.get(v.as_str()).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(c) = visit(v, g, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

fn cycles_under(src: &Path) -> Vec<String> {
    sibling_graph(src)
        .iter()
        .filter_map(|(parent, g)| {
            find_cycle(g).map(|c| {
                let at = if parent.is_empty() {
                    "crate".to_string()
                } else {
                    parent.join("::")
                };
                format!("{at}: {}", c.join(" → "))
            })
        })
        .collect()
}

/// The operator's crates, as directories under `operator/`: the binary, the engine and the
/// clients beside it.
const CRATES: [&str; 8] = [
    ".",
    "engine",
    "support",
    "telemetry",
    "registry",
    "git",
    "forge",
    "sources",
];

#[test]
fn modules_import_downwards_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cycles = Vec::new();
    for krate in CRATES {
        cycles.extend(cycles_under(&root.join(krate).join("src")));
    }
    assert!(
        cycles.is_empty(),
        "import cycles between modules:\n{}",
        cycles.join("\n")
    );
}

/// Glob imports of this crate's modules in `code` (`use super::*`, `use self::{a::*}`,
/// `pub use labels::*`): they hide which module uses which, so the graph above could not
/// see them. Globs of another crate (`external`: a facade, a `prelude::*`) are its own.
fn globs_in(code: &str, external: &[String]) -> Vec<String> {
    code.split(';')
        .filter_map(|statement| {
            let at = statement.find("use ")?;
            let before = &statement[..at];
            let at_item_start = before.trim_end().is_empty()
                || before.ends_with('\n')
                || before.trim_end().ends_with("pub")
                || before.trim_end().ends_with(')');
            let tree = statement[at + 4..].trim_start().trim_start_matches("::");
            let first = tree.split("::").next().unwrap_or_default();
            let other_crate = external.iter().any(|e| e == first);
            (at_item_start && tree.contains('*') && !other_crate)
                .then(|| statement.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .collect()
}

/// The crates a path of this crate may start with besides its own modules: the standard
/// library and every dependency in `Cargo.toml` (`-` read as `_`).
fn external_crates(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let mut names: Vec<String> = ["std", "core", "alloc"].map(String::from).to_vec();
    let mut in_dependencies = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line.ends_with("dependencies]");
        } else if in_dependencies && let Some((name, _)) = line.split_once('=') {
            names.push(name.trim().replace('-', "_"));
        }
    }
    names
}

#[test]
fn no_module_imports_another_by_glob() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut offenders = Vec::new();
    for krate in CRATES {
        offenders.extend(globs_of_crate(&root.join(krate)));
    }
    assert!(
        offenders.is_empty(),
        "glob imports:\n{}",
        offenders.join("\n")
    );
}

/// The glob imports of the crate at `root`, as `file: statement`.
fn globs_of_crate(root: &Path) -> Vec<String> {
    let external = external_crates(root);
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut offenders = Vec::new();
    for file in files {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file");
        for glob in globs_in(&code_of(&text), &external) {
            offenders.push(format!("{}: {glob}", file.display()));
        }
    }
    offenders
}

#[test]
fn the_glob_reader_sees_globs_of_the_crates_modules_only() {
    let code = "use super::*;\nuse self::{decide::*, read::x};\npub use labels::*;\n\
                use crate::a::{b::*};\nuse tracing_subscriber::{fmt, prelude::*};\n\
                use serde_json::json;\nuse super::x;\nfn f() { let x = 2 * 3; }";
    let external = ["tracing_subscriber".to_string(), "serde_json".to_string()];
    assert_eq!(
        globs_in(code, &external).len(),
        4,
        "{:?}",
        globs_in(code, &external)
    );
}

#[test]
fn the_reader_sees_cycles_and_use_trees() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path();
    std::fs::create_dir_all(src.join("a")).expect("dir");
    std::fs::write(src.join("lib.rs"), "pub mod a; pub mod b;\n").expect("write");
    std::fs::write(
        src.join("a/mod.rs"),
        "mod x; mod y;\nuse crate::{b::Thing, a::x};\n",
    )
    .expect("write");
    std::fs::write(src.join("a/x.rs"), "use super::{y::Y};\n").expect("write");
    std::fs::write(
        src.join("a/y.rs"),
        "pub struct Y;\n#[cfg(test)]\nmod tests { use crate::a::x::X; }\n",
    )
    .expect("write");
    std::fs::write(src.join("b.rs"), "// crate::a::x is only a comment\n").expect("write");
    assert!(cycles_under(src).is_empty(), "{:?}", cycles_under(src));
    std::fs::write(src.join("b.rs"), "fn f() { crate::a::x::g(); }\n").expect("write");
    assert_eq!(cycles_under(src), vec!["crate: a → b → a".to_string()]);
    std::fs::write(src.join("b.rs"), "").expect("write");
    std::fs::write(src.join("a/y.rs"), "use crate::a::x::X;\n").expect("write");
    assert_eq!(cycles_under(src), vec!["a: x → y → x".to_string()]);
}

/// The functions in `code` whose signature (parameters, return type, bounds) names one of
/// `shared` as a whole word, other than `of`, the constructor of a step's own context.
fn signatures_naming(code: &str, shared: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("fn ") {
        let starts_word = i == 0 || !rest[..i].ends_with(is_ident);
        let after = &rest[i + 3..];
        rest = after;
        if !starts_word {
            continue;
        }
        let name: String = after.chars().take_while(|c| is_ident(*c)).collect();
        let signature = after.split(['{', ';']).next().unwrap_or("");
        let names_shared = signature
            .split(|c: char| !is_ident(c))
            .any(|word| shared.contains(&word));
        if names_shared && name != "of" {
            found.push(name);
        }
    }
    found
}

/// The step files of each controller: each step takes a small context of its own (built in
/// the pipeline's `mod.rs` from the shared one), so its signature says what it touches.
const STEP_FILES: &[&str] = &[
    "controllers/imagewatch/validate.rs",
    "controllers/imagewatch/dereference.rs",
    "controllers/imagewatch/scan.rs",
    "controllers/imagewatch/select.rs",
    "controllers/imagewatch/write.rs",
    "controllers/imagewatch/status.rs",
    "controllers/imagewatch/pull_request.rs",
    "controllers/promotion/read.rs",
    "controllers/promotion/decide.rs",
    "controllers/promotion/deliver.rs",
    "controllers/promotion/finalizer.rs",
    "controllers/promotion/status.rs",
];

#[test]
fn steps_take_their_own_context_not_the_shared_one() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offenders = Vec::new();
    for file in STEP_FILES {
        let path = src.join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        for name in signatures_naming(&code_of(&text), &["Context", "Shared"]) {
            offenders.push(format!("{file}: fn {name}"));
        }
    }
    assert!(
        offenders.is_empty(),
        "step functions taking the shared context instead of their step's own:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_reader_sees_signatures_that_name_the_shared_context() {
    let code = "
        impl<'a> ScanContext<'a> {
            pub(super) fn of(ctx: &'a Context) -> Self { ScanContext { x: &ctx.x } }
        }
        pub(super) async fn scan(
            watch: &ImageWatch,
            ctx: &ScanContext<'_>,
        ) -> Result<(), E> { ctx.run(Context::new()) }
        fn wide(
            watch: &ImageWatch,
            ctx: &Context,
        ) -> Result<(), E> {}
        fn arc(shared: Arc<Shared>);
        fn define() { let info = 1; }
    ";
    assert_eq!(
        signatures_naming(code, &["Context", "Shared"]),
        vec!["wide".to_string(), "arc".to_string()]
    );
}

/// The `imagewatch-…` crates in the `[dependencies]` of the crate at `root`.
fn own_dependencies(root: &Path) -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let mut out = BTreeSet::new();
    let mut in_dependencies = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
        } else if in_dependencies
            && let Some((name, _)) = line.split_once('=')
            && name.trim().starts_with("imagewatch")
        {
            out.insert(name.trim().to_string());
        }
    }
    out
}

/// The layers of the operator's crates, bottom up: the engine (pure) and `support` (HTTP
/// clients, the TTL cache); `telemetry`; the clients `registry`, `git` (with the writer) and
/// `forge`, which know nothing of each other; the event `sources` above the registry; the
/// binary on top. The compiler refuses an
/// import against a dependency; this pins the dependencies themselves.
#[test]
fn each_crate_depends_on_the_layers_below_it_only() {
    let layers: [(&str, &[&str]); 8] = [
        ("engine", &["imagewatch-crd"]),
        ("support", &[]),
        ("telemetry", &["imagewatch-crd", "imagewatch-engine"]),
        (
            "registry",
            &["imagewatch-crd", "imagewatch-engine", "imagewatch-support"],
        ),
        (
            "git",
            &[
                "imagewatch-crd",
                "imagewatch-engine",
                "imagewatch-support",
                "imagewatch-telemetry",
            ],
        ),
        (
            "forge",
            &[
                "imagewatch-crd",
                "imagewatch-engine",
                "imagewatch-telemetry",
            ],
        ),
        (
            "sources",
            &[
                "imagewatch-crd",
                "imagewatch-engine",
                "imagewatch-registry",
                "imagewatch-telemetry",
            ],
        ),
        (
            ".",
            &[
                "imagewatch-crd",
                "imagewatch-engine",
                "imagewatch-forge",
                "imagewatch-git",
                "imagewatch-registry",
                "imagewatch-sources",
                "imagewatch-support",
                "imagewatch-telemetry",
            ],
        ),
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert_eq!(
        layers.map(|(k, _)| k).iter().collect::<BTreeSet<_>>(),
        CRATES.iter().collect::<BTreeSet<_>>(),
        "every crate has its layer"
    );
    for (krate, allowed) in layers {
        let found = own_dependencies(&root.join(krate));
        let allowed: BTreeSet<String> = allowed.iter().map(|s| s.to_string()).collect();
        assert_eq!(found, allowed, "operator/{krate}/Cargo.toml");
    }
}

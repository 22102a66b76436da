//! The operator's modules import downwards only. Between its crates the compiler keeps the
//! layers (an upward import does not build); inside each crate, among the children of any
//! module (the crate root's top-level modules, the files of `distribution/`, …) and that
//! module's own file, the graph of "uses something of" has no cycle: a parent whose code
//! calls a child never defines what its children use. The graph is read from the source: every `crate::…` and `super::…` path
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

/// The code of a file without its tests and line comments: a `#[cfg(test)]` item of one
/// line (`use …;`, `mod x_tests;`, a `#[path]` module) is left out, and so is everything
/// from the `#[cfg(test)] mod tests {` at the end of a file on.
fn code_of(text: &str) -> String {
    let mut kept = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            let next = lines.peek().map(|l| l.trim()).unwrap_or_default();
            if next.starts_with("mod ") && next.contains('{') && !line.starts_with(' ') {
                break;
            }
            if next.starts_with("#[path") {
                lines.next();
                lines.next();
            } else if next.ends_with(';') {
                lines.next();
            }
            continue;
        }
        kept.push(line);
    }
    kept.into_iter()
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

/// The node of a module's own file among its children's nodes: its own items, and the code
/// that uses its children.
const OWN: &str = "(own)";

/// The child modules of `module`: the files and folders of its directory (tests left out).
fn children_of(src: &Path, module: &[String]) -> BTreeSet<String> {
    let dir = module.iter().fold(src.to_path_buf(), |d, m| d.join(m));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let path = e.path();
            let name = path.file_name()?.to_string_lossy().to_string();
            if path.is_dir() {
                return Some(name);
            }
            let stem = name.strip_suffix(".rs")?;
            let test = stem == "tests" || stem.ends_with("_tests");
            (!test && !matches!(stem, "mod" | "lib" | "main")).then(|| stem.to_string())
        })
        .collect()
}

/// The statements of `code` that re-export (`pub use`, `pub(crate) use`, `pub(super) use`).
fn is_reexport(statement: &str) -> bool {
    let s = statement.trim_start();
    s.starts_with("pub use ") || (s.starts_with("pub(") && s.contains(") use "))
}

/// The names a module file re-exports from its children: name → child.
fn reexports(code: &str, children: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for statement in code.split(';').filter(|s| is_reexport(s)) {
        let tree = statement[statement.find(" use ").map_or(0, |i| i + 5)..].trim();
        for path in expand(&[], tree) {
            let path: Vec<&str> = path
                .iter()
                .map(String::as_str)
                .skip_while(|p| *p == "self")
                .collect();
            let Some(first) = path.first() else { continue };
            if !children.contains(*first) {
                continue;
            }
            let name = tree_alias(tree, path.last().copied().unwrap_or_default());
            out.insert(name, first.to_string());
        }
    }
    out
}

/// The name an item of a `use` tree is re-exported as (`x as y` → `y`).
fn tree_alias(tree: &str, last: &str) -> String {
    let marker = format!("{last} as ");
    match tree.find(&marker) {
        Some(i) => tree[i + marker.len()..]
            .chars()
            .take_while(|c| is_ident(*c))
            .collect(),
        None => last.to_string(),
    }
}

/// Paths of `code` that start with one of `children` (`child::…` without an anchor), outside
/// re-exports.
fn child_paths(code: &str, children: &BTreeSet<String>) -> Vec<ModPath> {
    let mut out = Vec::new();
    for statement in code.split(';').filter(|s| !is_reexport(s)) {
        for child in children {
            let needle = format!("{child}::");
            let mut at = 0;
            while let Some(pos) = statement[at..].find(&needle) {
                let start = at + pos;
                at = start + needle.len();
                let before = &statement[..start];
                if before.ends_with(|c: char| is_ident(c) || c == ':') {
                    continue;
                }
                out.push(vec![child.clone()]);
            }
        }
    }
    out
}

/// parent module → (child → children it uses). A module's own file is the node [`OWN`]
/// among its children: a child naming an item of its parent's file (not a re-export of a
/// sibling) is an edge child → own, the parent's code naming a child is own → child.
fn sibling_graph(src: &Path) -> BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut codes = BTreeMap::new();
    for file in files {
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable source");
        codes.insert(module_of(src, &file), code_of(&text));
    }
    let mut children: BTreeMap<ModPath, BTreeSet<String>> = BTreeMap::new();
    let mut exported: BTreeMap<ModPath, BTreeMap<String, String>> = BTreeMap::new();
    for (module, code) in &codes {
        let kids = children_of(src, module);
        exported.insert(module.clone(), reexports(code, &kids));
        children.insert(module.clone(), kids);
    }
    let mut graph: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (me, code) in &codes {
        let mut named = paths_after(code, "crate::");
        let parent: ModPath = me[..me.len().saturating_sub(1)].to_vec();
        for p in paths_after(code, "super::") {
            let mut full = parent.clone();
            full.extend(p);
            named.push(full);
        }
        for p in paths_after(code, "self::")
            .into_iter()
            .chain(child_paths(code, &children[me]))
        {
            let mut full = me.clone();
            full.extend(p);
            named.push(full);
        }
        for target in named {
            let common = me.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common >= target.len() {
                continue; // the module itself or an ancestor, not an item
            }
            let at = me[..common].to_vec();
            let kids = children.get(&at).cloned().unwrap_or_default();
            let node = |name: &str| -> String {
                if kids.contains(name) {
                    name.to_string()
                } else {
                    exported
                        .get(&at)
                        .and_then(|e| e.get(name))
                        .cloned()
                        .unwrap_or_else(|| OWN.to_string())
                }
            };
            let from = if common == me.len() {
                OWN.to_string()
            } else {
                me[common].clone()
            };
            let to = node(&target[common]);
            if from != to {
                graph
                    .entry(at)
                    .or_default()
                    .entry(from)
                    .or_default()
                    .insert(to);
            }
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

/// The operator's crates, as directories under `operator/`: the resource types (`crd/`,
/// beside it), the binary, the engine and the clients beside it.
const CRATES: [&str; 9] = [
    "../crd",
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

/// Every dependency the `Cargo.toml` of the crate at `root` names, with its section
/// (`[dependencies]`, `[dev-dependencies]`, …).
fn manifest_dependencies(root: &Path) -> Vec<(String, String)> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let mut out = Vec::new();
    let mut section = String::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_string();
        } else if section.ends_with("dependencies]")
            && !line.starts_with('#')
            && let Some((name, _)) = line.split_once('=')
        {
            out.push((section.clone(), name.trim().to_string()));
        }
    }
    out
}

/// The crates a path of this crate may start with besides its own modules: the standard
/// library and every dependency in `Cargo.toml` (`-` read as `_`).
fn external_crates(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = ["std", "core", "alloc"].map(String::from).to_vec();
    names.extend(
        manifest_dependencies(root)
            .into_iter()
            .map(|(_, name)| name.replace('-', "_")),
    );
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

#[test]
fn the_reader_sees_a_parent_and_its_child_using_each_other() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path();
    std::fs::create_dir_all(src.join("p")).expect("dir");
    std::fs::write(src.join("lib.rs"), "pub mod p;\n").expect("write");
    // The parent re-exports a child's item and defines one of its own; the children use
    // both, and a one-line test import is not code.
    std::fs::write(
        src.join("p/mod.rs"),
        "mod c; mod d;\npub use d::Shared;\npub struct Own;\n",
    )
    .expect("write");
    std::fs::write(
        src.join("p/c.rs"),
        "#[cfg(test)]\nuse super::Own;\nuse super::Shared;\nfn f() {}\n",
    )
    .expect("write");
    std::fs::write(src.join("p/d.rs"), "pub struct Shared;\n").expect("write");
    assert!(cycles_under(src).is_empty(), "{:?}", cycles_under(src));
    // A child uses the parent's own item while the parent's code calls that child.
    std::fs::write(src.join("p/c.rs"), "use super::Own;\npub fn g() {}\n").expect("write");
    std::fs::write(
        src.join("p/mod.rs"),
        "mod c; mod d;\npub use d::Shared;\npub struct Own;\nfn f() { c::g(); }\n",
    )
    .expect("write");
    assert_eq!(cycles_under(src), vec!["p: (own) → c → (own)".to_string()]);
    // Through a re-export: d uses c (re-exported by the parent) and c uses d.
    std::fs::write(
        src.join("p/mod.rs"),
        "mod c; mod d;\npub use c::g;\npub use d::Shared;\n",
    )
    .expect("write");
    std::fs::write(src.join("p/c.rs"), "use super::Shared;\npub fn g() {}\n").expect("write");
    std::fs::write(
        src.join("p/d.rs"),
        "pub struct Shared;\nfn h() { super::g(); }\n",
    )
    .expect("write");
    assert_eq!(cycles_under(src), vec!["p: c → d → c".to_string()]);
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
    "controllers/imagewatch/spec_rules.rs",
    "controllers/promotion/read/mod.rs",
    "controllers/promotion/read/gates.rs",
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
    manifest_dependencies(root)
        .into_iter()
        .filter(|(section, name)| section == "[dependencies]" && name.starts_with("imagewatch"))
        .map(|(_, name)| name)
        .collect()
}

/// The layers of the operator's crates, bottom up: the engine (pure) and `support` (HTTP
/// clients, the TTL cache); `telemetry`; the clients `registry`, `git` (with the writer) and
/// `forge`, which know nothing of each other; the event `sources` above the registry; the
/// binary on top. The compiler refuses an
/// import against a dependency; this pins the dependencies themselves.
#[test]
fn each_crate_depends_on_the_layers_below_it_only() {
    let layers: [(&str, &[&str]); 9] = [
        ("../crd", &[]),
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

/// The binary (controllers, cluster services, wiring) has no `git2` of its own: every Git
/// read and write, the promotion's history walks included, goes through `imagewatch-git`
/// and its writer, so the compiler keeps libgit2 out of the controllers.
#[test]
fn the_binary_reaches_git_only_through_the_git_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let git2: Vec<_> = manifest_dependencies(root)
        .into_iter()
        .filter(|(_, name)| name == "git2")
        .collect();
    assert!(git2.is_empty(), "operator/Cargo.toml names git2: {git2:?}");
}

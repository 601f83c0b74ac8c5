//! The layering of `src/` as a test: no import circle between modules, and no import against the
//! floor table of docs/ARCHITECTURE.md.
//!
//! The table is read from the document itself (the first table under "## Module map": its rows,
//! top to bottom, are the floors from the highest down; its second column names the top-level
//! modules of each floor), so the document cannot drift from the code: a module the code has and
//! the table lacks fails, a module the table names and the code lacks fails, and a module that
//! imports one on a higher floor fails.
//!
//! Imports are read from the source text: every `use` tree and every path that starts with
//! `crate::`, `super::`, `self::`, `verbd::` (in the binary) or the name of a declared child
//! module, after comments, string literals and `#[cfg(test)]` items are removed (unit tests may
//! reach anywhere). A path is resolved to the deepest module file it names, following the names a
//! module imports (`pub use` re-exports and the private imports its children see through
//! `super::`), and `#[macro_export]` macros to the file that defines them.
//!
//! A circle is looked for among siblings at every level of the tree (the top-level modules, the
//! files of one folder): an import from inside sibling A to inside sibling B is an arrow A → B. A
//! child that uses its parent's items (`super::X`) is no arrow between siblings.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Top-level modules that work under way may add before the floor table names them, with the floor
/// each will stand on. Once the table names one, the table decides.
const ANNOUNCED: &[(&str, &str)] = &[("spawner", "mechanism")];

/// What a module is called in the floor table and in messages: the crate roots are `main` (the
/// binary) and `lib`; `main.rs` and `cli/` in the table are `main` and `cli`.
type ModPath = Vec<String>;

const LIB: &str = "lib";
const BIN: &str = "main";

#[test]
fn the_house_keeps_its_floors_and_has_no_circles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let problems = check(&root.join("src"), &doc);
    assert!(
        problems.is_empty(),
        "the layering of src/ breaks docs/ARCHITECTURE.md:\n{}",
        problems.join("\n")
    );
}

/// Every problem of the tree under `src` against the floor table in `doc`, one line each.
fn check(src: &Path, doc: &str) -> Vec<String> {
    let floors = match floor_table(doc) {
        Ok(floors) => floors,
        Err(problem) => return vec![problem],
    };
    let tree = Tree::read(src);
    let edges = tree.edges();
    let mut problems = circles(&edges);
    problems.extend(floor_problems(&tree, &edges, &floors));
    problems.extend(rule_problems(doc, &edges, &floors));
    problems
}

// ---------------------------------------------------------------------------------------------
// The floor table.

/// Top-level module name → (floor index, floor name); index 0 is the highest floor.
type Floors = BTreeMap<String, (usize, String)>;

fn floor_table(doc: &str) -> Result<Floors, String> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Module map"))
        .ok_or("docs/ARCHITECTURE.md has no \"## Module map\" section")?;
    let mut floor_names: Vec<String> = Vec::new();
    let mut floors = Floors::new();
    let rows = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2); // the header and its separator
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (floor, modules) = match cells.as_slice() {
            ["", floor, modules, ..] => (floor.to_string(), *modules),
            _ => {
                return Err(format!(
                    "a row of the floor table is not `| floor | module | …`: {row}"
                ));
            }
        };
        if floor_names.last() != Some(&floor) {
            if floor_names.contains(&floor) {
                return Err(format!(
                    "the floor `{floor}` appears twice in the floor table, apart"
                ));
            }
            floor_names.push(floor.clone());
        }
        let index = floor_names.len() - 1;
        for name in modules.split('`').skip(1).step_by(2) {
            let name = name
                .trim_end_matches('/')
                .trim_end_matches(".rs")
                .to_string();
            if floors
                .insert(name.clone(), (index, floor.clone()))
                .is_some()
            {
                return Err(format!("the floor table names `{name}` twice"));
            }
        }
    }
    if floors.is_empty() {
        return Err("the \"## Module map\" section of docs/ARCHITECTURE.md has no table".into());
    }
    Ok(floors)
}

fn floor_problems(tree: &Tree, edges: &[Edge], floors: &Floors) -> Vec<String> {
    let mut problems = Vec::new();
    let mut placed = floors.clone();
    let tops: BTreeSet<String> = tree.modules.keys().filter_map(top_level).collect();
    for top in &tops {
        if placed.contains_key(top) {
            continue;
        }
        match ANNOUNCED.iter().find(|(name, _)| name == top) {
            Some((_, floor)) => match floors.values().find(|(_, name)| name == floor) {
                Some(place) => {
                    placed.insert(top.clone(), place.clone());
                }
                None => problems.push(format!(
                    "module `{top}` is announced for the floor `{floor}`, which the floor table does not have"
                )),
            },
            None => problems.push(format!(
                "module `{top}` ({}) is not in the floor table: add it to the floor table in docs/ARCHITECTURE.md",
                tree.file_of(top)
            )),
        }
    }
    for name in floors.keys() {
        if !tops.contains(name) {
            problems.push(format!(
                "the floor table names `{name}`, which src/ does not have: remove it from the floor table in docs/ARCHITECTURE.md"
            ));
        }
    }
    for edge in edges {
        let (Some(from), Some(to)) = (top_level(&edge.from), top_level(&edge.to)) else {
            continue;
        };
        let (Some((from_index, from_floor)), Some((to_index, to_floor))) =
            (placed.get(&from), placed.get(&to))
        else {
            continue;
        };
        if to_index < from_index {
            problems.push(format!(
                "upward import: {} (`{from}`, floor `{from_floor}`) uses `{}` of `{to}` (floor `{to_floor}`, higher)",
                edge.file, edge.path
            ));
        }
    }
    problems
}

/// The "never reaches" rules of the paragraph "Rules the layout keeps" under the table: each
/// clause (up to a `;`) `` `a` never reaches `b`, `c` or `d` `` is checked through every import on
/// the way.
fn rule_problems(doc: &str, edges: &[Edge], floors: &Floors) -> Vec<String> {
    let Some(start) = doc.find("Rules the layout keeps") else {
        return Vec::new();
    };
    let paragraph = doc[start..].split("\n\n").next().unwrap_or_default();
    let paragraph = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut arrows: BTreeMap<String, BTreeMap<String, &Edge>> = BTreeMap::new();
    for edge in edges {
        if let (Some(from), Some(to)) = (top_level(&edge.from), top_level(&edge.to))
            && from != to
        {
            arrows.entry(from).or_default().entry(to).or_insert(edge);
        }
    }
    let mut problems = Vec::new();
    let mut rules = 0;
    for clause in paragraph
        .split(';')
        .filter(|c| c.contains(" never reaches "))
    {
        let (before, after) = clause.split_once(" never reaches ").unwrap();
        let names = |text: &str| -> Vec<String> {
            text.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        };
        let Some(subject) = names(before).pop() else {
            problems.push(format!(
                "a rule names no module before \"never reaches\": {clause}"
            ));
            continue;
        };
        for name in std::iter::once(&subject).chain(&names(after)) {
            if !floors.contains_key(name) {
                problems.push(format!(
                    "a rule names `{name}`, which the floor table lacks"
                ));
            }
        }
        for forbidden in names(after) {
            rules += 1;
            if let Some(route) = route(&arrows, &subject, &forbidden) {
                problems.push(format!(
                    "`{subject}` reaches `{forbidden}` though docs/ARCHITECTURE.md says it never does: {route}"
                ));
            }
        }
    }
    if rules == 0 {
        problems.push(
            "the paragraph \"Rules the layout keeps\" holds no \"`a` never reaches `b`\"".into(),
        );
    }
    problems
}

/// The shortest chain of imports from `from` to `to`, told file by file; `None` if there is none.
fn route(
    arrows: &BTreeMap<String, BTreeMap<String, &Edge>>,
    from: &str,
    to: &str,
) -> Option<String> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([from]);
    while let Some(at) = queue.pop_front() {
        for next in arrows.get(at).into_iter().flat_map(|t| t.keys()) {
            if next == from || came_from.contains_key(next.as_str()) {
                continue;
            }
            came_from.insert(next, at);
            if next == to {
                let mut steps = Vec::new();
                let mut here = to;
                while here != from {
                    let before = came_from[here];
                    let edge = arrows[before][here];
                    steps.push(format!("{} uses `{}`", edge.file, edge.path));
                    here = before;
                }
                steps.reverse();
                return Some(steps.join(", then "));
            }
            queue.push_back(next);
        }
    }
    None
}

/// The top-level module a module stands in, as the floor table names it; `None` for `lib.rs`.
fn top_level(module: &ModPath) -> Option<String> {
    match module.as_slice() {
        [root] if root == BIN => Some(BIN.to_string()),
        [_, top, ..] => Some(top.clone()),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Circles.

/// Every circle among the siblings of one parent: a strongly connected set of two or more.
fn circles(edges: &[Edge]) -> Vec<String> {
    // parent → sibling → siblings it reaches, with the edges that tie them.
    let mut arrows: BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, Vec<&Edge>>>> =
        BTreeMap::new();
    for edge in edges {
        let common = edge
            .from
            .iter()
            .zip(&edge.to)
            .take_while(|(a, b)| a == b)
            .count();
        if common == 0 || common >= edge.from.len() || common >= edge.to.len() {
            // Across the two crates (the binary only reaches the library) or parent ↔ child.
            continue;
        }
        arrows
            .entry(edge.from[..common].to_vec())
            .or_default()
            .entry(edge.from[common].clone())
            .or_default()
            .entry(edge.to[common].clone())
            .or_default()
            .push(edge);
    }
    let mut problems = Vec::new();
    for (parent, graph) in &arrows {
        for component in strongly_connected(graph) {
            let mut text = format!(
                "import circle among the modules of `{}`: {}",
                parent.join("::"),
                component.iter().cloned().collect::<Vec<_>>().join(", ")
            );
            for (from, targets) in graph.iter().filter(|(from, _)| component.contains(*from)) {
                for (to, ties) in targets.iter().filter(|(to, _)| component.contains(*to)) {
                    let _ = write!(text, "\n    {from} -> {to}:");
                    for tie in ties {
                        let _ = write!(text, " {} uses `{}`;", tie.file, tie.path);
                    }
                }
            }
            problems.push(text);
        }
    }
    problems
}

/// Tarjan's algorithm; the components of two nodes or more.
fn strongly_connected<T>(graph: &BTreeMap<String, BTreeMap<String, T>>) -> Vec<BTreeSet<String>> {
    struct State<'a, T> {
        graph: &'a BTreeMap<String, BTreeMap<String, T>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    fn visit<'a, T>(state: &mut State<'a, T>, node: &'a str) {
        let n = state.index.len();
        state.index.insert(node, n);
        state.low.insert(node, n);
        state.stack.push(node);
        let graph = state.graph;
        for next in graph.get(node).into_iter().flat_map(|t| t.keys()) {
            let next = next.as_str();
            if !state.index.contains_key(next) {
                visit(state, next);
                let low = state.low[node].min(state.low[next]);
                state.low.insert(node, low);
            } else if state.stack.contains(&next) {
                let low = state.low[node].min(state.index[next]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = BTreeSet::new();
            while let Some(member) = state.stack.pop() {
                component.insert(member.to_string());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

// ---------------------------------------------------------------------------------------------
// Reading the tree.

/// One import, resolved: the module `from` (in `file`) uses `path`, which lies in module `to`.
struct Edge {
    from: ModPath,
    to: ModPath,
    file: String,
    path: String,
}

struct Module {
    /// The file, relative to the project root (`src/…`).
    file: String,
    /// The tokens of the file without comments, literals and `#[cfg(test)]` items.
    tokens: Vec<String>,
    /// The child modules it declares (`mod x;`).
    children: BTreeSet<String>,
    /// Each name it imports (`use a::b as name;`) → the path, as written.
    imports: BTreeMap<String, Vec<String>>,
    /// The paths of its `use` trees, expanded.
    uses: Vec<Vec<String>>,
}

struct Tree {
    modules: BTreeMap<ModPath, Module>,
    /// `#[macro_export]` macro name → the module that defines it.
    macros: BTreeMap<String, ModPath>,
}

impl Tree {
    fn read(src: &Path) -> Tree {
        let main = src.join("main.rs");
        let binary_modules: BTreeSet<String> = std::fs::read_to_string(&main)
            .map(|text| declared_children(&tokens(&clean(&text))))
            .unwrap_or_default();
        let mut files = Vec::new();
        collect_files(src, &mut files);
        let mut modules = BTreeMap::new();
        let mut macros = BTreeMap::new();
        for file in files {
            let relative = file.strip_prefix(src).unwrap();
            let mut segments: Vec<String> = relative
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            let last = segments.pop().unwrap();
            let stem = last.trim_end_matches(".rs");
            let module: ModPath = match (segments.is_empty(), stem) {
                (true, "lib") => vec![LIB.into()],
                (true, "main") => vec![BIN.into()],
                _ => {
                    let root = if binary_modules
                        .contains(&segments.first().cloned().unwrap_or(stem.into()))
                    {
                        BIN
                    } else {
                        LIB
                    };
                    let mut path = vec![root.to_string()];
                    path.extend(segments);
                    if stem != "mod" {
                        path.push(stem.to_string());
                    }
                    path
                }
            };
            let text = std::fs::read_to_string(&file).unwrap();
            for name in exported_macros(&text) {
                macros.insert(name, module.clone());
            }
            let tokens = tokens(&drop_test_items(&tokens(&clean(&text))).join(" "));
            let children = declared_children(&tokens);
            let uses = use_trees(&tokens);
            let imports = uses
                .iter()
                .filter_map(|(path, alias)| {
                    let name = alias.clone().or_else(|| path.last().cloned())?;
                    (name != "*" && name != "_").then(|| (name, path.clone()))
                })
                .collect();
            let file = format!("src/{}", relative.display());
            let uses = uses.into_iter().map(|(path, _)| path).collect();
            modules.insert(
                module,
                Module {
                    file,
                    tokens,
                    children,
                    imports,
                    uses,
                },
            );
        }
        Tree { modules, macros }
    }

    /// The file of a top-level module, for messages.
    fn file_of(&self, top: &str) -> String {
        self.modules
            .iter()
            .find(|(m, _)| top_level(m).as_deref() == Some(top))
            .map(|(_, module)| module.file.clone())
            .unwrap_or_default()
    }

    /// Every import of every module, resolved to the module it lands in (none to itself).
    fn edges(&self) -> Vec<Edge> {
        let mut edges = Vec::new();
        for (path, module) in &self.modules {
            let mut seen = BTreeSet::new();
            let written = module.uses.iter().cloned().chain(expression_paths(module));
            for segments in written {
                let Some(to) = self.resolve(path, &segments, 0) else {
                    continue;
                };
                if &to != path && seen.insert((to.clone(), segments.clone())) {
                    edges.push(Edge {
                        from: path.clone(),
                        to,
                        file: module.file.clone(),
                        path: segments.join("::"),
                    });
                }
            }
        }
        edges
    }

    /// The module that `segments`, written in module `at`, lands in; `None` outside the crate.
    fn resolve(&self, at: &ModPath, segments: &[String], depth: usize) -> Option<ModPath> {
        if depth > 8 {
            return None; // an import loop of names: the compiler refuses it anyway
        }
        let (first, rest) = segments.split_first()?;
        let mut current: ModPath = match first.as_str() {
            "crate" => vec![at[0].clone()],
            "verbd" if at[0] == BIN => vec![LIB.into()],
            "self" => at.clone(),
            "super" => at[..at.len().saturating_sub(1).max(1)].to_vec(),
            name if self.modules.get(at)?.children.contains(name) => {
                let mut child = at.clone();
                child.push(name.to_string());
                child
            }
            _ => return None,
        };
        let mut rest = rest;
        while let Some((segment, after)) = rest.split_first() {
            if segment == "super" {
                current.pop();
                if current.is_empty() {
                    return None;
                }
                rest = after;
                continue;
            }
            if segment == "self" {
                rest = after;
                continue;
            }
            let mut deeper = current.clone();
            deeper.push(segment.clone());
            if self.modules.contains_key(&deeper) {
                current = deeper;
                rest = after;
                continue;
            }
            if current.len() == 1
                && let Some(module) = self.macros.get(segment)
                && module[0] == current[0]
            {
                return Some(module.clone());
            }
            if let Some(imported) = self.modules.get(&current)?.imports.get(segment) {
                let mut through = imported.clone();
                through.extend(after.iter().cloned());
                return self
                    .resolve(&current, &through, depth + 1)
                    .or(Some(current));
            }
            break;
        }
        Some(current)
    }
}

fn collect_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The source without comments, string and character literals (each becomes a space or `""`).
fn clean(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
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
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&chars, i) {
            // A raw string: r"…", r#"…"#, …; `r#ident` is a raw identifier.
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            i += 2 + hashes;
            while i < chars.len() {
                if chars[i] == '"'
                    && chars[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes
                {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A character literal ('a', '\n', '\u{..}') or a lifetime ('a): a lifetime has no
            // closing quote right after its first character.
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// Identifiers, `::` and single punctuation characters.
fn tokens(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            tokens.push(word.strip_prefix("r#").unwrap_or(&word).to_string());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".into());
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    tokens
}

/// The tokens without every item marked `#[cfg(test)]` (a `mod tests { … }`, a `use`, a `fn`).
fn drop_test_items(tokens: &[String]) -> Vec<String> {
    const MARK: [&str; 7] = ["#", "[", "cfg", "(", "test", ")", "]"];
    let mut kept = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i..].iter().take(MARK.len()).eq(MARK.iter()) {
            i += MARK.len();
            // Skip to the end of the item: a `;` before any brace, or the matching `}`.
            let mut depth = 0usize;
            while i < tokens.len() {
                match tokens[i].as_str() {
                    "{" => depth += 1,
                    "}" => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    ";" if depth == 0 => {
                        i += 1;
                        break;
                    }
                    _ => {}
                }
                i += 1;
            }
        } else {
            kept.push(tokens[i].clone());
            i += 1;
        }
    }
    kept
}

/// `mod name;` and `mod name {` declarations (at any depth: inline modules are rare here).
fn declared_children(tokens: &[String]) -> BTreeSet<String> {
    tokens
        .windows(3)
        .filter(|w| w[0] == "mod" && (w[2] == ";" || w[2] == "{"))
        .map(|w| w[1].clone())
        .collect()
}

fn exported_macros(text: &str) -> Vec<String> {
    let cleaned = tokens(&clean(text));
    cleaned
        .windows(7)
        .filter(|w| w[..6] == ["#", "[", "macro_export", "]", "macro_rules", "!"])
        .map(|w| w[6].clone())
        .collect()
}

/// Every `use` tree, expanded: (path, the name it is imported as when renamed).
fn use_trees(tokens: &[String]) -> Vec<(Vec<String>, Option<String>)> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == "use" {
            let end = tokens[i..]
                .iter()
                .position(|t| t == ";")
                .map_or(tokens.len(), |p| i + p);
            let mut at = i + 1;
            expand(&tokens[..end], &mut at, &[], &mut found);
            i = end;
        }
        i += 1;
    }
    found
}

/// Expands the use tree at `tokens[*at..]` under `prefix`.
fn expand(
    tokens: &[String],
    at: &mut usize,
    prefix: &[String],
    found: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut path = prefix.to_vec();
    if tokens.get(*at).map(String::as_str) == Some("::") {
        *at += 1; // a leading `::` (an extern crate path)
    }
    while let Some(token) = tokens.get(*at) {
        match token.as_str() {
            "{" => {
                *at += 1;
                loop {
                    match tokens.get(*at).map(String::as_str) {
                        None => return,
                        Some("}") => {
                            *at += 1;
                            return;
                        }
                        Some(",") => *at += 1,
                        Some(_) => expand(tokens, at, &path, found),
                    }
                }
            }
            "*" => {
                *at += 1;
                path.push("*".into());
                found.push((path, None));
                return;
            }
            "::" => *at += 1,
            "," | "}" => {
                found.push((path, None));
                return;
            }
            "as" => {
                let alias = tokens.get(*at + 1).cloned();
                *at += 2;
                found.push((path, alias));
                return;
            }
            "self" if path.len() > prefix.len() || !prefix.is_empty() => {
                *at += 1;
                // `a::{self, …}`: the module itself, imported under its own name.
                let alias = path.last().cloned();
                if tokens.get(*at).map(String::as_str) == Some("as") {
                    continue;
                }
                found.push((path, alias));
                return;
            }
            word => {
                path.push(word.to_string());
                *at += 1;
            }
        }
    }
    if path.len() > prefix.len() {
        found.push((path, None));
    }
}

/// The paths outside `use` trees that may name a module of the crate: `crate::…`, `super::…`,
/// `self::…`, `verbd::…` and `child::…`.
fn expression_paths(module: &Module) -> Vec<Vec<String>> {
    let tokens = &module.tokens;
    let mut paths = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == "use" {
            while i < tokens.len() && tokens[i] != ";" {
                i += 1;
            }
            continue;
        }
        let starts = matches!(tokens[i].as_str(), "crate" | "super" | "self" | "verbd")
            || module.children.contains(&tokens[i]);
        let continues = tokens.get(i + 1).map(String::as_str) == Some("::");
        let inside = i > 0 && tokens[i - 1] == "::";
        if starts && continues && !inside {
            let mut path = vec![tokens[i].clone()];
            i += 1;
            while tokens.get(i).map(String::as_str) == Some("::")
                && tokens
                    .get(i + 1)
                    .is_some_and(|t| t.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
            {
                path.push(tokens[i + 1].clone());
                i += 2;
            }
            paths.push(path);
        } else {
            i += 1;
        }
    }
    paths
}

// ---------------------------------------------------------------------------------------------
// The checker on small trees: each promise of the test fails when it should.

const TABLE: &str = "# Architecture\n\n## Module map\n\n| floor | module | responsibility |\n|---|---|---|\n| top | `main.rs`, `server/` | x |\n| low | `policy/`, `journal` | y |\n\nRules the layout keeps: `policy` never reaches\n`journal`; `server` may reach anything.\n\n## Next\n";

fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

const HOUSE: [(&str, &str); 6] = [
    ("main.rs", "use verbd::server::Daemon;\nfn main() {}\n"),
    (
        "lib.rs",
        "pub mod journal;\npub mod policy;\npub mod server;\n",
    ),
    (
        "server/mod.rs",
        "mod call;\nuse crate::policy::Policy;\npub struct Daemon;\n",
    ),
    (
        "server/call.rs",
        "use super::Daemon;\nuse crate::journal::Journal;\n",
    ),
    (
        "policy/mod.rs",
        "pub mod sql;\npub use sql::Check;\npub struct Policy;\n",
    ),
    ("journal.rs", "pub struct Journal;\n"),
];

fn house_with(extra: &[(&str, &str)]) -> Vec<String> {
    let mut files: BTreeMap<&str, &str> = HOUSE.iter().copied().collect();
    files.insert("policy/sql.rs", "pub struct Check;\n");
    files.extend(extra.iter().copied());
    let dir = tree(&files.into_iter().collect::<Vec<_>>());
    check(dir.path(), TABLE)
}

#[test]
fn a_sound_small_house_passes() {
    assert_eq!(house_with(&[]), Vec::<String>::new());
}

#[test]
fn an_import_up_a_floor_fails() {
    let problems = house_with(&[(
        "journal.rs",
        "use crate::server::Daemon;\npub struct Journal;\n",
    )]);
    let up = "upward import: src/journal.rs (`journal`, floor `low`) uses `crate::server::Daemon` of `server` (floor `top`, higher)";
    assert!(problems.iter().any(|p| p == up), "{problems:?}");
}

#[test]
fn an_import_in_an_expression_counts_and_one_in_a_comment_or_string_does_not() {
    let quiet = "/// See [`crate::server::Daemon`].\npub struct Journal;\nconst S: &str = \"crate::server::Daemon\";\nconst R: &str = r#\"crate::server::X\"#;\n";
    assert_eq!(house_with(&[("journal.rs", quiet)]), Vec::<String>::new());
    let loud =
        "pub struct Journal;\nfn f() -> usize { std::mem::size_of::<crate::server::Daemon>() }\n";
    let problems = house_with(&[("journal.rs", loud)]);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("upward import: src/journal.rs")),
        "{problems:?}"
    );
}

#[test]
fn a_test_module_may_reach_anywhere() {
    let text =
        "pub struct Journal;\n#[cfg(test)]\nmod tests {\n    use crate::server::Daemon;\n}\n";
    assert_eq!(house_with(&[("journal.rs", text)]), Vec::<String>::new());
}

#[test]
fn a_circle_between_files_of_one_folder_fails_and_names_its_ties() {
    let problems = house_with(&[
        (
            "policy/mod.rs",
            "pub mod sql;\nmod compile;\npub use sql::Check;\npub struct Policy;\n",
        ),
        (
            "policy/compile.rs",
            "use super::Check;\npub struct Compiled;\n",
        ),
        (
            "policy/sql.rs",
            "pub struct Check;\nfn f(_: super::compile::Compiled) {}\n",
        ),
    ]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("import circle among the modules of `lib::policy`: compile, sql")
    );
    // The re-export `policy::Check` is followed to the file that defines it.
    assert!(problems[0].contains("compile -> sql: src/policy/compile.rs uses `super::Check`"));
}

#[test]
fn a_circle_between_top_level_modules_on_one_floor_fails() {
    let problems = house_with(&[
        (
            "journal.rs",
            "pub struct Journal;\npub fn f() -> crate::policy::Policy { todo!() }\n",
        ),
        ("policy/sql.rs", "use crate::journal;\npub struct Check;\n"),
    ]);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("import circle among the modules of `lib`: journal, policy")),
        "{problems:?}"
    );
}

#[test]
fn a_module_the_table_lacks_fails_and_says_where_to_add_it() {
    let problems = house_with(&[
        (
            "lib.rs",
            "pub mod journal;\npub mod policy;\npub mod server;\npub mod queue;\n",
        ),
        ("queue.rs", "pub struct Queue;\n"),
    ]);
    assert_eq!(
        problems,
        [
            "module `queue` (src/queue.rs) is not in the floor table: add it to the floor table in docs/ARCHITECTURE.md"
        ]
    );
}

#[test]
fn a_module_the_code_lacks_fails() {
    let table = TABLE.replace("`journal`", "`journal`, `gone`");
    let dir = tree(
        &HOUSE
            .iter()
            .copied()
            .chain([("policy/sql.rs", "")])
            .collect::<Vec<_>>(),
    );
    let problems = check(dir.path(), &table);
    assert_eq!(
        problems,
        [
            "the floor table names `gone`, which src/ does not have: remove it from the floor table in docs/ARCHITECTURE.md"
        ]
    );
}

#[test]
fn an_announced_module_stands_on_its_floor_before_the_table_names_it() {
    let (name, floor) = ANNOUNCED[0];
    let table = TABLE.replace("| low |", &format!("| {floor} |"));
    let lib = format!("pub mod journal;\npub mod policy;\npub mod server;\npub mod {name};\n");
    let up = "use crate::server::Daemon;\n";
    let file = format!("{name}.rs");
    let mut files: Vec<(&str, &str)> = HOUSE.to_vec();
    files.retain(|(path, _)| *path != "lib.rs");
    files.extend([
        ("lib.rs", lib.as_str()),
        ("policy/sql.rs", ""),
        (file.as_str(), up),
    ]);
    let dir = tree(&files);
    let problems = check(dir.path(), &table);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with(&format!("upward import: src/{name}.rs")),
        "{problems:?}"
    );
}

#[test]
fn a_rule_broken_through_an_import_fails_and_names_the_route() {
    let problems = house_with(&[(
        "policy/sql.rs",
        "pub struct Check;\nuse crate::journal::Journal;\n",
    )]);
    assert_eq!(
        problems,
        [
            "`policy` reaches `journal` though docs/ARCHITECTURE.md says it never does: src/policy/sql.rs uses `crate::journal::Journal`"
        ]
    );
}

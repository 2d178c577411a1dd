//! The graph of a crate's modules, file by file, read from its source with
//! `syn`: which file names an item of which other file, and the circles
//! (files that reach themselves through others).
//!
//! What counts as an arrow from file A to file B:
//!
//! - A declares the module B (`mod b;`): a parent stands above its
//!   children, so a child that needs an item of its parent's own file
//!   closes a circle (the item moves to a file of its own);
//! - A names an item defined in B, through a `use` or a path of two names
//!   or more (`crate::…`, `super::…`, `self::…`, or one that starts with a
//!   name A imported), in code or in a macro's arguments. A name is followed through re-exports to the
//!   file that defines it, so `use crate::Thing` is an arrow to the file of
//!   `Thing`, not to the file that re-exports it; a re-export (`pub use
//!   b::Thing`) is itself an arrow from the re-exporting file to `b`. A
//!   name that stands for a module (`use crate::store;`) is an arrow to
//!   that module's file (its `mod.rs`).
//!
//! Test code (`#[cfg(test)]` items and the modules they declare) is left
//! out: a test module imports what it tests, and nothing imports it. So is
//! the binary (`main.rs`), which nothing in the library can import.
//! Paths to other crates are not arrows.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// One crate's files and the arrows between them.
pub struct Graph {
    /// Each file, relative to the crate's directory (`src/store/mod.rs`).
    pub files: Vec<String>,
    /// `(from, to)` file indices, with what ties them (paths and
    /// declarations as written, with their module).
    pub edges: BTreeMap<(usize, usize), BTreeSet<String>>,
}

/// A circle: files that reach each other, and the arrows among them.
pub struct Circle {
    /// The files, sorted.
    pub files: Vec<String>,
    /// Each arrow inside the circle with what ties its ends.
    pub arrows: Vec<(String, String, Vec<String>)>,
}

impl std::fmt::Display for Circle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "circle of {} files: {}",
            self.files.len(),
            self.files.join(", ")
        )?;
        for (from, to, why) in &self.arrows {
            writeln!(f, "  {from} -> {to}: {}", why.join("; "))?;
        }
        Ok(())
    }
}

struct Module {
    name: String,
    file: usize,
    parent: Option<usize>,
    children: HashMap<String, usize>,
    /// Items defined here, by name, with the file that defines them.
    defs: HashMap<String, usize>,
    /// `use` imports: the name they bind, and the path they name.
    imports: HashMap<String, Vec<String>>,
    /// `use path::*` imports.
    globs: Vec<Vec<String>>,
}

enum Resolved {
    Module(usize),
    Item(usize),
}

struct Crate {
    dir: PathBuf,
    files: Vec<String>,
    modules: Vec<Module>,
    /// Parsed files, in file order.
    asts: Vec<syn::File>,
    /// Declaration arrows: (parent file, child file, `mod name`).
    declarations: Vec<(usize, usize, String)>,
}

impl Graph {
    /// Reads the crate whose library root is `dir/src/lib.rs`.
    pub fn of_crate(dir: &Path) -> Graph {
        let mut krate = Crate {
            dir: dir.to_owned(),
            files: Vec::new(),
            modules: Vec::new(),
            asts: Vec::new(),
            declarations: Vec::new(),
        };
        krate.load_file(Path::new("src/lib.rs"), "crate".into(), None);
        krate.arrows()
    }

    /// Every circle, largest first.
    pub fn circles(&self) -> Vec<Circle> {
        let components = strongly_connected(self.files.len(), self.edges.keys().copied());
        let mut circles: Vec<Circle> = components
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|component| {
                let inside: BTreeSet<usize> = component.iter().copied().collect();
                let mut files: Vec<String> =
                    component.iter().map(|&f| self.files[f].clone()).collect();
                files.sort();
                let arrows = self
                    .edges
                    .iter()
                    .filter(|((from, to), _)| inside.contains(from) && inside.contains(to))
                    .map(|((from, to), why)| {
                        (
                            self.files[*from].clone(),
                            self.files[*to].clone(),
                            why.iter().cloned().collect(),
                        )
                    })
                    .collect();
                Circle { files, arrows }
            })
            .collect();
        circles.sort_by(|a, b| {
            b.files
                .len()
                .cmp(&a.files.len())
                .then(a.files.cmp(&b.files))
        });
        circles
    }

    /// The graph as text: each file and the files it points to.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut order: Vec<usize> = (0..self.files.len()).collect();
        order.sort_by_key(|&f| &self.files[f]);
        for from in order {
            let mut to: Vec<&str> = self
                .edges
                .keys()
                .filter(|(f, _)| *f == from)
                .map(|(_, t)| self.files[*t].as_str())
                .collect();
            to.sort_unstable();
            let _ = writeln!(out, "{} -> {}", self.files[from], to.join(", "));
        }
        out
    }
}

impl Crate {
    /// Parses `path` (relative to the crate) as the module `name`, and the
    /// modules it declares, recursively.
    fn load_file(&mut self, path: &Path, name: String, parent: Option<usize>) -> usize {
        let full = self.dir.join(path);
        let text = std::fs::read_to_string(&full)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", full.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", full.display()));
        let file = self.files.len();
        self.files.push(path.to_string_lossy().replace('\\', "/"));
        self.asts.push(ast.clone());
        let module = self.new_module(name, file, parent);
        let dir = module_dir(path);
        self.load_items(&ast.items, module, file, &dir);
        module
    }

    fn new_module(&mut self, name: String, file: usize, parent: Option<usize>) -> usize {
        let index = self.modules.len();
        self.modules.push(Module {
            name: name.clone(),
            file,
            parent,
            children: HashMap::new(),
            defs: HashMap::new(),
            imports: HashMap::new(),
            globs: Vec::new(),
        });
        if let Some(parent) = parent {
            self.modules[parent].children.insert(name, index);
        }
        index
    }

    /// Records the items of `module` (in `file`; its child modules' files
    /// are under `dir`).
    fn load_items(&mut self, items: &[syn::Item], module: usize, file: usize, dir: &Path) {
        for item in items {
            if is_test_only(item_attrs(item)) {
                continue;
            }
            match item {
                syn::Item::Mod(m) => {
                    let name = m.ident.to_string();
                    match &m.content {
                        Some((_, inner)) => {
                            let child = self.new_module(name.clone(), file, Some(module));
                            self.load_items(inner, child, file, &dir.join(&name));
                        }
                        None => {
                            let path = child_file(&self.dir, dir, &name, &m.attrs);
                            let child = self.load_file(&path, name.clone(), Some(module));
                            let child_file = self.modules[child].file;
                            self.declarations
                                .push((file, child_file, format!("mod {name}")));
                        }
                    }
                }
                syn::Item::Use(u) => {
                    let mut leaves = Vec::new();
                    use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
                    for leaf in leaves {
                        match leaf {
                            UseLeaf::Name(alias, path) => {
                                self.modules[module].imports.insert(alias, path);
                            }
                            UseLeaf::Glob(path) => self.modules[module].globs.push(path),
                        }
                    }
                }
                other => {
                    if let Some(name) = item_name(other) {
                        self.modules[module].defs.insert(name, file);
                    }
                }
            }
        }
    }

    fn arrows(self) -> Graph {
        let mut edges: BTreeMap<(usize, usize), BTreeSet<String>> = BTreeMap::new();
        for (from, to, why) in &self.declarations {
            edges.entry((*from, *to)).or_default().insert(why.clone());
        }
        for file in 0..self.files.len() {
            let root = self
                .modules
                .iter()
                .position(|m| m.file == file)
                .expect("every file is a module");
            let mut visitor = PathVisitor {
                krate: &self,
                module: root,
                paths: Vec::new(),
            };
            visitor.visit_file(&self.asts[file]);
            for (module, path) in visitor.paths {
                let target = match self.resolve(module, &path, 0) {
                    Some(Resolved::Module(m)) => self.modules[m].file,
                    Some(Resolved::Item(f)) => f,
                    None => continue,
                };
                if target != file {
                    let shown = format!("{} in {}", path.join("::"), self.module_path(module));
                    edges.entry((file, target)).or_default().insert(shown);
                }
            }
        }
        Graph {
            files: self.files,
            edges,
        }
    }

    fn module_path(&self, mut module: usize) -> String {
        let mut names = vec![self.modules[module].name.clone()];
        while let Some(parent) = self.modules[module].parent {
            names.push(self.modules[parent].name.clone());
            module = parent;
        }
        names.reverse();
        names.join("::")
    }

    /// What `path`, written in `module`, stands for in this crate; `None`
    /// for another crate's item, a local name, or what cannot be found.
    fn resolve(&self, module: usize, path: &[String], depth: usize) -> Option<Resolved> {
        if depth > 32 || path.is_empty() {
            return None;
        }
        let (mut current, rest) = match path[0].as_str() {
            "crate" => (0, &path[1..]),
            "self" => (module, &path[1..]),
            "super" => {
                let mut current = module;
                let mut i = 0;
                while path.get(i).map(String::as_str) == Some("super") {
                    current = self.modules[current].parent?;
                    i += 1;
                }
                (current, &path[i..])
            }
            name => match self.lookup(module, name, depth)? {
                Resolved::Module(m) => (m, &path[1..]),
                item => return Some(item),
            },
        };
        for segment in rest {
            match self.lookup(current, segment, depth)? {
                Resolved::Module(m) => current = m,
                item => return Some(item),
            }
        }
        Some(Resolved::Module(current))
    }

    fn lookup(&self, module: usize, name: &str, depth: usize) -> Option<Resolved> {
        let m = &self.modules[module];
        if let Some(&child) = m.children.get(name) {
            return Some(Resolved::Module(child));
        }
        if let Some(&file) = m.defs.get(name) {
            return Some(Resolved::Item(file));
        }
        if let Some(path) = m.imports.get(name) {
            return self.resolve(module, path, depth + 1);
        }
        for glob in &m.globs {
            if let Some(Resolved::Module(source)) = self.resolve(module, glob, depth + 1)
                && source != module
                && let Some(found) = self.lookup(source, name, depth + 1)
            {
                return Some(found);
            }
        }
        None
    }
}

/// Collects, with their module, every path of a file that may name an
/// item of the crate.
struct PathVisitor<'a> {
    krate: &'a Crate,
    module: usize,
    paths: Vec<(usize, Vec<String>)>,
}

impl<'ast> Visit<'ast> for PathVisitor<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_test_only(item_attrs(item)) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        // A module of another file is visited with that file.
        let Some((_, items)) = &item.content else {
            return;
        };
        let name = item.ident.to_string();
        let Some(&child) = self.krate.modules[self.module].children.get(&name) else {
            return;
        };
        let outer = std::mem::replace(&mut self.module, child);
        for item in items {
            self.visit_item(item);
        }
        self.module = outer;
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&item.tree, &mut Vec::new(), &mut leaves);
        for leaf in leaves {
            let path = match leaf {
                UseLeaf::Name(_, path) | UseLeaf::Glob(path) => path,
            };
            self.paths.push((self.module, path));
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Fn(f) => &f.attrs,
            syn::ImplItem::Const(c) => &c.attrs,
            syn::ImplItem::Type(t) => &t.attrs,
            _ => return syn::visit::visit_impl_item(self, item),
        };
        if !is_test_only(attrs) {
            syn::visit::visit_impl_item(self, item);
        }
    }

    /// `pub(crate)`, `pub(super)`: who may see an item, not an import.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    /// A path of one name is a local, a generic, or a name the file
    /// imports (whose `use` is already an arrow): only longer paths are
    /// followed.
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() > 1 {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.paths.push((self.module, segments));
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        // Its arguments are tokens to `syn`: the paths in them are found
        // by hand.
        let mut found = Vec::new();
        paths_in_tokens(mac.tokens.clone(), &mut found);
        for path in found {
            self.paths.push((self.module, path));
        }
    }
}

/// The `a::b::c` sequences of a macro's arguments (which `syn` does not
/// parse): every identifier followed by `::` and another.
fn paths_in_tokens(tokens: TokenStream, out: &mut Vec<Vec<String>>) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < trees.len() {
        match &trees[i] {
            TokenTree::Group(group) => {
                paths_in_tokens(group.stream(), out);
                i += 1;
            }
            TokenTree::Ident(first) => {
                let mut path = vec![first.to_string()];
                let mut j = i + 1;
                while let (
                    Some(TokenTree::Punct(a)),
                    Some(TokenTree::Punct(b)),
                    Some(TokenTree::Ident(next)),
                ) = (trees.get(j), trees.get(j + 1), trees.get(j + 2))
                {
                    if a.as_char() != ':' || b.as_char() != ':' {
                        break;
                    }
                    path.push(next.to_string());
                    j += 3;
                }
                if path.len() > 1 {
                    out.push(path);
                }
                i = j;
            }
            TokenTree::Punct(_) | TokenTree::Literal(_) => i += 1,
        }
    }
}

enum UseLeaf {
    /// The name bound, and the path it stands for.
    Name(String, Vec<String>),
    Glob(Vec<String>),
}

fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<UseLeaf>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                if let Some(last) = prefix.last() {
                    out.push(UseLeaf::Name(last.clone(), prefix.clone()));
                }
            } else {
                let mut path = prefix.clone();
                path.push(name.clone());
                out.push(UseLeaf::Name(name, path));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            let name = r.ident.to_string();
            if name != "self" {
                path.push(name);
            }
            out.push(UseLeaf::Name(r.rename.to_string(), path));
        }
        syn::UseTree::Glob(_) => out.push(UseLeaf::Glob(prefix.clone())),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_leaves(tree, prefix, out);
            }
        }
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

fn item_name(item: &syn::Item) -> Option<String> {
    Some(
        match item {
            syn::Item::Const(i) => &i.ident,
            syn::Item::Enum(i) => &i.ident,
            syn::Item::Fn(i) => &i.sig.ident,
            syn::Item::Static(i) => &i.ident,
            syn::Item::Struct(i) => &i.ident,
            syn::Item::Trait(i) => &i.ident,
            syn::Item::TraitAlias(i) => &i.ident,
            syn::Item::Type(i) => &i.ident,
            syn::Item::Union(i) => &i.ident,
            syn::Item::Macro(i) => i.ident.as_ref()?,
            _ => return None,
        }
        .to_string(),
    )
}

/// `#[cfg(test)]`, or a `cfg` that needs `test` (`all(test, …)`).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        if !attr.path().is_ident("cfg") {
            return false;
        }
        let Ok(list) = attr.meta.require_list() else {
            return false;
        };
        let text = list.tokens.to_string().replace(' ', "");
        text == "test" || text.starts_with("all(test,") || text.contains(",test)")
    })
}

/// The directory of the files of `path`'s child modules.
fn module_dir(path: &Path) -> PathBuf {
    let parent = path.parent().unwrap_or(Path::new(""));
    match path.file_name().and_then(|n| n.to_str()) {
        Some("lib.rs" | "main.rs" | "mod.rs") => parent.to_owned(),
        _ => parent.join(path.file_stem().unwrap_or_default()),
    }
}

/// The file of the child module `name` declared in a file whose children
/// live in `dir`: `#[path]`, `dir/name.rs` or `dir/name/mod.rs`.
fn child_file(krate: &Path, dir: &Path, name: &str, attrs: &[syn::Attribute]) -> PathBuf {
    for attr in attrs {
        if attr.path().is_ident("path")
            && let syn::Meta::NameValue(nv) = &attr.meta
            && let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) = &nv.value
        {
            return dir.join(s.value());
        }
    }
    let flat = dir.join(format!("{name}.rs"));
    if krate.join(&flat).is_file() {
        flat
    } else {
        dir.join(name).join("mod.rs")
    }
}

/// Tarjan's strongly connected components of a graph of `n` nodes.
fn strongly_connected(n: usize, edges: impl Iterator<Item = (usize, usize)>) -> Vec<Vec<usize>> {
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (from, to) in edges {
        next[from].push(to);
    }
    struct State {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        components: Vec<Vec<usize>>,
    }
    fn visit(v: usize, next: &[Vec<usize>], s: &mut State) {
        s.index[v] = Some(s.counter);
        s.low[v] = s.counter;
        s.counter += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &next[v] {
            match s.index[w] {
                None => {
                    visit(w, next, s);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(index) if s.on_stack[w] => s.low[v] = s.low[v].min(index),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.components.push(component);
        }
    }
    let mut state = State {
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        counter: 0,
        components: Vec::new(),
    };
    for v in 0..n {
        if state.index[v].is_none() {
            visit(v, &next, &mut state);
        }
    }
    state.components
}

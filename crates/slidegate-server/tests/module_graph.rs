//! No module of either crate imports, directly or through others, a module
//! that imports it back (see `module_graph/graph.rs` for what counts as an
//! import). Each test prints its crate's graph, file by file:
//!
//! ```text
//! cargo test -p slidegate-server --test module_graph -- --nocapture
//! ```

#[path = "module_graph/graph.rs"]
mod graph;

use std::path::{Path, PathBuf};

use graph::Graph;

fn crate_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name)
}

fn check(name: &str) {
    let graph = Graph::of_crate(&crate_dir(name));
    println!("{name}: {} files\n{}", graph.files.len(), graph.render());
    let report: String = graph.circles().iter().map(ToString::to_string).collect();
    assert!(
        report.is_empty(),
        "{name}: modules that import each other, directly or through others \
         (move what both need to a module of its own, below both):\n{report}"
    );
}

#[test]
fn the_server_has_no_circles() {
    check("slidegate-server");
}

#[test]
fn the_library_has_no_circles() {
    check("slidegate");
}

#[test]
fn a_circle_through_three_files_and_a_child_using_its_parent_are_both_found() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/module_circle");
    let graph = Graph::of_crate(&dir);
    let circles = graph.circles();
    let shown: String = circles.iter().map(ToString::to_string).collect();
    println!("{shown}");
    let files: Vec<Vec<&str>> = circles
        .iter()
        .map(|c| c.files.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(
        files,
        [
            vec!["src/back.rs", "src/middle.rs", "src/ring.rs"],
            vec!["src/family/child.rs", "src/family/mod.rs"],
        ],
        "{shown}"
    );
    // The message names what ties each arrow.
    assert!(
        shown.contains("src/ring.rs -> src/middle.rs: crate::middle::Middle in crate::ring\n"),
        "{shown}"
    );
    assert!(
        shown.contains("src/back.rs -> src/ring.rs: super::ring::Ring in crate::back"),
        "{shown}"
    );
    assert!(
        shown.contains(
            "src/family/mod.rs -> src/family/child.rs: child::Child in crate::family; mod child"
        ),
        "{shown}"
    );
    assert!(
        shown.contains(
            "src/family/child.rs -> src/family/mod.rs: super::Parent in crate::family::child"
        ),
        "{shown}"
    );
    // A test module's imports are no arrows.
    assert!(
        graph.render().contains("src/standalone.rs -> \n"),
        "{}",
        graph.render()
    );
}

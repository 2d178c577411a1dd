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

use graph::{Circle, Graph};

fn crate_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name)
}

/// Circles of the library that are known and being taken apart; each
/// entry is one circle's files, sorted. The list only shrinks: a circle
/// not in it fails the test, and so does an entry that is no longer a
/// circle (remove it).
const KNOWN_LIBRARY_CIRCLES: &[&[&str]] = &[
    &[
        "src/algorithm/fixed_window.rs",
        "src/algorithm/gcra.rs",
        "src/algorithm/mod.rs",
        "src/algorithm/sliding_counter.rs",
        "src/algorithm/sliding_log.rs",
        "src/rate.rs",
    ],
    &[
        "src/middleware.rs",
        "src/middleware/builder.rs",
        "src/middleware/decide.rs",
        "src/middleware/policies.rs",
        "src/middleware/response.rs",
        "src/middleware/service.rs",
    ],
    &[
        "src/store/memory.rs",
        "src/store/mod.rs",
        "src/store/redis/builder.rs",
        "src/store/redis/changes.rs",
        "src/store/redis/coalesce.rs",
        "src/store/redis/cross_slot.rs",
        "src/store/redis/mod.rs",
        "src/store/redis/script.rs",
        "src/store/redis/sentinel.rs",
        "src/store/redis/topology.rs",
        "src/store/reserve.rs",
        "src/store/resilient.rs",
    ],
];

fn check(name: &str, known: &[&[&str]]) {
    let graph = Graph::of_crate(&crate_dir(name));
    println!("{name}: {} files\n{}", graph.files.len(), graph.render());
    let circles = graph.circles();
    let (known_found, new): (Vec<&Circle>, Vec<&Circle>) = circles.iter().partition(|c| {
        known
            .iter()
            .any(|k| c.files.iter().map(String::as_str).eq(k.iter().copied()))
    });
    let gone: Vec<&&[&str]> = known
        .iter()
        .filter(|k| {
            !known_found
                .iter()
                .any(|c| c.files.iter().map(String::as_str).eq(k.iter().copied()))
        })
        .collect();
    let report: String = new.iter().map(ToString::to_string).collect();
    assert!(
        new.is_empty(),
        "{name}: modules that import each other, directly or through others \
         (move what both need to a module of its own, below both):\n{report}"
    );
    assert!(
        gone.is_empty(),
        "{name}: no longer circles, remove them from the known list: {gone:?}"
    );
}

#[test]
fn the_server_has_no_circles() {
    check("slidegate-server", &[]);
}

#[test]
fn the_library_has_no_circles_but_the_known_ones() {
    check("slidegate", KNOWN_LIBRARY_CIRCLES);
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

//! Shared support for the workspace integration tests in `tests/`.

pub mod bert_gguf;
pub mod fused_steps;
pub mod fuzz;
pub mod generation;
pub mod gguf_writer;
pub mod llama_config;
pub mod models;
pub mod outputs;
pub mod overlap;
pub mod race;
pub mod random_graph;
pub mod references;
pub mod rpc_server;

use std::path::PathBuf;

/// The workspace root (where the top-level Cargo.toml is).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every graph file under `examples/graphs/`, sorted by name.
pub fn example_graph_files() -> Vec<PathBuf> {
    let dir = workspace_root().join("examples/graphs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ron"))
        .collect();
    files.sort();
    files
}

/// The seeded generator for test-case generation (shared with the kernel tests).
pub use kernels::testing::Rng as TestRng;

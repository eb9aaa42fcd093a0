//! Plans stay byte-identical across restructurings: every example graph
//! compiled for every example target under both policies gives the RON
//! that the compiler before the device-abstraction change gave, recorded
//! (length and FNV-1a hash of the RON) in `data/plans_before.tsv`.
//!
//! A deliberate change of planning decisions re-records the file with
//! `GGPLAN_BLESS_PLANS=1 cargo test -p ggplan-compiler --test plans_unchanged`
//! and says why in its commit; the plan snapshots under `snapshots/` show
//! what changed.

use compiler::assign::Policy;
use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `.ron` files of `dir`, sorted.
fn ron_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ron"))
        .collect();
    files.sort();
    files
}

/// FNV-1a, 64 bits: stable across Rust releases, unlike std's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// One line per (graph, target, policy): the plan's RON length and hash,
/// or the compiler's refusal.
fn record() -> String {
    let mut out = String::from("# graph\ttarget\tpolicy\tbytes\tfnv1a64 (or the refusal)\n");
    for graph_file in ron_files(&root().join("examples/graphs")) {
        let graph = ir::text::read_graph(&graph_file).unwrap();
        for target_file in ron_files(&root().join("examples/targets")) {
            let target = Target::read(&target_file).unwrap();
            for (policy, name) in [(Policy::Ggml, "ggml"), (Policy::Cost, "cost")] {
                let options = CompileOptions {
                    policy,
                    ..CompileOptions::default()
                };
                let stem = |p: &Path| p.file_stem().unwrap().to_string_lossy().into_owned();
                let (g, t) = (stem(&graph_file), stem(&target_file));
                let _ = match compile(&graph, &target, &options) {
                    Ok(compiled) => {
                        let ron = ir::plan::plan_to_ron(&compiled.plan);
                        let hash = fnv1a(ron.as_bytes());
                        writeln!(out, "{g}\t{t}\t{name}\t{}\t{hash:016x}", ron.len())
                    }
                    Err(e) => writeln!(out, "{g}\t{t}\t{name}\t-\trefused: {e}"),
                };
            }
        }
    }
    out
}

#[test]
fn every_example_plan_is_the_one_recorded_before_the_restructuring() {
    let path = root().join("compiler/tests/data/plans_before.tsv");
    let now = record();
    if std::env::var("GGPLAN_BLESS_PLANS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &now).unwrap();
        return;
    }
    let before = std::fs::read_to_string(&path).unwrap();
    let differ: Vec<String> = (before.lines().zip(now.lines()))
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("  before: {a}\n  now:    {b}"))
        .collect();
    assert!(
        differ.is_empty() && before.lines().count() == now.lines().count(),
        "plans changed ({} of {} lines):\n{}",
        differ.len(),
        now.lines().count(),
        differ.join("\n")
    );
    // Guards the guard: the table covers every graph × target × policy.
    assert_eq!(now.lines().count(), 1 + 4 * 11 * 2);
}

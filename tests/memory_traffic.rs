//! `Runtime::memory_read_bytes`: the weights and state a run reads, the
//! numerator of the memory floor `ggplan bench` and `ggplan generate` print.
//! Expectations are counted by hand from the example graphs.

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use ggplan_tests::workspace_root;
use runtime::{LoadOptions, Runtime, Weights};
use std::sync::Arc;

fn read_bytes(graph: &str) -> u64 {
    let path = workspace_root().join("examples/graphs").join(graph);
    let graph = ir::text::read_graph(&path).unwrap();
    let target = Target::preset("cpu").unwrap();
    let plan = compile(&graph, &target, &CompileOptions::default())
        .unwrap()
        .plan;
    let options = LoadOptions {
        threads: 1,
        ..LoadOptions::default()
    };
    let rt = Runtime::load(Arc::new(plan), Weights::Random { seed: 1 }, &options).unwrap();
    rt.memory_read_bytes()
}

#[test]
fn every_weight_of_the_mlp_once() {
    // w1 64x128, b1 128, w2 128x10, b2 10, all f32; the input x does not count.
    assert_eq!(read_bytes("mlp.ron"), 4 * (64 * 128 + 128 + 128 * 10 + 10));
}

#[test]
fn llama_over_a_cache_counts_gathered_rows_and_cache_reads_not_writes() {
    let f32 = 4u64;
    // 128 token rows gathered from the 512 x 8000 embedding table.
    let embedding = 128 * 512 * f32;
    // Per layer: q, k, v, o (512 x 512), gate, up (512 x 1536), down
    // (1536 x 512), two norm weights, and attention reading the K and V
    // caches' 128 rows of 512 once each (set_rows writes them: not counted).
    let layer = (4 * 512 * 512 + 3 * 512 * 1536 + 2 * 512 + 2 * 128 * 512) * f32;
    let head = (512 + 512 * 8000) * f32;
    assert_eq!(read_bytes("llama2l_kv.ron"), embedding + 2 * layer + head);
}

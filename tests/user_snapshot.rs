//! A user's snapshot test, written as the README's guide tells users to:
//! SmolLM2-135M's prefill plan, built from its GGUF through the `ggplan`
//! facade, snapshot with `ggplan::assert_plan_snapshot!` (review changes with
//! `cargo insta review`) and held to quality gates. Skipped (with a line
//! saying so) when `scripts/setup.sh` has not installed the model.

use ggplan::testing::SnapshotView;
use ggplan::{CompileOptions, Gates, ModelShape, PlacementOptions, assert_plan_snapshot};
use ggplan_tests::models::smollm2_gguf;

fn smollm2_prefill() -> Option<ggplan::Graph> {
    let Some(path) = smollm2_gguf() else {
        eprintln!("skipped: SmolLM2 GGUF not installed (scripts/setup.sh installs it)");
        return None;
    };
    Some(ggplan::graph::from_gguf(path, &ModelShape::tokens(128)).expect("SmolLM2 builds"))
}

#[test]
fn smollm2_prefill_on_the_cpu() {
    let Some(graph) = smollm2_prefill() else {
        return;
    };
    let target = ggplan::target::resolve("cpu").unwrap();
    let plan = ggplan::compile(&graph, &target, &CompileOptions::default())
        .unwrap()
        .plan;
    assert_plan_snapshot!("smollm2_prefill_cpu", plan);
    ggplan::testing::assert_gates(
        &plan,
        &Gates {
            max_splits: Some(1),
            max_copy_bytes: Some(0),
            max_arena_over_bound: Some(1.02),
        },
    );
}

#[test]
fn smollm2_prefill_with_ten_blocks_offloaded() {
    let Some(graph) = smollm2_prefill() else {
        return;
    };
    let target = ggplan::target::resolve("cpu+cuda0").unwrap();
    let options = CompileOptions {
        placement: PlacementOptions {
            offload_layers: Some(10),
            ..Default::default()
        },
        ..Default::default()
    };
    let plan = ggplan::compile(&graph, &target, &options).unwrap().plan;
    assert_plan_snapshot!("smollm2_prefill_offload10", plan, SnapshotView::Summary);
    ggplan::testing::assert_gates(
        &plan,
        &Gates {
            // cpu, cuda0, then cpu again for the output head: SmolLM2 ties
            // it to the token embeddings, which stay on the CPU.
            max_splits: Some(3),
            max_copy_bytes: Some(1 << 20),
            max_arena_over_bound: Some(1.02),
        },
    );
}

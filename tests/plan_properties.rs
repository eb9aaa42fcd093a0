//! Property test: random valid graphs -> compile for several targets and both
//! policies -> the checker passes, compiling twice gives identical bytes, and
//! the plan evaluator (the plan's order, arenas, copies, fused kernels) gives
//! the graph evaluator's outputs.

use compiler::assign::Policy;
use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::PlacementOptions;
use compiler::target::Target;
use ggplan_tests::outputs::nmse;
use ggplan_tests::random_graph::random_graph;
use ggplan_tests::{TestRng, workspace_root};
use kernels::evaluate::{Bindings, Weights, evaluate, evaluate_plan};
use std::collections::BTreeMap;

#[test]
fn random_graphs_compile_check_and_compute_the_same_outputs() {
    let small =
        Target::read(&workspace_root().join("examples/targets/cpu+2gpu-small.ron")).unwrap();
    // Buffers of at most 16 KiB (the largest random tensor is a 64x64 f32
    // weight, exactly 16 KiB) force arenas to be chunked.
    let mut tiny_buffers = Target::preset("cpu").unwrap();
    tiny_buffers.name = "cpu-16k-buffers".into();
    tiny_buffers.devices[0].max_buffer_bytes = 16 << 10;
    let setups = [
        (Target::preset("cpu").unwrap(), PlacementOptions::default()),
        (tiny_buffers, PlacementOptions::default()),
        (
            Target::preset("cpu+cuda0").unwrap(),
            PlacementOptions {
                offload_layers: Some(1),
                ..Default::default()
            },
        ),
        (
            Target::preset("cpu+cuda0+cuda1").unwrap(),
            PlacementOptions::default(),
        ),
        (
            small.clone(),
            PlacementOptions {
                fit: true,
                ..Default::default()
            },
        ),
        // The cost policy's layer split (the ggml policy's: by memory).
        (
            small,
            PlacementOptions {
                layer_split: Some(Vec::new()),
                ..Default::default()
            },
        ),
    ];
    let mut rng = TestRng::new(0xC0FFEE);
    let (mut chunked_compute, mut chunked_weights) = (0, 0);
    for case in 0..40 {
        let graph = random_graph(&mut rng, case);
        let bindings = Bindings {
            weights: Weights::Random { seed: case as u64 },
            inputs: BTreeMap::new(),
            random_inputs: Some(1),
        };
        let reference = evaluate(&graph, &bindings).unwrap();
        for (target, placement) in &setups {
            for policy in [Policy::Ggml, Policy::Cost] {
                let label = format!("case {case} on {} ({policy:?})", target.name);
                let opts = CompileOptions {
                    policy,
                    placement: placement.clone(),
                    micro_batches: 1,
                    tensor_split: None,
                    spelled: vec![],
                };
                let plan = match compile(&graph, target, &opts) {
                    Ok(c) => c.plan,
                    Err(e) => panic!("{label}: {e}\n{}", ir::text::to_ron(&graph)),
                };
                let twice = compile(&graph, target, &opts).unwrap().plan;
                assert_eq!(
                    ir::plan::plan_to_ron(&plan),
                    ir::plan::plan_to_ron(&twice),
                    "{label}: not deterministic"
                );
                let problems = compiler::check::check_plan(&plan, Some(target));
                assert!(problems.is_empty(), "{label}: {problems:?}");
                let count =
                    |u: ir::plan::Usage| plan.arenas.iter().filter(|a| a.usage == u).count();
                chunked_compute +=
                    usize::from(count(ir::plan::Usage::Compute) > plan.devices.len());
                chunked_weights +=
                    usize::from(count(ir::plan::Usage::Weights) > plan.devices.len());
                let run =
                    evaluate_plan(&plan, &bindings).unwrap_or_else(|e| panic!("{label}: {e}"));
                for out in graph.with_role(ir::Role::Output) {
                    let name = &graph.tensor(out).name;
                    let e = nmse(
                        &reference.read(out).data,
                        &run.read_name(name).unwrap().data,
                    );
                    assert!(
                        e <= 1e-10,
                        "{label}: output '{name}' NMSE {e}\n{}",
                        ir::text::to_ron(&graph)
                    );
                }
            }
        }
    }
    assert!(
        chunked_compute > 0 && chunked_weights > 0,
        "chunking was exercised: {chunked_compute} compute, {chunked_weights} weights"
    );
}

//! The CPU runtime end to end: example plans against the reference, every
//! step checked in isolation, state kept between runs and shared between two
//! plans, the observer, and every kind of bad input refused with a clear error.

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use ggplan_tests::example_graph_files;
use ir::plan::Plan;
use ir::{ConstInit, DType, GraphBuilder};
use runtime::{Flow, LoadOptions, Observer, Runtime, RuntimeError, StateStore, StepInfo, Weights};
use std::collections::BTreeMap;
use std::sync::Arc;

fn cpu_plan(graph: &ir::Graph) -> Plan {
    compile(
        graph,
        &Target::preset("cpu").unwrap(),
        &CompileOptions::default(),
    )
    .unwrap()
    .plan
}

fn options(threads: usize) -> LoadOptions {
    LoadOptions {
        threads,
        ..LoadOptions::default()
    }
}

fn load(plan: Plan, weights: Weights, threads: usize) -> Result<Runtime, RuntimeError> {
    Runtime::load(Arc::new(plan), weights, &options(threads))
}

#[test]
fn example_plans_match_the_reference_step_by_step_and_at_the_outputs() {
    for path in example_graph_files() {
        let graph = ir::text::read_graph(&path).unwrap();
        let plan = cpu_plan(&graph);
        for threads in [1, 2, 3] {
            let weights = Weights::Random { seed: 3 };
            let mut rt = load(plan.clone(), weights.clone(), threads).unwrap();
            let mut inputs = BTreeMap::new();
            for name in rt.input_names() {
                let values = rt.set_random_input(&name, 4).unwrap();
                inputs.insert(name, values);
            }
            let steps = runtime::check::check_steps(&mut rt, &mut |_| {}).unwrap();
            for c in &steps {
                assert!(c.passed(), "{} ({threads} threads): {c:?}", graph.name);
            }
            assert_eq!(steps.len(), rt.steps().len());
            // The fast path (one job, barriers) computes the same outputs.
            rt.run().unwrap();
            let outs = runtime::check::check_outputs(&rt, &weights, inputs).unwrap();
            assert!(!outs.is_empty());
            for c in &outs {
                assert!(c.passed(), "{} ({threads} threads): {c:?}", graph.name);
            }
        }
    }
}

/// cache[4, 6] (state) gets row `pos` from `x`; out = cache + 0.
fn cache_graph(name: &str) -> ir::Graph {
    let mut b = GraphBuilder::new(name);
    let cache = b.state("cache", DType::F32, [4, 6, 1, 1]).unwrap();
    let x = b.input("x", DType::F32, [4, 1, 1, 1]).unwrap();
    let pos = b.input("pos", DType::I32, [1, 1, 1, 1]).unwrap();
    let written = b.set_rows("written", cache, x, pos).unwrap();
    let zero = b
        .constant("zero", DType::F32, [1, 1, 1, 1], ConstInit::Fill(0.0))
        .unwrap();
    let out = b.add("out", written, zero).unwrap();
    b.mark_output(out).unwrap();
    b.finish().unwrap()
}

fn write_row(rt: &mut Runtime, pos: i32, value: f32) {
    rt.set_input_f32("x", &[value; 4]).unwrap();
    rt.set_input_i32("pos", &[pos]).unwrap();
    rt.run().unwrap();
}

#[test]
fn state_persists_between_runs_and_is_shared_between_plans() {
    let plan = cpu_plan(&cache_graph("cache"));
    let mut rt = load(plan.clone(), Weights::Random { seed: 0 }, 2).unwrap();
    write_row(&mut rt, 1, 5.0);
    write_row(&mut rt, 3, 7.0);
    let out = rt.output_f32("out").unwrap();
    assert_eq!(&out[4..8], &[5.0; 4]);
    assert_eq!(&out[12..16], &[7.0; 4]);
    assert_eq!(&out[0..4], &[0.0; 4]);
    rt.reset_state();
    write_row(&mut rt, 0, 1.0);
    assert_eq!(&rt.output_f32("out").unwrap()[4..8], &[0.0; 4]);

    // Two runtimes over one store see each other's writes.
    let store = Arc::new(StateStore::new());
    let shared = LoadOptions {
        threads: 1,
        state: Some(Arc::clone(&store)),
        ..LoadOptions::default()
    };
    let mut a =
        Runtime::load(Arc::new(plan.clone()), Weights::Random { seed: 0 }, &shared).unwrap();
    let other = cpu_plan(&cache_graph("cache2"));
    let mut b = Runtime::load(Arc::new(other), Weights::Random { seed: 0 }, &shared).unwrap();
    write_row(&mut a, 2, 9.0);
    write_row(&mut b, 4, 3.0);
    let out = b.output_f32("out").unwrap();
    assert_eq!(&out[8..12], &[9.0; 4]);
    assert_eq!(&out[16..20], &[3.0; 4]);
}

struct StopAfter(usize, usize);

impl Observer for StopAfter {
    fn after(&mut self, rt: &Runtime, step: &StepInfo<'_>) -> Flow {
        self.1 += 1;
        // The step's result is readable here.
        assert!(rt.tensor_bytes(step.step.dst).is_some());
        if step.index + 1 == self.0 {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

#[test]
fn an_observer_sees_each_step_and_can_stop_the_run() {
    let graph = ir::text::read_graph(&example_graph_files()[0]).unwrap();
    let mut rt = load(cpu_plan(&graph), Weights::Random { seed: 1 }, 2).unwrap();
    for name in rt.input_names() {
        rt.set_random_input(&name, 1).unwrap();
    }
    let mut stop = StopAfter(2, 0);
    assert_eq!(rt.run_observed(&mut stop).unwrap(), 2);
    assert_eq!(stop.1, 2);
}

fn err(r: Result<Runtime, RuntimeError>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_plans_are_refused_with_what_is_wrong() {
    let graph = ir::text::read_graph(&example_graph_files()[0]).unwrap();
    let plan = cpu_plan(&graph);

    let mut newer = plan.clone();
    newer.format_version = 99;
    let e = err(load(newer, Weights::Random { seed: 0 }, 1));
    assert!(e.contains("format_version 99"), "{e}");

    // A hand edit that makes two live tensors share bytes.
    let mut broken = plan.clone();
    if let Some(t) = broken.tensors.iter_mut().find(|t| {
        t.role == ir::Role::Output && matches!(t.placement, ir::plan::Placement::Arena { .. })
    }) {
        t.placement = ir::plan::Placement::Arena {
            arena: 99,
            offset: 3,
        };
    }
    let e = err(load(broken, Weights::Random { seed: 0 }, 1));
    assert!(e.contains("is invalid") && e.contains("arena 99"), "{e}");

    // Arenas larger than this machine's memory (device limits raised so the
    // checker accepts the plan, as a plan for a bigger machine would).
    let mut huge = plan.clone();
    let big = 1u64 << 50;
    huge.devices[0].memory_bytes = 4 * big;
    huge.devices[0].max_buffer_bytes = 4 * big;
    let a = huge
        .arenas
        .iter()
        .position(|a| a.usage == ir::plan::Usage::Compute)
        .unwrap();
    huge.arenas[a].size = big;
    huge.stats.devices[0].compute_bytes = big;
    let e = err(load(huge, Weights::Random { seed: 0 }, 1));
    assert!(e.contains("need") && e.contains("available"), "{e}");

    let gpu = compile(
        &graph,
        &Target::preset("cuda0").unwrap(),
        &CompileOptions::default(),
    )
    .unwrap()
    .plan;
    let e = err(load(gpu, Weights::Random { seed: 0 }, 1));
    assert!(e.contains("cuda0") && e.contains("does not have"), "{e}");
}

#[test]
fn bad_weights_and_inputs_are_refused_naming_the_tensor() {
    // Weights from a safetensors file missing one tensor and mis-shaping another.
    let mut b = GraphBuilder::new("tiny");
    let w = b.weight("w", DType::F32, [3, 2, 1, 1]).unwrap();
    let v = b.weight("v", DType::F32, [3, 1, 1, 1]).unwrap();
    let x = b.input("x", DType::F32, [3, 5, 1, 1]).unwrap();
    let ids = b.input("ids", DType::I32, [2, 1, 1, 1]).unwrap();
    let y = b.mul_mat("y", w, x).unwrap();
    let rows = b.get_rows("rows", w, ids).unwrap();
    let z = b.mul("z", x, v).unwrap();
    for t in [y, rows, z] {
        b.mark_output(t).unwrap();
    }
    let plan = cpu_plan(&b.finish().unwrap());

    let dir = std::env::temp_dir().join(format!("ggplan-rt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("w.safetensors");
    let data = vec![0u8; 4 * 4];
    let tensors = vec![(
        "w",
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4, 1], &data).unwrap(),
    )];
    safetensors::serialize_to_file(tensors, None, &path).unwrap();
    let e = err(load(plan.clone(), Weights::open(&path).unwrap(), 1));
    assert!(
        e.contains("weight 'w'") && e.contains("[3, 2, 1, 1]"),
        "{e}"
    );

    let data = vec![0u8; 6 * 4];
    let tensors = vec![(
        "w",
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2, 3], &data).unwrap(),
    )];
    safetensors::serialize_to_file(tensors, None, &path).unwrap();
    let e = err(load(plan.clone(), Weights::open(&path).unwrap(), 1));
    assert!(e.contains("'v'") && e.contains("w.safetensors"), "{e}");
    std::fs::remove_dir_all(&dir).ok();

    let mut rt = load(plan, Weights::Random { seed: 0 }, 2).unwrap();
    let e = rt.run().unwrap_err().to_string();
    assert!(e.contains("never set") && e.contains("'x'"), "{e}");
    let e = rt.set_input_f32("x", &[1.0; 14]).unwrap_err().to_string();
    assert!(
        e.contains("'x'") && e.contains("f32 [3, 5, 1, 1] (15 values)"),
        "{e}"
    );
    let e = rt.set_input_i32("x", &[1; 15]).unwrap_err().to_string();
    assert!(e.contains("'x'") && e.contains("i32"), "{e}");
    let e = rt.set_input_i32("ids", &[0, 2]).unwrap_err().to_string();
    assert!(
        e.contains("'ids'") && e.contains("outside 0..2") && e.contains("'w'"),
        "{e}"
    );
    let e = rt.set_input_f32("w", &[0.0; 6]).unwrap_err().to_string();
    assert!(e.contains("'w' is a weight"), "{e}");
    let e = rt.output_f32("nope").unwrap_err().to_string();
    assert!(e.contains("no tensor named 'nope'"), "{e}");
    rt.set_input_f32("x", &[1.0; 15]).unwrap();
    rt.set_input_i32("ids", &[1, 0]).unwrap();
    rt.run().unwrap();
}

/// A mixture of experts' ids given as an input are checked against the
/// experts' count (ggml's mul_mat_id would read past the experts' tensor).
#[test]
fn expert_ids_out_of_range_are_refused_naming_the_experts() {
    let mut b = GraphBuilder::new("moe");
    let experts = b.weight("exps", DType::F32, [4, 3, 5, 1]).unwrap();
    let x = b.input("x", DType::F32, [4, 1, 2, 1]).unwrap();
    let ids = b.input("ids", DType::I32, [2, 2, 1, 1]).unwrap();
    let y = b.mul_mat_id("y", experts, x, ids).unwrap();
    b.mark_output(y).unwrap();
    let plan = cpu_plan(&b.finish().unwrap());
    let mut rt = load(plan, Weights::Random { seed: 0 }, 2).unwrap();
    let e = rt
        .set_input_i32("ids", &[0, 4, 5, 1])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'ids' element 2 is 5") && e.contains("outside 0..5") && e.contains("'exps'"),
        "{e}"
    );
    rt.set_input_i32("ids", &[0, 4, 2, 1]).unwrap();
    rt.set_input_f32("x", &[0.5; 8]).unwrap();
    rt.run().unwrap();
}

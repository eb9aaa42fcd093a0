//! Multi-device plans on the runtime: the example graphs split by layers over
//! CPU core groups (`cpu0+cpu1`, `cpu0+cpu1+cpu2+cpu3`) run with their streams
//! concurrent, ordered only by the plan's events, and compute what one device
//! computes. With fault injection (random delays before every segment), 100
//! seeded runs of each plan give the same bits, and a plan missing one wait
//! is refused at load.

use compiler::assign::Policy;
use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::PlacementOptions;
use compiler::target::Target;
use ggplan_tests::example_graph_files;
use ir::plan::Plan;
use runtime::{LoadOptions, Runtime, RuntimeError, Weights};
use std::collections::BTreeMap;
use std::sync::Arc;

fn plan_for(graph: &ir::Graph, target: &str, policy: Policy) -> Plan {
    let options = CompileOptions {
        policy,
        placement: PlacementOptions {
            layer_split: Some(Vec::new()),
            ..PlacementOptions::default()
        },
        spelled: vec![],
    };
    let target = Target::preset(target).unwrap();
    compile(graph, &target, &options).unwrap().plan
}

fn load(plan: Plan, threads: usize, delays: Option<u64>) -> Result<Runtime, RuntimeError> {
    let options = LoadOptions {
        threads,
        fault_injection: delays,
        ..LoadOptions::default()
    };
    Runtime::load(Arc::new(plan), Weights::Random { seed: 3 }, &options)
}

/// Every output of one run, by name, with the same seeded inputs.
fn outputs(rt: &mut Runtime) -> BTreeMap<String, Vec<f32>> {
    for name in rt.input_names() {
        rt.set_random_input(&name, 4).unwrap();
    }
    rt.run().unwrap();
    let plan = rt.plan().clone();
    plan.tensors[..plan.n_graph_tensors as usize]
        .iter()
        .filter(|t| t.role == ir::Role::Output)
        .map(|t| (t.name.clone(), rt.output_f32(&t.name).unwrap()))
        .collect()
}

fn nmse(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
    let den: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum();
    num / den.max(f64::MIN_POSITIVE)
}

fn bits(v: &BTreeMap<String, Vec<f32>>) -> Vec<Vec<u32>> {
    v.values()
        .map(|x| x.iter().map(|f| f.to_bits()).collect())
        .collect()
}

#[test]
fn layer_split_plans_match_one_device_and_survive_injected_delays() {
    for path in example_graph_files() {
        let graph = ir::text::read_graph(&path).unwrap();
        let single = plan_for(&graph, "cpu", Policy::Cost);
        let want = outputs(&mut load(single, 1, None).unwrap());
        for (target, devices) in [("cpu0+cpu1", 2), ("cpu0+cpu1+cpu2+cpu3", 4)] {
            for policy in [Policy::Cost, Policy::Ggml] {
                let plan = plan_for(&graph, target, policy);
                let used: std::collections::BTreeSet<_> =
                    plan.splits.iter().map(|s| s.device).collect();
                let what = format!("{} on {target} ({policy:?})", graph.name);
                // Graphs with blocks spread them (mlp has none: one device).
                let blocks = compiler::placement::n_layers(&graph);
                assert_eq!(used.len(), (blocks as usize).clamp(1, devices), "{what}");
                // One thread per device: the same kernels on the same rows.
                let got = outputs(&mut load(plan.clone(), devices, None).unwrap());
                for (name, values) in &got {
                    let e = nmse(&want[name], values);
                    assert!(e <= 1e-10, "{what}: '{name}' NMSE {e:e}");
                }
                let reference = bits(&got);
                let mut rt = load(plan, devices, Some(7)).unwrap();
                for run in 0..100 {
                    assert_eq!(bits(&outputs(&mut rt)), reference, "{what}: run {run}");
                }
            }
        }
    }
}

#[test]
fn a_plan_missing_one_wait_is_refused_at_load() {
    let path = example_graph_files()
        .into_iter()
        .find(|p| p.ends_with("llama2l.ron"))
        .unwrap();
    let graph = ir::text::read_graph(&path).unwrap();
    let mut plan = plan_for(&graph, "cpu0+cpu1", Policy::Cost);
    let split = plan
        .splits
        .iter_mut()
        .find(|s| !s.waits.is_empty())
        .unwrap();
    split.waits.remove(0);
    let err = load(plan, 2, None).err().expect("refused").to_string();
    assert!(err.contains("race"), "{err}");
}

#[test]
fn stream_programs_cover_every_step_once_in_global_order() {
    for path in example_graph_files() {
        let graph = ir::text::read_graph(&path).unwrap();
        let plan = plan_for(&graph, "cpu0+cpu1+cpu2+cpu3", Policy::Cost);
        let programs = runtime::executor::programs(&plan);
        let mut seen: Vec<usize> = programs
            .iter()
            .flat_map(|p| p.segments.iter().flat_map(|s| s.steps.clone()))
            .collect();
        for p in &programs {
            let starts: Vec<usize> = p.segments.iter().map(|s| s.steps.start).collect();
            assert!(starts.windows(2).all(|w| w[0] < w[1]), "{}", graph.name);
        }
        seen.sort_unstable();
        let total: usize = plan
            .splits
            .iter()
            .map(|s| s.copies.len() + s.steps.len())
            .sum();
        assert_eq!(seen, (0..total).collect::<Vec<_>>(), "{}", graph.name);
    }
}

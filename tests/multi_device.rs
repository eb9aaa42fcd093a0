//! Multi-device plans on the runtime: the example graphs split by layers over
//! CPU core groups (`cpu0+cpu1`, `cpu0+cpu1+cpu2+cpu3`) run with their streams
//! concurrent, ordered only by the plan's events, and compute what one device
//! computes. With fault injection (random delays before every segment), 100
//! seeded runs of each plan give the same bits, and a plan missing one wait
//! is refused at load. Pipelined plans (`--pipeline 2` and `4`: micro-batches
//! over a KV cache) compute what the unpipelined one-device plan computes. A
//! stream that panics (a test hook) stops the others: the panic reaches the
//! caller, every time, without a hang.

use compiler::assign::Policy;
use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::PlacementOptions;
use compiler::target::Target;
use ggplan_tests::example_graph_files;
use ggplan_tests::outputs::{bits, nmse_f32 as nmse, outputs};
use ggplan_tests::overlap::MIN_OVERLAP;
use ir::plan::Plan;
use runtime::{LoadOptions, Runtime, RuntimeError, Weights};
use std::sync::Arc;

fn plan_for(graph: &ir::Graph, target: &str, policy: Policy) -> Plan {
    pipelined_plan_for(graph, target, policy, 1)
}

fn pipelined_plan_for(graph: &ir::Graph, target: &str, policy: Policy, n: u32) -> Plan {
    let target = Target::preset(target).unwrap();
    // Equal shares: without them the cost policy would weigh the split, and
    // keep these small graphs on one device. llama.cpp's rule (the ggml
    // policy) counts the output head as a layer, which BERT lacks: with
    // equal shares its two blocks would both land on the first device, so
    // the first device gets half the share of the others.
    let mut shares = vec![1.0; target.devices.len()];
    if policy == Policy::Ggml {
        shares[1..].fill(2.0);
    }
    let options = CompileOptions {
        policy,
        placement: PlacementOptions {
            layer_split: Some(shares),
            ..PlacementOptions::default()
        },
        micro_batches: n,
        tensor_split: None,
        spelled: vec![],
    };
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
                // Graphs with blocks spread them (mlp has none: one device);
                // the input layer and the head are units of their own.
                let blocks = compiler::placement::n_layers(&graph) as usize;
                if blocks == 0 {
                    assert_eq!(used.len(), 1, "{what}");
                } else {
                    assert!(
                        used.len() >= 2 && used.len() <= (blocks + 2).min(devices),
                        "{what}"
                    );
                }
                // One thread per device: the same kernels on the same rows.
                let got = outputs(&mut load(plan.clone(), devices, None).unwrap());
                for (name, values) in &got {
                    let e = nmse(&want[name], values);
                    assert!(e <= 1e-10, "{what}: '{name}' NMSE {e:e}");
                }
                let reference = bits(&got);
                // Delays perturb the order of streams only where there are
                // several: a plan on one device has nothing to shake.
                if used.len() < 2 {
                    continue;
                }
                let mut rt = load(plan, devices, Some(7)).unwrap();
                for run in 0..100 {
                    assert_eq!(bits(&outputs(&mut rt)), reference, "{what}: run {run}");
                }
                assert!(rt.injected_delays() >= 100 * used.len() as u64, "{what}");
            }
        }
    }
}

/// The logits of a cached llama plan over a fresh cache for a causal prompt
/// (token j at position and cache row j, seeing rows 0..=j).
fn causal_logits(rt: &mut Runtime) -> Vec<f32> {
    let (t, attend) = (128, 128);
    let step = models::llama::step_inputs(0, t, 128, attend).unwrap();
    let tokens: Vec<i32> = (0..t as i32).map(|j| (j * 37 + 11) % 8000).collect();
    rt.set_input_i32("tokens", &tokens).unwrap();
    rt.set_input_i32("pos", &step.pos).unwrap();
    rt.set_input_i32("kv_idx", &step.kv_idx).unwrap();
    rt.set_input_f32("kq_mask", &step.kq_mask).unwrap();
    rt.run().unwrap();
    rt.output_f32("result_output").unwrap()
}

/// A one-stream plan normally skips the executor (one pool job per run);
/// with fault injection it must not, or its delays would never happen.
#[test]
fn injected_delays_reach_a_plan_on_one_device() {
    for path in example_graph_files() {
        let graph = ir::text::read_graph(&path).unwrap();
        let plan = plan_for(&graph, "cpu", Policy::Cost);
        let want = bits(&outputs(&mut load(plan.clone(), 1, None).unwrap()));
        let mut rt = load(plan, 1, Some(5)).unwrap();
        assert_eq!(rt.injected_delays(), 0);
        for run in 0..3 {
            assert_eq!(bits(&outputs(&mut rt)), want, "{}: run {run}", graph.name);
        }
        assert!(rt.injected_delays() >= 3, "{}", graph.name);
    }
}

#[test]
fn pipelined_micro_batches_match_one_device_and_survive_injected_delays() {
    let path = example_graph_files()
        .into_iter()
        .find(|p| p.ends_with("llama2l_kv.ron"))
        .unwrap();
    let graph = ir::text::read_graph(&path).unwrap();
    let single = plan_for(&graph, "cpu", Policy::Cost);
    let want = causal_logits(&mut load(single, 1, None).unwrap());
    for n in [2, 4] {
        let plan = pipelined_plan_for(&graph, "cpu0+cpu1", Policy::Cost, n);
        let what = format!("--pipeline {n}");
        // Micro-batch m of device 0 hands off before micro-batch m + 1 starts.
        let device0 = &plan.splits[0];
        assert_eq!(device0.records.len(), n as usize, "{what}");
        let got = causal_logits(&mut load(plan.clone(), 2, None).unwrap());
        let e = nmse(&want, &got);
        assert!(e <= 1e-10, "{what}: NMSE {e:e}");
        let reference: Vec<u32> = got.iter().map(|f| f.to_bits()).collect();
        let mut rt = load(plan, 2, Some(11)).unwrap();
        for run in 0..100 {
            let bits: Vec<u32> = causal_logits(&mut rt).iter().map(|f| f.to_bits()).collect();
            assert!(bits == reference, "{what}: run {run} differs");
        }
        // Every segment of both devices' streams and of the copies: at
        // least one delay per micro-batch per device per run.
        assert!(rt.injected_delays() >= 100 * 2 * u64::from(n), "{what}");
    }
}

/// The two devices of a pipelined plan compute at the same time: device 1
/// runs micro-batch m's second half while device 0 runs micro-batch m + 1.
#[test]
fn pipelined_devices_compute_at_the_same_time() {
    let path = example_graph_files()
        .into_iter()
        .find(|p| p.ends_with("llama2l_kv.ron"))
        .unwrap();
    let graph = ir::text::read_graph(&path).unwrap();
    let plan = pipelined_plan_for(&graph, "cpu0+cpu1", Policy::Cost, 4);
    let mut rt = load(plan, 2, None).unwrap();
    causal_logits(&mut rt); // sets the inputs
    let share = ggplan_tests::overlap::best_compute_overlap(&mut rt, 10);
    eprintln!("pipelined llama2l_kv on cpu0+cpu1: best overlap {share:.2}");
    assert!(
        share >= MIN_OVERLAP,
        "the devices overlapped for {share:.2}"
    );
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

#[test]
fn a_stream_that_panics_stops_the_others_and_the_panic_reaches_the_caller() {
    let path = example_graph_files()
        .into_iter()
        .find(|p| p.ends_with("llama2l.ron"))
        .unwrap();
    let graph = ir::text::read_graph(&path).unwrap();
    let plan = plan_for(&graph, "cpu0+cpu1", Policy::Cost);
    let programs = runtime::executor::programs(&plan);
    let kind = ir::plan::StreamKind::Compute;
    let compute: Vec<_> = programs.iter().filter(|p| p.kind == kind).collect();
    let copy = programs
        .iter()
        .find(|p| p.kind != kind)
        .expect("a copy stream");
    // On the caller's stream before anyone waits; on the other device's
    // stream (its own thread); in a copy (run by the thread that waits for it).
    let first = compute[0].segments[0].steps.start;
    let last = compute.last().unwrap().segments.last().unwrap().steps.end - 1;
    let copied = copy.segments[0].steps.start;
    for at in [first, last, copied] {
        let options = LoadOptions {
            threads: 2,
            fault_panic_at: Some(at),
            ..LoadOptions::default()
        };
        let plan = Arc::new(plan.clone());
        let mut rt = Runtime::load(plan, Weights::Random { seed: 3 }, &options).unwrap();
        for name in rt.input_names() {
            rt.set_random_input(&name, 4).unwrap();
        }
        for run in 0..3 {
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.run()));
            let payload = caught.expect_err("the injected panic reaches the caller");
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_default();
            let want = format!("injected fault at prepared step {at}");
            assert_eq!(
                msg, want,
                "run {run}: the first panic, not a stream that gave up"
            );
        }
    }
}

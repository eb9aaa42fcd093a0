//! `--fit` for a mixture of experts under `--policy cost`: the first blocks
//! whole on the host when the crossings llama.cpp's placement makes cost
//! more than the host's compute, llama.cpp's placement (every block's
//! attention on the accelerators first) when the accelerator is fast.
//!
//! On a random four-block Qwen 3 MoE-style llama whose experts do not all fit
//! the accelerators: over slow links the cost policy runs the first blocks
//! whole on the CPU, with fewer device crossings than `--policy ggml`'s
//! llama.cpp placement and a lower estimate, which the experts' reasons give
//! beside llama.cpp's; on a GPU target it keeps llama.cpp's placement and says
//! so; the plan is deterministic, and on CPU core groups the runtime computes
//! what one device computes with either placement.

use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::{PlacementOptions, Policy};
use compiler::target::Target;
use ggplan_tests::llama_config::tiny_moe_llama;
use ggplan_tests::outputs::{nmse_f32 as nmse, outputs};
use ir::Graph;
use ir::plan::{Plan, plan_to_ron};
use models::llama::LlamaConfig;
use runtime::{LoadOptions, Runtime, Weights};
use std::sync::Arc;

const BLOCKS: u32 = 4;

/// Four blocks `n_embd` wide (4 heads), 8 experts of `n_ff_exp` (2 per
/// token), `n_tokens` per run.
fn moe_llama(n_tokens: i64, n_embd: i64, n_ff_exp: i64) -> Graph {
    let cfg = LlamaConfig {
        n_layer: BLOCKS as usize,
        ..tiny_moe_llama(n_tokens, n_embd, n_ff_exp)
    };
    models::llama::build_prefill(&cfg).unwrap()
}

fn fit(policy: Policy) -> CompileOptions {
    CompileOptions {
        policy,
        placement: PlacementOptions {
            fit: true,
            ..Default::default()
        },
        ..CompileOptions::default()
    }
}

/// Bytes of every weight whose name contains `part`.
fn bytes_of(graph: &Graph, part: &str) -> u64 {
    (graph.with_role(ir::Role::Weight))
        .map(|w| graph.tensor(w))
        .filter(|t| t.name.contains(part))
        .map(|t| t.layout.span_bytes())
        .sum()
}

/// `target` with each device but the last (the host) given room for every
/// weight but the experts, plus one block's experts, shared by the devices.
fn tight(graph: &Graph, name: &str) -> Target {
    let mut t = Target::preset(name).unwrap();
    let accelerators = t.devices.len() - 1;
    let experts = bytes_of(graph, "_exps");
    let rest = bytes_of(graph, "") - experts;
    let room = compiler::assign::compute_reserve_bytes(graph)
        + (rest + experts / u64::from(BLOCKS)) / accelerators as u64
        + (64 << 10);
    for d in &mut t.devices[..accelerators] {
        d.memory_bytes = room;
        d.max_buffer_bytes = room;
    }
    t
}

fn plan(graph: &Graph, target: &Target, options: &CompileOptions) -> Plan {
    compile(graph, target, options)
        .unwrap_or_else(|e| panic!("{}: {e}", target.name))
        .plan
}

/// The device of weight `name` in `plan`.
fn device_of<'p>(plan: &'p Plan, name: &str) -> &'p str {
    let t = plan.tensors.iter().find(|t| t.name == name).expect(name);
    &plan.devices[t.device.index()].name
}

fn reason_of<'p>(plan: &'p Plan, name: &str) -> &'p str {
    let t = plan.tensors.iter().find(|t| t.name == name).expect(name);
    &t.reason
}

#[test]
fn over_slow_links_the_first_blocks_run_whole_on_the_host() {
    let graph = moe_llama(16, 64, 48);
    let mut target = tight(&graph, "cpu+rpc0+rpc1");
    // Servers as fast as the host, links slow: every crossing costs more
    // than the attention it would move off the host.
    let host = target.devices.last().unwrap().throughput.clone();
    for d in &mut target.devices {
        d.throughput = host.clone();
    }
    for l in &mut target.links {
        l.latency_us = 2000.0;
    }
    let ours = plan(&graph, &target, &fit(Policy::Cost));
    let llama = plan(&graph, &target, &fit(Policy::Ggml));
    // llama.cpp's --fit: every block's attention on a server, the last
    // blocks' experts on the host.
    for l in 0..BLOCKS {
        assert_ne!(device_of(&llama, &format!("blk.{l}.attn_q.weight")), "cpu");
    }
    assert_eq!(device_of(&llama, "blk.3.ffn_up_exps.weight"), "cpu");
    // Ours: block 0 (at least) whole on the host, attention and experts.
    assert_eq!(device_of(&ours, "blk.0.attn_q.weight"), "cpu");
    assert_eq!(device_of(&ours, "blk.0.ffn_down_exps.weight"), "cpu");
    assert!(
        ours.splits.len() < llama.splits.len(),
        "{} splits against llama.cpp's {}",
        ours.splits.len(),
        llama.splits.len()
    );
    let why = reason_of(&ours, "blk.3.ffn_gate_exps.weight");
    assert!(
        why.contains("--fit, --policy cost: ")
            && why.contains("run whole on cpu")
            && why.contains("for llama.cpp's placement"),
        "{why}"
    );
    let why = reason_of(&ours, "blk.0.attn_q.weight");
    assert!(why.starts_with("--fit, --policy cost: "), "{why}");
    assert!(!why.contains("--pin rule"), "{why}");
    // The same graph and target give the same plan, byte for byte.
    let again = plan(&graph, &target, &fit(Policy::Cost));
    assert_eq!(plan_to_ron(&ours), plan_to_ron(&again));
}

#[test]
fn on_a_gpu_the_cost_policy_keeps_llama_cpp_s_placement() {
    // Large enough for the GPU's speed to outweigh its launches and copies
    // (on the tiny model the host alone is estimated faster, and chosen).
    let graph = moe_llama(64, 512, 512);
    let target = tight(&graph, "cpu+cuda0");
    let ours = plan(&graph, &target, &fit(Policy::Cost));
    for l in 0..BLOCKS {
        assert_eq!(device_of(&ours, &format!("blk.{l}.attn_q.weight")), "cuda0");
    }
    assert_eq!(device_of(&ours, "blk.0.ffn_up_exps.weight"), "cuda0");
    assert_eq!(device_of(&ours, "blk.3.ffn_up_exps.weight"), "cpu");
    let why = reason_of(&ours, "blk.3.ffn_up_exps.weight");
    assert!(
        why.contains("llama.cpp's placement (every block's attention on the accelerators first")
            && why.contains("is the fastest found"),
        "{why}"
    );
}

#[test]
fn either_placement_on_core_groups_computes_what_one_device_does() {
    let graph = moe_llama(7, 64, 48);
    let run = |plan: Plan| {
        let options = LoadOptions {
            threads: 1,
            ..LoadOptions::default()
        };
        let mut rt = Runtime::load(Arc::new(plan), Weights::Random { seed: 11 }, &options).unwrap();
        outputs(&mut rt)
    };
    let want = run(plan(
        &graph,
        &Target::preset("cpu").unwrap(),
        &CompileOptions::default(),
    ));
    let mut target = tight(&graph, "cpu0+cpu1");
    for l in &mut target.links {
        l.latency_us = 2000.0;
    }
    for policy in [Policy::Cost, Policy::Ggml] {
        let p = plan(&graph, &target, &fit(policy));
        assert_eq!(p.devices.len(), 2);
        let got = run(p);
        for (name, w) in &want {
            let e = nmse(&got[name], w);
            assert!(e <= 1e-10, "{policy:?} {name}: NMSE {e:e}");
        }
    }
}

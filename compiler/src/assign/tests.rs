//! Tests of the assign pass shared by both policies, and of policy `ggml`.
//! Helpers here (scenarios, a copy counter, an invariant checker) are used by
//! `tests_cost.rs` too; they share no code with the pass.

use super::*;
use crate::Error;
use crate::placement::PinRule;
use crate::target::Target;
use ir::{DType, GraphBuilder, Role};
use std::collections::BTreeSet;
use std::path::Path;

pub(super) fn example_graph(name: &str) -> Graph {
    let path = format!(
        "{}/../examples/graphs/{name}.ron",
        env!("CARGO_MANIFEST_DIR")
    );
    ir::text::read_graph(Path::new(&path)).expect("example graph")
}

pub(super) fn target_file(name: &str) -> Target {
    let path = format!(
        "{}/../examples/targets/{name}.ron",
        env!("CARGO_MANIFEST_DIR")
    );
    Target::read(Path::new(&path)).expect("example target")
}

/// The three set-ups of the issue: a target and weight placement options.
pub(super) fn scenarios() -> Vec<(&'static str, Target, PlacementOptions)> {
    let preset = |n: &str| Target::preset(n).expect("preset");
    let offload = PlacementOptions {
        offload_layers: Some(1),
        ..Default::default()
    };
    let fit = PlacementOptions {
        fit: true,
        ..Default::default()
    };
    vec![
        ("cpu", preset("cpu"), PlacementOptions::default()),
        ("cpu+cuda0 --offload-layers 1", preset("cpu+cuda0"), offload),
        ("cpu+2gpu-small --fit", target_file("cpu+2gpu-small"), fit),
    ]
}

/// Cross-device copies, one per (tensor read, destination device), and
/// their bytes: every source of a kernel whose bytes live elsewhere.
pub(super) fn copies(graph: &Graph, a: &Assignment) -> (usize, u64) {
    let mut pairs = BTreeSet::new();
    for n in graph.nodes() {
        let t = graph.tensor(n);
        if t.op.is_some_and(|op| op.is_view()) {
            continue;
        }
        let here = a.device[n.index()];
        for &s in &t.srcs {
            if a.device[graph.storage_of(s).root.index()] != here {
                pairs.insert((s, here));
            }
        }
    }
    let bytes = pairs
        .iter()
        .map(|(s, _)| graph.tensor(*s).layout.span_bytes())
        .sum();
    (pairs.len(), bytes)
}

/// Every invariant of the module doc that can be checked from outside.
pub(super) fn check_invariants(
    graph: &Graph,
    target: &Target,
    o: &PlacementOptions,
    policy: Policy,
    a: &Assignment,
) {
    assert_eq!(a.device.len(), graph.len());
    assert_eq!(a.reason.len(), graph.len());
    let pins = crate::placement::Pins::new(o, target, graph, policy);
    for id in graph.ids() {
        let t = graph.tensor(id);
        let d = a.device[id.index()];
        assert!(d.index() < target.devices.len(), "{}", t.name);
        assert!(!a.reason[id.index()].is_empty(), "{} has no reason", t.name);
        if let Some(op) = t.op.filter(|op| !op.is_view()) {
            let src0 = graph.tensor(t.srcs[0]).layout.dtype;
            assert!(target.supports(d, &op, src0), "{} ({op}) on {d:?}", t.name);
        }
        if let Some(view) = t.view {
            assert_eq!(
                d,
                a.device[view.root.index()],
                "{} apart from its root",
                t.name
            );
        }
        if t.role == Role::Weight
            && let Some((p, _)) = pins.device_for(&t.name)
        {
            assert_eq!(d, p, "pinned weight {} moved", t.name);
        }
    }
}

pub(super) fn run(g: &Graph, t: &Target, o: &PlacementOptions, p: Policy) -> Assignment {
    assign_devices(g, t, o, p).expect("assignment")
}

pub(super) fn device_of(g: &Graph, t: &Target, a: &Assignment, name: &str) -> String {
    let id = g.find(name).expect(name);
    t.devices[a.device[id.index()].index()].name.clone()
}

pub(super) fn reason_of<'a>(g: &Graph, a: &'a Assignment, name: &str) -> &'a str {
    &a.reason[g.find(name).expect(name).index()]
}

#[test]
fn both_policies_keep_every_invariant_on_the_examples() {
    for graph in ["llama2l", "bert2l", "mlp"] {
        let g = example_graph(graph);
        for (what, t, o) in scenarios() {
            for p in [Policy::Ggml, Policy::Cost] {
                let a = run(&g, &t, &o, p);
                check_invariants(&g, &t, &o, p, &a);
                assert_eq!(
                    a,
                    run(&g, &t, &o, p),
                    "{graph} {what} {p:?}: not deterministic"
                );
            }
        }
    }
}

#[test]
fn a_single_device_takes_everything() {
    let g = example_graph("llama2l");
    let t = Target::preset("cpu").expect("preset");
    for p in [Policy::Ggml, Policy::Cost] {
        let a = run(&g, &t, &PlacementOptions::default(), p);
        assert!(a.device.iter().all(|d| d.index() == 0));
        assert_eq!(copies(&g, &a), (0, 0));
    }
}

#[test]
fn ggml_passes_on_llama2l_with_half_the_layers_offloaded() {
    let g = example_graph("llama2l");
    let (_, t, o) = scenarios().swap_remove(1);
    let a = run(&g, &t, &o, Policy::Ggml);
    let at = |n| device_of(&g, &t, &a, n);
    let why = |n| reason_of(&g, &a, n);
    // Pass 1: inputs to the last device; weights where placed; the first
    // weight source decides.
    assert_eq!(at("tokens"), "cpu");
    assert!(
        why("kq_mask").starts_with("ggml pass 1: graph input"),
        "{}",
        why("kq_mask")
    );
    assert_eq!(at("l0.q"), "cpu");
    assert_eq!(
        why("l0.q"),
        "ggml pass 1: its first weight source 'l0.wq' is on cpu"
    );
    assert_eq!(at("l1.q"), "cuda0");
    // Pass 2: the accelerator spreads up from block 1 into the end of block
    // 0 (ggml's greedy order: l0.l_out reads two CPU tensors).
    assert_eq!(at("l0.l_out"), "cuda0");
    assert!(
        why("l0.l_out").starts_with("ggml pass 2: expanded up from"),
        "{}",
        why("l0.l_out")
    );
    assert_eq!(at("l1.kq"), "cuda0");
    assert!(
        why("l1.kq").starts_with("ggml pass 2: expanded down from"),
        "{}",
        why("l1.kq")
    );
    // ... then the CPU spreads over the rest of block 0.
    assert_eq!(at("l0.kq"), "cpu");
    assert!(why("l0.kq").contains("second round"), "{}", why("l0.kq"));
    // Pass 4: views follow their roots.
    assert_eq!(at("l0.q3"), "cpu");
    assert!(
        why("l0.q3").starts_with("ggml pass 4: view of 'l0.q'"),
        "{}",
        why("l0.q3")
    );
}

/// ggml's `op_offload`: a product on a weight in the CPU's memory goes to
/// the CUDA device from a batch of 32 columns (ggml-cuda's default
/// `GGML_OP_OFFLOAD_MIN_BATCH`), not at 31; a `get_rows` never; an RPC
/// server (no `offload_op`) never; the cost policy decides by its model.
#[test]
fn ggml_op_offload_moves_large_batches_on_host_weights_to_cuda() {
    let graph = |tokens: i64| {
        let mut b = GraphBuilder::new("offload");
        let ids = b.input("ids", DType::I32, [tokens, 1, 1, 1]).expect("ids");
        let table = b
            .weight("table", DType::F32, [64, 100, 1, 1])
            .expect("table");
        let w = b.weight("w", DType::F32, [64, 64, 1, 1]).expect("w");
        let x = b.get_rows("x", table, ids).expect("x");
        let y = b.mul_mat("y", w, x).expect("y");
        b.mark_output(y).expect("out");
        b.finish().expect("graph")
    };
    let pins = |t: &Target| PlacementOptions {
        pins: vec![PinRule::parse(".*=cpu", t).expect("pin")],
        op_offload: true,
        ..PlacementOptions::default()
    };
    let cuda = Target::preset("cpu+cuda0").expect("preset");
    for (tokens, want) in [(31, "cpu"), (32, "cuda0"), (200, "cuda0")] {
        let g = graph(tokens);
        let a = run(&g, &cuda, &pins(&cuda), Policy::Ggml);
        assert_eq!(device_of(&g, &cuda, &a, "y"), want, "{tokens} tokens");
        assert_eq!(device_of(&g, &cuda, &a, "x"), "cpu", "get_rows stays");
        if want == "cuda0" {
            let why = reason_of(&g, &a, "y");
            assert!(
                why.contains("op_offload") && why.contains(&format!("{tokens} >= 32")),
                "{why}"
            );
        }
    }
    let rpc = Target::preset("cpu+rpc0").expect("preset");
    let g = graph(200);
    let a = run(&g, &rpc, &pins(&rpc), Policy::Ggml);
    assert_eq!(
        device_of(&g, &rpc, &a, "y"),
        "cpu",
        "an RPC server never offloads"
    );
    // Without --op-offload (llama.cpp's --no-op-offload) the product stays.
    let off = PlacementOptions {
        op_offload: false,
        ..pins(&cuda)
    };
    let a = run(&g, &cuda, &off, Policy::Ggml);
    assert_eq!(device_of(&g, &cuda, &a, "y"), "cpu");
    // llama2l's CPU block of 128 tokens goes to cuda0 (that the cost policy
    // is never estimated slower than this plan: tests_cost.rs).
    let llama = example_graph("llama2l");
    let (_, t, mut o) = scenarios().swap_remove(1);
    o.op_offload = true;
    let ggml = run(&llama, &t, &o, Policy::Ggml);
    assert_eq!(device_of(&llama, &t, &ggml, "l0.q"), "cuda0");
}

/// A small KV-cache update: `k` written into rows of a state tensor through
/// a view, then the whole cache read by a matmul. `cache` is the cache's dtype.
pub(super) fn kv_graph(cache: DType, with_set_rows: bool) -> Graph {
    let mut b = GraphBuilder::new("kv");
    let x = b.input("x", DType::F32, [64, 4, 1, 1]).expect("x");
    let wk = b.weight("wk", DType::F32, [64, 64, 1, 1]).expect("wk");
    let c = b.state("cache_k", cache, [64, 16, 1, 1]).expect("cache");
    let k = b.mul_mat("k", wk, x).expect("k");
    let row = cache.row_bytes(64).expect("row bytes");
    let written = if with_set_rows {
        let idx = b.input("rows", DType::I32, [4, 1, 1, 1]).expect("idx");
        b.set_rows("k_store", c, k, idx).expect("set_rows")
    } else {
        let slot = b
            .view("k_slot", c, [64, 4, 1, 1], [row, row * 4, row * 4], 0)
            .expect("view");
        b.cpy("k_store", k, slot).expect("cpy")
    };
    let all = b
        .view(
            "k_all",
            written,
            [64, 16, 1, 1],
            [row, row * 16, row * 16],
            0,
        )
        .expect("view");
    let scores = b.mul_mat("scores", all, x).expect("scores");
    b.mark_output(scores).expect("out");
    b.finish().expect("kv graph")
}

#[test]
fn writes_into_state_run_on_the_state_device() {
    let t = Target::preset("cpu+cuda0").expect("preset");
    let o = PlacementOptions::default();
    for (cache, set_rows, want) in [
        (DType::F32, false, None),
        (DType::F16, true, None),
        // cuda0 runs no set_rows into Q8_0: the cache and its write on the CPU.
        (DType::Q8_0, true, Some("cpu")),
    ] {
        let g = kv_graph(cache, set_rows);
        for p in [Policy::Ggml, Policy::Cost] {
            let a = run(&g, &t, &o, p);
            check_invariants(&g, &t, &o, p, &a);
            let cache_dev = device_of(&g, &t, &a, "cache_k");
            assert_eq!(device_of(&g, &t, &a, "k_store"), cache_dev, "{cache} {p:?}");
            assert_eq!(device_of(&g, &t, &a, "k_all"), cache_dev, "{cache} {p:?}");
            if let Some(want) = want {
                assert_eq!(cache_dev, want, "{cache} {p:?}");
            }
        }
    }
}

#[test]
fn an_op_no_device_runs_is_an_error_naming_it() {
    let g = example_graph("llama2l");
    let mut t = Target::preset("cuda0").expect("preset");
    t.devices[0].supports = vec![crate::target::OpSupport {
        ops: crate::target::OpSet::Only(vec![ir::OpKind::MulMat, ir::OpKind::GetRows]),
        src0: crate::target::DTypeSet::All,
    }];
    for p in [Policy::Ggml, Policy::Cost] {
        let e = assign_devices(&g, &t, &PlacementOptions::default(), p).expect_err("unsupported");
        assert!(matches!(e, Error::UnsupportedOp { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("'l0.attn_norm.rms'") && msg.contains("rms_norm"),
            "{msg}"
        );
        assert!(
            msg.contains("src0 f32") && msg.contains("devices: cuda0"),
            "{msg}"
        );
    }
}

#[test]
fn weights_that_fit_no_device_are_an_error_naming_them() {
    let g = example_graph("llama2l");
    let mut t = target_file("cpu+2gpu-small");
    for d in &mut t.devices {
        d.memory_bytes = 12 << 20;
        d.max_buffer_bytes = 12 << 20;
    }
    let fit = PlacementOptions {
        fit: true,
        ..Default::default()
    };
    for o in [fit, PlacementOptions::default()] {
        let e = assign_devices(&g, &t, &o, Policy::Cost).expect_err("too big");
        let msg = e.to_string();
        assert!(matches!(e, Error::WeightDoesNotFit { .. }), "{msg}");
        assert!(
            msg.starts_with("weight 'tok_embd' (16384000 bytes"),
            "{msg}"
        );
        for dev in ["cuda0 has", "cuda1 has", "cpu has"] {
            assert!(msg.contains(dev), "{msg}");
        }
    }
    // Fits a device, but not all on the first one: suggest --fit.
    let small = target_file("cpu+2gpu-small");
    let e =
        assign_devices(&g, &small, &PlacementOptions::default(), Policy::Ggml).expect_err("first");
    assert!(matches!(e, Error::WeightsExceedFirstDevice { .. }), "{e}");
    assert!(e.to_string().contains("use --fit"), "{e}");
    // --offload-layers needs an accelerator.
    let o = PlacementOptions {
        offload_layers: Some(1),
        ..Default::default()
    };
    let cpu = Target::preset("cpu").expect("preset");
    let e = assign_devices(&g, &cpu, &o, Policy::Cost).expect_err("no accelerator");
    assert!(matches!(e, Error::OffloadLayers { .. }), "{e}");
}

#[test]
fn fit_fills_devices_in_priority_order_block_by_block() {
    let g = example_graph("llama2l");
    let (_, t, o) = scenarios().swap_remove(2);
    let w = place_weights(&g, &t, &o, Policy::Cost).expect("placement");
    let at = |n: &str| {
        let id = g.find(n).expect(n);
        t.devices[w.device[id.index()].expect("placed").index()]
            .name
            .clone()
    };
    // 24 MiB GPUs less a 4.2 MiB reserve: the 15.6 MiB embedding fills
    // cuda0, block 0 (13 MiB) cuda1, the rest goes to the CPU.
    assert_eq!(compute_reserve_bytes(&g), 4_096_000 + 262_144);
    assert_eq!(at("tok_embd"), "cuda0");
    assert_eq!(
        [at("l0.wq"), at("l0.ffn_down"), at("l0.attn_norm.weight")],
        ["cuda1"; 3]
    );
    assert_eq!([at("l1.wq"), at("output"), at("output_norm")], ["cpu"; 3]);
    let why = &w.reason[g.find("l0.wq").expect("l0.wq").index()];
    assert!(
        why.starts_with("--fit: block 0's weights (13.0 MiB) fit cuda1"),
        "{why}"
    );
}

#[test]
fn a_weight_on_a_device_that_cannot_run_its_user_says_so() {
    let g = example_graph("llama2l");
    let mut t = Target::preset("cpu+cuda0").expect("preset");
    // This cuda0 has no get_rows: the embedding stays there (all weights go
    // to the first device) and its lookup runs on the CPU through a copy.
    t.devices[0].supports[0].ops = crate::target::OpSet::Only(
        ir::OpKind::ALL
            .iter()
            .copied()
            .filter(|&k| k != ir::OpKind::GetRows)
            .collect(),
    );
    for p in [Policy::Ggml, Policy::Cost] {
        let a = run(&g, &t, &PlacementOptions::default(), p);
        check_invariants(&g, &t, &PlacementOptions::default(), p, &a);
        assert_eq!(device_of(&g, &t, &a, "tok_embd"), "cuda0");
        assert_eq!(device_of(&g, &t, &a, "inp_embd"), "cpu");
        let why = reason_of(&g, &a, "tok_embd");
        assert!(
            why.contains("cuda0 cannot run its user 'inp_embd' (get_rows, src0 f32)"),
            "{why}"
        );
    }
}

/// Three blocks of a mixture of experts: a 256 KiB attention weight and
/// three 1 MiB expert tensors each, read by one product each; with
/// `cache`, a 256 KiB KV cache per block too.
fn moe_weights_graph(cache: bool) -> ir::Graph {
    let mut b = GraphBuilder::new("moe_fit");
    let x = b.input("x", DType::F32, [256, 1, 1, 1]).unwrap();
    let xe = b.input("xe", DType::F32, [256, 1, 8, 1]).unwrap();
    for l in 0..3 {
        if cache {
            b.state(format!("cache_k_l{l}"), DType::F32, [256, 256, 1, 1])
                .unwrap();
        }
        let q = b
            .weight(
                format!("blk.{l}.attn_q.weight"),
                DType::F32,
                [256, 256, 1, 1],
            )
            .unwrap();
        let y = b.mul_mat(format!("q{l}"), q, x).unwrap();
        b.mark_output(y).unwrap();
        for part in ["down", "gate", "up"] {
            let e = b
                .weight(
                    format!("blk.{l}.ffn_{part}_exps.weight"),
                    DType::F32,
                    [256, 128, 8, 1],
                )
                .unwrap();
            let y = b.mul_mat(format!("{part}{l}"), e, xe).unwrap();
            b.mark_output(y).unwrap();
        }
    }
    b.finish().unwrap()
}

#[test]
fn fit_places_every_block_s_attention_before_any_expert_as_llama_cpp_does() {
    let g = moe_weights_graph(false);
    let mut t = Target::preset("cpu+cuda0").expect("preset");
    let gpu = t.devices.iter().position(|d| d.name == "cuda0").unwrap();
    assert_eq!(gpu, 0, "the accelerator has the priority");
    // Room for the three attention weights, block 0's experts and one more
    // expert tensor (1.5 MiB spare).
    let room = compute_reserve_bytes(&g) + 3 * (256 << 10) + (3 << 20) + (3 << 19);
    t.devices[gpu].memory_bytes = room;
    t.devices[gpu].max_buffer_bytes = room;
    let o = PlacementOptions {
        fit: true,
        ..Default::default()
    };
    let w = place_weights(&g, &t, &o, Policy::Cost).expect("placement");
    let at = |n: &str| {
        let id = g.find(n).expect(n);
        t.devices[w.device[id.index()].expect("placed").index()]
            .name
            .clone()
    };
    for l in 0..3 {
        assert_eq!(at(&format!("blk.{l}.attn_q.weight")), "cuda0", "block {l}");
    }
    for part in ["up", "gate", "down"] {
        assert_eq!(at(&format!("blk.0.ffn_{part}_exps.weight")), "cuda0");
        assert_eq!(at(&format!("blk.2.ffn_{part}_exps.weight")), "cpu");
    }
    // Block 1's experts split by tensor: up kept, gate and down moved.
    assert_eq!(
        ["up", "gate", "down"].map(|p| at(&format!("blk.1.ffn_{p}_exps.weight"))),
        ["cuda0", "cpu", "cpu"]
    );
    let why = &w.reason[g.find("blk.0.ffn_up_exps.weight").unwrap().index()];
    assert!(
        why.starts_with("--fit: block 0's experts (3.0 MiB;"),
        "{why}"
    );
    let why = &w.reason[g.find("blk.1.ffn_up_exps.weight").unwrap().index()];
    assert!(
        why.contains("the rest of its block's experts did not fit"),
        "{why}"
    );
}

#[test]
fn fit_keeps_room_for_each_block_s_kv_cache_beside_its_weights() {
    // The budget of the test above, but each block has a 256 KiB cache: the
    // caches take the 0.75 MiB block 1's up tensor had, so all of block 1's
    // experts go to the CPU.
    let plain = moe_weights_graph(false);
    let g = moe_weights_graph(true);
    let mut t = Target::preset("cpu+cuda0").expect("preset");
    let room = compute_reserve_bytes(&plain) + 3 * (256 << 10) + (3 << 20) + (3 << 19);
    assert_eq!(compute_reserve_bytes(&g), compute_reserve_bytes(&plain));
    t.devices[0].memory_bytes = room;
    t.devices[0].max_buffer_bytes = room;
    let o = PlacementOptions {
        fit: true,
        ..Default::default()
    };
    let w = place_weights(&g, &t, &o, Policy::Cost).expect("placement");
    let at = |n: &str| {
        let d = w.device[g.find(n).expect(n).index()].expect("placed");
        t.devices[d.index()].name.clone()
    };
    assert_eq!(at("blk.2.attn_q.weight"), "cuda0");
    assert_eq!(at("blk.0.ffn_down_exps.weight"), "cuda0");
    assert_eq!(
        ["up", "gate", "down"].map(|p| at(&format!("blk.1.ffn_{p}_exps.weight"))),
        ["cpu"; 3]
    );
    let why = &w.reason[g.find("blk.0.attn_q.weight").unwrap().index()];
    assert!(
        why.contains("block 0's weights and state (0.5 MiB)"),
        "{why}"
    );
}

//! Property test: random mixture-of-experts graphs x placements. Each graph
//! is 1-3 blocks of llama.cpp's MoE FFN (`build_moe_ffn`: router product,
//! soft_max, top-k by `argsort` and a view, the chosen probabilities by
//! `get_rows`, optionally renormalised by their clamped sum, SwiGLU experts
//! through `mul_mat_id`, weighted and summed over the used slots) between RMS
//! norms and residual adds, at random odd sizes (1-8 experts, 1-all used,
//! 1-9 tokens, F32 or F16 experts). Every graph is compiled for `cpu` and for
//! `cpu0+cpu1` placed six ways: by layers with random shares, with the
//! experts of random blocks pinned to the second core group (llama.cpp's
//! `-ot`), cut into two micro-batches (`--pipeline 2`), tensor split by rows
//! and along a random axis of the FFN weights and experts, and with whole
//! experts per core group at random shares (expert parallelism). Every plan
//! passes the checker (`compile` runs it), compiling twice gives the same
//! bytes, and the reference plan evaluator gives the one-device plan's
//! outputs (NMSE <= 1e-10: routing is decided on bit-identical router
//! logits, the router is never cut along its sums).

use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::PinRule;
use compiler::target::Target;
use compiler::tensor_split::{Collectives, SplitRule, TensorSplitOptions};
use ggplan_tests::TestRng;
use ggplan_tests::outputs::nmse;
use ir::{DType, GluKind, Graph, GraphBuilder, TensorId};
use kernels::evaluate::{Bindings, Weights, evaluate_plan};
use std::collections::BTreeMap;

/// Sizes of one random graph.
#[derive(Debug)]
struct Shape {
    n_embd: i64,
    n_ff: i64,
    n_expert: i64,
    n_used: i64,
    tokens: i64,
    blocks: usize,
    expert_dtype: DType,
    renormalise: bool,
}

fn random_shape(rng: &mut TestRng) -> Shape {
    let n_expert = 1 + rng.below(8) as i64;
    Shape {
        // F16 experts need rows of whole elements only; odd widths test edges.
        n_embd: [8i64, 12, 17, 32][rng.below(4)],
        n_ff: [5i64, 16, 23][rng.below(3)],
        n_expert,
        n_used: 1 + rng.below(n_expert as usize) as i64,
        tokens: 1 + rng.below(9) as i64,
        blocks: 1 + rng.below(3),
        expert_dtype: [DType::F32, DType::F16][rng.below(2)],
        renormalise: rng.below(2) == 0,
    }
}

/// One MoE FFN over `x [n_embd, t]`, as llama.cpp builds it for qwen3moe.
fn moe_ffn(b: &mut GraphBuilder, s: &Shape, il: usize, x: TensorId) -> TensorId {
    let (e, f, ne, nu, t) = (s.n_embd, s.n_ff, s.n_expert, s.n_used, s.tokens);
    let p = format!("blk.{il}");
    let router = b
        .weight(
            format!("{p}.ffn_gate_inp.weight"),
            DType::F32,
            [e, ne, 1, 1],
        )
        .unwrap();
    let gate_exps = b
        .weight(
            format!("{p}.ffn_gate_exps.weight"),
            s.expert_dtype,
            [e, f, ne, 1],
        )
        .unwrap();
    let up_exps = b
        .weight(
            format!("{p}.ffn_up_exps.weight"),
            s.expert_dtype,
            [e, f, ne, 1],
        )
        .unwrap();
    let down_exps = b
        .weight(
            format!("{p}.ffn_down_exps.weight"),
            s.expert_dtype,
            [f, e, ne, 1],
        )
        .unwrap();

    let logits = b.mul_mat(format!("{p}.router"), router, x).unwrap();
    let probs = b
        .soft_max(format!("{p}.probs"), logits, None, 1.0, 0.0)
        .unwrap();
    let order = b.argsort(format!("{p}.order"), probs, true).unwrap();
    let [_, rows_nb, _, _] = b.tensor(order).layout.nb;
    let chosen = b
        .view(
            format!("{p}.chosen"),
            order,
            [nu, t, 1, 1],
            [rows_nb, rows_nb * t as u64, rows_nb * t as u64],
            0,
        )
        .unwrap();
    let probs3 = b
        .reshape(format!("{p}.probs3"), probs, [1, ne, t, 1])
        .unwrap();
    let mut weights = b.get_rows(format!("{p}.weights"), probs3, chosen).unwrap();
    if s.renormalise {
        let flat = b
            .reshape(format!("{p}.weights2"), weights, [nu, t, 1, 1])
            .unwrap();
        let sum = b.sum_rows(format!("{p}.weights_sum"), flat).unwrap();
        let sum = b
            .clamp(
                format!("{p}.weights_sum_clamped"),
                sum,
                6.103_515_6e-5,
                f32::INFINITY,
            )
            .unwrap();
        let norm = b.div(format!("{p}.weights_norm"), flat, sum).unwrap();
        weights = b
            .reshape(format!("{p}.weights3"), norm, [1, nu, t, 1])
            .unwrap();
    }
    let x3 = b.reshape(format!("{p}.x3"), x, [e, 1, t, 1]).unwrap();
    let up = b
        .mul_mat_id(format!("{p}.up"), up_exps, x3, chosen)
        .unwrap();
    let gate = b
        .mul_mat_id(format!("{p}.gate"), gate_exps, x3, chosen)
        .unwrap();
    let par = b
        .glu_split(format!("{p}.swiglu"), GluKind::SwiGlu, gate, up)
        .unwrap();
    let experts = b
        .mul_mat_id(format!("{p}.down"), down_exps, par, chosen)
        .unwrap();
    let weighted = b.mul(format!("{p}.weighted"), experts, weights).unwrap();
    // The used slots summed: views of slot k, `[n_embd, t]`, added in order.
    let nb = b.tensor(weighted).layout.nb;
    let slot = |b: &mut GraphBuilder, k: i64| {
        b.view(
            format!("{p}.slot{k}"),
            weighted,
            [e, t, 1, 1],
            [nb[2], nb[2] * t as u64, nb[2] * t as u64],
            k as u64 * nb[1],
        )
        .unwrap()
    };
    let mut out = slot(b, 0);
    for k in 1..nu {
        let next = slot(b, k);
        out = b.add(format!("{p}.moe_sum{k}"), out, next).unwrap();
    }
    out
}

fn random_moe_graph(s: &Shape, case: usize) -> Graph {
    let mut b = GraphBuilder::new(format!("moe{case}"));
    let mut x = b
        .input("x", DType::F32, [s.n_embd, s.tokens, 1, 1])
        .unwrap();
    for il in 0..s.blocks {
        let norm_w = b
            .weight(
                format!("blk.{il}.ffn_norm.weight"),
                DType::F32,
                [s.n_embd, 1, 1, 1],
            )
            .unwrap();
        let normed = b.rms_norm(format!("blk.{il}.norm"), x, 1e-6).unwrap();
        let normed = b.mul(format!("blk.{il}.ffn_norm"), normed, norm_w).unwrap();
        let moe = moe_ffn(&mut b, s, il, normed);
        x = b.add(format!("blk.{il}.l_out"), moe, x).unwrap();
    }
    b.mark_output(x).unwrap();
    b.finish().unwrap()
}

/// The expert and FFN weights (never the router: cutting its sums could
/// reorder near-tied probabilities and so change the routing itself).
fn expert_weights(graph: &Graph) -> Vec<String> {
    graph
        .ids()
        .map(|id| graph.tensor(id))
        .filter(|t| t.role == ir::Role::Weight && t.name.contains("_exps"))
        .map(|t| t.name.clone())
        .collect()
}

fn placements(
    rng: &mut TestRng,
    graph: &Graph,
    s: &Shape,
    target: &Target,
) -> Vec<(String, CompileOptions)> {
    let mut out = Vec::new();
    let shares = vec![1.0 + rng.below(3) as f64, 1.0 + rng.below(3) as f64];
    let mut layer = CompileOptions::default();
    layer.placement.layer_split = Some(shares.clone());
    out.push((format!("layer split {shares:?}"), layer));

    let mut pinned = CompileOptions::default();
    let block = rng.below(s.blocks);
    let rule = format!("blk\\.{block}\\.ffn_.*_exps=cpu1");
    pinned.placement.pins = vec![PinRule::parse(&rule, target).unwrap()];
    out.push((format!("pin {rule}"), pinned));

    if s.tokens >= 2 {
        let piped = CompileOptions {
            micro_batches: 2,
            ..CompileOptions::default()
        };
        out.push(("pipeline 2".into(), piped));
    }

    let row = CompileOptions {
        tensor_split: Some(TensorSplitOptions {
            shares: vec![],
            rules: vec![],
            collectives: Collectives::Auto,
            experts: Default::default(),
        }),
        ..CompileOptions::default()
    };
    out.push(("split-mode row".into(), row));

    let mut rules = Vec::new();
    for name in expert_weights(graph) {
        if rng.below(2) == 0 {
            let axis = rng.below(2);
            let rule = format!("^{}$={axis}", name.replace('.', "\\."));
            rules.push(SplitRule::parse(&rule).unwrap());
        }
    }
    // Expert parallelism: every block's experts shared out whole, by
    // random shares (a device may get none of a block's experts).
    if s.n_expert >= 2 {
        let shares = vec![1.0 + rng.below(3) as f64, 1.0 + rng.below(3) as f64];
        let split = CompileOptions {
            tensor_split: Some(TensorSplitOptions {
                shares: shares.clone(),
                rules: vec![SplitRule::parse("_exps\\.weight$=2").unwrap()],
                collectives: [Collectives::Auto, Collectives::AllReduce][rng.below(2)],
                experts: Default::default(),
            }),
            ..CompileOptions::default()
        };
        out.push((format!("experts split {shares:?}"), split));
    }
    if !rules.is_empty() {
        let label = format!("{} split rules", rules.len());
        let split = CompileOptions {
            tensor_split: Some(TensorSplitOptions {
                shares: vec![],
                rules,
                collectives: [Collectives::Auto, Collectives::AllReduce][rng.below(2)],
                experts: Default::default(),
            }),
            ..CompileOptions::default()
        };
        out.push((label, split));
    }
    out
}

#[test]
fn random_moe_graphs_on_every_placement_check_and_compute_one_devices_outputs() {
    let mut rng = TestRng::new(0x00E0_0E5E);
    let mut placed = 0;
    // Plans that cut something: more expert products than one device runs
    // (experts split, micro-batches), or steps on both core groups.
    let (mut more_products, mut both_groups) = (0, 0);
    for case in 0..24 {
        let shape = random_shape(&mut rng);
        let graph = random_moe_graph(&shape, case);
        let bindings = Bindings {
            weights: Weights::Random { seed: case as u64 },
            inputs: BTreeMap::new(),
            random_inputs: Some(1),
        };
        let one = compile(
            &graph,
            &Target::preset("cpu").unwrap(),
            &CompileOptions::default(),
        )
        .unwrap_or_else(|e| panic!("case {case} {shape:?} on cpu: {e}"))
        .plan;
        let reference = evaluate_plan(&one, &bindings).unwrap();
        let products = |plan: &ir::plan::Plan| {
            (plan.splits.iter().flat_map(|s| &s.steps))
                .filter(|s| {
                    matches!(
                        s,
                        ir::plan::Step::Op {
                            op: ir::Op::MulMatId | ir::Op::MulMatIdPart { .. },
                            ..
                        }
                    )
                })
                .count()
        };
        let target = Target::preset("cpu0+cpu1").unwrap();
        for (how, options) in placements(&mut rng, &graph, &shape, &target) {
            let label = format!("case {case} {shape:?}, {how}");
            let plan = compile(&graph, &target, &options)
                .unwrap_or_else(|e| panic!("{label}: {e}"))
                .plan;
            let again = compile(&graph, &target, &options).unwrap().plan;
            assert_eq!(
                ir::plan::plan_to_ron(&plan),
                ir::plan::plan_to_ron(&again),
                "{label}: not deterministic"
            );
            let run = evaluate_plan(&plan, &bindings).unwrap_or_else(|e| panic!("{label}: {e}"));
            for out in graph.with_role(ir::Role::Output) {
                let name = &graph.tensor(out).name;
                let e = nmse(
                    &reference.read_name(name).unwrap().data,
                    &run.read_name(name).unwrap().data,
                );
                assert!(e <= 1e-10, "{label}: output '{name}' NMSE {e}");
            }
            placed += 1;
            more_products += usize::from(products(&plan) > products(&one));
            if std::env::var("MOE_DEBUG").is_ok() {
                println!("{how}: {} vs {}", products(&plan), products(&one));
            }
            let devices: std::collections::BTreeSet<_> =
                plan.splits.iter().map(|s| s.device).collect();
            both_groups += usize::from(devices.len() == 2);
        }
    }
    assert!(placed >= 100, "{placed} placements");
    assert!(
        more_products >= 30,
        "{more_products} plans cut the expert products"
    );
    assert!(
        both_groups >= 60,
        "{both_groups} plans use both core groups"
    );
    println!(
        "{placed} placements, {more_products} cut the expert products, {both_groups} on both groups"
    );
}

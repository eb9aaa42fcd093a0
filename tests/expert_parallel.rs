//! Expert parallelism (`--split-mode row --experts whole`, or `--split
//! '_exps\.weight$=2'`): a mixture of experts' stacked matrices shared out
//! whole between CPU core groups, each computing the tokens routed to its own
//! experts (`mul_mat_id_part`), where ggml's meta backend cuts every expert
//! by rows.
//!
//! On a random two-block Qwen 3 MoE-style llama (8 experts, 2 per token),
//! prefill and decode, over 2 and 4 core groups and 3:1 shares: the plan has
//! no whole `mul_mat_id`, one `mul_mat_id_part` per device and expert tensor,
//! exactly the collectives of the rows plan (the GLU, the down product and
//! the router's weighting run part by part, and one all-reduce per block
//! adds the slots up), every part marked with its device's experts, and the
//! runtime computes what one device computes (NMSE <= 1e-10), under injected
//! delays too. `--experts auto` keeps rows where they cut evenly and takes
//! whole experts where K-quant blocks cut the down matrix unevenly, saying
//! both estimates in the experts' reasons. The checker refuses parts whose
//! experts overlap, whose marks disagree with their ops, or whose expert
//! sets differ.

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use compiler::tensor_split::{Collectives, ExpertSplit, SplitRule, TensorSplitOptions};
use ggplan_tests::llama_config::{tiny_llama, tiny_moe_llama};
use ggplan_tests::outputs::{nmse_f32 as nmse, outputs};
use ir::plan::{Plan, SplitPart, Step};
use ir::{DType, Graph, Op};
use models::llama::LlamaConfig;
use runtime::{LoadOptions, Runtime, Weights};
use std::sync::Arc;

/// Two blocks, 8 experts of `n_ff_exp` (2 per token, renormalised) of
/// `dtype`, `n_embd` wide, `n_tokens` per run.
fn moe_llama(n_tokens: i64, n_embd: i64, dtype: DType, n_ff_exp: i64) -> Graph {
    let cfg = LlamaConfig {
        matrix_dtypes: Default::default(),
        weight_dtype: dtype,
        ..tiny_moe_llama(n_tokens, n_embd, n_ff_exp)
    };
    models::llama::build_prefill(&cfg).unwrap()
}

fn split(shares: &[f64], experts: ExpertSplit) -> CompileOptions {
    CompileOptions {
        tensor_split: Some(TensorSplitOptions {
            shares: shares.to_vec(),
            rules: vec![],
            collectives: Collectives::AllReduce,
            experts,
        }),
        ..CompileOptions::default()
    }
}

fn plan_for(graph: &Graph, target: &str, options: &CompileOptions) -> Plan {
    let target = Target::preset(target).unwrap();
    compile(graph, &target, options)
        .unwrap_or_else(|e| panic!("{target:?}: {e}", target = target.name))
        .plan
}

fn count(plan: &Plan, which: impl Fn(&Op) -> bool) -> usize {
    (plan.splits.iter().flat_map(|s| &s.steps))
        .filter(|s| matches!(s, Step::Op { op, .. } if which(op)))
        .count()
}

fn run(plan: Plan, delays: Option<u64>) -> std::collections::BTreeMap<String, Vec<f32>> {
    let options = LoadOptions {
        threads: 1,
        fault_injection: delays,
        ..LoadOptions::default()
    };
    let mut rt = Runtime::load(Arc::new(plan), Weights::Random { seed: 5 }, &options).unwrap();
    outputs(&mut rt)
}

#[test]
fn whole_experts_per_device_compute_what_one_device_does() {
    for tokens in [7, 1] {
        let graph = moe_llama(tokens, 64, DType::F32, 24);
        let want = run(plan_for(&graph, "cpu", &CompileOptions::default()), None);
        for (target, devices, shares) in [
            ("cpu0+cpu1", 2, vec![]),
            ("cpu0+cpu1", 2, vec![3.0, 1.0]),
            ("cpu0+cpu1+cpu2+cpu3", 4, vec![]),
        ] {
            let what = format!("{tokens} tokens on {target} shares {shares:?}");
            let plan = plan_for(&graph, target, &split(&shares, ExpertSplit::Whole));
            let rows = plan_for(&graph, target, &split(&shares, ExpertSplit::Rows));
            assert_eq!(count(&plan, |op| *op == Op::MulMatId), 0, "{what}");
            // Three expert tensors in each of two blocks, one part per device.
            let parts = count(&plan, |op| matches!(op, Op::MulMatIdPart { .. }));
            assert_eq!(parts, 3 * 2 * devices, "{what}");
            // The MoE FFN's one collective per block: the slots' sum,
            // all-reduced (as the rows plan's, which adds the slots of the
            // down product's partial sums).
            let moe_sums = |p: &Plan| -> Vec<String> {
                let mut sums: Vec<String> = (p.splits.iter().flat_map(|s| &s.steps))
                    .filter_map(|s| match s {
                        Step::Op { op, srcs, .. } if op.collective().is_some() => {
                            Some(p.tensors[srcs[0] as usize].name.clone())
                        }
                        _ => None,
                    })
                    .filter(|n| n.contains("ffn_moe"))
                    .collect();
                sums.sort();
                sums.dedup();
                sums
            };
            assert_eq!(
                moe_sums(&plan),
                ["l0.ffn_moe_out#0", "l1.ffn_moe_out#0"],
                "{what}"
            );
            assert_eq!(moe_sums(&plan), moe_sums(&rows), "{what}");
            // Every part's result says which experts its device holds.
            let mut firsts = Vec::new();
            for step in plan.splits.iter().flat_map(|s| &s.steps) {
                let Step::Op {
                    op: Op::MulMatIdPart { first, experts },
                    dst,
                    ..
                } = step
                else {
                    continue;
                };
                assert_eq!(*experts, 8, "{what}");
                match &plan.tensors[*dst as usize].part {
                    Some(SplitPart::Routed {
                        first: f, count, ..
                    }) => {
                        assert_eq!(f, first, "{what}");
                        firsts.push((*first, *count));
                    }
                    other => panic!("{what}: a part marked {other:?}"),
                }
            }
            firsts.sort();
            firsts.dedup();
            let covered: i64 = firsts.iter().map(|(_, c)| c).sum();
            assert_eq!(covered, 8, "{what}: {firsts:?}");
            let got = run(plan.clone(), None);
            let delayed = run(plan, Some(7));
            for (name, values) in &want {
                let e = nmse(values, &got[name]);
                assert!(e <= 1e-10, "{what}: '{name}' NMSE {e:e}");
                assert_eq!(got[name], delayed[name], "{what}: delays changed '{name}'");
            }
        }
    }
}

/// Only the experts split, by a rule (attention and the router whole).
#[test]
fn a_rule_splitting_the_experts_along_axis_2_shares_them_out_whole() {
    let graph = moe_llama(5, 64, DType::F32, 24);
    let want = run(plan_for(&graph, "cpu", &CompileOptions::default()), None);
    let options = CompileOptions {
        tensor_split: Some(TensorSplitOptions {
            shares: vec![],
            rules: vec![SplitRule::parse(r"_exps\.weight$=2").unwrap()],
            collectives: Collectives::Auto,
            experts: ExpertSplit::Auto,
        }),
        ..CompileOptions::default()
    };
    let plan = plan_for(&graph, "cpu0+cpu1", &options);
    assert_eq!(count(&plan, |op| matches!(op, Op::MulMatIdPart { .. })), 12);
    // One all-reduce per block: two participants each.
    assert_eq!(count(&plan, |op| op.collective().is_some()), 4);
    let got = run(plan, None);
    for (name, values) in &want {
        let e = nmse(values, &got[name]);
        assert!(e <= 1e-10, "'{name}' NMSE {e:e}");
    }
}

/// `--experts auto`: F32 experts cut evenly by rows stay cut by rows (the
/// GLU then runs on half the rows); Q4_K experts 768 wide cut their down
/// matrix by K blocks of 256 into 512 and 256 over two devices, so whole experts
/// (4 and 4) are estimated sooner and taken. The reasons give both figures.
#[test]
fn auto_takes_whole_experts_where_rows_cut_unevenly() {
    let even = moe_llama(16, 64, DType::F32, 24);
    let plan = plan_for(&even, "cpu0+cpu1", &split(&[], ExpertSplit::Auto));
    assert_eq!(count(&plan, |op| matches!(op, Op::MulMatIdPart { .. })), 0);
    let uneven = moe_llama(16, 512, DType::Q4_K, 768);
    let plan = plan_for(&uneven, "cpu0+cpu1", &split(&[], ExpertSplit::Auto));
    assert_eq!(count(&plan, |op| matches!(op, Op::MulMatIdPart { .. })), 12);
    let reason = &plan
        .tensors
        .iter()
        .find(|t| t.name == "blk.0.ffn_down_exps.weight#1")
        .expect("device 1's down experts")
        .reason;
    assert!(
        reason.contains("whole experts per device, by the cost model")
            && reason.contains("cut by rows at"),
        "{reason}"
    );
}

/// The checker proves that the parts of each routed value tile the experts:
/// a part moved onto another's experts (mark and op alike), a mark that
/// disagrees with its op, and a part of another expert set are refused,
/// naming the tensor; so is an op it does not know to keep zeros reading a
/// routed part.
#[test]
fn the_checker_refuses_parts_that_do_not_tile_the_experts() {
    let graph = moe_llama(3, 64, DType::F32, 24);
    let plan = plan_for(&graph, "cpu0+cpu1", &split(&[], ExpertSplit::Whole));
    assert!(ir::plan::check::check_plan(&plan).is_empty());
    // The first part of the down product on device 1 (experts 4..8).
    let at = |plan: &Plan| {
        (plan.splits.iter().enumerate())
            .flat_map(|(s, split)| (split.steps.iter().enumerate()).map(move |(i, st)| (s, i, st)))
            .find_map(|(s, i, st)| match st {
                Step::Op {
                    op: Op::MulMatIdPart { first: 4, .. },
                    dst,
                    ..
                } if plan.tensors[*dst as usize].name.contains("ffn_moe_down") => {
                    Some((s, i, *dst))
                }
                _ => None,
            })
            .expect("device 1's down part")
    };
    let (s, i, dst) = at(&plan);
    let with = |first: i64, experts: i64, mark_first: i64| {
        let mut p = plan.clone();
        if let Step::Op { op, .. } = &mut p.splits[s].steps[i] {
            *op = Op::MulMatIdPart { first, experts };
        }
        if let Some(SplitPart::Routed { first: f, .. }) = &mut p.tensors[dst as usize].part {
            *f = mark_first;
        }
        let problems: Vec<String> = ir::plan::check::check_plan(&p)
            .iter()
            .map(ToString::to_string)
            .collect();
        problems.join("\n")
    };
    let overlap = with(2, 8, 2);
    assert!(overlap.contains("overlap another part's"), "{overlap}");
    let mark = with(4, 8, 3);
    assert!(mark.contains("is marked as experts [3, 7)"), "{mark}");
    let other_set = with(4, 12, 4);
    assert!(other_set.contains("its set has 12 experts"), "{other_set}");
    // The router's weighting as a division: an op the checker does not let
    // read a routed part.
    let mut p = plan.clone();
    let weighted = (p.splits.iter_mut().flat_map(|s| s.steps.iter_mut()))
        .find_map(|st| match st {
            Step::Op {
                op: op @ Op::Mul,
                srcs,
                ..
            } if plan.tensors[srcs[0] as usize].name.contains("ffn_moe_down") => Some(op),
            _ => None,
        })
        .expect("the weighting of the down product's part");
    *weighted = Op::Div;
    let problems: Vec<String> = ir::plan::check::check_plan(&p)
        .iter()
        .map(ToString::to_string)
        .collect();
    let problems = problems.join("\n");
    assert!(
        problems.contains("is a routed part of expert parallelism")
            && problems.contains("(div) reads it"),
        "{problems}"
    );
}

/// `--experts whole` on a graph without experts is refused, naming it.
#[test]
fn whole_experts_without_experts_are_refused() {
    let graph = models::llama::build_prefill(&tiny_llama(3)).unwrap();
    let target = Target::preset("cpu0+cpu1").unwrap();
    let Err(err) = compile(&graph, &target, &split(&[], ExpertSplit::Whole)) else {
        panic!("a graph without experts was split by experts");
    };
    let err = err.to_string();
    assert!(
        err.contains("--experts whole") && err.contains("no stacked experts"),
        "{err}"
    );
}

//! Attention steps on the CPU runtime (`Step::Attention`): the fused chain
//! computes, bit for bit, what the four unfused ops compute (the same
//! kernels one after another), at odd sizes with a seed — head 64 and 40,
//! odd numbers of cached rows, grouped-query heads (3 query heads per cache
//! head), F32 and F16 caches, decode's one query row and prefill's several,
//! a causal mask or none, 1 and 3 threads — and each step and output passes
//! against the reference plan evaluator within DESIGN.md's thresholds; two
//! steps of different sizes share their device's buffers; the checker
//! refuses a damaged step and the plan text keeps it (version 3 refused).

use ggplan_tests::fused_steps::{count_steps, cpu_plan, load_random};
use ggplan_tests::outputs::{assert_every_step_passes, bits};
use ir::plan::{Plan, Step};
use ir::{DType, Graph, GraphBuilder};
use kernels::reference::Dense;
use runtime::{Precision, Runtime, Weights};
use std::collections::BTreeMap;

/// The shapes of one case.
#[derive(Clone, Copy, Debug)]
struct Shape {
    head: i64,
    n_kv: i64,
    n_q: i64,
    n_head: i64,
    n_kv_head: i64,
    cache: DType,
    mask: bool,
}

/// `merged = cont(permute(mul_mat(v, soft_max(mul_mat(k, q_perm) · 1/√head,
/// mask)), 0, 2, 1, 3))` over inputs k [head, n_kv, n_kv_head] and v
/// [n_kv, head, n_kv_head] (the caches, as a model lays them out), q [head,
/// n_head, n_q]; with `apart` the scores are an output too, which keeps the
/// chain unfused.
fn graph(s: Shape, apart: bool) -> Graph {
    let mut b = GraphBuilder::new("attention");
    chain(&mut b, "", s, apart);
    b.finish().unwrap()
}

/// One attention chain of [`graph`], its tensors' names prefixed.
fn chain(b: &mut GraphBuilder, prefix: &str, s: Shape, apart: bool) {
    let n = |name: &str| format!("{prefix}{name}");
    let k = b
        .input(n("k"), s.cache, [s.head, s.n_kv, s.n_kv_head, 1])
        .unwrap();
    let v = b
        .input(n("v"), s.cache, [s.n_kv, s.head, s.n_kv_head, 1])
        .unwrap();
    let q = b
        .input(n("q"), DType::F32, [s.head, s.n_head, s.n_q, 1])
        .unwrap();
    let mask = s.mask.then(|| {
        b.input(n("mask"), DType::F32, [s.n_kv, s.n_q, 1, 1])
            .unwrap()
    });
    let qp = b.permute(n("q_perm"), q, [0, 2, 1, 3]).unwrap();
    let kq = b.mul_mat(n("kq"), k, qp).unwrap();
    let scale = 1.0 / (s.head as f32).sqrt();
    let probs = b.soft_max(n("probs"), kq, mask, scale, 0.0).unwrap();
    let kqv = b.mul_mat(n("kqv"), v, probs).unwrap();
    let perm = b.permute(n("kqv_perm"), kqv, [0, 2, 1, 3]).unwrap();
    let merged = (b.cont_shaped(n("merged"), perm, [s.head * s.n_head, s.n_q, 1, 1])).unwrap();
    if apart {
        b.mark_output(kq).unwrap();
    }
    b.mark_output(merged).unwrap();
}

fn attentions(plan: &Plan) -> usize {
    count_steps(plan, |s| matches!(s, Step::Attention { .. }))
}

fn load(plan: Plan, threads: usize) -> Runtime {
    load_random(plan, Precision::Fast, threads, 11)
}

/// A causal mask: query row i (the last n_q of n_kv positions) sees rows
/// 0 ..= n_kv - n_q + i.
fn causal(n_kv: i64, n_q: i64) -> Vec<f32> {
    (0..n_q)
        .flat_map(|i| {
            (0..n_kv).map(move |j| {
                if j <= n_kv - n_q + i {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect()
}

/// Sets every input (seeded; the mask causal) and returns them as the
/// reference evaluator takes them.
fn set_inputs(rt: &mut Runtime, s: Shape, seed: u64) -> BTreeMap<String, Dense> {
    let mut inputs = BTreeMap::new();
    for name in rt.input_names() {
        let values = if name.ends_with("mask") {
            let m = causal(s.n_kv, s.n_q);
            rt.set_input_f32(&name, &m).unwrap();
            Dense::new(
                [s.n_kv, s.n_q, 1, 1],
                m.iter().map(|&x| f64::from(x)).collect(),
            )
        } else {
            rt.set_random_input(&name, seed).unwrap()
        };
        inputs.insert(name, values);
    }
    inputs
}

fn merged(rt: &mut Runtime, s: Shape, seed: u64) -> BTreeMap<String, Vec<f32>> {
    set_inputs(rt, s, seed);
    rt.run().unwrap();
    BTreeMap::from([("merged".to_string(), rt.output_f32("merged").unwrap())])
}

#[test]
fn a_fused_attention_computes_the_unfused_chains_bits_and_passes_the_reference() {
    let decode = Shape {
        head: 64,
        n_kv: 17,
        n_q: 1,
        n_head: 9,
        n_kv_head: 3,
        cache: DType::F16,
        mask: true,
    };
    let cases = [
        decode,
        Shape {
            mask: false,
            ..decode
        },
        Shape {
            cache: DType::F32,
            ..decode
        },
        Shape {
            head: 40,
            n_kv: 13,
            n_q: 5,
            n_head: 6,
            n_kv_head: 2,
            ..decode
        },
        Shape {
            head: 40,
            n_kv: 31,
            n_q: 7,
            cache: DType::F32,
            ..decode
        },
        Shape {
            n_q: 3,
            n_head: 3,
            n_kv_head: 3,
            mask: false,
            ..decode
        },
    ];
    let seed = 7;
    for s in cases {
        let fused = cpu_plan(&graph(s, false));
        let apart = cpu_plan(&graph(s, true));
        assert_eq!(attentions(&fused), 1, "{s:?}");
        assert_eq!(attentions(&apart), 0, "{s:?}: the scores are read out");
        for threads in [1, 3] {
            let what = format!("{s:?} {threads} threads");
            let mut rt = load(fused.clone(), threads);
            let inputs = set_inputs(&mut rt, s, seed);
            assert_every_step_passes(&mut rt, &what);
            let steps = runtime::check::check_steps(&mut rt, &mut |_| {}).unwrap();
            let step = steps.iter().find(|c| c.kind == "attention");
            assert!(step.is_some_and(|c| c.passed()), "{what}: {step:?}");
            let step = (rt.steps().iter()).find(|st| st.kind == "attention");
            assert!(
                step.is_some_and(|st| !st.fallback),
                "{what}: a fast fused step"
            );
            rt.run().unwrap();
            let weights = Weights::Random { seed: 11 };
            let checked = runtime::check::check_outputs(&rt, &weights, inputs).unwrap();
            assert_eq!(checked.len(), 1, "{what}");
            for c in checked {
                assert!(c.passed(), "{what}: {c:?}");
            }
            let got = merged(&mut rt, s, seed);
            let want = merged(&mut load(apart.clone(), threads), s, seed);
            assert_eq!(bits(&got), bits(&want), "{what}");
        }
    }
}

#[test]
fn a_head_too_large_for_the_kernel_stays_four_steps() {
    let s = Shape {
        head: 257,
        n_kv: 5,
        n_q: 1,
        n_head: 2,
        n_kv_head: 1,
        cache: DType::F32,
        mask: true,
    };
    let plan = cpu_plan(&graph(s, false));
    assert_eq!(attentions(&plan), 0);
    let mut rt = load(plan, 1);
    set_inputs(&mut rt, s, 3);
    assert_every_step_passes(&mut rt, "head 257");
}

#[test]
fn the_checker_holds_an_attention_step_to_its_ops_and_the_text_keeps_it() {
    let s = Shape {
        head: 40,
        n_kv: 13,
        n_q: 5,
        n_head: 6,
        n_kv_head: 2,
        cache: DType::F16,
        mask: true,
    };
    let plan = cpu_plan(&graph(s, false));
    assert!(ir::plan::check::check_plan(&plan).is_empty());
    let text = ir::plan::plan_to_ron(&plan);
    assert!(text.contains("Attention("), "{text}");
    let parsed = ir::plan::parse_plan(&text, "attention.ron").unwrap();
    assert_eq!(parsed, plan);
    // A plan of the version before attention steps is refused, naming the
    // command that remakes it.
    let old = text.replacen(
        &format!("format_version: {}", ir::plan::PLAN_FORMAT_VERSION),
        "format_version: 3",
        1,
    );
    let err = ir::plan::parse_plan(&old, "old.ron")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("attention") && err.contains("ggplan compile"),
        "{err}"
    );

    let (si, k) = (plan.splits.iter().enumerate())
        .find_map(|(si, sp)| {
            let k = sp
                .steps
                .iter()
                .position(|st| matches!(st, Step::Attention { .. }))?;
            Some((si, k))
        })
        .unwrap();
    let broken = |edit: &dyn Fn(&mut Step)| {
        let mut p = plan.clone();
        edit(&mut p.splits[si].steps[k]);
        ir::plan::check::check_plan(&p)
    };
    let id = |n: &str| (plan.tensors.iter()).position(|t| t.name == n).unwrap() as u32;
    // The permuted view named as the product: the permute no longer holds.
    let v = broken(&|st| {
        if let Step::Attention { permuted, .. } = st {
            *permuted = id("kqv");
        }
    });
    assert!(!v.is_empty(), "the product named twice");
    // q as the mask: no mask has its extents.
    let v = broken(&|st| {
        if let Step::Attention { srcs, .. } = st {
            srcs[3] = srcs[1];
        }
    });
    assert!(!v.is_empty(), "q as the mask");
    // Five sources.
    let v = broken(&|st| {
        if let Step::Attention { srcs, .. } = st {
            srcs.push(srcs[0]);
        }
    });
    assert!(
        v.iter().any(|v| v.message.contains("3 or 4 sources")),
        "{v:?}"
    );
    // An intermediate given bytes of its own is refused.
    let mut p = plan.clone();
    let scores = id("kq") as usize;
    p.tensors[scores].placement = p.tensors[id("merged") as usize].placement;
    let v = ir::plan::check::check_plan(&p);
    assert!(v.iter().any(|v| v.tensor == Some(scores as u32)), "{v:?}");
}

#[test]
fn attention_steps_of_different_sizes_share_the_devices_buffers() {
    let small = Shape {
        head: 40,
        n_kv: 13,
        n_q: 5,
        n_head: 6,
        n_kv_head: 2,
        cache: DType::F16,
        mask: true,
    };
    let large = Shape {
        head: 64,
        n_kv: 31,
        n_q: 3,
        n_head: 9,
        n_kv_head: 3,
        mask: false,
        ..small
    };
    let two = |apart: bool| {
        let mut b = GraphBuilder::new("two");
        chain(&mut b, "a.", small, apart);
        chain(&mut b, "b.", large, apart);
        cpu_plan(&b.finish().unwrap())
    };
    let (fused, apart) = (two(false), two(true));
    assert_eq!((attentions(&fused), attentions(&apart)), (2, 0));
    for threads in [1, 3] {
        let run = |plan: &Plan| {
            let mut rt = load(plan.clone(), threads);
            // Inputs: seeded; the masks causal over the small chain's rows.
            for name in rt.input_names() {
                if name.ends_with("mask") {
                    rt.set_input_f32(&name, &causal(small.n_kv, small.n_q))
                        .unwrap();
                } else {
                    rt.set_random_input(&name, 5).unwrap();
                }
            }
            rt.run().unwrap();
            let out: BTreeMap<String, Vec<f32>> = ["a.merged", "b.merged"]
                .map(|n| (n.to_string(), rt.output_f32(n).unwrap()))
                .into_iter()
                .collect();
            assert_every_step_passes(&mut rt, "two chains");
            out
        };
        assert_eq!(bits(&run(&fused)), bits(&run(&apart)), "{threads} threads");
    }
}

//! Products that share their activations, run as one step on the CPU
//! runtime: sibling products (`mul_mat x N`, 2 to 5 products of different
//! rows, every result stored), and a gate and an up product fused with the
//! GLU that reads them (`mul_mat + glu`), compute, bit for bit, what the
//! unfused nodes compute (the same product kernels, then the same unit), for
//! every weight family the CPU has (F32 panels, F16, Q8_0, Q4_0, Q4_1, Q4_K,
//! Q6_K), both precisions, 1 and 3 threads, at odd sizes with a seed, whether
//! the graph spells the unit as a `glu` op or as `act` then `mul` (an
//! elementwise group); each fused step and the outputs also pass against the
//! reference.

use ggplan_tests::fused_steps::{count_steps, cpu_plan, load_random};
use ggplan_tests::outputs::{assert_every_step_passes, bits, outputs};
use ir::plan::{Plan, Step};
use ir::{DType, GluKind, Graph, GraphBuilder};
use runtime::{Precision, Runtime, Weights};
use std::collections::BTreeMap;

/// How the graph spells the unit.
#[derive(Clone, Copy, Debug)]
enum Unit {
    /// A two-source `glu` op.
    Op(GluKind),
    /// `silu(gate)`, then `mul` (with the up product first when `true`).
    SiluMul(bool),
}

/// `h = unit(mul_mat(wg, x), mul_mat(wu, x))`, weights [k, m] of `dtype`,
/// x [k, n]; with `gate_out` the gate product is an output too, which keeps
/// the products apart.
fn graph(dtype: DType, [k, m, n]: [i64; 3], unit: Unit, gate_out: bool) -> Graph {
    let mut b = GraphBuilder::new("product_glu");
    let wg = b.weight("wg", dtype, [k, m, 1, 1]).unwrap();
    let wu = b.weight("wu", dtype, [k, m, 1, 1]).unwrap();
    let x = b.input("x", DType::F32, [k, n, 1, 1]).unwrap();
    let gate = b.mul_mat("gate", wg, x).unwrap();
    let up = b.mul_mat("up", wu, x).unwrap();
    let h = match unit {
        Unit::Op(kind) => b.glu_split("h", kind, gate, up).unwrap(),
        Unit::SiluMul(up_first) => {
            let s = b.silu("s", gate).unwrap();
            if up_first {
                b.mul("h", up, s).unwrap()
            } else {
                b.mul("h", s, up).unwrap()
            }
        }
    };
    if gate_out {
        b.mark_output(gate).unwrap();
    }
    b.mark_output(h).unwrap();
    b.finish().unwrap()
}

fn product_glus(plan: &Plan) -> usize {
    count_steps(plan, |s| matches!(s, Step::MulMatGlu { .. }))
}

fn load(plan: Plan, precision: Precision, threads: usize) -> Runtime {
    load_random(plan, precision, threads, 23)
}

#[test]
fn a_fused_product_glu_computes_the_unfused_nodes_bits_on_every_weight_family() {
    let cases: &[(DType, [i64; 3])] = &[
        (DType::F32, [17, 3, 1]),
        (DType::F32, [783, 17, 13]),
        (DType::F16, [33, 17, 3]),
        (DType::Q8_0, [96, 17, 1]),
        (DType::Q4_0, [64, 3, 13]),
        (DType::Q4_1, [160, 5, 2]),
        (DType::Q4_K, [256, 17, 3]),
        (DType::Q6_K, [512, 3, 1]),
    ];
    let units = [
        Unit::Op(GluKind::SwiGlu),
        Unit::Op(GluKind::GeGlu),
        Unit::Op(GluKind::GeGluErf),
        Unit::SiluMul(false),
        Unit::SiluMul(true),
    ];
    for (c, &(dtype, size)) in cases.iter().enumerate() {
        // Every unit on the first two cases; one each after (time).
        let picked: Vec<Unit> = match c {
            0 | 1 => units.to_vec(),
            _ => vec![units[c % units.len()]],
        };
        for unit in picked {
            let fused = cpu_plan(&graph(dtype, size, unit, false));
            let apart = cpu_plan(&graph(dtype, size, unit, true));
            assert_eq!(product_glus(&fused), 1, "{dtype} {size:?} {unit:?}");
            assert_eq!(
                product_glus(&apart),
                0,
                "{dtype} {size:?}: the gate is read out"
            );
            for precision in [Precision::Fast, Precision::Exact] {
                for threads in [1, 3] {
                    let what = format!("{dtype} {size:?} {unit:?} {precision:?} {threads} threads");
                    let mut rt = load(fused.clone(), precision, threads);
                    // Seed 4, as `outputs` sets them.
                    let inputs: BTreeMap<_, _> = (rt.input_names().into_iter())
                        .map(|n| {
                            let v = rt.set_random_input(&n, 4).unwrap();
                            (n, v)
                        })
                        .collect();
                    assert_every_step_passes(&mut rt, &what);
                    let step = (rt.steps().iter()).find(|s| s.kind == "mul_mat_glu");
                    assert!(
                        step.is_some_and(|s| !s.fallback),
                        "{what}: a fast fused step"
                    );
                    let got = outputs(&mut rt);
                    let weights = Weights::Random { seed: 23 };
                    for c in runtime::check::check_outputs(&rt, &weights, inputs).unwrap() {
                        assert!(c.passed(), "{what}: {c:?}");
                    }
                    let mut want = outputs(&mut load(apart.clone(), precision, threads));
                    want.remove("gate");
                    assert_eq!(bits(&got), bits(&want), "{what}");
                }
            }
        }
    }
}

/// The reference plan evaluator runs a `mul_mat + glu` step as its nodes:
/// the fused plan's output is the unfused plan's within f64 rounding.
#[test]
fn the_reference_plan_evaluator_runs_the_step_as_its_nodes() {
    use kernels::evaluate::{Bindings, Weights as RefWeights, evaluate_plan};
    for unit in [Unit::Op(GluKind::GeGluErf), Unit::SiluMul(true)] {
        let bindings = Bindings {
            weights: RefWeights::Random { seed: 5 },
            inputs: BTreeMap::new(),
            random_inputs: Some(2),
        };
        let fused = cpu_plan(&graph(DType::Q4_K, [256, 7, 5], unit, false));
        let apart = cpu_plan(&graph(DType::Q4_K, [256, 7, 5], unit, true));
        assert_eq!(product_glus(&fused), 1);
        let (a, b) = (
            evaluate_plan(&fused, &bindings).unwrap(),
            evaluate_plan(&apart, &bindings).unwrap(),
        );
        let (a, b) = (a.read_name("h").unwrap(), b.read_name("h").unwrap());
        let e = kernels::testing::nmse(&b.data, &a.data);
        assert!(e <= 1e-12, "{unit:?}: NMSE {e}");
    }
}

/// `y_i = mul_mat(w_i, x)` for weights of `dtype` with `rows` rows each,
/// x [k, n], every product an output. `apart`: each product but the first
/// reads its own copy of x (`cont`), which keeps them apart with the same
/// values.
fn siblings(dtype: DType, k: i64, rows: &[i64], n: i64, apart: bool) -> Graph {
    let mut b = GraphBuilder::new("product_many");
    let x = b.input("x", DType::F32, [k, n, 1, 1]).unwrap();
    for (i, &m) in rows.iter().enumerate() {
        let w = b.weight(format!("w{i}"), dtype, [k, m, 1, 1]).unwrap();
        let xi = if apart && i > 0 {
            b.cont(format!("x{i}"), x).unwrap()
        } else {
            x
        };
        let y = b.mul_mat(format!("y{i}"), w, xi).unwrap();
        b.mark_output(y).unwrap();
    }
    b.finish().unwrap()
}

fn product_manys(plan: &Plan) -> Vec<usize> {
    (plan.splits.iter().flat_map(|s| &s.steps))
        .filter_map(|s| match s {
            Step::MulMatMany { dsts, .. } => Some(dsts.len()),
            _ => None,
        })
        .collect()
}

#[test]
fn fused_sibling_products_compute_the_unfused_products_bits_on_every_weight_family() {
    let cases: &[(DType, i64, &[i64], i64)] = &[
        (DType::F32, 17, &[5, 3, 5], 1),
        (DType::F32, 783, &[17, 9], 13),
        (DType::F16, 33, &[17, 3, 17], 3),
        (DType::Q8_0, 96, &[17, 5, 5], 1),
        (DType::Q4_0, 64, &[3, 7], 13),
        (DType::Q4_1, 160, &[9, 3, 3], 2),
        (DType::Q4_K, 256, &[17, 3], 3),
        (DType::Q6_K, 512, &[3, 5, 2, 7, 1, 4], 1),
    ];
    for &(dtype, k, rows, n) in cases {
        let fused = cpu_plan(&siblings(dtype, k, rows, n, false));
        let apart = cpu_plan(&siblings(dtype, k, rows, n, true));
        // At most five products a step: six make five and one.
        let want = if rows.len() > 5 {
            vec![5]
        } else {
            vec![rows.len()]
        };
        assert_eq!(product_manys(&fused), want, "{dtype} {rows:?}");
        assert!(product_manys(&apart).is_empty(), "{dtype}: apart");
        for precision in [Precision::Fast, Precision::Exact] {
            for threads in [1, 3] {
                let what = format!("{dtype} {k} {rows:?} {n} {precision:?} {threads} threads");
                let mut rt = load(fused.clone(), precision, threads);
                let inputs: BTreeMap<_, _> = (rt.input_names().into_iter())
                    .map(|n| {
                        let v = rt.set_random_input(&n, 4).unwrap();
                        (n, v)
                    })
                    .collect();
                assert_every_step_passes(&mut rt, &what);
                let step = (rt.steps().iter()).find(|s| s.kind == "mul_mat_many");
                assert!(
                    step.is_some_and(|s| !s.fallback),
                    "{what}: a fast fused step"
                );
                let got = outputs(&mut rt);
                assert_eq!(got.len(), rows.len(), "{what}");
                let weights = Weights::Random { seed: 23 };
                for c in runtime::check::check_outputs(&rt, &weights, inputs).unwrap() {
                    assert!(c.passed(), "{what}: {c:?}");
                }
                let want = outputs(&mut load(apart.clone(), precision, threads));
                assert_eq!(bits(&got), bits(&want), "{what}");
            }
        }
    }
}

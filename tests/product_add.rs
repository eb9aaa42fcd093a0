//! `mul_mat + add` steps on the CPU runtime: a product fused with its add
//! computes, bit for bit, what the unfused pair computes (the same product
//! kernel, then the same add), for every matmul family (f32 panels and
//! `gemm`, f16, int8 dot products, K-quant tiles, both precisions), at odd
//! sizes with a seed; each fused step and the outputs also pass against the
//! reference.

use ggplan_tests::fused_steps::{count_steps, cpu_plan, load_random};
use ggplan_tests::outputs::{assert_every_step_passes, bits, outputs};
use ir::plan::{Plan, Step};
use ir::{DType, Graph, GraphBuilder};
use runtime::{Precision, Runtime, Weights};
use std::collections::BTreeMap;

/// `s = mul_mat(w, x) + r` (or `r + mul_mat(w, x)`), w [k, m] of `dtype` (a
/// weight, or an input when `weight` is false), x [k, n]; with
/// `product_out` the product is an output too, which keeps the pair apart.
fn graph(
    dtype: DType,
    [k, m, n]: [i64; 3],
    weight: bool,
    swapped: bool,
    product_out: bool,
) -> Graph {
    let mut b = GraphBuilder::new("product_add");
    let w = if weight {
        b.weight("w", dtype, [k, m, 1, 1]).unwrap()
    } else {
        b.input("w", dtype, [k, m, 1, 1]).unwrap()
    };
    let x = b.input("x", DType::F32, [k, n, 1, 1]).unwrap();
    let r = b.input("r", DType::F32, [m, n, 1, 1]).unwrap();
    let y = b.mul_mat("y", w, x).unwrap();
    let s = if swapped {
        b.add("s", r, y).unwrap()
    } else {
        b.add("s", y, r).unwrap()
    };
    if product_out {
        b.mark_output(y).unwrap();
    }
    b.mark_output(s).unwrap();
    b.finish().unwrap()
}

fn product_adds(plan: &Plan) -> usize {
    count_steps(plan, |s| matches!(s, Step::MulMatAdd { .. }))
}

fn load(plan: Plan, precision: Precision, threads: usize) -> Runtime {
    load_random(plan, precision, threads, 11)
}

#[test]
fn a_fused_product_add_computes_the_unfused_pairs_bits_on_every_matmul_family() {
    let cases: &[(DType, [i64; 3], bool)] = &[
        (DType::F32, [17, 3, 1], true),
        (DType::F32, [783, 17, 13], true),
        (DType::F32, [17, 5, 3], false), // two activations: gemm
        (DType::F16, [33, 17, 3], true),
        (DType::Q8_0, [96, 17, 1], true),
        (DType::Q4_0, [64, 3, 13], true),
        (DType::Q4_K, [256, 17, 3], true),
        (DType::Q6_K, [512, 3, 1], true),
    ];
    for &(dtype, size, weight) in cases {
        for swapped in [false, true] {
            let fused = cpu_plan(&graph(dtype, size, weight, swapped, false));
            let apart = cpu_plan(&graph(dtype, size, weight, swapped, true));
            assert_eq!(product_adds(&fused), 1, "{dtype} {size:?}");
            assert_eq!(
                product_adds(&apart),
                0,
                "{dtype} {size:?}: the product is read out"
            );
            for precision in [Precision::Fast, Precision::Exact] {
                for threads in [1, 3] {
                    let what = format!("{dtype} {size:?} {precision:?} {threads} threads");
                    let mut rt = load(fused.clone(), precision, threads);
                    // Seed 4, as `outputs` sets them.
                    let inputs: BTreeMap<_, _> = (rt.input_names().into_iter())
                        .map(|n| {
                            let v = rt.set_random_input(&n, 4).unwrap();
                            (n, v)
                        })
                        .collect();
                    assert_every_step_passes(&mut rt, &what);
                    let step = (rt.steps().iter()).find(|s| s.kind == "mul_mat_add");
                    assert!(
                        step.is_some_and(|s| !s.fallback),
                        "{what}: a fast fused step"
                    );
                    let got = outputs(&mut rt);
                    let weights = Weights::Random { seed: 11 };
                    for c in runtime::check::check_outputs(&rt, &weights, inputs).unwrap() {
                        assert!(c.passed(), "{what}: {c:?}");
                    }
                    let mut want = outputs(&mut load(apart.clone(), precision, threads));
                    want.remove("y");
                    assert_eq!(bits(&got), bits(&want), "{what}");
                }
            }
        }
    }
}

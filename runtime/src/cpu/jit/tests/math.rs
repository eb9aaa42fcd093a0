//! Dense sweeps of the polynomial exp, tanh and erf against f64 std/libm,
//! with the bounds documented in `math`.

use super::*;
use crate::cpu::jit::Jit;
use crate::cpu::jit::spec::{Func, Node};
use ir::plan::UnaryFn;
use kernels::reference::fused::apply_unary;

/// `f` of the JIT over `xs` (one flat row, so vector lanes and the tail both run).
fn jit_apply(jit: &Jit, f: Func, xs: &[f32]) -> Vec<f32> {
    let ne = [xs.len() as i64, 1, 1, 1];
    let mut input = xs.to_vec();
    let mut out = vec![f32::NAN; xs.len()];
    let t = |p: *mut f32| RawTensor {
        data: p.cast(),
        dtype: DType::F32,
        ne,
        nb: [4, 4 * ne[0] as u64, 4 * ne[0] as u64, 4 * ne[0] as u64],
    };
    let kernel = jit
        .prepare_nodes(
            &[Node::Input(0), Node::Unary(f, 0)],
            t(out.as_mut_ptr()),
            &[t(input.as_mut_ptr())],
        )
        .unwrap();
    run(&*kernel, 2);
    out
}

/// `n + 1` evenly spaced f32 points over [lo, hi].
fn sweep(lo: f64, hi: f64, n: usize) -> Vec<f32> {
    (0..=n)
        .map(|i| (lo + (hi - lo) * i as f64 / n as f64) as f32)
        .collect()
}

const N: usize = 1 << 20;

#[test]
fn exp_relative_error() {
    let jit = shared_jit();
    let xs = sweep(-87.0, 88.0, N);
    let ys = jit_apply(jit, Func::Exp, &xs);
    let mut worst = (0.0f64, 0.0f32);
    for (&x, &y) in xs.iter().zip(&ys) {
        let want = f64::from(x).exp();
        let rel = ((f64::from(y) - want) / want).abs();
        if rel > worst.0 {
            worst = (rel, x);
        }
    }
    eprintln!("exp: max relative error {:e} at {}", worst.0, worst.1);
    assert!(
        worst.0 <= 1.5e-7,
        "exp: relative error {:e} at {}",
        worst.0,
        worst.1
    );

    let special = [
        f32::NEG_INFINITY,
        -200.0,
        -104.0,
        0.0,
        89.0,
        f32::INFINITY,
        f32::NAN,
    ];
    let ys = jit_apply(jit, Func::Exp, &special);
    assert!(ys[0] == 0.0 && ys[1] == 0.0 && ys[2] < 1e-44, "{ys:?}");
    assert_eq!(ys[3], 1.0);
    assert!(ys[4] == f32::INFINITY && ys[5] == f32::INFINITY, "{ys:?}");
    assert!(ys[6].is_nan());
    // Subnormal results degrade gradually rather than jump.
    let ys = jit_apply(jit, Func::Exp, &[-90.0, -100.0]);
    assert!(
        (f64::from(ys[0]) / (-90f64).exp() - 1.0).abs() < 1e-3,
        "{ys:?}"
    );
    assert!(
        (f64::from(ys[1]) / (-100f64).exp() - 1.0).abs() < 0.2,
        "{ys:?}"
    );
}

/// Max |jit(x) - want(x)| over a sweep.
fn max_abs_error(jit: &Jit, f: Func, lo: f64, hi: f64, want: impl Fn(f64) -> f64) -> (f64, f32) {
    let xs = sweep(lo, hi, N);
    let ys = jit_apply(jit, f, &xs);
    let mut worst = (0.0f64, 0.0f32);
    for (&x, &y) in xs.iter().zip(&ys) {
        let e = (f64::from(y) - want(f64::from(x))).abs();
        if e > worst.0 || e.is_nan() {
            worst = (e, x);
        }
    }
    worst
}

#[test]
fn tanh_and_erf_absolute_error() {
    let jit = shared_jit();
    let (e, at) = max_abs_error(jit, Func::Plan(UnaryFn::Tanh), -12.0, 12.0, f64::tanh);
    eprintln!("tanh: max absolute error {e:e} at {at}");
    assert!(e <= 2e-7, "tanh: {e:e} at {at}");
    let (e, at) = max_abs_error(jit, Func::Erf, -7.0, 7.0, libm::erf);
    eprintln!("erf: max absolute error {e:e} at {at}");
    assert!(e <= 2e-7, "erf: {e:e} at {at}");
    let ys = jit_apply(
        jit,
        Func::Plan(UnaryFn::Tanh),
        &[f32::INFINITY, f32::NEG_INFINITY, 0.0],
    );
    assert_eq!(ys, [1.0, -1.0, 0.0]);
    let ys = jit_apply(jit, Func::Erf, &[f32::INFINITY, f32::NEG_INFINITY, 0.0]);
    assert_eq!(ys, [1.0, -1.0, 0.0]);
}

#[test]
fn activations_meet_the_nmse_threshold_over_a_sweep() {
    let jit = shared_jit();
    for (f, name, lo, hi) in [
        (UnaryFn::Silu, "silu", -90.0, 90.0),
        (UnaryFn::Gelu, "gelu", -12.0, 12.0),
        (UnaryFn::GeluErf, "gelu_erf", -12.0, 12.0),
        (UnaryFn::Tanh, "tanh", -12.0, 12.0),
    ] {
        let xs = sweep(lo, hi, N);
        let ys = jit_apply(jit, Func::Plan(f), &xs);
        let want: Vec<f64> = xs.iter().map(|&x| apply_unary(f, f64::from(x))).collect();
        let got: Vec<f64> = ys.iter().map(|&y| f64::from(y)).collect();
        let e = kernels::testing::nmse(&want, &got);
        eprintln!("{name}: nmse {e:e}");
        assert!(
            e <= kernels::testing::nmse_threshold(name),
            "{name}: nmse {e:e}"
        );
    }
}

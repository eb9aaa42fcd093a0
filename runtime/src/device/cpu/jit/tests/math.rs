//! Dense sweeps of the polynomial exp, tanh and erf against f64 std/libm,
//! with the bounds documented in `math`.

use super::*;
use crate::device::cpu::jit::Jit;
use crate::device::cpu::jit::spec::{Func, Node};
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
    let worst = max_relative_error(jit, Func::Exp, -87.0, 88.0, f64::exp, |_| 1.0);
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

/// silu and gelu in f64 as x / (1 + e^-arg): the reference's gelu,
/// 0.5 x (1 + tanh u), cancels in f64 itself for x below about -6.
fn sigmoid_form(f: UnaryFn, x: f64) -> f64 {
    x / (1.0 + (-sigmoid_arg(f, x)).exp())
}

/// The exponent's argument of [`sigmoid_form`].
fn sigmoid_arg(f: UnaryFn, x: f64) -> f64 {
    match f {
        UnaryFn::Silu => x,
        _ => 2.0 * (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044_715 * x * x * x),
    }
}

/// Max relative error of silu and gelu (x / (1 + e^-arg), the table-driven
/// exponential of `exp_table`) over their whole useful ranges (bounds as in
/// `exp_table`'s doc). silu is
/// checked down to -86 (below, the true value is under 1e-36 and the result
/// is bounded instead) and gelu to -9 (its exponent reaches -86 there).
/// gelu's argument is itself computed in f32, so its error is measured
/// relative to the conditioning: relative error / max(1, |arg|).
#[test]
fn sigmoid_family_relative_error() {
    let jit = shared_jit();
    for (f, lo, hi) in [(UnaryFn::Silu, -86.0, 88.0), (UnaryFn::Gelu, -9.0, 12.0)] {
        let cond = |x: f64| match f {
            UnaryFn::Silu => 1.0,
            _ => sigmoid_arg(f, x).abs().max(1.0),
        };
        let want = |x: f64| sigmoid_form(f, x);
        let worst = max_relative_error(jit, Func::Plan(f), lo, hi, want, cond);
        eprintln!("{f:?}: max relative error {:e} at {}", worst.0, worst.1);
        assert!(
            worst.0 <= 4.5e-7,
            "{f:?}: relative error {:e} at {}",
            worst.0,
            worst.1
        );
    }
    // Within |x| <= 30 (every activation a model produces in practice) the
    // range reduction's constant adds less, so the bound is tighter.
    let silu = |x: f64| sigmoid_form(UnaryFn::Silu, x);
    let (worst, at) =
        max_relative_error(jit, Func::Plan(UnaryFn::Silu), -30.0, 30.0, silu, |_| 1.0);
    eprintln!("silu on [-30, 30]: max relative error {worst:e} at {at}");
    assert!(worst <= 3e-7, "silu on [-30, 30]: {worst:e} at {at}");
    // Far tails: silu(-200) is a tiny negative number or -0, never NaN or
    // large; silu(200) is 200; NaN stays NaN.
    let ys = jit_apply(
        jit,
        Func::Plan(UnaryFn::Silu),
        &[-200.0, -100.0, 200.0, f32::NAN, f32::INFINITY],
    );
    assert!(ys[0] <= 0.0 && ys[0] > -1e-30, "{ys:?}");
    assert!(ys[1] <= 0.0 && ys[1] > -1e-30, "{ys:?}");
    assert_eq!(ys[2], 200.0);
    assert!(ys[3].is_nan());
    assert_eq!(ys[4], f32::INFINITY);
}

/// A value gives the same bits whether it lands in a full vector or in the
/// scalar tail (where alignment, thread splits and row lengths put it), for
/// every function: plans stay bit-reproducible when only offsets change.
#[test]
fn vector_lanes_and_scalar_tail_compute_identical_bits() {
    let jit = shared_jit();
    let values: Vec<f32> = [-1e-3, 1e-3, 0.0, -0.0, 87.5, -87.5, 86.6, -86.6]
        .into_iter()
        .chain(sweep(-100.0, 100.0, 1015))
        .collect();
    // 1031 = 16 * 64 + 7 = 8 * 128 + 7: the last 7 elements are the tail
    // for any vector width.
    let body = 1024;
    assert_eq!(values.len(), body);
    let funcs = [
        Func::Exp,
        Func::Erf,
        Func::Plan(UnaryFn::Silu),
        Func::Plan(UnaryFn::Gelu),
        Func::Plan(UnaryFn::GeluErf),
        Func::Plan(UnaryFn::Tanh),
    ];
    for f in funcs {
        for chunk in values.chunks(7) {
            let mut row = values.clone();
            row.extend_from_slice(chunk);
            row.resize(body + 7, 0.0);
            let ys = jit_apply(jit, f, &row);
            for (k, &v) in chunk.iter().enumerate() {
                let at = values.iter().position(|&x| x.to_bits() == v.to_bits());
                let vector = ys[at.expect("each value is in the body")];
                let tail = ys[body + k];
                assert_eq!(
                    vector.to_bits(),
                    tail.to_bits(),
                    "{f:?}({v}): vector {vector} vs tail {tail}"
                );
            }
        }
    }
}

/// Max |jit(x) / want(x) - 1| / cond(x) over a sweep, and where; points
/// where want(x) = 0 are skipped, a NaN result counts as the worst.
fn max_relative_error(
    jit: &Jit,
    f: Func,
    lo: f64,
    hi: f64,
    want: impl Fn(f64) -> f64,
    cond: impl Fn(f64) -> f64,
) -> (f64, f32) {
    let xs = sweep(lo, hi, N);
    let ys = jit_apply(jit, f, &xs);
    let mut worst = (0.0f64, 0.0f32);
    for (&x, &y) in xs.iter().zip(&ys) {
        let w = want(f64::from(x));
        if w == 0.0 {
            continue;
        }
        let rel = ((f64::from(y) - w) / w).abs() / cond(f64::from(x));
        if rel > worst.0 || rel.is_nan() {
            worst = (rel, x);
        }
    }
    worst
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

use super::{assert_close, dense, run, run_same};
use crate::reference::{gelu_erf, gelu_tanh, silu};
use crate::testing::Rng;
use ir::{DType, GluKind, Op};

#[test]
fn add_broadcasts_src1_over_every_dim() {
    // a [3, 2, 2], b [3, 1, 1]: b repeats over rows and matrices.
    let a = dense(
        [3, 2, 2, 1],
        &[1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.],
    );
    let b = dense([3, 1, 1, 1], &[10., 20., 30.]);
    let y = run_same(Op::Add, &[&a, &b]);
    assert_eq!(
        y.data,
        [11., 22., 33., 14., 25., 36., 17., 28., 39., 20., 31., 42.]
    );

    // b [1, 2, 1]: one value per row, repeated along ne0 and over dim 2.
    let b = dense([1, 2, 1, 1], &[100., 200.]);
    let y = run_same(Op::Add, &[&a, &b]);
    assert_eq!(
        y.data,
        [
            101., 102., 103., 204., 205., 206., 107., 108., 109., 210., 211., 212.
        ]
    );
}

#[test]
fn sub_mul_div_broadcast() {
    let a = dense([2, 2, 1, 1], &[1., 2., 3., 4.]);
    let b = dense([2, 1, 1, 1], &[2., 4.]);
    assert_eq!(run_same(Op::Sub, &[&a, &b]).data, [-1., -2., 1., 0.]);
    assert_eq!(run_same(Op::Mul, &[&a, &b]).data, [2., 8., 6., 16.]);
    assert_eq!(run_same(Op::Div, &[&a, &b]).data, [0.5, 0.5, 1.5, 1.0]);
}

#[test]
fn unary_ops_by_hand() {
    let a = dense([4, 1, 1, 1], &[-2., 0., 1., 4.]);
    let y = run_same(
        Op::Scale {
            scale: 0.5,
            bias: 1.0,
        },
        &[&a],
    );
    assert_eq!(y.data, [0., 1., 1.5, 3.]);
    assert_eq!(run_same(Op::Sqr, &[&a]).data, [4., 0., 1., 16.]);
    assert_eq!(run_same(Op::Relu, &[&a]).data, [0., 0., 1., 4.]);
    let y = run_same(Op::Sqrt, &[&a]);
    assert!(y.data[0].is_nan());
    assert_eq!(&y.data[1..], &[0., 1., 2.]);
    let y = run_same(Op::Tanh, &[&a]);
    assert_close(
        &y.data,
        &[
            -0.964_027_580_075_817,
            0.0,
            0.761_594_155_955_764_9,
            0.999_329_299_739_067,
        ],
        1e-15,
    );
}

#[test]
fn activations_by_hand() {
    // silu(1) = 1 / (1 + e^-1); silu(-1) = -1 / (1 + e).
    assert_close(
        &[silu(1.0), silu(-1.0), silu(0.0)],
        &[0.731_058_578_630_004_9, -0.268_941_421_369_995_1, 0.0],
        1e-15,
    );
    // gelu tanh: 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)).
    assert_close(
        &[gelu_tanh(1.0), gelu_tanh(-1.0)],
        &[0.841_191_990_608_276_8, -0.158_808_009_391_723_2],
        1e-14,
    );
    // gelu erf: x * Phi(x); Phi(1) = 0.8413447460685429, Phi(2) = 0.9772498680518208.
    assert_close(
        &[gelu_erf(1.0), gelu_erf(-1.0), gelu_erf(2.0)],
        &[
            0.841_344_746_068_542_9,
            -0.158_655_253_931_457_1,
            1.954_499_736_103_641_6,
        ],
        1e-14,
    );
    let a = dense([3, 1, 1, 1], &[-1., 0., 1.]);
    assert_close(
        &run_same(Op::Silu, &[&a]).data,
        &[silu(-1.0), 0.0, silu(1.0)],
        0.0,
    );
    assert_close(
        &run_same(Op::Gelu, &[&a]).data,
        &[gelu_tanh(-1.0), 0.0, gelu_tanh(1.0)],
        0.0,
    );
    assert_close(
        &run_same(Op::GeluErf, &[&a]).data,
        &[gelu_erf(-1.0), 0.0, gelu_erf(1.0)],
        0.0,
    );
}

#[test]
fn gelu_erf_and_tanh_agree_closely() {
    for i in -60..=60 {
        let x = f64::from(i) / 10.0;
        assert!((gelu_erf(x) - gelu_tanh(x)).abs() < 5e-4, "x = {x}");
    }
}

#[test]
fn glu_one_source_by_hand() {
    // Row [g0, g1, u0, u1] = [1, -1, 2, 3].
    let a = dense([4, 1, 1, 1], &[1., -1., 2., 3.]);
    let swiglu = Op::Glu {
        kind: GluKind::SwiGlu,
        swapped: false,
    };
    let y = run(swiglu, &[&a], DType::F32, [2, 1, 1, 1]);
    assert_close(&y.data, &[silu(1.0) * 2.0, silu(-1.0) * 3.0], 1e-15);
    let swapped = Op::Glu {
        kind: GluKind::GeGlu,
        swapped: true,
    };
    let y = run(swapped, &[&a], DType::F32, [2, 1, 1, 1]);
    assert_close(&y.data, &[gelu_tanh(2.0), -gelu_tanh(3.0)], 1e-15);
}

#[test]
fn glu_one_source_equals_two_sources() {
    let mut rng = Rng::new(11);
    let (n, rows) = (5, 3);
    let gate = rng.vec(n * rows, -3.0, 3.0);
    let up = rng.vec(n * rows, -3.0, 3.0);
    let mut joined = Vec::new();
    for r in 0..rows {
        joined.extend_from_slice(&gate[r * n..(r + 1) * n]);
        joined.extend_from_slice(&up[r * n..(r + 1) * n]);
    }
    let ne = [n as i64, rows as i64, 1, 1];
    let one = dense([2 * n as i64, rows as i64, 1, 1], &joined);
    let (g, u) = (dense(ne, &gate), dense(ne, &up));
    for kind in [GluKind::SwiGlu, GluKind::GeGlu, GluKind::GeGluErf] {
        let op = Op::Glu {
            kind,
            swapped: false,
        };
        let y1 = run(op, &[&one], DType::F32, ne);
        let y2 = run(op, &[&g, &u], DType::F32, ne);
        assert_eq!(y1.data, y2.data, "{kind:?}");
    }
}

#[test]
fn clamp_by_hand() {
    let a = dense([5, 1, 1, 1], &[-2., 0.25, 0.5, 3., f64::INFINITY]);
    let y = run_same(
        Op::Clamp {
            min: 0.25,
            max: 2.0,
        },
        &[&a],
    );
    assert_eq!(y.data, [0.25, 0.25, 0.5, 2., 2.]);
}

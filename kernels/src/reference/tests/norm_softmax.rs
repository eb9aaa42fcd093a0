use super::{assert_close, dense, run_same};
use crate::reference::{Dense, alibi_slope};
use crate::testing::Rng;
use ir::Op;

const NEG_INF: f64 = f64::NEG_INFINITY;

#[test]
fn rms_norm_by_hand() {
    let a = dense([4, 1, 1, 1], &[1., 2., 3., 4.]);
    let y = run_same(Op::RmsNorm { eps: 0.0 }, &[&a]);
    let r = 7.5f64.sqrt();
    assert_close(&y.data, &[1. / r, 2. / r, 3. / r, 4. / r], 1e-15);
}

#[test]
fn rms_norm_of_a_constant_row() {
    let eps = 1e-5f32;
    for c in [3.0, -0.25, 1e-3] {
        let a = dense([7, 2, 1, 1], &[c; 14]);
        let y = run_same(Op::RmsNorm { eps }, &[&a]);
        let want = c / (c * c + f64::from(eps)).sqrt();
        assert_close(&y.data, &[want; 14], 1e-15);
    }
}

#[test]
fn norm_by_hand_and_moments() {
    let a = dense([4, 1, 1, 1], &[1., 2., 3., 4.]);
    let y = run_same(Op::Norm { eps: 0.0 }, &[&a]);
    let s = 1.25f64.sqrt();
    assert_close(&y.data, &[-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s], 1e-15);

    let mut rng = Rng::new(21);
    let a = Dense::new([33, 5, 2, 1], rng.vec(330, -4.0, 9.0));
    let y = run_same(Op::Norm { eps: 1e-6 }, &[&a]);
    for (row, out) in a.rows().zip(y.rows()) {
        let n = out.len() as f64;
        let mean = out.iter().sum::<f64>() / n;
        let var = out.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        let in_mean = row.iter().sum::<f64>() / n;
        let in_var = row.iter().map(|v| (v - in_mean).powi(2)).sum::<f64>() / n;
        assert!(mean.abs() < 1e-14, "mean {mean}");
        assert_close(&[var], &[in_var / (in_var + 1e-6)], 1e-12);
    }
}

#[test]
fn soft_max_by_hand() {
    let a = dense([2, 1, 1, 1], &[0.0, 2f64.ln()]);
    let y = run_same(
        Op::SoftMax {
            scale: 1.0,
            max_bias: 0.0,
        },
        &[&a],
    );
    assert_close(&y.data, &[1. / 3., 2. / 3.], 1e-15);
    // scale applies before the mask: 2 * [0, ln2 / 2] + [0, -inf, ln 3] ...
    let a = dense([3, 1, 1, 1], &[0.0, 5.0, 2f64.ln() / 2.0]);
    let mask = dense([3, 1, 1, 1], &[3f64.ln(), NEG_INF, 0.0]);
    let y = run_same(
        Op::SoftMax {
            scale: 2.0,
            max_bias: 0.0,
        },
        &[&a, &mask],
    );
    assert_close(&y.data, &[0.6, 0.0, 0.4], 1e-15);
}

#[test]
fn soft_max_all_masked_row_is_zero() {
    let a = dense([3, 2, 1, 1], &[1., 2., 3., 4., 5., 6.]);
    let mask = dense([3, 2, 1, 1], &[NEG_INF, NEG_INF, NEG_INF, 0., NEG_INF, 0.]);
    let y = run_same(
        Op::SoftMax {
            scale: 1.0,
            max_bias: 0.0,
        },
        &[&a, &mask],
    );
    let e = 1.0 / (1.0 + 2f64.exp());
    assert_close(&y.data, &[0., 0., 0., e, 0., 1. - e], 1e-15);
}

#[test]
fn soft_max_uses_mask_row_i1_and_repeats_dims_2_3() {
    // The mask has 3 rows for 2 rows of logits (row 2 is never read) and one
    // matrix for 2 heads.
    let a = dense([2, 2, 2, 1], &[0.; 8]);
    let mask = dense([2, 3, 1, 1], &[0., 2f64.ln(), 3f64.ln(), 0., 100., -100.]);
    let y = run_same(
        Op::SoftMax {
            scale: 1.0,
            max_bias: 0.0,
        },
        &[&a, &mask],
    );
    let row0 = [1. / 3., 2. / 3.];
    let row1 = [0.75, 0.25];
    assert_close(&y.data, &[row0, row1, row0, row1].concat(), 1e-15);
}

#[test]
fn alibi_slopes_by_hand() {
    let eight: Vec<f64> = (0..8).map(|h| alibi_slope(8.0, 8, h)).collect();
    let want: Vec<f64> = (0..8).map(|h| 0.5f64.powi(h + 1)).collect();
    assert_close(&eight, &want, 1e-15);
    // 6 heads: n = 4, m0 = 2^-2, m1 = 2^-1; heads 4, 5 take m1^1, m1^3.
    let six: Vec<f64> = (0..6).map(|h| alibi_slope(8.0, 6, h)).collect();
    assert_close(
        &six,
        &[0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125],
        1e-15,
    );
    assert_eq!(alibi_slope(0.0, 6, 3), 1.0);
}

#[test]
fn soft_max_alibi_scales_the_mask_per_head() {
    // 2 heads, max_bias 8: n = 2, m0 = 2^-4; head 0 slope 1/16, head 1 slope 1/256.
    let a = dense([2, 1, 2, 1], &[0.; 4]);
    let mask = dense([2, 1, 1, 1], &[0., 16.]);
    let y = run_same(
        Op::SoftMax {
            scale: 1.0,
            max_bias: 8.0,
        },
        &[&a, &mask],
    );
    let p = |z: f64| 1.0 / (1.0 + z.exp());
    assert_close(
        &y.data,
        &[p(1.0), 1. - p(1.0), p(1. / 16.), 1. - p(1. / 16.)],
        1e-15,
    );
}

#[test]
fn soft_max_rows_sum_to_one() {
    let mut rng = Rng::new(31);
    let a = Dense::new([17, 3, 4, 2], rng.vec(17 * 24, -6.0, 6.0));
    let mut mask = Dense::new([17, 5, 1, 2], rng.vec(17 * 10, -2.0, 2.0));
    for (i, v) in mask.data.iter_mut().enumerate() {
        if i % 3 == 0 {
            *v = NEG_INF;
        }
    }
    let cases: [(f32, f32, Option<&Dense>); 4] = [
        (1.0, 0.0, None),
        (0.37, 0.0, None),
        (0.37, 0.0, Some(&mask)),
        (1.5, 8.0, Some(&mask)),
    ];
    for (scale, max_bias, m) in cases {
        let op = Op::SoftMax { scale, max_bias };
        let y = match m {
            Some(m) => run_same(op, &[&a, m]),
            None => run_same(op, &[&a]),
        };
        for row in y.rows() {
            let sum: f64 = row.iter().sum();
            assert!(
                (sum - 1.0).abs() < 1e-14,
                "scale {scale} bias {max_bias}: sum {sum}"
            );
            assert!(row.iter().all(|&v| (0.0..=1.0).contains(&v)));
        }
    }
}

#[test]
fn diag_mask_inf_by_hand() {
    // [3, 2]: element (i0, i1) is masked when i0 > n_past + i1.
    let a = dense([3, 2, 1, 1], &[1., 2., 3., 4., 5., 6.]);
    let y = run_same(Op::DiagMaskInf { n_past: 0 }, &[&a]);
    assert_eq!(y.data, [1., NEG_INF, NEG_INF, 4., 5., NEG_INF]);
    let y = run_same(Op::DiagMaskInf { n_past: 1 }, &[&a]);
    assert_eq!(y.data, [1., 2., NEG_INF, 4., 5., 6.]);
}

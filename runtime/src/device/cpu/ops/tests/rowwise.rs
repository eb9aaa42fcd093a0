//! sum_rows, mean, argmax, diag_mask_inf, soft_max, rms_norm, norm.

use super::harness::*;
use ir::{DType, Op};
use kernels::reference::Dense;
use kernels::testing::Rng;

const SHAPES: [[i64; 4]; 6] = [
    [1, 1, 1, 1],
    [5, 3, 1, 1],
    [33, 17, 1, 1],
    [7, 783, 1, 1],
    [3, 4096, 1, 1],
    [1001, 3, 2, 2],
];

#[test]
fn sum_rows_and_mean() {
    let mut rng = Rng::new(20);
    for op in [Op::SumRows, Op::Mean] {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for ne in SHAPES {
                let a = filled(&mut rng, dtype, ne);
                let dst = poisoned(dtype, [1, ne[1], ne[2], ne[3]]);
                let what = format!("{op} {dtype} {ne:?}");
                check(&what, op, vec![a], Dst::Own(dst), Expect::Nmse);
            }
            let a = permuted(&mut rng, dtype, [9, 13, 2, 1], [1, 0, 2, 3], -1.0, 1.0);
            let dst = poisoned(dtype, [1, 13, 2, 1]);
            check(
                &format!("{op} {dtype} transposed"),
                op,
                vec![a],
                Dst::Own(dst),
                Expect::Nmse,
            );
        }
    }
}

#[test]
fn argmax_takes_the_last_maximum() {
    let mut rng = Rng::new(21);
    for dtype in [DType::F32, DType::F16] {
        for (n0, n1) in [(1, 1), (5, 3), (33, 17), (7, 783), (3, 4096)] {
            // Few distinct values: ties everywhere.
            let v = (0..n0 * n1).map(|_| rng.below(4) as f64).collect();
            let a = dense(dtype, &Dense::new([n0, n1, 1, 1], v));
            let dst = poisoned(DType::I32, [n1, 1, 1, 1]);
            let what = format!("argmax {dtype} [{n0}, {n1}]");
            check(&what, Op::Argmax, vec![a], Dst::Own(dst), Expect::Bytes);
        }
    }
    let a = permuted(&mut rng, DType::F32, [6, 9, 1, 1], [1, 0, 2, 3], -1.0, 1.0);
    let dst = poisoned(DType::I32, [9, 1, 1, 1]);
    check(
        "argmax transposed",
        Op::Argmax,
        vec![a],
        Dst::Own(dst),
        Expect::Bytes,
    );
}

#[test]
fn diag_mask_inf() {
    let mut rng = Rng::new(22);
    for n_past in [-2, 0, 3] {
        for dtype in [DType::F32, DType::F16] {
            for ne in [[7, 5, 2, 1], [17, 17, 1, 1], [1, 1, 1, 1]] {
                let op = Op::DiagMaskInf { n_past };
                let a = filled(&mut rng, dtype, ne);
                let dst = poisoned(dtype, ne);
                let what = format!("diag_mask_inf {n_past} {dtype} {ne:?}");
                check(&what, op, vec![a], Dst::Own(dst), Expect::Bytes);
            }
        }
    }
    let a = filled(&mut rng, DType::F32, [9, 9, 1, 1]);
    let op = Op::DiagMaskInf { n_past: 1 };
    check(
        "diag_mask_inf in place",
        op,
        vec![a],
        Dst::Into(0),
        Expect::Bytes,
    );
}

/// A causal mask `[ne0, ne1_pad]`: -inf above the diagonal shifted by `n_past`,
/// random small values elsewhere; row 0 fully masked when `kill_first`.
fn causal_mask(rng: &mut Rng, dtype: DType, ne: [i64; 4], n_past: i64, kill_first: bool) -> T {
    let m = Dense::from_fn(ne, |[i0, i1, _, _]| {
        if i0 > n_past + i1 || (kill_first && i1 == 0) {
            f64::NEG_INFINITY
        } else {
            rng.uniform(-1.0, 1.0)
        }
    });
    dense(dtype, &m)
}

#[test]
fn soft_max_with_masks_scale_and_alibi() {
    let mut rng = Rng::new(23);
    for dtype in [DType::F32, DType::F16] {
        for ne in [
            [1, 1, 1, 1],
            [7, 3, 5, 2],
            [33, 17, 3, 1],
            [5, 783, 1, 1],
            [3, 4096, 1, 1],
        ] {
            for max_bias in [0.0, 8.0] {
                let op = Op::SoftMax {
                    scale: 0.7,
                    max_bias,
                };
                let a = filled(&mut rng, dtype, ne);
                let dst = poisoned(dtype, ne);
                let what = format!("soft_max {dtype} {ne:?} no mask");
                check(&what, op, vec![a], Dst::Own(dst), Expect::Nmse);
                for mask_dtype in [DType::F32, DType::F16] {
                    let a = filled(&mut rng, dtype, ne);
                    // Padded rows, broadcast over dims 2 and 3; one fully masked row.
                    let mne = [ne[0], ne[1] + 2, 1, 1];
                    let mask = causal_mask(&mut rng, mask_dtype, mne, ne[0] - ne[1], true);
                    let dst = poisoned(dtype, ne);
                    let what = format!("soft_max {dtype} {ne:?} mask {mask_dtype} bias {max_bias}");
                    check(&what, op, vec![a, mask], Dst::Own(dst), Expect::Nmse);
                }
            }
        }
    }
    // Strided logits, and in place.
    let op = Op::SoftMax {
        scale: 1.0,
        max_bias: 0.0,
    };
    let a = permuted(&mut rng, DType::F32, [9, 13, 2, 1], [1, 0, 2, 3], -3.0, 3.0);
    let dst = poisoned(DType::F32, [9, 13, 2, 1]);
    check(
        "soft_max transposed",
        op,
        vec![a],
        Dst::Own(dst),
        Expect::Nmse,
    );
    let a = filled(&mut rng, DType::F32, [9, 13, 2, 1]);
    check("soft_max in place", op, vec![a], Dst::Into(0), Expect::Nmse);
}

#[test]
fn rms_norm_and_norm() {
    let mut rng = Rng::new(24);
    for op in [Op::RmsNorm { eps: 1e-6 }, Op::Norm { eps: 1e-5 }] {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for ne in SHAPES {
                let a = filled(&mut rng, dtype, ne);
                let dst = poisoned(dtype, ne);
                let what = format!("{op} {dtype} {ne:?}");
                check(&what, op, vec![a], Dst::Own(dst), Expect::Nmse);
            }
        }
        let a = permuted(&mut rng, DType::F32, [9, 13, 2, 1], [1, 0, 2, 3], -1.0, 1.0);
        let dst = poisoned(DType::F32, [9, 13, 2, 1]);
        check(
            &format!("{op} transposed"),
            op,
            vec![a],
            Dst::Own(dst),
            Expect::Nmse,
        );
        let a = filled(&mut rng, DType::F32, [4097, 3, 1, 1]);
        check(
            &format!("{op} in place"),
            op,
            vec![a],
            Dst::Into(0),
            Expect::Nmse,
        );
    }
}

//! The elementwise fallbacks: unary maps, broadcast binary ops, glu.

use super::harness::*;
use ir::{DType, GluKind, Op};
use kernels::testing::Rng;

const UNARY: [Op; 9] = [
    Op::Scale {
        scale: 1.5,
        bias: -0.25,
    },
    Op::Sqr,
    Op::Sqrt,
    Op::Silu,
    Op::Gelu,
    Op::GeluErf,
    Op::Relu,
    Op::Tanh,
    Op::Clamp {
        min: -0.5,
        max: 1.25,
    },
];

#[test]
fn unary_ops() {
    let mut rng = Rng::new(30);
    for op in UNARY {
        let lo = if op == Op::Sqrt { 0.0 } else { -4.0 };
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for ne in [[1, 1, 1, 1], [7, 3, 1, 1], [1001, 3, 1, 1], [3, 783, 1, 1]] {
                let a = dense(dtype, &random(&mut rng, ne, lo, 4.0));
                let dst = poisoned(dtype, ne);
                let what = format!("{op} {dtype} {ne:?}");
                check(&what, op, vec![a], Dst::Own(dst), Expect::Nmse);
            }
            let a = permuted(&mut rng, dtype, [7, 17, 3, 1], [2, 0, 1, 3], lo, 4.0);
            let dst = poisoned(dtype, [7, 17, 3, 1]);
            check(
                &format!("{op} {dtype} permuted"),
                op,
                vec![a],
                Dst::Own(dst),
                Expect::Nmse,
            );
        }
        let a = dense(DType::F32, &random(&mut rng, [3, 4096, 1, 1], lo, 4.0));
        let dst = poisoned(DType::F32, [3, 4096, 1, 1]);
        check(
            &format!("{op} 4096 rows"),
            op,
            vec![a],
            Dst::Own(dst),
            Expect::Nmse,
        );
        let a = dense(DType::F32, &random(&mut rng, [33, 5, 1, 1], lo, 4.0));
        check(
            &format!("{op} in place"),
            op,
            vec![a],
            Dst::Into(0),
            Expect::Nmse,
        );
    }
}

#[test]
fn binary_ops_broadcast() {
    let mut rng = Rng::new(31);
    let a_ne = [15, 6, 4, 2];
    let b_shapes = [[15, 6, 4, 2], [1, 1, 1, 1], [15, 1, 4, 1], [5, 3, 1, 2]];
    for op in [Op::Add, Op::Sub, Op::Mul, Op::Div] {
        for (da, db) in [
            (DType::F32, DType::F32),
            (DType::F16, DType::F32),
            (DType::F32, DType::BF16),
        ] {
            for b_ne in b_shapes {
                let a = dense(da, &random(&mut rng, a_ne, -2.0, 2.0));
                let b = dense(db, &random(&mut rng, b_ne, 0.5, 2.0));
                let dst = poisoned(da, a_ne);
                let what = format!("{op} {da} {db} {b_ne:?}");
                check(&what, op, vec![a, b], Dst::Own(dst), Expect::Nmse);
            }
        }
        for rows in [1, 3, 17, 783] {
            let a = filled(&mut rng, DType::F32, [9, rows, 1, 1]);
            let b = dense(DType::F32, &random(&mut rng, [9, 1, 1, 1], 0.5, 2.0));
            let dst = poisoned(DType::F32, [9, rows, 1, 1]);
            check(
                &format!("{op} rows {rows}"),
                op,
                vec![a, b],
                Dst::Own(dst),
                Expect::Nmse,
            );
        }
        let a = permuted(&mut rng, DType::F32, [7, 5, 2, 1], [1, 0, 2, 3], -2.0, 2.0);
        let b = permuted(&mut rng, DType::F32, [7, 5, 1, 1], [1, 0, 2, 3], 0.5, 2.0);
        let dst = poisoned(DType::F32, [7, 5, 2, 1]);
        check(
            &format!("{op} transposed"),
            op,
            vec![a, b],
            Dst::Own(dst),
            Expect::Nmse,
        );
        let a = filled(&mut rng, DType::F32, [7, 5, 2, 1]);
        let b = dense(DType::F32, &random(&mut rng, [7, 5, 2, 1], 0.5, 2.0));
        check(
            &format!("{op} in place"),
            op,
            vec![a, b],
            Dst::Into(0),
            Expect::Nmse,
        );
    }
}

#[test]
fn glu_one_and_two_sources() {
    let mut rng = Rng::new(32);
    for kind in [GluKind::SwiGlu, GluKind::GeGlu, GluKind::GeGluErf] {
        for dtype in [DType::F32, DType::F16] {
            for rows in [1, 3, 97] {
                for swapped in [false, true] {
                    let op = Op::Glu { kind, swapped };
                    let a = dense(dtype, &random(&mut rng, [22, rows, 1, 1], -4.0, 4.0));
                    let dst = poisoned(dtype, [11, rows, 1, 1]);
                    let what = format!("glu {kind:?} {dtype} rows {rows} swapped {swapped}");
                    check(&what, op, vec![a], Dst::Own(dst), Expect::Nmse);
                }
                let op = Op::Glu {
                    kind,
                    swapped: false,
                };
                let g = dense(dtype, &random(&mut rng, [13, rows, 1, 1], -4.0, 4.0));
                let u = filled(&mut rng, DType::F32, [13, rows, 1, 1]);
                let dst = poisoned(dtype, [13, rows, 1, 1]);
                let what = format!("glu {kind:?} {dtype} two sources rows {rows}");
                check(&what, op, vec![g, u], Dst::Own(dst), Expect::Nmse);
            }
        }
    }
}

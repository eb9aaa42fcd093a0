//! `eval_fused` against `reference::compute` run op by op (both in f64, so the
//! results must agree to the last bit or within a few ulps), at odd sizes with
//! broadcasting, plus the body checks.

use super::{check_fused, eval_fused};
use crate::reference::{Dense, compute};
use crate::testing::Rng;
use ir::plan::{BinaryFn, Expr, UnaryFn};
use ir::{DType, GluKind, Layout, Op};

fn random(rng: &mut Rng, ne: [i64; 4]) -> Dense {
    let n = ne.iter().product::<i64>() as usize;
    Dense::new(ne, rng.vec(n, -2.0, 2.0))
}

/// `op` over `srcs` with an f32 result of src0's extents, as the evaluator runs it.
fn op(op: Op, srcs: &[&Dense]) -> Dense {
    let out = Layout::contiguous(DType::F32, srcs[0].ne).expect("valid layout");
    compute(&op, srcs, &out)
}

#[track_caller]
fn assert_same(got: &Dense, want: &Dense, tol: f64) {
    assert_eq!(got.ne, want.ne);
    for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "element {i}: fused {g}, op by op {w}"
        );
    }
}

const OUT: [i64; 4] = [7, 3, 5, 2];

#[test]
fn fused_unary_matches_each_op_exactly() {
    let mut rng = Rng::new(1);
    let x = random(&mut rng, OUT);
    let xp = Dense::new(OUT, x.data.iter().map(|v| v.abs()).collect());
    let cases = [
        (
            UnaryFn::Scale {
                scale: 0.37,
                bias: -1.5,
            },
            Op::Scale {
                scale: 0.37,
                bias: -1.5,
            },
        ),
        (UnaryFn::Sqr, Op::Sqr),
        (UnaryFn::Sqrt, Op::Sqrt),
        (UnaryFn::Silu, Op::Silu),
        (UnaryFn::Gelu, Op::Gelu),
        (UnaryFn::GeluErf, Op::GeluErf),
        (UnaryFn::Relu, Op::Relu),
        (UnaryFn::Tanh, Op::Tanh),
    ];
    for (f, o) in cases {
        let src = if o == Op::Sqrt { &xp } else { &x };
        let got = eval_fused(&[Expr::Input(0), Expr::Unary(f, 0)], &[src], OUT);
        assert_eq!(got, op(o, &[src]), "{o}");
    }
}

#[test]
fn fused_binary_broadcasts_like_ggml() {
    let mut rng = Rng::new(2);
    let a = random(&mut rng, OUT);
    for bne in [OUT, [7, 1, 5, 1], [1, 3, 1, 2], [7, 1, 1, 1], [1, 1, 1, 1]] {
        let b = random(&mut rng, bne);
        for (f, o) in [
            (BinaryFn::Add, Op::Add),
            (BinaryFn::Sub, Op::Sub),
            (BinaryFn::Mul, Op::Mul),
            (BinaryFn::Div, Op::Div),
        ] {
            let body = [Expr::Input(0), Expr::Input(1), Expr::Binary(f, 0, 1)];
            let got = eval_fused(&body, &[&a, &b], OUT);
            assert_eq!(got, op(o, &[&a, &b]), "{o} with src1 {bne:?}");
        }
    }
}

#[test]
fn fused_norm_mul_add_matches_layernorm_chain() {
    let mut rng = Rng::new(3);
    let x = random(&mut rng, OUT);
    let (w, bias) = (
        random(&mut rng, [7, 1, 1, 1]),
        random(&mut rng, [7, 1, 1, 1]),
    );
    for (norm, o) in [
        (
            Expr::Norm {
                input: 0,
                eps: 1e-5,
            },
            Op::Norm { eps: 1e-5 },
        ),
        (
            Expr::RmsNorm {
                input: 0,
                eps: 1e-6,
            },
            Op::RmsNorm { eps: 1e-6 },
        ),
    ] {
        let body = [
            norm,
            Expr::Input(1),
            Expr::Binary(BinaryFn::Mul, 0, 1),
            Expr::Input(2),
            Expr::Binary(BinaryFn::Add, 2, 3),
        ];
        let got = eval_fused(&body, &[&x, &w, &bias], OUT);
        let want = op(Op::Add, &[&op(Op::Mul, &[&op(o, &[&x]), &w]), &bias]);
        assert_same(&got, &want, 1e-15);
    }
}

#[test]
fn fused_norm_of_a_broadcast_input_reduces_the_matching_row() {
    let mut rng = Rng::new(4);
    let x = random(&mut rng, [7, 1, 5, 1]);
    let y = random(&mut rng, OUT);
    let body = [
        Expr::RmsNorm {
            input: 0,
            eps: 1e-5,
        },
        Expr::Input(1),
        Expr::Binary(BinaryFn::Add, 1, 0),
    ];
    let got = eval_fused(&body, &[&x, &y], OUT);
    let want = op(Op::Add, &[&y, &op(Op::RmsNorm { eps: 1e-5 }, &[&x])]);
    assert_same(&got, &want, 1e-15);
}

#[test]
fn fused_glu_and_a_dag_with_shared_operands() {
    let mut rng = Rng::new(5);
    let (g, u) = (random(&mut rng, OUT), random(&mut rng, OUT));
    for (act, kind) in [
        (UnaryFn::Silu, GluKind::SwiGlu),
        (UnaryFn::Gelu, GluKind::GeGlu),
        (UnaryFn::GeluErf, GluKind::GeGluErf),
    ] {
        let body = [
            Expr::Input(0),
            Expr::Unary(act, 0),
            Expr::Input(1),
            Expr::Binary(BinaryFn::Mul, 1, 2),
        ];
        let glu = Op::Glu {
            kind,
            swapped: false,
        };
        assert_eq!(eval_fused(&body, &[&g, &u], OUT), op(glu, &[&g, &u]));
    }
    // (g + u) * (g - u): a DAG, not a chain.
    let body = [
        Expr::Input(0),
        Expr::Input(1),
        Expr::Binary(BinaryFn::Add, 0, 1),
        Expr::Binary(BinaryFn::Sub, 0, 1),
        Expr::Binary(BinaryFn::Mul, 2, 3),
    ];
    let want = op(Op::Mul, &[&op(Op::Add, &[&g, &u]), &op(Op::Sub, &[&g, &u])]);
    assert_eq!(eval_fused(&body, &[&g, &u], OUT), want);
}

#[test]
fn fused_bodies_that_break_the_rules_are_named() {
    let ne = [OUT, [7, 1, 1, 1]];
    let err = |body: &[Expr], inputs: &[[i64; 4]]| check_fused(body, inputs, OUT).unwrap_err();
    assert!(err(&[], &ne).contains("empty"));
    assert!(err(&[Expr::Unary(UnaryFn::Sqr, 0)], &ne).contains("not an earlier one"));
    assert!(err(&[Expr::Input(2)], &ne).contains("there are 2 inputs"));
    let e = err(&[Expr::Input(0)], &[[2, 3, 5, 2]]);
    assert!(e.contains("does not repeat evenly"), "{e}");
    let e = err(&[Expr::RmsNorm { input: 0, eps: 0.0 }], &[[1, 3, 5, 2]]);
    assert!(e.contains("ne0 is not the output's 7"), "{e}");
    assert!(check_fused(&[Expr::Input(1)], &ne, OUT).is_ok());
}

#[test]
#[should_panic(expected = "eval_fused: expression 0 reads input 0, but there are 0 inputs")]
fn fused_eval_panics_on_a_malformed_body() {
    eval_fused(&[Expr::Input(0)], &[], OUT);
}

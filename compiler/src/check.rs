//! The plan checker's family 5, support (with a target): every op step and every fused
//! expression runs on a device that supports it.
//!
//! Plan devices are matched with target devices by name. A fused expression
//! stands for the elementwise op of its [`OpKind`]; its src0 dtype is the dtype
//! of its first argument (an `Input`'s tensor's, passed through unary and
//! binary nodes; a norm's input's).

use crate::target::{Device, Target};
use ir::plan::Plan;
use ir::plan::check::Checker;
use ir::plan::check::ViolationKind::Support;
pub use ir::plan::check::{PlanViolation, ViolationKind};
use ir::plan::{BinaryFn, Expr, FusedKernel, Step, UnaryFn};
use ir::{DType, Op, OpKind};

/// Every violation of `plan`: `ir`'s checker, with this family (op support on
/// `target`) in its place when a target is given.
pub fn check_plan(plan: &Plan, target: Option<&Target>) -> Vec<PlanViolation> {
    ir::plan::check::check_plan_with(plan, |c| {
        if let Some(target) = target {
            check(c, target);
        }
    })
}

fn check(c: &mut Checker<'_>, target: &Target) {
    let plan = c.plan;
    for (d, dev) in plan.devices.iter().enumerate() {
        if target.device(&dev.name).is_none() {
            let msg = format!("is not a device of target '{}'", target.name);
            c.problem(Support, format!("device '{}' (d{d})", dev.name), msg);
        }
    }
    for (s, split) in plan.splits.iter().enumerate() {
        let Some(dev) = plan
            .devices
            .get(split.device.index())
            .and_then(|d| target.device(&d.name))
        else {
            continue; // reported above, or by the format family
        };
        for (k, step) in split.steps.iter().enumerate() {
            match step {
                Step::Op { .. } | Step::RopeStore { .. } => {
                    for (op, dst, srcs) in step.ops() {
                        let Some(src0) = srcs.first().and_then(|&s| c.tensor(s)) else {
                            continue; // format
                        };
                        if !dev.supports(op, src0.dtype) {
                            let msg = format!(
                                "split {s} step {k} runs {op} with a {} src0 on {}, which does not support it",
                                src0.dtype, dev.name
                            );
                            c.tensor_problem(Support, dst, msg);
                        }
                    }
                }
                Step::Fused { kernel } => {
                    if let Some(kn) = plan.kernels.get(*kernel as usize) {
                        fused(c, dev, *kernel, kn, s, k);
                    }
                }
                Step::MulMatAdd { product, dst, srcs } => {
                    // Both ops, each with its own src0: the weight, the product.
                    for (op, src0) in [(Op::MulMat, srcs[0]), (Op::Add, *product)] {
                        let Some(t) = c.tensor(src0) else { continue };
                        if !dev.supports(&op, t.dtype) {
                            let msg = format!(
                                "split {s} step {k} runs mul_mat + add, whose {op} has a {} src0, on {}, which does not support it",
                                t.dtype, dev.name
                            );
                            c.tensor_problem(Support, *dst, msg);
                        }
                    }
                }
                Step::Attention {
                    scores,
                    permuted,
                    dst,
                    srcs,
                    scale,
                    max_bias,
                    ..
                } => {
                    // Each op with its own src0: k, the scores, v, the view.
                    let softmax = Op::SoftMax {
                        scale: *scale,
                        max_bias: *max_bias,
                    };
                    let ops = [
                        (Op::MulMat, srcs.first().copied()),
                        (softmax, Some(*scores)),
                        (Op::MulMat, srcs.get(2).copied()),
                        (Op::Cont, Some(*permuted)),
                    ];
                    for (op, src0) in ops {
                        let Some(t) = src0.and_then(|t| c.tensor(t)) else {
                            continue; // format
                        };
                        if !dev.supports(&op, t.dtype) {
                            let msg = format!(
                                "split {s} step {k} runs attention, whose {op} has a {} src0, on {}, which does not support it",
                                t.dtype, dev.name
                            );
                            c.tensor_problem(Support, *dst, msg);
                        }
                    }
                }
                Step::MulMatMany { dsts, srcs } => {
                    for (&dst, &w) in dsts.iter().zip(srcs) {
                        let Some(t) = c.tensor(w) else { continue };
                        if !dev.supports(&Op::MulMat, t.dtype) {
                            let msg = format!(
                                "split {s} step {k} runs mul_mat x {} with a {} weight on {}, which does not support it",
                                dsts.len(),
                                t.dtype,
                                dev.name
                            );
                            c.tensor_problem(Support, dst, msg);
                        }
                    }
                }
                Step::MulMatGlu {
                    kind,
                    products,
                    dst,
                    srcs,
                    ..
                } => {
                    // Both products (src0: each weight), then the unit (src0:
                    // the gate product).
                    let glu = Op::Glu {
                        kind: *kind,
                        swapped: false,
                    };
                    let ops = [
                        (Op::MulMat, srcs[0]),
                        (Op::MulMat, srcs[1]),
                        (glu, products[0]),
                    ];
                    for (op, src0) in ops {
                        let Some(t) = c.tensor(src0) else { continue };
                        if !dev.supports(&op, t.dtype) {
                            let msg = format!(
                                "split {s} step {k} runs mul_mat + glu, whose {op} has a {} src0, on {}, which does not support it",
                                t.dtype, dev.name
                            );
                            c.tensor_problem(Support, *dst, msg);
                        }
                    }
                }
            }
        }
    }
}

fn fused(c: &mut Checker<'_>, dev: &Device, index: u32, kn: &FusedKernel, s: usize, k: usize) {
    let dtypes = expr_dtypes(c, kn);
    let mut missing: Vec<(OpKind, DType)> = Vec::new();
    for (e, expr) in kn.body.iter().enumerate() {
        let Some(kind) = op_kind(expr) else { continue };
        // An expression's value has its first argument's dtype.
        let Some(src0) = dtypes.get(e).copied().flatten() else {
            continue; // malformed body: the fused family
        };
        if !dev.supports_kind(kind, src0) && !missing.contains(&(kind, src0)) {
            missing.push((kind, src0));
        }
    }
    for (kind, dtype) in missing {
        let msg = format!(
            "split {s} step {k}: fused kernel {index} computes {kind} of {dtype}, which {} does not support",
            dev.name
        );
        c.tensor_problem(Support, kn.output, msg);
    }
}

/// The elementwise op an expression stands for (`None` for an input).
fn op_kind(expr: &Expr) -> Option<OpKind> {
    Some(match expr {
        Expr::Input(_) => return None,
        Expr::Unary(f, _) => match f {
            UnaryFn::Scale { .. } => OpKind::Scale,
            UnaryFn::Sqr => OpKind::Sqr,
            UnaryFn::Sqrt => OpKind::Sqrt,
            UnaryFn::Silu => OpKind::Silu,
            UnaryFn::Gelu => OpKind::Gelu,
            UnaryFn::GeluErf => OpKind::GeluErf,
            UnaryFn::Relu => OpKind::Relu,
            UnaryFn::Clamp { .. } => OpKind::Clamp,
            UnaryFn::Tanh => OpKind::Tanh,
        },
        Expr::Binary(f, _, _) => match f {
            BinaryFn::Add => OpKind::Add,
            BinaryFn::Sub => OpKind::Sub,
            BinaryFn::Mul => OpKind::Mul,
            BinaryFn::Div => OpKind::Div,
        },
        Expr::RmsNorm { .. } => OpKind::RmsNorm,
        Expr::Norm { .. } => OpKind::Norm,
    })
}

/// The dtype of every expression's value (`None` where the body is malformed).
fn expr_dtypes(c: &Checker<'_>, kn: &FusedKernel) -> Vec<Option<DType>> {
    let input = |i: u32| {
        kn.inputs
            .get(i as usize)
            .and_then(|&t| c.tensor(t))
            .map(|t| t.dtype)
    };
    let mut out: Vec<Option<DType>> = Vec::with_capacity(kn.body.len());
    for expr in &kn.body {
        let earlier = |a: u32| out.get(a as usize).copied().flatten();
        let dtype = match *expr {
            Expr::Input(i) | Expr::RmsNorm { input: i, .. } | Expr::Norm { input: i, .. } => {
                input(i)
            }
            Expr::Unary(_, a) | Expr::Binary(_, a, _) => earlier(a),
        };
        out.push(dtype);
    }
    out
}

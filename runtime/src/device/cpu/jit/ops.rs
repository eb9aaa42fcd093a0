//! Unfused elementwise and row ops as one-kernel bodies, so they share the
//! fused code generator (and its cache).
//!
//! - unary op f: `[Input(0), Unary(f, 0)]`;
//! - binary op f (src1 broadcast over src0): `[Input(0), Input(1), Binary(f, 0, 1)]`;
//! - glu: `[Input(0), Input(1), Unary(act, 0), Binary(Mul, 2, 1)]` over (gate,
//!   up): src0 and src1, or with one source the two halves of each row as
//!   views (gate first unless `swapped`);
//! - rms_norm / norm: `[RmsNorm { input: 0 }]` / `[Norm { input: 0 }]`.

use super::Jit;
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::Op;
use ir::plan::{BinaryFn, Expr};

impl Jit {
    /// An unfused elementwise or row op as a kernel: unary ops, binary ops
    /// (src1 broadcast over src0), glu (one or two sources), rms_norm, norm.
    pub fn prepare_elementwise(
        &self,
        op: &Op,
        dst: RawTensor,
        srcs: &[RawTensor],
    ) -> Result<Box<dyn CpuKernel>, RuntimeError> {
        let arity = |n: usize| {
            if srcs.len() == n {
                Ok(())
            } else {
                Err(RuntimeError::Unsupported {
                    op: op.name().into(),
                    detail: format!("takes {n} sources, got {}", srcs.len()),
                })
            }
        };
        let (body, inputs): (Vec<Expr>, Vec<RawTensor>) = if let Some(f) = op.unary_fn() {
            arity(1)?;
            (vec![Expr::Input(0), Expr::Unary(f, 0)], srcs.to_vec())
        } else if let Some(f) = op.binary_fn() {
            arity(2)?;
            let body = vec![Expr::Input(0), Expr::Input(1), Expr::Binary(f, 0, 1)];
            (body, srcs.to_vec())
        } else {
            match *op {
                Op::RmsNorm { eps } => {
                    arity(1)?;
                    (vec![Expr::RmsNorm { input: 0, eps }], srcs.to_vec())
                }
                Op::Norm { eps } => {
                    arity(1)?;
                    (vec![Expr::Norm { input: 0, eps }], srcs.to_vec())
                }
                Op::Glu { kind, swapped } => {
                    let act = kind.activation();
                    let body = vec![
                        Expr::Input(0),
                        Expr::Input(1),
                        Expr::Unary(act, 0),
                        Expr::Binary(BinaryFn::Mul, 2, 1),
                    ];
                    let inputs = match srcs {
                        [gate, up] => vec![*gate, *up],
                        [a] => halves(a, swapped)?.to_vec(),
                        _ => arity(1).map(|()| Vec::new())?,
                    };
                    (body, inputs)
                }
                _ => {
                    return Err(RuntimeError::Unsupported {
                        op: op.name().into(),
                        detail: "not an elementwise or row op of the JIT".into(),
                    });
                }
            }
        };
        self.prepare_fused(&body, dst, &inputs)
    }
}

/// (gate, up) views of the two halves of every row of `a`.
fn halves(a: &RawTensor, swapped: bool) -> Result<[RawTensor; 2], RuntimeError> {
    if a.ne[0] % 2 != 0 {
        return Err(RuntimeError::Unsupported {
            op: "glu".into(),
            detail: format!("one-source rows of odd length {}", a.ne[0]),
        });
    }
    let n = a.ne[0] / 2;
    let first = RawTensor {
        ne: [n, a.ne[1], a.ne[2], a.ne[3]],
        ..*a
    };
    let second = RawTensor {
        // The address of element n of row 0: computed, never dereferenced here.
        data: a.data.wrapping_add((n as u64 * a.nb[0]) as usize),
        ..first
    };
    Ok(if swapped {
        [second, first]
    } else {
        [first, second]
    })
}

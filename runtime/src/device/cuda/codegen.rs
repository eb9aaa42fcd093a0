//! CUDA C for fused bodies (`ir::plan::Expr`) and for the elementwise and
//! norm ops, which are one-node bodies: the same descriptions the LLVM JIT
//! compiles for the CPU, with the reference evaluator's semantics (inputs
//! broadcast by index modulo their extents; a norm reduces over its input's
//! row before the elementwise body).
//!
//! Each kernel runs one block per output row and reads dtypes at run time
//! (`ldf` / `stf` in common.cuh), so its source depends on the body alone:
//! a plan with 30 identical layers generates each distinct body once, named
//! by a hash of its text. Constants are written as their f32 bits, so the
//! device computes with exactly the plan's values.

use ir::Op;
use ir::plan::{BinaryFn, Expr, UnaryFn};
use std::fmt::Write;

/// A generated kernel: its entry point and source (without common.cuh).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    /// The `extern "C"` name.
    pub name: String,
    /// The kernel's source.
    pub source: String,
}

/// The one-node body of an elementwise or norm op, or `None` for other ops.
pub fn op_body(op: &Op) -> Option<Vec<Expr>> {
    let unary = |f| Some(vec![Expr::Input(0), Expr::Unary(f, 0)]);
    let binary = |f| Some(vec![Expr::Input(0), Expr::Input(1), Expr::Binary(f, 0, 1)]);
    match *op {
        ir::unary_op!() => unary(op.unary_fn()?),
        Op::Add | Op::Sub | Op::Mul | Op::Div => binary(op.binary_fn()?),
        Op::RmsNorm { eps } => Some(vec![Expr::RmsNorm { input: 0, eps }]),
        Op::Norm { eps } => Some(vec![Expr::Norm { input: 0, eps }]),
        // The two-source form only: act(gate) * up.
        Op::Glu { kind, .. } => {
            let act = kind.activation();
            Some(vec![
                Expr::Input(0),
                Expr::Unary(act, 0),
                Expr::Input(1),
                Expr::Binary(BinaryFn::Mul, 1, 2),
            ])
        }
        _ => None,
    }
}

/// An f32 constant as CUDA C that has exactly its bits.
fn float(v: f32) -> String {
    format!("__uint_as_float(0x{:08x}u)", v.to_bits())
}

/// An input's element at the output index (broadcast by modulo).
fn input(i: u32) -> String {
    let t = format!("a.t[{}]", i + 1);
    format!("ldf(at({t}, i0 % {t}.ne[0], i1 % {t}.ne[1], i2 % {t}.ne[2], i3 % {t}.ne[3]), {t}.dt)")
}

/// The kernel for `body`. `body` must be well formed (the plan checker
/// proved it: topological, inputs in range).
pub fn fused_kernel(body: &[Expr]) -> Generated {
    let mut pre = String::new();
    let mut each = String::new();
    for (k, e) in body.iter().enumerate() {
        let v = match *e {
            Expr::Input(i) => input(i),
            Expr::Unary(f, x) => {
                let x = format!("v{x}");
                match f {
                    UnaryFn::Scale { scale, bias } => {
                        format!("{x} * {} + {}", float(scale), float(bias))
                    }
                    UnaryFn::Sqr => format!("{x} * {x}"),
                    UnaryFn::Sqrt => format!("sqrtf({x})"),
                    UnaryFn::Silu => format!("gg_silu({x})"),
                    UnaryFn::Gelu => format!("gg_gelu({x})"),
                    UnaryFn::GeluErf => format!("gg_gelu_erf({x})"),
                    UnaryFn::Relu => format!("({x} > 0.0f ? {x} : 0.0f)"),
                    UnaryFn::Tanh => format!("tanhf({x})"),
                    UnaryFn::Clamp { min, max } => {
                        format!("fminf(fmaxf({x}, {}), {})", float(min), float(max))
                    }
                }
            }
            Expr::Binary(f, x, y) => {
                let op = match f {
                    BinaryFn::Add => '+',
                    BinaryFn::Sub => '-',
                    BinaryFn::Mul => '*',
                    BinaryFn::Div => '/',
                };
                format!("v{x} {op} v{y}")
            }
            Expr::RmsNorm { input: i, eps } | Expr::Norm { input: i, eps } => {
                let rms = matches!(e, Expr::RmsNorm { .. });
                norm_prologue(&mut pre, k, i, eps, rms);
                format!("({} - mean{k}) * scale{k}", input(i))
            }
        };
        let _ = writeln!(each, "    const float v{k} = {v};");
    }
    let last = body.len().saturating_sub(1);
    let text = format!(
        "{{\n  __shared__ float sh[32];\n  const T &O = a.t[0];\n  long long i1, i2, i3;\n  \
         unrow(blockIdx.x, O.ne, i1, i2, i3);\n{pre}  \
         for (long long i0 = threadIdx.x; i0 < O.ne[0]; i0 += blockDim.x) {{\n{each}    \
         stf(at_mut(O, i0, i1, i2, i3), O.dt, v{last});\n  }}\n}}\n"
    );
    let name = format!("fused_{:016x}", fnv1a(text.as_bytes()));
    Generated {
        source: format!("extern \"C\" __global__ void {name}(const Args a) {text}"),
        name,
    }
}

/// Row statistics of a norm node `k` over input `i`'s row: `mean{k}` (0 for
/// rms_norm) and `scale{k}` = 1 / sqrt(mean square or variance + eps).
fn norm_prologue(pre: &mut String, k: usize, i: u32, eps: f32, rms: bool) {
    let x = input(i);
    let _ = writeln!(pre, "  float mean{k} = 0.0f, scale{k};\n  {{");
    if !rms {
        let _ = writeln!(
            pre,
            "    float s = 0.0f;\n    for (long long i0 = threadIdx.x; i0 < O.ne[0]; i0 += blockDim.x) s += {x};\n    \
             mean{k} = block_sum(s, sh) / (float)O.ne[0];"
        );
    }
    let _ = writeln!(
        pre,
        "    float q = 0.0f;\n    for (long long i0 = threadIdx.x; i0 < O.ne[0]; i0 += blockDim.x) {{ const float d = {x} - mean{k}; q += d * d; }}\n    \
         scale{k} = 1.0f / sqrtf(block_sum(q, sh) / (float)O.ne[0] + {});\n  }}",
        float(eps)
    );
}

/// FNV-1a, 64 bits: a stable name for a kernel text (not a security hash).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_generate_stable_named_kernels() {
        let body = [
            Expr::RmsNorm {
                input: 0,
                eps: 1e-5,
            },
            Expr::Input(1),
            Expr::Binary(BinaryFn::Mul, 0, 1),
        ];
        let k = fused_kernel(&body);
        assert_eq!(k, fused_kernel(&body), "deterministic");
        assert!(k.source.contains(&k.name) && k.name.starts_with("fused_"));
        // eps 1e-5 as its f32 bits; the norm reduces before the loop.
        assert!(k.source.contains(&format!("0x{:08x}u", 1e-5f32.to_bits())));
        assert!(k.source.find("block_sum").unwrap() < k.source.find("stf(").unwrap());
        let other = fused_kernel(&[Expr::Input(0), Expr::Unary(UnaryFn::Silu, 0)]);
        assert_ne!(other.name, k.name);
        assert!(!other.source.contains("block_sum"), "no norm, no reduction");
    }

    #[test]
    fn elementwise_ops_are_one_node_bodies() {
        assert_eq!(op_body(&Op::Add).map(|b| b.len()), Some(3));
        assert_eq!(
            op_body(&Op::RmsNorm { eps: 1e-6 }),
            Some(vec![Expr::RmsNorm {
                input: 0,
                eps: 1e-6
            }])
        );
        assert!(op_body(&Op::MulMat).is_none());
        assert!(
            op_body(&Op::SoftMax {
                scale: 1.0,
                max_bias: 0.0
            })
            .is_none()
        );
    }
}

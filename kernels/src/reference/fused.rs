//! The reference interpreter of fused-kernel bodies ([`ir::plan::Expr`]).
//!
//! [`eval_fused`] evaluates a body in f64 with the semantics of running its
//! member ops one by one through [`super::compute`]: the same scalar helpers
//! ([`silu`], [`gelu_tanh`], [`gelu_erf`]), the same operation order inside
//! rms_norm and norm, ggml's repeat broadcast. It differs from the unfused
//! evaluation only in that intermediates are never rounded to f32.
//!
//! Invariants of a body it accepts ([`check_fused`] says which one fails):
//! - the body is non-empty and in topological order: every argument indexes an
//!   earlier expression; the last expression is the output;
//! - `Input(i)` and the norms' `input` index `inputs`;
//! - every input's extents divide the output's: input `i` is read at the output
//!   index modulo its own extents (ggml's repeat broadcast);
//! - a row normalisation (`RmsNorm`, `Norm`) reads an input whose ne0 is the
//!   output's ne0: for output row (i1, i2, i3) it reduces over the input's row
//!   (i1 % ne1, i2 % ne2, i3 % ne3), then yields that row's normalised element
//!   at the output's i0.

use super::dense::Dense;
use super::elementwise::{gelu_erf, gelu_tanh, silu};
use ir::layout::fmt_ne;
use ir::plan::{BinaryFn, Expr, UnaryFn};

#[cfg(test)]
mod tests;

/// `f(x)` in f64, as `reference::compute` evaluates the corresponding op.
pub fn apply_unary(f: UnaryFn, x: f64) -> f64 {
    match f {
        UnaryFn::Scale { scale, bias } => x * f64::from(scale) + f64::from(bias),
        UnaryFn::Sqr => x * x,
        UnaryFn::Sqrt => x.sqrt(),
        UnaryFn::Silu => silu(x),
        UnaryFn::Gelu => gelu_tanh(x),
        UnaryFn::GeluErf => gelu_erf(x),
        UnaryFn::Relu => {
            if x > 0.0 {
                x
            } else {
                0.0
            }
        }
        UnaryFn::Tanh => x.tanh(),
        UnaryFn::Clamp { min, max } => x.max(f64::from(min)).min(f64::from(max)),
    }
}

/// `f(a, b)` in f64.
pub fn apply_binary(f: BinaryFn, a: f64, b: f64) -> f64 {
    match f {
        BinaryFn::Add => a + b,
        BinaryFn::Sub => a - b,
        BinaryFn::Mul => a * b,
        BinaryFn::Div => a / b,
    }
}

/// Checks that `body` over inputs of extents `input_ne` can produce an output
/// of extents `out_ne` (the module invariants); the error names the expression
/// or input and the rule it breaks.
pub fn check_fused(body: &[Expr], input_ne: &[[i64; 4]], out_ne: [i64; 4]) -> Result<(), String> {
    if body.is_empty() {
        return Err("the body is empty".into());
    }
    if out_ne.iter().any(|&n| n < 1) {
        return Err(format!(
            "output extents {} must all be >= 1",
            fmt_ne(&out_ne)
        ));
    }
    for (j, ne) in input_ne.iter().enumerate() {
        if (0..4).any(|d| ne[d] < 1 || out_ne[d] % ne[d] != 0) {
            return Err(format!(
                "input {j} {} does not repeat evenly over the output {}",
                fmt_ne(ne),
                fmt_ne(&out_ne)
            ));
        }
    }
    let input = |k: usize, i: u32| -> Result<[i64; 4], String> {
        input_ne.get(i as usize).copied().ok_or_else(|| {
            format!(
                "expression {k} reads input {i}, but there are {} inputs",
                input_ne.len()
            )
        })
    };
    let arg = |k: usize, a: u32| -> Result<(), String> {
        if (a as usize) < k {
            Ok(())
        } else {
            Err(format!(
                "expression {k} uses expression {a}, which is not an earlier one"
            ))
        }
    };
    for (k, e) in body.iter().enumerate() {
        match *e {
            Expr::Input(i) => input(k, i).map(|_| ())?,
            Expr::Unary(_, a) => arg(k, a)?,
            Expr::Binary(_, a, b) => arg(k, a).and_then(|()| arg(k, b))?,
            Expr::RmsNorm { input: i, .. } | Expr::Norm { input: i, .. } => {
                let ne = input(k, i)?;
                if ne[0] != out_ne[0] {
                    return Err(format!(
                        "expression {k} normalises rows of input {i} {}, whose ne0 is not the \
                         output's {}",
                        fmt_ne(&ne),
                        out_ne[0]
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Evaluates the fused kernel `kernel_body` over `inputs` into a tensor of
/// extents `out_ne`, in f64 (see the module doc for the semantics).
///
/// Panics, with [`check_fused`]'s message, when the body, the inputs and
/// `out_ne` break the module invariants (like `reference::compute`, the oracle
/// treats malformed kernels as a caller bug; check first where they come from
/// outside).
pub fn eval_fused(kernel_body: &[Expr], inputs: &[&Dense], out_ne: [i64; 4]) -> Dense {
    let input_ne: Vec<[i64; 4]> = inputs.iter().map(|d| d.ne).collect();
    if let Err(e) = check_fused(kernel_body, &input_ne, out_ne) {
        panic!("eval_fused: {e}");
    }
    let n0 = out_ne[0] as usize;
    let mut data = Vec::with_capacity(out_ne.iter().product::<i64>() as usize);
    let mut values = vec![0.0f64; kernel_body.len()];
    // Per expression: (shift, divisor) of a norm over the current row.
    let mut stats = vec![(0.0f64, 1.0f64); kernel_body.len()];
    for i3 in 0..out_ne[3] {
        for i2 in 0..out_ne[2] {
            for i1 in 0..out_ne[1] {
                let rows: Vec<&[f64]> = inputs
                    .iter()
                    .map(|d| d.row(i1 % d.ne[1], i2 % d.ne[2], i3 % d.ne[3]))
                    .collect();
                for (k, e) in kernel_body.iter().enumerate() {
                    match *e {
                        Expr::RmsNorm { input, eps } => {
                            stats[k] = rms_stats(rows[input as usize], eps);
                        }
                        Expr::Norm { input, eps } => {
                            stats[k] = norm_stats(rows[input as usize], eps);
                        }
                        Expr::Input(_) | Expr::Unary(..) | Expr::Binary(..) => {}
                    }
                }
                for i0 in 0..n0 {
                    for (k, e) in kernel_body.iter().enumerate() {
                        let at = |row: &[f64]| row[i0 % row.len()];
                        values[k] = match *e {
                            Expr::Input(i) => at(rows[i as usize]),
                            Expr::Unary(f, a) => apply_unary(f, values[a as usize]),
                            Expr::Binary(f, a, b) => {
                                apply_binary(f, values[a as usize], values[b as usize])
                            }
                            Expr::RmsNorm { input, .. } => at(rows[input as usize]) / stats[k].1,
                            Expr::Norm { input, .. } => {
                                (at(rows[input as usize]) - stats[k].0) / stats[k].1
                            }
                        };
                    }
                    data.push(values[kernel_body.len() - 1]);
                }
            }
        }
    }
    Dense::new(out_ne, data)
}

/// (0, sqrt(mean(x^2) + eps)), computed as `reference` rms_norm does.
fn rms_stats(row: &[f64], eps: f32) -> (f64, f64) {
    let n = row.len() as f64;
    let mean_square = row.iter().map(|x| x * x).sum::<f64>() / n;
    (0.0, (mean_square + f64::from(eps)).sqrt())
}

/// (mean, sqrt(var + eps)), computed as `reference` norm does.
fn norm_stats(row: &[f64], eps: f32) -> (f64, f64) {
    let n = row.len() as f64;
    let mean = row.iter().sum::<f64>() / n;
    let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, (var + f64::from(eps)).sqrt())
}

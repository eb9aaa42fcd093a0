//! Elementwise ops: unary maps, broadcast binary ops, gated linear units.
//!
//! Invariants: the result has src0's extents; binary ops read src1 at
//! `i[d] % src1.ne[d]` in every dim (ggml's repeat broadcast; ir::rules guarantees
//! src1's extents divide src0's).

use super::dense::Dense;
use ir::GluKind;

/// `x * sigmoid(x)` = x / (1 + e^-x).
pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// gelu, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
pub fn gelu_tanh(x: f64) -> f64 {
    let sqrt_2_over_pi = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (sqrt_2_over_pi * (x + 0.044715 * x * x * x)).tanh())
}

/// gelu, exact: 0.5 x (1 + erf(x / sqrt 2)) (erf from the `libm` crate).
pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
}

/// `f` applied to every element.
pub(crate) fn unary(a: &Dense, f: impl Fn(f64) -> f64) -> Dense {
    Dense::new(a.ne, a.data.iter().map(|&x| f(x)).collect())
}

/// `f(a, b)` with `b` broadcast over `a` (b's index = a's index % b.ne per dim).
pub(crate) fn binary(a: &Dense, b: &Dense, f: impl Fn(f64, f64) -> f64) -> Dense {
    let bn = b.ne;
    let mut data = Vec::with_capacity(a.n_elements());
    for i3 in 0..a.ne[3] {
        for i2 in 0..a.ne[2] {
            for i1 in 0..a.ne[1] {
                let a_row = a.row(i1, i2, i3);
                let b_row = b.row(i1 % bn[1], i2 % bn[2], i3 % bn[3]);
                let b_values = b_row.iter().cycle();
                data.extend(a_row.iter().zip(b_values).map(|(&x, &y)| f(x, y)));
            }
        }
    }
    Dense::new(a.ne, data)
}

/// The activation of a GLU kind.
fn glu_activation(kind: GluKind) -> fn(f64) -> f64 {
    match kind {
        GluKind::SwiGlu => silu,
        GluKind::GeGlu => gelu_tanh,
        GluKind::GeGluErf => gelu_erf,
    }
}

/// Gated linear unit: `act(gate) * up`.
///
/// One source: each row of 2n values splits into halves; the gate is the first
/// half (the second when `swapped`), the up the other one. Two sources: the gate
/// is src0 and the up src1 (`swapped` is ignored, as in ggml, where the two-source
/// form never sets it).
pub(crate) fn glu(kind: GluKind, swapped: bool, a: &Dense, up: Option<&Dense>) -> Dense {
    let act = glu_activation(kind);
    match up {
        Some(b) => binary(a, b, |g, u| act(g) * u),
        None => {
            let n = a.ne[0] as usize / 2;
            let ne = [n as i64, a.ne[1], a.ne[2], a.ne[3]];
            let mut data = Vec::with_capacity(a.n_elements() / 2);
            for row in a.rows() {
                let (first, second) = row.split_at(n);
                let (gate, up) = if swapped {
                    (second, first)
                } else {
                    (first, second)
                };
                data.extend(gate.iter().zip(up).map(|(&g, &u)| act(g) * u));
            }
            Dense::new(ne, data)
        }
    }
}

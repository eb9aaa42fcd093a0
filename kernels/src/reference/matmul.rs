//! mul_mat: `result[i, j, k2, k3] = sum_k a[k, i, k2 / r2, k3 / r3] * b[k, j, k2, k3]`
//! with `r2 = b.ne2 / a.ne2`, `r3 = b.ne3 / a.ne3` (src0 broadcast over src1's
//! batch dims). Result extents `[a.ne1, b.ne1, b.ne2, b.ne3]`.
//!
//! Accumulates in f64, each sum strictly in order of k (results do not depend on
//! how the loops are blocked: four rows of src0 are summed side by side only so
//! that the four independent additions overlap in the CPU). The oracle does not reproduce ggml's
//! conversion of src1 to the weight's `vec_dot_type` (e.g. Q8_0/Q8_K activations
//! for quantized weights): compare fast kernels with a mul_mat tolerance.

use super::dense::Dense;

/// src0 (a) times src1 (b) as ggml's mul_mat.
pub(crate) fn mul_mat(a: &Dense, b: &Dense) -> Dense {
    let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
    let (m, n) = (a.ne[1], b.ne[1]);
    let mut out = Dense::zeros([m, n, b.ne[2], b.ne[3]]);
    for k3 in 0..b.ne[3] {
        for k2 in 0..b.ne[2] {
            let a_row = |i: i64| a.row(i, k2 / r2, k3 / r3);
            // Rows of src0 in groups of four (kept in cache) against every row of src1.
            for i in (0..m).step_by(4) {
                for j in 0..n {
                    let b_row = b.row(j, k2, k3);
                    let dst = out.row_mut(j, k2, k3);
                    if i + 4 <= m {
                        let sums =
                            dot4([a_row(i), a_row(i + 1), a_row(i + 2), a_row(i + 3)], b_row);
                        dst[i as usize..i as usize + 4].copy_from_slice(&sums);
                    } else {
                        for ii in i..m {
                            dst[ii as usize] = dot(a_row(ii), b_row);
                        }
                    }
                }
            }
        }
    }
    out
}

/// `sum_k x[k] * y[k]`, in order of k.
fn dot(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).fold(0.0, |acc, (a, b)| acc + a * b)
}

/// [`dot`] of four rows with the same `y`; each sum in order of k, bit-identical
/// to four calls of [`dot`].
fn dot4(xs: [&[f64]; 4], y: &[f64]) -> [f64; 4] {
    let [x0, x1, x2, x3] = xs;
    let mut acc = [0.0; 4];
    for ((((&yk, &a), &b), &c), &d) in y.iter().zip(x0).zip(x1).zip(x2).zip(x3) {
        acc[0] += a * yk;
        acc[1] += b * yk;
        acc[2] += c * yk;
        acc[3] += d * yk;
    }
    acc
}

/// ggml's mul_mat_id: experts `a` `[k, n, n_expert]`, activations `b`
/// `[k, b1, t]`, I32 expert ids `[n_used, t]`; result `[n, n_used, t]` whose
/// slot `e` of token `t` is expert `ids[e, t]`'s matrix times `b` row
/// `e % b1` of token `t`, each sum in order of k.
///
/// With `part = Some((first, experts))` (mul_mat_id_part), `a` is experts
/// `[first, first + n_expert)` of a set of `experts`: a slot routed to one of
/// them is computed as above, a slot routed to another expert of the set is
/// a row of zeros; an id outside the set is refused either way.
pub(crate) fn mul_mat_id(a: &Dense, b: &Dense, ids: &Dense, part: Option<(i64, i64)>) -> Dense {
    let (n, n_used, t) = (a.ne[1], ids.ne[0], ids.ne[1]);
    let (first, experts) = part.unwrap_or((0, a.ne[2]));
    let mut out = Dense::zeros([n, n_used, t, 1]);
    for tok in 0..t {
        for e in 0..n_used {
            let v = ids.get([e, tok, 0, 0]);
            let id = v as i64;
            assert!(
                id as f64 == v && (0..experts).contains(&id),
                "mul_mat_id: expert id {v} is outside 0..{experts}"
            );
            let expert = id - first;
            if !(0..a.ne[2]).contains(&expert) {
                continue; // another part's expert: the row stays zero
            }
            let b_row = b.row(e % b.ne[1], tok, 0);
            let dst = out.row_mut(e, tok, 0);
            for (i, d) in dst.iter_mut().enumerate() {
                *d = dot(a.row(i as i64, expert, 0), b_row);
            }
        }
    }
    out
}

//! Row reductions: sum_rows, mean (result ne0 = 1) and argmax (a matrix
//! `[n, m]` gives I32 `[m]`).
//!
//! Choice: argmax returns the index of the *last* maximum of a row on exact
//! ties, as ggml's CPU kernel does (so greedy decoding picks the same token),
//! NaNs never win, and a row of -inf gives its last index, also as ggml.

use super::dense::Dense;

/// `f(row)` for every row, as a tensor with ne0 = 1.
fn per_row(a: &Dense, f: impl Fn(&[f64]) -> f64) -> Dense {
    Dense::new([1, a.ne[1], a.ne[2], a.ne[3]], a.rows().map(f).collect())
}

/// Sum of every row.
pub(crate) fn sum_rows(a: &Dense) -> Dense {
    per_row(a, |r| r.iter().sum())
}

/// Mean of every row.
pub(crate) fn mean(a: &Dense) -> Dense {
    per_row(a, |r| r.iter().sum::<f64>() / r.len() as f64)
}

/// Index of the last maximum of every row of the matrix `a`.
pub(crate) fn argmax(a: &Dense) -> Dense {
    let data = a
        .rows()
        .map(|row| {
            let mut best = (0usize, f64::NEG_INFINITY);
            for (i, &v) in row.iter().enumerate() {
                if v >= best.1 {
                    best = (i, v);
                }
            }
            best.0 as f64
        })
        .collect();
    Dense::new([a.ne[1], 1, 1, 1], data)
}

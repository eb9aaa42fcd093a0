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

/// The I32 indices sorting each row of `a` (ascending, or descending), equal
/// values in index order.
pub(crate) fn argsort(a: &Dense, descending: bool) -> Dense {
    let mut data = Vec::with_capacity(a.data.len());
    for row in a.rows() {
        let mut idx: Vec<usize> = (0..row.len()).collect();
        idx.sort_by(|&i, &j| {
            let order = row[i].total_cmp(&row[j]);
            if descending { order.reverse() } else { order }
        });
        data.extend(idx.into_iter().map(|i| i as f64));
    }
    Dense::new(a.ne, data)
}

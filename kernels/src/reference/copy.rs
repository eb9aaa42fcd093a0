//! Data movement: cpy, get_rows, set_rows, concat, slice.
//!
//! - cpy: src0's values in flat logical order, seen with the destination's extents
//!   (same element count); dtype conversion happens when the result is scattered;
//! - get_rows: `result[:, j, k1, k2] = a[:, idx[j, k1, k2], k1, k2]`, result
//!   `[a.ne0, idx.ne0, idx.ne1, idx.ne2]`;
//! - get_rows_part: the same from rows `[start, start + a.ne1)` of a larger
//!   table, zeros for an index outside them;
//! - set_rows: the whole destination, with `dst[:, idx[i, i2 % idx.ne1, i3 % idx.ne2], i2, i3]
//!   = rows[:, i, i2, i3]`;
//! - concat: src1 follows src0 along `dim`;
//! - slice: `len` indices along `dim` from `start` (a reduce-scatter keeps one).
//!
//! Invariant: indices are whole numbers in range; an index outside the table panics
//! with the index and the table's extent (a bad index is a bug in the graph's inputs).

use super::dense::Dense;
use ir::layout::fmt_ne;

/// src0's values with extents `ne`.
pub(crate) fn cpy(a: &Dense, ne: [i64; 4]) -> Dense {
    a.clone().reshaped(ne)
}

/// The row number `v` as an index below `n`, or a panic naming `what`.
fn row_index(v: f64, n: i64, what: &str) -> i64 {
    let i = v as i64;
    assert!(
        i as f64 == v && (0..n).contains(&i),
        "{what}: index {v} is outside 0..{n}"
    );
    i
}

/// Rows of `a` at the I32 indices in `idx`; with `part = Some(start)`, `a`
/// is rows `[start, start + a.ne1)` of a larger table and an index outside
/// them gives a row of zeros (get_rows_part).
pub(crate) fn get_rows(a: &Dense, idx: &Dense, part: Option<i64>) -> Dense {
    let ne = [a.ne[0], idx.ne[0], idx.ne[1], idx.ne[2]];
    let zeros = vec![0.0; a.ne[0] as usize];
    let mut data = Vec::with_capacity((ne[0] * ne[1] * ne[2] * ne[3]) as usize);
    for k2 in 0..idx.ne[2] {
        for k1 in 0..idx.ne[1] {
            for j in 0..idx.ne[0] {
                let v = idx.get([j, k1, k2, 0]) - part.unwrap_or(0) as f64;
                if part.is_some() && !(0.0..a.ne[1] as f64).contains(&v) {
                    data.extend_from_slice(&zeros);
                    continue;
                }
                let r = row_index(v, a.ne[1], "get_rows");
                data.extend_from_slice(a.row(r, k1, k2));
            }
        }
    }
    Dense::new(ne, data)
}

/// `dst` with the rows of `rows` written at the indices in `idx`.
pub(crate) fn set_rows(dst: &Dense, rows: &Dense, idx: &Dense) -> Dense {
    let mut out = dst.clone();
    for i3 in 0..rows.ne[3] {
        for i2 in 0..rows.ne[2] {
            for i in 0..rows.ne[1] {
                let v = idx.get([i, i2 % idx.ne[1], i3 % idx.ne[2], 0]);
                let r = row_index(v, dst.ne[1], "set_rows");
                out.row_mut(r, i2, i3).copy_from_slice(rows.row(i, i2, i3));
            }
        }
    }
    out
}

/// `a` and `b` joined along `dim`.
/// `len` indices of `a` along `dim` from `start` (a reduce-scatter's share).
pub(crate) fn slice(a: &Dense, dim: usize, start: i64, len: i64) -> Dense {
    assert!(
        dim < 4 && start >= 0 && len >= 1 && start + len <= a.ne[dim],
        "slice: [{start}, {start} + {len}) is not inside dim {dim} of {}",
        fmt_ne(&a.ne)
    );
    let mut ne = a.ne;
    ne[dim] = len;
    Dense::from_fn(ne, |mut idx| {
        idx[dim] += start;
        a.get(idx)
    })
}

pub(crate) fn concat(a: &Dense, b: &Dense, dim: usize) -> Dense {
    assert!(
        dim < 4 && (0..4).all(|d| d == dim || a.ne[d] == b.ne[d]),
        "concat: {} and {} do not join along dim {dim}",
        fmt_ne(&a.ne),
        fmt_ne(&b.ne)
    );
    let mut ne = a.ne;
    ne[dim] += b.ne[dim];
    Dense::from_fn(ne, |mut idx| {
        if idx[dim] < a.ne[dim] {
            a.get(idx)
        } else {
            idx[dim] -= a.ne[dim];
            b.get(idx)
        }
    })
}

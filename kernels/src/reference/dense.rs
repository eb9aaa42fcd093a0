//! [`Dense`] values and the moves between bytes and them ([`gather`], [`scatter`]).
//!
//! Invariants:
//! - a `Dense` holds exactly `ne0 * ne1 * ne2 * ne3` values (every `ne[i] >= 1`) in
//!   ggml's logical order: flat index = i0 + ne0*(i1 + ne1*(i2 + ne2*i3)); its rows
//!   (runs of ne0 values) are contiguous;
//! - [`gather`] reads every element through the layout's byte strides, so views,
//!   permutes and transposes need no special case; block-quantized tensors must have
//!   packed rows (`nb0` = the block size), and each row is dequantized whole;
//! - [`scatter`] is its inverse and writes only the bytes of the tensor's elements
//!   (a view leaves the rest of its root untouched); values round once, from f64 to
//!   the destination dtype (quantized rows: f64 -> f32, then [`crate::quant::quantize_row`]).

use crate::quant::{dequantize_row, plain, quantize_row};
use ir::Layout;
use ir::layout::fmt_ne;

/// Values of a tensor, in f64, in ggml's logical order (`ne[0]` fastest).
#[derive(Clone, Debug, PartialEq)]
pub struct Dense {
    /// Extents, `ne[0]` innermost; each at least 1.
    pub ne: [i64; 4],
    /// `ne0 * ne1 * ne2 * ne3` values; flat = i0 + ne0*(i1 + ne1*(i2 + ne2*i3)).
    pub data: Vec<f64>,
}

impl Dense {
    /// Wraps `data` as a tensor of extents `ne`. Panics when the lengths disagree.
    pub fn new(ne: [i64; 4], data: Vec<f64>) -> Dense {
        assert!(
            ne.iter().all(|&n| n >= 1),
            "Dense: extents {} must all be >= 1",
            fmt_ne(&ne)
        );
        let n = n_elements(ne);
        assert_eq!(
            data.len(),
            n,
            "Dense: {} needs {n} values, got {}",
            fmt_ne(&ne),
            data.len()
        );
        Dense { ne, data }
    }

    /// All zeros.
    pub fn zeros(ne: [i64; 4]) -> Dense {
        Dense::new(ne, vec![0.0; n_elements(ne)])
    }

    /// The tensor whose element at each index is `f(index)`.
    pub fn from_fn(ne: [i64; 4], mut f: impl FnMut([i64; 4]) -> f64) -> Dense {
        let mut data = Vec::with_capacity(n_elements(ne));
        for_each_index(ne, |idx| data.push(f(idx)));
        Dense::new(ne, data)
    }

    /// Number of values.
    pub fn n_elements(&self) -> usize {
        self.data.len()
    }

    /// Number of rows (ne1 * ne2 * ne3).
    pub fn n_rows(&self) -> usize {
        self.data.len() / self.ne[0] as usize
    }

    /// Flat position of element `idx`. Panics when `idx` is out of bounds.
    pub fn flat_index(&self, idx: [i64; 4]) -> usize {
        for d in 0..4 {
            assert!(
                (0..self.ne[d]).contains(&idx[d]),
                "index {idx:?} is out of bounds of {}",
                fmt_ne(&self.ne)
            );
        }
        let [n0, n1, n2, _] = self.ne;
        (idx[0] + n0 * (idx[1] + n1 * (idx[2] + n2 * idx[3]))) as usize
    }

    /// The element at `idx`.
    pub fn get(&self, idx: [i64; 4]) -> f64 {
        self.data[self.flat_index(idx)]
    }

    /// Sets the element at `idx`.
    pub fn set(&mut self, idx: [i64; 4], value: f64) {
        let i = self.flat_index(idx);
        self.data[i] = value;
    }

    /// Row (i1, i2, i3): its ne0 values.
    pub fn row(&self, i1: i64, i2: i64, i3: i64) -> &[f64] {
        let start = self.flat_index([0, i1, i2, i3]);
        &self.data[start..start + self.ne[0] as usize]
    }

    /// Row (i1, i2, i3), mutable.
    pub fn row_mut(&mut self, i1: i64, i2: i64, i3: i64) -> &mut [f64] {
        let start = self.flat_index([0, i1, i2, i3]);
        let n0 = self.ne[0] as usize;
        &mut self.data[start..start + n0]
    }

    /// Every row in flat order.
    pub fn rows(&self) -> std::slice::ChunksExact<'_, f64> {
        self.data.chunks_exact(self.ne[0] as usize)
    }

    /// Every row in flat order, mutable.
    pub fn rows_mut(&mut self) -> std::slice::ChunksExactMut<'_, f64> {
        let n0 = self.ne[0] as usize;
        self.data.chunks_exact_mut(n0)
    }

    /// The same values (flat order) seen with extents `ne`. Panics when the element
    /// counts differ.
    pub fn reshaped(self, ne: [i64; 4]) -> Dense {
        assert_eq!(
            n_elements(ne),
            self.data.len(),
            "reshape of {} to {} changes the element count",
            fmt_ne(&self.ne),
            fmt_ne(&ne)
        );
        Dense::new(ne, self.data)
    }
}

/// `ne0 * ne1 * ne2 * ne3`.
fn n_elements(ne: [i64; 4]) -> usize {
    ne.iter().map(|&n| n.max(0) as usize).product()
}

/// Calls `f` with every index of `ne`, in flat order (i0 fastest).
pub(crate) fn for_each_index(ne: [i64; 4], mut f: impl FnMut([i64; 4])) {
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                for i0 in 0..ne[0] {
                    f([i0, i1, i2, i3]);
                }
            }
        }
    }
}

/// Calls `f` with (i1, i2, i3) of every row, in flat order.
fn for_each_row(ne: [i64; 4], mut f: impl FnMut(i64, i64, i64)) {
    for_each_index([1, ne[1], ne[2], ne[3]], |[_, i1, i2, i3]| f(i1, i2, i3));
}

/// Panics unless `layout` is fit for `what` over `n_bytes` bytes.
fn check_layout(what: &str, layout: &Layout, n_bytes: usize) {
    assert!(
        layout.ne.iter().all(|&n| n >= 1) && layout.dtype.row_bytes(layout.ne[0] as u64).is_some(),
        "{what}: extents {} are not valid for {}",
        fmt_ne(&layout.ne),
        layout.dtype
    );
    assert!(
        !layout.dtype.is_quantized() || layout.rows_packed(),
        "{what}: {} rows must be packed (nb0 = {}), got nb0 = {}",
        layout.dtype,
        layout.dtype.block_bytes(),
        layout.nb[0]
    );
    let span = layout.span_bytes();
    assert!(
        span <= n_bytes as u64,
        "{what}: {} {} with strides {:?} spans {span} bytes, only {n_bytes} given",
        layout.dtype,
        fmt_ne(&layout.ne),
        layout.nb
    );
}

/// Byte offset of row (i1, i2, i3).
fn row_offset(layout: &Layout, i1: i64, i2: i64, i3: i64) -> usize {
    layout.offset_of([0, i1, i2, i3]) as usize
}

/// Reads the tensor described by `layout` whose first byte is `bytes[0]`.
///
/// Honours any strides; block-quantized rows must be packed. Panics (naming the
/// layout) when the layout is invalid or reaches past `bytes`.
pub fn gather(bytes: &[u8], layout: &Layout) -> Dense {
    check_layout("gather", layout, bytes.len());
    let dtype = layout.dtype;
    let mut data = Vec::with_capacity(layout.n_elements() as usize);
    if dtype.is_quantized() {
        let row_bytes = layout.row_bytes() as usize;
        let mut row = vec![0f32; layout.ne[0] as usize];
        for_each_row(layout.ne, |i1, i2, i3| {
            let at = row_offset(layout, i1, i2, i3);
            dequantize_row(dtype, &bytes[at..at + row_bytes], &mut row);
            data.extend(row.iter().map(|&v| f64::from(v)));
        });
    } else {
        for_each_index(layout.ne, |idx| {
            data.push(plain::read_value(
                dtype,
                &bytes[layout.offset_of(idx) as usize..],
            ));
        });
    }
    Dense::new(layout.ne, data)
}

/// Writes `values` into the tensor described by `layout` whose first byte is
/// `bytes[0]`, converting (quantizing whole rows) to its dtype. Only the bytes of
/// the tensor's elements change.
///
/// Panics when the extents differ from `values.ne`, or as [`gather`] does.
pub fn scatter(values: &Dense, bytes: &mut [u8], layout: &Layout) {
    check_layout("scatter", layout, bytes.len());
    assert_eq!(
        values.ne,
        layout.ne,
        "scatter: values {} do not fit the layout {}",
        fmt_ne(&values.ne),
        fmt_ne(&layout.ne)
    );
    let dtype = layout.dtype;
    if dtype.is_quantized() {
        let row_bytes = layout.row_bytes() as usize;
        let mut row = vec![0f32; layout.ne[0] as usize];
        for_each_row(layout.ne, |i1, i2, i3| {
            for (r, &v) in row.iter_mut().zip(values.row(i1, i2, i3)) {
                *r = v as f32;
            }
            let at = row_offset(layout, i1, i2, i3);
            quantize_row(dtype, &row, &mut bytes[at..at + row_bytes]);
        });
    } else {
        let mut values = values.data.iter();
        for_each_index(layout.ne, |idx| {
            let v = *values.next().expect("values match the extents");
            plain::write_value(dtype, v, &mut bytes[layout.offset_of(idx) as usize..]);
        });
    }
}

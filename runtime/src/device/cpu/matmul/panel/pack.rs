//! Weights packed into panels once at load, and activations packed into
//! column blocks on every run.
//!
//! Weight panels (for a micro-kernel with `mr` rows, [`PanelIsa::mr`]):
//! panel `p` covers weight rows `p * mr .. p * mr + mr`; for each depth `kk`
//! in `0..K` in order it holds those rows' values at `kk`, so a micro-kernel
//! reads one contiguous run of `mr` values per step. Rows past M are zero.
//! Every panel starts 32-byte aligned (a step is 32 to 128 bytes).
//!
//! Values are f16 for F16 weights (the micro-kernels widen them, exactly, as
//! they load: a matrix-vector product then reads half the bytes) and f32 for
//! F32 and BF16 weights (BF16 widened here, exactly; its panels take twice
//! its bytes).
//!
//! Activation blocks (for tiles of at most `nr` columns, [`PanelIsa::nr`]):
//! block `b` covers columns `b * nr .. b * nr + nr` of all of src1's columns
//! (batches one after the other); for each depth `kk` it holds those columns'
//! values at `kk`, `nr` apart (a last, narrower block leaves the rest unset:
//! its tiles never read them).
//!
//! F16 and BF16 weights are widened to f32 here (exactly), so their products
//! run on the f32 micro-kernels; their panels take twice their bytes.

use super::isa::PanelIsa;
use crate::device::cpu::RawTensor;
use crate::device::cpu::matmul::convert::row_to_f32;
use crate::device::cpu::matmul::shape::Geometry;
use crate::memory::AlignedBuffer;
use ir::DType;
use std::cell::RefCell;

/// The type of a panel's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PanelValue {
    /// f32.
    F32,
    /// IEEE half, widened by the micro-kernel.
    F16,
}

impl PanelValue {
    /// The panel values of a weight of `dtype`.
    pub fn of(dtype: DType) -> PanelValue {
        if dtype == DType::F16 {
            PanelValue::F16
        } else {
            PanelValue::F32
        }
    }

    /// Bytes per value.
    pub const fn bytes(self) -> usize {
        match self {
            PanelValue::F32 => 4,
            PanelValue::F16 => 2,
        }
    }
}

/// One weight packed in panels.
pub struct Panels {
    buf: AlignedBuffer,
    /// The tile shape the panels are made for.
    pub isa: PanelIsa,
    /// The values' type.
    pub value: PanelValue,
    /// Weight rows (M).
    pub m: usize,
    /// Row length (K).
    pub k: usize,
}

impl Panels {
    /// Number of panels.
    pub fn count(&self) -> usize {
        self.m.div_ceil(self.isa.mr())
    }

    /// Panel `p`'s values at depth `kk` (`mr` of them, then the following depths).
    ///
    /// # Safety
    /// `p < count()`, `kk <= k`.
    pub unsafe fn at(&self, p: usize, kk: usize) -> *const u8 {
        let step = self.isa.mr() * self.value.bytes();
        // SAFETY: inside the buffer of count() * k steps.
        unsafe { self.buf.as_ptr().add((p * self.k + kk) * step) }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }
}

thread_local! {
    /// One row widened to f32 (kept across runs).
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Packs a 2-D weight `src0` (`[K, M, 1, 1]`, F32, F16 or BF16, any row
/// stride) for `isa`; `None` when the memory cannot be had.
///
/// # Safety
/// Every row of `src0` is readable.
pub unsafe fn pack_weights(src0: &RawTensor, isa: PanelIsa) -> Option<Panels> {
    let (k, m, mr) = (src0.ne[0] as usize, src0.ne[1] as usize, isa.mr());
    let value = PanelValue::of(src0.dtype);
    let bytes = m
        .div_ceil(mr)
        .checked_mul(mr)?
        .checked_mul(k)?
        .checked_mul(value.bytes())?;
    let panels = Panels {
        buf: AlignedBuffer::zeroed(bytes.max(1), 64)?,
        isa,
        value,
        m,
        k,
    };
    if value == PanelValue::F16 {
        let out = panels.buf.as_ptr() as *mut u16;
        let nb0 = src0.nb[0] as usize;
        for i in 0..m {
            // SAFETY: row i of src0 is readable (caller), K values long.
            let row = unsafe { src0.row_ptr(i, 0, 0) };
            let (p, r) = (i / mr, i % mr);
            for kk in 0..k {
                // SAFETY: value kk of the row (stride nb0); the panel index
                // (p * k + kk) * mr + r < count() * k * mr.
                unsafe {
                    let bits = (row.add(kk * nb0) as *const u16).read_unaligned();
                    *out.add((p * k + kk) * mr + r) = bits;
                }
            }
        }
        return Some(panels);
    }
    let out = panels.buf.as_ptr() as *mut f32;
    ROW.with_borrow_mut(|row| {
        row.resize(k, 0.0);
        for i in 0..m {
            // SAFETY: row i of src0 is readable (caller), K values long.
            unsafe { row_to_f32(src0.dtype, src0.row_ptr(i, 0, 0), src0.nb[0] as usize, row) };
            let (p, r) = (i / mr, i % mr);
            for (kk, &v) in row.iter().enumerate() {
                // SAFETY: (p * k + kk) * mr + r < count() * k * mr.
                unsafe { *out.add((p * k + kk) * mr + r) = v };
            }
        }
    });
    Some(panels)
}

/// f32 values in the activation blocks of `geo` for tiles `nr` wide.
pub fn column_block_floats(geo: &Geometry, nr: usize) -> usize {
    (geo.n * geo.batches()).div_ceil(nr) * nr * geo.k
}

/// The dst column and src1 row of flat column `c` (`j + n * batch`).
pub fn column_coords(geo: &Geometry, c: usize) -> (usize, usize, usize) {
    let (b2, b3) = geo.batch_coords(c / geo.n);
    (c % geo.n, b2, b3)
}

/// Packs activation block `b` (module doc) into `out`, which holds
/// [`column_block_floats`] f32.
///
/// # Safety
/// `b < ceil(columns / nr)`; src1 is readable; only this thread writes the
/// block's bytes of `out`.
pub unsafe fn pack_columns(geo: &Geometry, nr: usize, b: usize, out: *mut f32) {
    let (k, columns) = (geo.k, geo.n * geo.batches());
    // SAFETY: block b starts inside `out` (b < ceil(columns / nr)).
    let block = unsafe { out.add(b * nr * k) };
    let cols = b * nr..columns.min(b * nr + nr);
    if geo.src1.dtype == DType::F32 && geo.src1.nb[0] == 4 {
        // Contiguous f32 rows: read the block's rows side by side and write
        // the block in order.
        let mut rows = [std::ptr::null::<f32>(); super::MAX_NR];
        for (r, c) in rows.iter_mut().zip(cols.clone()) {
            let (j, b2, b3) = column_coords(geo, c);
            // SAFETY: (j, b2, b3) is inside src1's extents.
            *r = unsafe { geo.src1_row(j, b2, b3) } as *const f32;
        }
        let rows = &rows[..cols.len()];
        for kk in 0..k {
            for (t, r) in rows.iter().enumerate() {
                // SAFETY: value kk of a K-long row; kk * nr + t inside block b.
                unsafe { *block.add(kk * nr + t) = *r.add(kk) };
            }
        }
        return;
    }
    ROW.with_borrow_mut(|row| {
        row.resize(k, 0.0);
        for c in cols {
            let (j, b2, b3) = column_coords(geo, c);
            // SAFETY: (j, b2, b3) is inside src1's extents.
            unsafe {
                row_to_f32(
                    geo.src1.dtype,
                    geo.src1_row(j, b2, b3),
                    geo.src1.nb[0] as usize,
                    row,
                )
            };
            let t = c - b * nr;
            for (kk, &v) in row.iter().enumerate() {
                // SAFETY: kk * nr + t < nr * k, inside block b.
                unsafe { *block.add(kk * nr + t) = v };
            }
        }
    });
}

//! Row access shared by the op kernels: a run of a tensor's elements read as
//! f32 values, or written from them, whatever the dtype and element stride.
//!
//! Invariants:
//! - a [`RowIo`] is built from a tensor whose layout was checked at prepare time
//!   (quantized rows packed, `ne0` a whole number of blocks);
//! - a slice over tensor memory is only ever formed when the elements are F32,
//!   packed and 4-byte aligned ([`RowIo::direct`]); everything else goes through
//!   unaligned element reads and writes, or `dequantize_row` / `quantize_row`;
//! - [`RowIo::view`] never hands out a slice that overlaps the bytes a kernel is
//!   about to write (in-place steps: dst aliasing src), so a `&[f32]` and a
//!   `&mut [f32]` over the same bytes never coexist.

use crate::device::cpu::RawTensor;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use ir::DType;
use kernels::quant::{dequantize_row, quantize_row};

/// Bytes of one element (one block for quantized dtypes).
pub(crate) fn elem_bytes(dtype: DType) -> usize {
    dtype.block_bytes() as usize
}

/// True when the byte ranges `[a, a + a_len)` and `[b, b + b_len)` intersect.
pub(crate) fn overlaps(a: *const u8, a_len: usize, b: *const u8, b_len: usize) -> bool {
    let (a, b) = (a as usize, b as usize);
    a < b + b_len && b < a + a_len
}

/// How one tensor's rows are read as f32 values and written from them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowIo {
    /// Element type.
    pub dtype: DType,
    /// Byte stride between elements (between blocks when quantized).
    pub nb0: usize,
    /// Elements are packed (`nb0` is the element or block size).
    pub packed: bool,
    /// Every element address is aligned for its type.
    pub aligned: bool,
}

impl RowIo {
    /// The row access of `t`.
    pub fn new(t: &RawTensor) -> RowIo {
        let align = match t.dtype {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            _ => 1,
        };
        let aligned = (t.data as usize).is_multiple_of(align)
            && t.nb.iter().all(|&b| (b as usize).is_multiple_of(align));
        RowIo {
            dtype: t.dtype,
            nb0: t.nb[0] as usize,
            packed: t.nb[0] as usize == elem_bytes(t.dtype),
            aligned,
        }
    }

    /// Rows are f32 slices in memory: read and written without conversion.
    pub fn direct(&self) -> bool {
        self.dtype == DType::F32 && self.packed && self.aligned
    }

    /// Bytes spanned by `n` elements starting at a row's first element.
    pub fn span(&self, n: usize) -> usize {
        if self.dtype.is_quantized() {
            n / self.dtype.block_elems() as usize * self.nb0
        } else if n == 0 {
            0
        } else {
            (n - 1) * self.nb0 + elem_bytes(self.dtype)
        }
    }

    /// Reads `out.len()` values starting at `p` into `out`.
    ///
    /// # Safety
    /// `p` addresses `out.len()` elements of this layout (whole blocks when
    /// quantized) that no one writes meanwhile, and they do not overlap `out`.
    pub unsafe fn load(&self, p: *const u8, out: &mut [f32]) {
        let n = out.len();
        let nb0 = self.nb0;
        // SAFETY: every address formed is one of the `n` elements
        // the caller vouches for; slices are formed only when packed and aligned.
        unsafe {
            match self.dtype {
                DType::F32 if self.packed => {
                    std::ptr::copy_nonoverlapping(p, out.as_mut_ptr().cast::<u8>(), n * 4)
                }
                DType::F32 => {
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = p.add(i * nb0).cast::<f32>().read_unaligned();
                    }
                }
                DType::F16 if self.packed && self.aligned => {
                    std::slice::from_raw_parts(p.cast::<f16>(), n).convert_to_f32_slice(out)
                }
                DType::F16 => {
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = f16::from_bits(p.add(i * nb0).cast::<u16>().read_unaligned()).to_f32();
                    }
                }
                DType::BF16 => {
                    for (i, o) in out.iter_mut().enumerate() {
                        let bits = p.add(i * nb0).cast::<u16>().read_unaligned();
                        *o = f32::from_bits(u32::from(bits) << 16);
                    }
                }
                DType::I32 => {
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = p.add(i * nb0).cast::<i32>().read_unaligned() as f32;
                    }
                }
                q => dequantize_row(q, std::slice::from_raw_parts(p, self.span(n)), out),
            }
        }
    }

    /// Writes `vals` as `vals.len()` elements starting at `p`, converting to
    /// the dtype (rounding to nearest even; whole blocks when quantized).
    ///
    /// # Safety
    /// `p` addresses `vals.len()` elements of this layout that this thread may
    /// write, and they do not overlap `vals`.
    pub unsafe fn store(&self, p: *mut u8, vals: &[f32]) {
        let n = vals.len();
        let nb0 = self.nb0;
        // SAFETY: as in `load`, for writing.
        unsafe {
            match self.dtype {
                DType::F32 if self.packed => {
                    std::ptr::copy_nonoverlapping(vals.as_ptr().cast::<u8>(), p, n * 4)
                }
                DType::F32 => {
                    for (i, &v) in vals.iter().enumerate() {
                        p.add(i * nb0).cast::<f32>().write_unaligned(v);
                    }
                }
                DType::F16 if self.packed && self.aligned => {
                    std::slice::from_raw_parts_mut(p.cast::<f16>(), n).convert_from_f32_slice(vals)
                }
                DType::F16 => {
                    for (i, &v) in vals.iter().enumerate() {
                        p.add(i * nb0)
                            .cast::<u16>()
                            .write_unaligned(f16::from_f32(v).to_bits());
                    }
                }
                DType::BF16 => {
                    for (i, &v) in vals.iter().enumerate() {
                        p.add(i * nb0)
                            .cast::<u16>()
                            .write_unaligned(bf16::from_f32(v).to_bits());
                    }
                }
                DType::I32 => {
                    for (i, &v) in vals.iter().enumerate() {
                        p.add(i * nb0)
                            .cast::<i32>()
                            .write_unaligned(f64::from(v).round() as i32);
                    }
                }
                q => quantize_row(q, vals, std::slice::from_raw_parts_mut(p, self.span(n))),
            }
        }
    }

    /// The `n` values at `p`: the memory itself when direct and clear of the
    /// bytes `[avoid, avoid + avoid_len)` about to be written, else a copy in `buf`.
    ///
    /// # Safety
    /// As [`RowIo::load`]; `buf` holds at least `n` values. The returned slice
    /// must not outlive the tensor's validity, and no one writes those `n`
    /// elements while it is alive.
    pub unsafe fn view<'a>(
        &self,
        p: *const u8,
        n: usize,
        buf: &'a mut [f32],
        avoid: *const u8,
        avoid_len: usize,
    ) -> &'a [f32] {
        if self.direct() && !overlaps(p, n * 4, avoid, avoid_len) {
            // SAFETY: F32, packed, aligned, in bounds and not being written.
            unsafe { std::slice::from_raw_parts(p.cast::<f32>(), n) }
        } else {
            // SAFETY: forwarded caller contract.
            unsafe { self.load(p, &mut buf[..n]) };
            &buf[..n]
        }
    }

    /// Where to compute `n` results bound for `p`: the memory itself when
    /// direct, else `buf`. Finish with [`RowIo::commit`].
    ///
    /// # Safety
    /// `p` addresses `n` elements this thread alone writes, and no slice over
    /// them is alive; `buf` holds at least `n` values.
    pub unsafe fn target<'a>(&self, p: *mut u8, n: usize, buf: &'a mut [f32]) -> &'a mut [f32] {
        if self.direct() {
            // SAFETY: F32, packed, aligned, in bounds, written by this thread only.
            unsafe { std::slice::from_raw_parts_mut(p.cast::<f32>(), n) }
        } else {
            &mut buf[..n]
        }
    }

    /// Stores `vals` at `p` unless they already are the memory at `p`.
    ///
    /// # Safety
    /// As [`RowIo::store`], except that `vals` may be the slice [`RowIo::target`]
    /// returned for `p`.
    pub unsafe fn commit(&self, p: *mut u8, vals: &[f32]) {
        if vals.as_ptr().cast::<u8>() != p.cast_const() {
            // SAFETY: forwarded caller contract; `vals` is a buffer, not the row.
            unsafe { self.store(p, vals) }
        }
    }
}

/// A scratch row for one thread: empty when `needed` is false, so that fully
/// direct kernels allocate nothing.
pub(crate) fn scratch_row(needed: bool, n: usize) -> Vec<f32> {
    if needed { vec![0.0; n] } else { Vec::new() }
}

/// Copies `n` elements of `dtype` (whole blocks when quantized) between two
/// strided runs, without conversion: one memmove when both are packed.
///
/// # Safety
/// Both runs are in bounds; `dst` is writable by this thread; quantized runs are packed.
pub(crate) unsafe fn copy_elems(
    dtype: DType,
    src: *const u8,
    src_nb0: usize,
    dst: *mut u8,
    dst_nb0: usize,
    n: usize,
) {
    let eb = elem_bytes(dtype);
    // SAFETY: addresses stay inside the two runs the caller vouches for.
    unsafe {
        if dtype.is_quantized() || (src_nb0 == eb && dst_nb0 == eb) {
            let bytes = dtype.row_bytes(n as u64).unwrap_or(0) as usize;
            std::ptr::copy(src, dst, bytes);
        } else if eb == 4 {
            for i in 0..n {
                let v = src.add(i * src_nb0).cast::<u32>().read_unaligned();
                dst.add(i * dst_nb0).cast::<u32>().write_unaligned(v);
            }
        } else {
            for i in 0..n {
                let v = src.add(i * src_nb0).cast::<u16>().read_unaligned();
                dst.add(i * dst_nb0).cast::<u16>().write_unaligned(v);
            }
        }
    }
}

/// Sum of `x` in f64 with eight independent lanes (vectorisable, and exact
/// enough that long rows of f32 do not drift from the f64 reference).
pub(crate) fn sum_f64(x: &[f32]) -> f64 {
    reduce8(x, f64::from)
}

/// Sum of squares of `x` in f64.
pub(crate) fn sum_sq_f64(x: &[f32]) -> f64 {
    reduce8(x, |v| {
        let v = f64::from(v);
        v * v
    })
}

/// Sum of squared deviations from `mean`, in f64.
pub(crate) fn sum_sq_dev_f64(x: &[f32], mean: f64) -> f64 {
    reduce8(x, |v| {
        let d = f64::from(v) - mean;
        d * d
    })
}

/// Sum of `f(v)` over `x` in eight lanes.
#[inline(always)]
fn reduce8(x: &[f32], f: impl Fn(f32) -> f64) -> f64 {
    let mut lanes = [0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += f(v);
        }
    }
    let mut s = lanes.iter().sum::<f64>();
    for &v in tail {
        s += f(v);
    }
    s
}

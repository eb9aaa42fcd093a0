//! The shapes of one mul_mat, checked once: extents, broadcast ratios and the
//! addresses of rows and output elements.
//!
//! Invariant: a [`Geometry`] exists only for shapes and dtypes that the
//! kernels support (the checks of `ir::rules` for mul_mat, plus alignment of
//! the f32 operands that are read or written as `f32`), so the address helpers
//! stay in bounds for indices inside the extents.

use super::unsupported;
use crate::RuntimeError;
use crate::device::cpu::RawTensor;
use ir::DType;
use ir::layout::fmt_ne;

/// One mul_mat's operands and extents.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// The result, f32 `[m, n, ne12, ne13]`.
    pub dst: RawTensor,
    /// The weights (broadcast over batches), `[k, m, ne02, ne03]`.
    pub src0: RawTensor,
    /// The activations, `[k, n, ne12, ne13]`.
    pub src1: RawTensor,
    /// Rows of src0 per matrix (dst's row length).
    pub m: usize,
    /// Rows of src1 per matrix.
    pub n: usize,
    /// Dot product length (row length of src0 and src1).
    pub k: usize,
    /// src1's (and dst's) extent in dim 2.
    pub ne12: usize,
    /// src1's (and dst's) extent in dim 3.
    pub ne13: usize,
    /// ne12 / ne02.
    pub r2: usize,
    /// ne13 / ne03.
    pub r3: usize,
}

impl Geometry {
    /// Checks the operands (errors name what is wrong).
    pub fn new(dst: RawTensor, src0: RawTensor, src1: RawTensor) -> Result<Geometry, RuntimeError> {
        let (a, b) = (&src0, &src1);
        let shapes = || {
            format!(
                "src0 {} {}, src1 {} {}, dst {} {}",
                a.dtype,
                fmt_ne(&a.ne),
                b.dtype,
                fmt_ne(&b.ne),
                dst.dtype,
                fmt_ne(&dst.ne)
            )
        };
        if [a.ne, b.ne, dst.ne].iter().flatten().any(|&e| e < 1) {
            return Err(unsupported(format!("empty extents: {}", shapes())));
        }
        if a.dtype == DType::I32 || !matches!(b.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(unsupported(format!(
                "src0 must not be i32 and src1 must be f32, f16 or bf16: {}",
                shapes()
            )));
        }
        if dst.dtype != DType::F32 {
            return Err(unsupported(format!("dst must be f32: {}", shapes())));
        }
        let want = [a.ne[1], b.ne[1], b.ne[2], b.ne[3]];
        if a.ne[0] != b.ne[0] || b.ne[2] % a.ne[2] != 0 || b.ne[3] % a.ne[3] != 0 || dst.ne != want
        {
            return Err(unsupported(format!(
                "shapes do not match (want equal ne0, src0 broadcast over src1 in dims 2 and 3, dst {}): {}",
                fmt_ne(&want),
                shapes()
            )));
        }
        if a.layout().is_transposed() {
            return Err(unsupported(format!("src0 is transposed: {}", shapes())));
        }
        if a.dtype.is_quantized()
            && (!a.layout().rows_packed()
                || !(a.ne[0] as u64).is_multiple_of(a.dtype.block_elems()))
        {
            return Err(unsupported(format!(
                "quantized src0 needs packed rows of whole blocks: {}",
                shapes()
            )));
        }
        // f32 operands are read and written as `f32` (by gemm, among others).
        for (what, t) in [("src0", a), ("src1", b), ("dst", &dst)] {
            if t.dtype == DType::F32
                && (!(t.data as usize).is_multiple_of(4) || t.nb.iter().any(|s| s % 4 != 0))
            {
                return Err(unsupported(format!(
                    "{what} f32 is not 4-byte aligned (address {:p}, strides {:?})",
                    t.data, t.nb
                )));
            }
        }
        let ne = |t: &RawTensor, d: usize| t.ne[d] as usize;
        Ok(Geometry {
            dst,
            src0,
            src1,
            m: ne(a, 1),
            n: ne(b, 1),
            k: ne(a, 0),
            ne12: ne(b, 2),
            ne13: ne(b, 3),
            r2: ne(b, 2) / ne(a, 2),
            r3: ne(b, 3) / ne(a, 3),
        })
    }

    /// Matrices in dst (and src1): ne12 * ne13.
    pub fn batches(&self) -> usize {
        self.ne12 * self.ne13
    }

    /// (b2, b3) of flat batch `b`.
    pub fn batch_coords(&self, b: usize) -> (usize, usize) {
        (b % self.ne12, b / self.ne12)
    }

    /// First byte of src0 row `i` of the matrix that dst batch (b2, b3) uses.
    ///
    /// # Safety
    /// `i < m`, `b2 < ne12`, `b3 < ne13`.
    pub unsafe fn src0_row(&self, i: usize, b2: usize, b3: usize) -> *const u8 {
        // SAFETY: b2 / r2 < ne02 and b3 / r3 < ne03 by the broadcast rule.
        unsafe { self.src0.row_ptr(i, b2 / self.r2, b3 / self.r3) }
    }

    /// First byte of src1 row `j` of batch (b2, b3).
    ///
    /// # Safety
    /// `j < n`, `b2 < ne12`, `b3 < ne13`.
    pub unsafe fn src1_row(&self, j: usize, b2: usize, b3: usize) -> *const u8 {
        // SAFETY: inside the extents by the caller's contract.
        unsafe { self.src1.row_ptr(j, b2, b3) }
    }

    /// Address of dst[i, j, b2, b3].
    ///
    /// # Safety
    /// `i < m`, `j < n`, `b2 < ne12`, `b3 < ne13`.
    pub unsafe fn dst_at(&self, i: usize, j: usize, b2: usize, b3: usize) -> *mut f32 {
        // SAFETY: inside the extents; dst is f32 and 4-byte aligned (checked).
        unsafe { self.dst.row_ptr(j, b2, b3).add(i * self.dst.nb[0] as usize) as *mut f32 }
    }
}

//! A `mul_mat` + GLU step on the CPU: the gate product kernel writes `dst`,
//! the up product kernel a buffer the step owns, then the unit's kernel
//! computes `act(dst) * up` into `dst` in place, with a barrier between each
//! two. The product kernels are the ones the unfused `mul_mat`s would run
//! (float panels, int8 lanes, K-quant tiles, `gemm`, the reference) and the
//! unit's is the two-source `glu` op's (the JIT's `act(gate) * up`, the
//! body the elementwise pass gives `act` then `mul` too), so the fused
//! step's bits are the unfused nodes'.
//!
//! Invariant: no operand shares `dst`'s bytes (the compiler gives the step no
//! in-place operand), so writing the gate product first loses nothing; the
//! up buffer has the product's extents, packed F32, 64-byte aligned, and
//! lives as long as the kernels that hold its address; the three kernels
//! share one scratch, used one after the other.
//!
//! Memory: the up buffer is the one allocation of the step outside the
//! plan's arenas (the plan places both products `Fused`: a GPU never stores
//! them).

use super::{CpuKernel, RawTensor, ThreadCtx};
use std::cell::UnsafeCell;

/// 64 bytes of f32s, so the buffer is aligned as arena tensors are.
#[repr(C, align(64))]
struct Line([f32; 16]);

/// The up product's bytes, written by one kernel and read by the next.
struct UpBuffer {
    _lines: Box<[UnsafeCell<Line>]>,
}

// SAFETY: the buffer is only written and read through the raw tensor the
// step's kernels hold, under the pool's barriers (see `run`).
unsafe impl Send for UpBuffer {}
// SAFETY: as above.
unsafe impl Sync for UpBuffer {}

/// The two products, then the unit, in one step.
pub struct ProductGluKernel {
    /// Writes `w_gate · x` into `dst`.
    pub gate: Box<dyn CpuKernel>,
    /// Writes `w_up · x` into the step's buffer.
    pub up: Box<dyn CpuKernel>,
    /// Writes `act(dst) * up` into `dst`.
    pub glu: Box<dyn CpuKernel>,
    /// Held for the kernels' addresses; read only through them.
    _buffer: UpBuffer,
}

/// A packed F32 buffer of `like`'s extents for the up product, and the raw
/// tensor naming it; the tensor is valid while the returned holder lives.
fn up_buffer(like: &RawTensor) -> (UpBuffer, RawTensor) {
    let n = like.ne.iter().product::<i64>().max(1) as usize;
    let lines = n.div_ceil(16);
    let buffer: Box<[UnsafeCell<Line>]> = (0..lines)
        .map(|_| UnsafeCell::new(Line([0.0; 16])))
        .collect();
    let data = UnsafeCell::raw_get(buffer.as_ptr()).cast::<u8>();
    let ne = like.ne;
    let nb0 = 4u64;
    let nb = [
        nb0,
        nb0 * ne[0] as u64,
        nb0 * (ne[0] * ne[1]) as u64,
        nb0 * (ne[0] * ne[1] * ne[2]) as u64,
    ];
    let tensor = RawTensor {
        data,
        dtype: ir::DType::F32,
        ne,
        nb,
    };
    (UpBuffer { _lines: buffer }, tensor)
}

impl ProductGluKernel {
    /// The step over `dst` (packed F32: checker): `gate` writes `dst`, `up`
    /// is made by `make_up` for the buffer it is given, `make_glu` for
    /// (`dst`, buffer). Either maker's error is returned as is.
    pub fn new<E>(
        dst: RawTensor,
        gate: Box<dyn CpuKernel>,
        make_up: impl FnOnce(RawTensor) -> Result<Box<dyn CpuKernel>, E>,
        make_glu: impl FnOnce(RawTensor) -> Result<Box<dyn CpuKernel>, E>,
    ) -> Result<ProductGluKernel, E> {
        let (buffer, up_tensor) = up_buffer(&dst);
        Ok(ProductGluKernel {
            gate,
            up: make_up(up_tensor)?,
            glu: make_glu(up_tensor)?,
            _buffer: buffer,
        })
    }
}

impl CpuKernel for ProductGluKernel {
    fn scratch_bytes(&self) -> usize {
        (self.gate.scratch_bytes())
            .max(self.up.scratch_bytes())
            .max(self.glu.scratch_bytes())
    }

    unsafe fn run(&self, ctx: &ThreadCtx<'_>, scratch: *mut u8) {
        // SAFETY: the caller's contract, passed on: every thread of the pool
        // runs the three kernels, in this order, with the same scratch (large
        // enough for each); the barriers order every product element's write
        // (and every use of the scratch) before the next kernel starts.
        unsafe {
            self.gate.run(ctx, scratch);
            ctx.barrier();
            self.up.run(ctx, scratch);
            ctx.barrier();
            self.glu.run(ctx, scratch);
        }
    }

    fn describe(&self) -> String {
        format!("{} + {} + glu", self.gate.describe(), self.up.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_up_buffer_is_packed_f32_aligned_and_large_enough() {
        let like = RawTensor {
            data: std::ptr::null_mut(),
            dtype: ir::DType::F32,
            ne: [17, 3, 1, 1],
            nb: [4, 68, 204, 204],
        };
        let (holder, t) = up_buffer(&like);
        assert_eq!((t.ne, t.nb), (like.ne, like.nb));
        assert_eq!(t.data as usize % 64, 0);
        assert!(holder._lines.len() * 64 >= 17 * 3 * 4);
    }
}

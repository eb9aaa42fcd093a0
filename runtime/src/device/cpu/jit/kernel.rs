//! A prepared JIT kernel: compiled code shared through the cache, plus this
//! step's argument block (addresses and extents baked in at prepare time).
//!
//! Invariants: `args` (and the slope table it may point to) live as long as
//! the kernel and never move (boxed); `code` keeps the machine code (and its
//! LLVM context) alive; threads split the work with `ctx.share`, each calling
//! the code on its own rows (or, for a flattened tensor, its own chunk of
//! elements), so their writes are disjoint.

use super::llvm::Compiled;
use crate::device::cpu::{CpuKernel, ThreadCtx};
use std::sync::Arc;

/// Elements per work item when a contiguous tensor is split as one flat row:
/// large enough to amortise the call, small enough to balance threads, and a
/// multiple of every vector width (chunk starts stay aligned).
const FLAT_CHUNK: usize = 4096;

/// How the threads split the work.
#[derive(Clone, Copy, Debug)]
pub(super) enum Split {
    /// Each thread takes whole rows.
    Rows {
        /// Output rows.
        n_rows: usize,
        /// Output row length.
        ne0: i64,
    },
    /// The tensors are one long row (all contiguous); each thread takes a
    /// range of its elements.
    Flat {
        /// Elements.
        n: usize,
    },
}

/// A step compiled by the JIT.
pub(super) struct JitKernel {
    pub code: Arc<Compiled>,
    pub args: Box<[i64]>,
    /// ALiBi slopes the argument block points to (soft_max only): owned here
    /// so they live as long as the block.
    pub _slopes: Option<Box<[f32]>>,
    pub split: Split,
    /// Non-temporal stores: fence before returning so they are visible to
    /// the threads that run the next step.
    pub stream: bool,
    pub desc: String,
}

impl CpuKernel for JitKernel {
    unsafe fn run(&self, ctx: &ThreadCtx<'_>, _scratch: *mut u8) {
        let (r0, r1, c0, c1) = match self.split {
            Split::Rows { n_rows, ne0 } => {
                let r = ctx.share(n_rows);
                (r.start as i64, r.end as i64, 0, ne0)
            }
            Split::Flat { n } => {
                let r = ctx.share(n.div_ceil(FLAT_CHUNK));
                let c0 = (r.start * FLAT_CHUNK).min(n);
                let c1 = (r.end * FLAT_CHUNK).min(n);
                (0, i64::from(c0 < c1), c0 as i64, c1 as i64)
            }
        };
        if r0 >= r1 {
            return;
        }
        // SAFETY: the code was generated for this argument block's layout
        // classes; the block holds valid tensors (the caller's contract) and
        // this thread's rows or elements are disjoint from the others'.
        unsafe { (self.code.func)(self.args.as_ptr(), r0, r1, c0, c1) };
        if self.stream {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: sfence has no preconditions (SSE is baseline on x86-64).
            unsafe {
                std::arch::x86_64::_mm_sfence()
            };
        }
    }

    fn describe(&self) -> String {
        self.desc.clone()
    }
}

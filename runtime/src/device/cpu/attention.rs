//! An attention step on the CPU ([`ir::plan::Step::Attention`]): the kernels
//! the four unfused ops would run, one after another with a barrier between
//! them — `mul_mat(k, q)` into a scores buffer, `soft_max` in place over it
//! (as an unfused plan may run it), `mul_mat(v, probs)` into a product
//! buffer, and `cont` of that product with axes 1 and 2 swapped into `dst`.
//! Each kernel computes exactly what it would unfused, so the step's bits are
//! the unfused chain's.
//!
//! Invariant: the scores and product buffers belong to the CPU device
//! ([`SharedAttentionBuffers`]): allocated once, at its first attention step's
//! preparation, as large as the largest scores and product of the attention
//! steps the plan runs on it, and shared by all of them. A device runs its
//! steps one at a time (one compute stream, one pool job per step), and no
//! step outside an attention step touches them, so sharing loses nothing and
//! costs what one layer's unfused intermediates would; each kernel holds them
//! alive (an `Arc`).

use super::{CpuKernel, RawTensor, ThreadCtx};
use crate::RuntimeError;
use crate::memory::AlignedBuffer;
use ir::plan::{DeviceId, Plan, Step};
use std::sync::{Arc, OnceLock};

/// The scores buffer and the product buffer.
type Buffers = Arc<[AlignedBuffer; 2]>;

/// The scores and product buffers of a CPU device's attention steps (see
/// the module doc).
#[derive(Default)]
pub struct SharedAttentionBuffers {
    buffers: OnceLock<Buffers>,
}

impl SharedAttentionBuffers {
    /// The buffers, allocated at the first call large enough for every
    /// attention step `plan` runs on `device`.
    fn get(&self, plan: &Plan, device: DeviceId) -> Result<Buffers, RuntimeError> {
        if let Some(b) = self.buffers.get() {
            return Ok(b.clone());
        }
        let span = |t: u32| plan.tensors[t as usize].layout().span_bytes() as usize;
        let (mut scores, mut product) = (0, 0);
        for step in (plan.splits.iter())
            .filter(|s| s.device == device)
            .flat_map(|s| &s.steps)
        {
            if let Step::Attention {
                scores: s,
                product: p,
                ..
            } = step
            {
                scores = scores.max(span(*s));
                product = product.max(span(*p));
            }
        }
        let alloc = |bytes: usize| {
            AlignedBuffer::zeroed(bytes.max(64), 64).ok_or_else(|| RuntimeError::Unsupported {
                op: "attention".to_string(),
                detail: format!("{bytes} bytes for attention intermediates cannot be allocated"),
            })
        };
        let buffers = Arc::new([alloc(scores)?, alloc(product)?]);
        Ok(self.buffers.get_or_init(|| buffers).clone())
    }
}

/// The four kernels and the buffers between them.
pub struct AttentionKernel {
    /// `mul_mat(k, q)` writing the scores buffer, `soft_max` over it in
    /// place, `mul_mat(v, probs)` writing the product buffer, `cont` of its
    /// permuted view writing `dst`.
    pub kernels: [Box<dyn CpuKernel>; 4],
    /// The buffers the kernels' tensors point into, kept alive.
    _buffers: Buffers,
}

/// Tensors over the device's attention buffers with the plan's layouts of
/// one step's scores, product and its permuted view.
pub struct AttentionBuffers {
    buffers: Buffers,
    /// The scores (also the probabilities, written in place: `soft_max`
    /// keeps its source's layout).
    pub scores: RawTensor,
    /// The product.
    pub product: RawTensor,
    /// The product's view with axes 1 and 2 swapped.
    pub permuted: RawTensor,
}

impl AttentionBuffers {
    /// Tensors of these layouts over `shared`'s buffers for `plan`'s steps
    /// on `device` (`permuted` views `product`'s bytes: the plan checker
    /// proved it does).
    pub fn new(
        shared: &SharedAttentionBuffers,
        (plan, device): (&Plan, DeviceId),
        [scores, product, permuted]: [ir::Layout; 3],
    ) -> Result<AttentionBuffers, RuntimeError> {
        let buffers = shared.get(plan, device)?;
        let at = |b: &AlignedBuffer, l: &ir::Layout| RawTensor {
            data: b.as_ptr(),
            dtype: l.dtype,
            ne: l.ne,
            nb: l.nb,
        };
        let [s, p] = &*buffers;
        let (scores, product, permuted) = (at(s, &scores), at(p, &product), at(p, &permuted));
        Ok(AttentionBuffers {
            buffers,
            scores,
            product,
            permuted,
        })
    }

    /// The step's kernel, holding these buffers.
    pub fn kernel(self, kernels: [Box<dyn CpuKernel>; 4]) -> AttentionKernel {
        AttentionKernel {
            kernels,
            _buffers: self.buffers,
        }
    }
}
impl CpuKernel for AttentionKernel {
    fn scratch_bytes(&self) -> usize {
        self.kernels
            .iter()
            .map(|k| k.scratch_bytes())
            .max()
            .unwrap_or(0)
    }

    unsafe fn run(&self, ctx: &ThreadCtx<'_>, scratch: *mut u8) {
        for (i, kernel) in self.kernels.iter().enumerate() {
            if i > 0 {
                ctx.barrier();
            }
            // SAFETY: the caller's contract, passed on: every thread of the
            // pool runs the four kernels in this order with the same scratch
            // (large enough for any of them); the barrier before each orders
            // every write of the one before it before any thread reads it;
            // the buffers live as long as `self`.
            unsafe { kernel.run(ctx, scratch) };
        }
    }

    fn describe(&self) -> String {
        let [scores, _, product, _] = &self.kernels;
        format!(
            "attention ({}, soft_max, {}, cont)",
            scores.describe(),
            product.describe()
        )
    }
}

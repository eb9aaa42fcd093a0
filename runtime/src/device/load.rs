//! What loading asks of a device about each weight: the request (the
//! tensor, its bytes' source, the plan it belongs to) and where the device
//! puts it.
//!
//! Invariant: a placement's address or bytes cover exactly the tensor's
//! span (binding checked its dtype and extents against the file).

use crate::RuntimeError;
use crate::weights::{BoundWeight, Weights, bind_weight};
use ir::Layout;
use ir::plan::Plan;
use std::borrow::Cow;

/// One weight of a plan, as a device is asked to place it.
pub struct WeightRequest<'a, 'w> {
    /// The plan.
    pub plan: &'a Plan,
    /// The plan tensor.
    pub tensor: u32,
    /// Its layout.
    pub layout: Layout,
    /// Where its bytes come from (kept alive by the runtime).
    pub weights: &'w Weights,
    /// Quantized products compute in exact precision (f32 activations).
    pub exact: bool,
}

impl<'w> WeightRequest<'_, 'w> {
    /// The weight's bytes: in place in the mapped file, or a copy (random
    /// values, a shard's slice, bytes the file does not align).
    pub fn bind(&self) -> Result<BoundWeight<'w>, RuntimeError> {
        let pt = &self.plan.tensors[self.tensor as usize];
        bind_weight(self.weights, &pt.name, &self.layout, pt.shard.as_ref())
    }
}

/// Where a device put a weight.
pub enum WeightPlacement<'w> {
    /// Read in place where it lies in the mapped file (host memory).
    InPlace(&'w [u8]),
    /// Written into its arena slot at load ([`super::Device::load_tensors`]).
    Write(Cow<'w, [u8]>),
    /// Held by the device already, at `addr` (a server's copy shared by every
    /// runtime of a job).
    Held {
        /// Its address on the device.
        addr: *mut u8,
        /// Its size there.
        bytes: u64,
        /// Whether this call uploaded it (else an earlier runtime did).
        uploaded: bool,
        /// Where the runtime reads its values instead of the device's
        /// (a dequantized copy on the device: the file's blocks are the
        /// truth), as (address, length) in the mapped file.
        host_source: Option<(usize, usize)>,
    },
}

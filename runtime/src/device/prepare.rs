//! What every device's step preparation shares: a plan tensor as a kernel
//! sees it, what a step costs, and the refusal of reads a device cannot make.
//!
//! Operands are plain addresses (`addresses.rs`) in their device's address
//! space. A step reads only tensors held on its split's device, except a
//! collective's participant (`all_reduce_sum`, `all_gather`), whose parts are
//! the other participants' tensors, read in place in their own devices'
//! arenas (the plan's events order it after every part is written).
//! Preparation re-checks this (the plan checker proved it): any other read
//! across devices, or a collective reading memory of another kind, is a
//! [`RuntimeError::PeerRead`].

use super::Device;
use super::cpu::RawTensor;
use super::step::PreparedStep;
use crate::RuntimeError;
use ir::Op;
use ir::plan::{FusedKernel, Plan, peer_read_refusal};
use std::sync::Arc;

/// The plan and its tensors' addresses, as every device prepares from them.
pub struct PrepareCtx<'a> {
    /// The plan.
    pub plan: &'a Plan,
    /// Per plan tensor, its address on its device.
    pub addr: &'a [*mut u8],
}

/// One end of a copy: its device and the tensor's address there.
#[derive(Clone, Copy)]
pub struct CopyEnd<'a> {
    /// The device holding the tensor.
    pub device: &'a Arc<dyn Device>,
    /// The tensor's address on it.
    pub addr: *mut u8,
}

impl CopyEnd<'_> {
    /// True when the end is host memory (a CPU device's arena).
    pub fn is_host(&self) -> bool {
        self.device.info().caps.host_buffer
    }
}

impl PrepareCtx<'_> {
    /// Plan tensor `t` at its address.
    pub fn raw(&self, t: u32) -> RawTensor {
        let pt = &self.plan.tensors[t as usize];
        RawTensor {
            data: self.addr[t as usize],
            dtype: pt.dtype,
            ne: pt.ne,
            nb: pt.nb,
        }
    }

    /// The bytes plan tensor `t` spans.
    pub fn span(&self, t: u32) -> u64 {
        self.raw(t).span_bytes()
    }

    /// The name of the device that runs split `split`.
    pub fn device_name(&self, split: usize) -> &str {
        &self.plan.devices[self.plan.splits[split].device.index()].name
    }

    /// Refuses a read of `srcs` by a step of split `split` (`op`, or a fused
    /// kernel for `None`) that no device can make (module doc).
    pub fn check_reads(
        &self,
        split: usize,
        op: Option<&Op>,
        srcs: &[u32],
    ) -> Result<(), RuntimeError> {
        let device = self.plan.splits[split].device.index();
        for &src in srcs {
            let held = self.plan.tensors[self.plan.owner(src) as usize]
                .device
                .index();
            if held == device {
                continue;
            }
            let (reader, held_dev) = (&self.plan.devices[device], &self.plan.devices[held]);
            let collective = op.is_some_and(|op| op.collective().is_some());
            if let Some(why) = peer_read_refusal(collective, reader.kind, held_dev.kind) {
                return Err(RuntimeError::PeerRead {
                    reader: op.map_or("fused", |op| op.name()),
                    device: reader.name.clone(),
                    tensor: self.plan.tensors[src as usize].name.clone(),
                    held_on: held_dev.name.clone(),
                    why,
                });
            }
        }
        Ok(())
    }

    /// An op step of split `split` running `kernel`, with its costs: bytes
    /// read and written (each operand's span once) and floating-point
    /// operations (2 per multiply-add for mul_mat; one per output element
    /// for the rest).
    pub fn op_step(
        &self,
        split: usize,
        (op, dst, srcs): (&Op, u32, &[u32]),
        kernel: Box<dyn super::DeviceStep>,
        fallback: bool,
    ) -> PreparedStep {
        let bytes = self.span(dst) + srcs.iter().map(|&t| self.span(t)).sum::<u64>();
        let out = self.raw(dst).n_elements() as u64;
        let flops = match (op, srcs.first()) {
            (Op::MulMat, Some(&src0)) => 2 * self.raw(src0).ne[0] as u64 * out,
            _ => out,
        };
        PreparedStep {
            kernel,
            split,
            device: self.plan.splits[split].device.index(),
            kind: op.name(),
            op: Some(*op),
            fused_kernel: None,
            product: None,
            dst,
            srcs: srcs.to_vec(),
            bytes,
            flops,
            fallback,
        }
    }

    /// A `mul_mat` + `add` step of split `split` running `kernel`,
    /// `dst = srcs[0] · srcs[1] + srcs[2]` with `product` never stored; its
    /// costs are the product's and one addition per output element.
    pub fn product_add_step(
        &self,
        split: usize,
        (product, dst, srcs): (u32, u32, &[u32; 3]),
        kernel: Box<dyn super::DeviceStep>,
        fallback: bool,
    ) -> PreparedStep {
        let bytes = self.span(dst) + srcs.iter().map(|&t| self.span(t)).sum::<u64>();
        let out = self.raw(dst).n_elements() as u64;
        let flops = 2 * self.raw(srcs[0]).ne[0] as u64 * out + out;
        let run = (kernel, fallback);
        let mut step = self.compound_step(split, "mul_mat_add", run, (dst, srcs), (bytes, flops));
        step.product = Some(product);
        step
    }

    /// A `mul_mat` + GLU step (`step`, a `Step::MulMatGlu`) of split `split`
    /// running `kernel`; its costs are both products' and two operations per
    /// output element. Its kind is `mul_mat_glu`; `srcs` are the gate weight,
    /// the up weight and the activations.
    pub fn product_glu_step(
        &self,
        split: usize,
        step: &ir::plan::Step,
        kernel: Box<dyn super::DeviceStep>,
        fallback: bool,
    ) -> PreparedStep {
        let ir::plan::Step::MulMatGlu { dst, srcs, .. } = step else {
            unreachable!("product_glu_step is given MulMatGlu steps only")
        };
        let dst = *dst;
        let bytes = self.span(dst) + srcs.iter().map(|&t| self.span(t)).sum::<u64>();
        let out = self.raw(dst).n_elements() as u64;
        let flops = 4 * self.raw(srcs[0]).ne[0] as u64 * out + 2 * out;
        let run = (kernel, fallback);
        self.compound_step(split, "mul_mat_glu", run, (dst, srcs), (bytes, flops))
    }

    /// A `mul_mat` x N step (`step`, a `Step::MulMatMany`) of split `split`
    /// running `kernel`; its costs are its products'. Its kind is
    /// `mul_mat_many`, its `dst` the first product (every result is the
    /// plan's to check), `srcs` the weights then the activations.
    pub fn product_many_step(
        &self,
        split: usize,
        step: &ir::plan::Step,
        kernel: Box<dyn super::DeviceStep>,
        fallback: bool,
    ) -> PreparedStep {
        let ir::plan::Step::MulMatMany { dsts, srcs } = step else {
            unreachable!("product_many_step is given MulMatMany steps only")
        };
        let bytes = (dsts.iter().chain(srcs))
            .map(|&t| self.span(t))
            .sum::<u64>();
        let k = srcs.first().map_or(0, |&w| self.raw(w).ne[0] as u64);
        let outs: u64 = dsts.iter().map(|&d| self.raw(d).n_elements() as u64).sum();
        let run = (kernel, fallback);
        let costs = (bytes, 2 * k * outs);
        self.compound_step(split, "mul_mat_many", run, (dsts[0], srcs), costs)
    }

    /// A rope-and-store step (`step`, a `Step::RopeStore`) of split `split`
    /// running `kernel`. It is known by its first op: `op`, `dst` and `srcs`
    /// are that op's (so `--check` compares the first result, the others
    /// through their readers' steps and the outputs), its costs every op's
    /// bytes and one operation per result element.
    pub fn rope_store_step(
        &self,
        split: usize,
        step: &ir::plan::Step,
        kernel: Box<dyn super::DeviceStep>,
        fallback: bool,
    ) -> PreparedStep {
        let ops = step.ops();
        let (op, dst, srcs) = ops[0];
        let bytes = (ops.iter())
            .map(|&(_, d, s)| self.span(d) + s.iter().map(|&t| self.span(t)).sum::<u64>())
            .sum::<u64>();
        let flops = (ops.iter())
            .map(|&(_, d, _)| self.raw(d).n_elements() as u64)
            .sum();
        let mut prepared = self.compound_step(
            split,
            "rope_store",
            (kernel, fallback),
            (dst, srcs),
            (bytes, flops),
        );
        prepared.op = Some(*op);
        prepared
    }

    /// A fused product or attention step of split `split`: `kind`, its
    /// kernel and fallback flag, the tensor it is known by and its reads, its
    /// costs (bytes, flops); no op, fused kernel or product.
    pub(crate) fn compound_step(
        &self,
        split: usize,
        kind: &'static str,
        (kernel, fallback): (Box<dyn super::DeviceStep>, bool),
        (dst, srcs): (u32, &[u32]),
        (bytes, flops): (u64, u64),
    ) -> PreparedStep {
        PreparedStep {
            kernel,
            split,
            device: self.plan.splits[split].device.index(),
            kind,
            op: None,
            fused_kernel: None,
            product: None,
            dst,
            srcs: srcs.to_vec(),
            bytes,
            flops,
            fallback,
        }
    }

    /// A step of split `split` running fused kernel `index` as `kernel`, with
    /// its costs (one operation per output element per body instruction).
    pub fn fused_step(
        &self,
        split: usize,
        index: u32,
        kernel: Box<dyn super::DeviceStep>,
        fallback: bool,
    ) -> PreparedStep {
        let k: &FusedKernel = &self.plan.kernels[index as usize];
        let bytes = self.span(k.output) + k.inputs.iter().map(|&t| self.span(t)).sum::<u64>();
        PreparedStep {
            kernel,
            split,
            device: self.plan.splits[split].device.index(),
            kind: "fused",
            op: None,
            fused_kernel: Some(index),
            product: None,
            dst: k.output,
            srcs: k.inputs.clone(),
            bytes,
            flops: self.raw(k.output).n_elements() as u64 * k.body.len() as u64,
            fallback,
        }
    }
}

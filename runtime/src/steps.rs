//! Preparing plan steps into CPU kernels, and what each step costs.
//!
//! Dispatch, per step:
//! - `mul_mat` → [`crate::cpu::matmul`] (float weights packed in panels for
//!   our micro-kernels, gemm for other f32/f16 products, SIMD integer dot
//!   products for Q8_0/Q4_0/Q4_1, dequantize-then-gemm for other dtypes);
//! - fused kernels, elementwise ops, norms and soft_max → the LLVM JIT;
//! - every other op → [`crate::cpu::ops`];
//! - whatever none of them supports → the reference kernels on one thread
//!   (correct, slow, and listed in the load report).
//!
//! Copies between devices of the plan (all host memory here) are byte copies.
//!
//! Operands are plain addresses (`addresses.rs`): every device of a
//! plan this runtime loads is a CPU device of one host, so a tensor's address
//! is valid on every device. A step reads only tensors held on its split's
//! device, except a collective's participant (`all_reduce_sum`,
//! `all_gather`), whose parts are the other participants' tensors, read in
//! place in their own devices' arenas (the plan's events order it after every
//! part is written). Preparation re-checks this (the plan checker proved it):
//! any other read across devices, or a collective reading a device that is
//! not a CPU (no shared memory), is a [`RuntimeError::PeerRead`].

use crate::RuntimeError;
use crate::cpu::reference_kernel::{ReferenceFusedKernel, ReferenceKernel};
use crate::cpu::{CpuKernel, RawTensor, ThreadCtx};
use crate::device::Device;
use crate::device::cuda::CudaDevice;
use crate::device::cuda::launch;
use crate::device::cuda::step::{CudaCopy, CudaStep, End as GpuEnd};
use crate::device::rpc::RemoteDevice;
use crate::device::rpc::ggml::{StepGraph, step_records};
use crate::device::rpc::kernels::{End, RemoteCopy, RemoteStep};
use ir::plan::{FusedKernel, Plan, Step, peer_read_refusal};
use ir::{Op, Role};
use std::sync::Arc;

/// A step ready to run, with the figures a profile prints.
pub struct PreparedStep {
    /// The kernel.
    pub kernel: Box<dyn CpuKernel>,
    /// Split index.
    pub split: usize,
    /// What it is: an op name, `fused`, or `copy`.
    pub kind: &'static str,
    /// The op, for an op step.
    pub op: Option<Op>,
    /// The plan's kernel index, for a fused step.
    pub fused_kernel: Option<u32>,
    /// The plan tensor written.
    pub dst: u32,
    /// The plan tensors read.
    pub srcs: Vec<u32>,
    /// Bytes read and written (each operand's span once).
    pub bytes: u64,
    /// Floating-point operations (2 per multiply-add for mul_mat; one per
    /// output element for the rest).
    pub flops: u64,
    /// True when the reference fallback runs it.
    pub fallback: bool,
    /// For a step a remote device computes: its node, which the device sends
    /// with the rest of its segment as one graph.
    pub remote: Option<Arc<StepGraph>>,
}

/// What the preparation needs: the plan, tensor addresses and the fast kernels.
pub(crate) struct Preparer<'a> {
    pub plan: &'a Plan,
    pub addr: &'a [*mut u8],
    pub fast: &'a crate::FastKernels,
    pub on_prepare: Option<&'a (dyn Fn(usize, usize) + Send + Sync)>,
    /// Per plan device: the remote device, for a remote one.
    pub remote: &'a [Option<Arc<RemoteDevice>>],
    /// Per plan device: the CUDA device, for a GPU.
    pub cuda: &'a [Option<Arc<CudaDevice>>],
}

impl Preparer<'_> {
    fn raw(&self, t: u32) -> RawTensor {
        let pt = &self.plan.tensors[t as usize];
        RawTensor {
            data: self.addr[t as usize],
            dtype: pt.dtype,
            ne: pt.ne,
            nb: pt.nb,
        }
    }

    fn span(&self, t: u32) -> u64 {
        self.raw(t).span_bytes()
    }

    /// The steps of `plan`, in execution order (each split's copies first).
    pub fn prepare_all(&self) -> Result<Vec<PreparedStep>, RuntimeError> {
        let mut out = Vec::new();
        let total: usize = self
            .plan
            .splits
            .iter()
            .map(|s| s.copies.len() + s.steps.len())
            .sum();
        for (s, split) in self.plan.splits.iter().enumerate() {
            for c in &split.copies {
                out.push(PreparedStep {
                    kernel: self.copy_kernel(c.src, c.dst, c.bytes as usize),
                    split: s,
                    kind: "copy",
                    op: None,
                    fused_kernel: None,
                    dst: c.dst,
                    srcs: vec![c.src],
                    bytes: 2 * c.bytes,
                    flops: 0,
                    fallback: false,
                    remote: None,
                });
            }
            for step in &split.steps {
                let index = out.len();
                let prepared = self.prepare(s, index, step).map_err(|e| {
                    let dst = match step {
                        Step::Op { dst, .. } => *dst,
                        Step::Fused { kernel } => self
                            .plan
                            .kernels
                            .get(*kernel as usize)
                            .map_or(0, |k| k.output),
                    };
                    RuntimeError::Step {
                        step: index,
                        tensor: self.plan.tensors[dst as usize].name.clone(),
                        source: Box::new(e),
                    }
                })?;
                out.push(prepared);
                if let Some(report) = self.on_prepare {
                    report(out.len(), total);
                }
            }
        }
        Ok(out)
    }

    /// Refuses a read of `srcs` by a step of split `split` (`op`, or a fused
    /// kernel for `None`) that this runtime cannot make (module doc).
    fn check_reads(&self, split: usize, op: Option<&Op>, srcs: &[u32]) -> Result<(), RuntimeError> {
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

    /// Bytes an op step reads and writes (each operand's span once) and its
    /// floating-point operations (2 per multiply-add for mul_mat; one per
    /// output element for the rest).
    fn op_costs(&self, op: &Op, dst: u32, srcs: &[u32]) -> (u64, u64) {
        let bytes = self.span(dst) + srcs.iter().map(|&t| self.span(t)).sum::<u64>();
        let out = self.raw(dst).n_elements() as u64;
        let flops = match (op, srcs.first()) {
            (Op::MulMat, Some(&src0)) => 2 * self.raw(src0).ne[0] as u64 * out,
            _ => out,
        };
        (bytes, flops)
    }

    /// The kernel of a copy from `src` to `dst`: a memcpy between host
    /// arenas, or calls to the server(s) of a remote end.
    fn copy_kernel(&self, src: u32, dst: u32, bytes: usize) -> Box<dyn CpuKernel> {
        let gpu_end = |t: u32| {
            let device = self.plan.tensors[t as usize].device.index();
            (self.cuda.get(device).and_then(Option::as_ref))
                .map(|dev| GpuEnd::Gpu(Arc::clone(dev), self.addr[t as usize] as u64))
        };
        match (gpu_end(src), gpu_end(dst)) {
            (None, None) => {}
            (from, to) => {
                // The compiler never joins a GPU and a remote device by a
                // copy (targets with both are refused), so the other end is host.
                let host = |t: u32| GpuEnd::Host(self.addr[t as usize]);
                return Box::new(CudaCopy {
                    from: from.unwrap_or_else(|| host(src)),
                    to: to.unwrap_or_else(|| host(dst)),
                    bytes,
                });
            }
        }
        let end = |t: u32| {
            let device = self.plan.tensors[t as usize].device.index();
            match self.remote.get(device).and_then(Option::as_ref) {
                Some(dev) => End::Remote(Arc::clone(dev), self.addr[t as usize] as u64),
                None => End::Host(self.addr[t as usize]),
            }
        };
        match (end(src), end(dst)) {
            (End::Host(src), End::Host(dst)) => Box::new(CopyKernel { src, dst, bytes }),
            (from, to) => Box::new(RemoteCopy { from, to, bytes }),
        }
    }

    /// A step of split `split` on a remote device: its node for the server.
    fn prepare_remote(
        &self,
        split: usize,
        index: usize,
        step: &Step,
        device: &Arc<RemoteDevice>,
    ) -> Result<PreparedStep, RuntimeError> {
        let Step::Op { op, dst, srcs } = step else {
            return Err(RuntimeError::Unsupported {
                op: "fused".to_string(),
                detail: format!(
                    "a fused kernel on remote device '{}' (ggml runs ops one by one; \
                     the compiler does not fuse there)",
                    self.plan.devices[self.plan.splits[split].device.index()].name
                ),
            });
        };
        self.check_reads(split, Some(op), srcs)?;
        let locate = |t: u32| device.locate(self.addr[t as usize] as u64, self.span(t));
        let graph = step_records(self.plan, index, op, *dst, srcs, &locate).map_err(|e| {
            RuntimeError::Unsupported {
                op: op.name().to_string(),
                detail: format!("on remote device '{}': {e}", device.info().name),
            }
        })?;
        let graph = Arc::new(graph);
        let (bytes, flops) = self.op_costs(op, *dst, srcs);
        Ok(PreparedStep {
            kernel: Box::new(RemoteStep {
                device: Arc::clone(device),
                graph: Arc::clone(&graph),
            }),
            split,
            kind: op.name(),
            op: Some(*op),
            fused_kernel: None,
            dst: *dst,
            srcs: srcs.clone(),
            bytes,
            flops,
            fallback: false,
            remote: Some(graph),
        })
    }

    /// A step of split `split` on a GPU: a kernel launch.
    fn prepare_cuda(
        &self,
        split: usize,
        step: &Step,
        device: &Arc<CudaDevice>,
    ) -> Result<PreparedStep, RuntimeError> {
        let name = &self.plan.devices[self.plan.splits[split].device.index()].name;
        let on_gpu = |e: RuntimeError| match e {
            RuntimeError::Unsupported { op, detail } => RuntimeError::Cuda {
                device: name.clone(),
                what: format!("no kernel for {op}: {detail}"),
            },
            other => other,
        };
        let (launch, kind, op, fused_kernel, dst, srcs, bytes, flops) = match step {
            Step::Op { op, dst, srcs } => {
                self.check_reads(split, Some(op), srcs)?;
                let s: Vec<RawTensor> = srcs.iter().map(|&t| self.raw(t)).collect();
                let launch = launch::op(op, self.raw(*dst), &s).map_err(on_gpu)?;
                let (bytes, flops) = self.op_costs(op, *dst, srcs);
                (
                    launch,
                    op.name(),
                    Some(*op),
                    None,
                    *dst,
                    srcs.clone(),
                    bytes,
                    flops,
                )
            }
            Step::Fused { kernel: index } => {
                let k: &FusedKernel = &self.plan.kernels[*index as usize];
                self.check_reads(split, None, &k.inputs)?;
                let out = self.raw(k.output);
                let inputs: Vec<RawTensor> = k.inputs.iter().map(|&t| self.raw(t)).collect();
                let launch = launch::fused(&k.body, out, &inputs).map_err(on_gpu)?;
                let bytes =
                    self.span(k.output) + k.inputs.iter().map(|&t| self.span(t)).sum::<u64>();
                let flops = out.n_elements() as u64 * k.body.len() as u64;
                (
                    launch,
                    "fused",
                    None,
                    Some(*index),
                    k.output,
                    k.inputs.clone(),
                    bytes,
                    flops,
                )
            }
        };
        Ok(PreparedStep {
            kernel: Box::new(CudaStep::new(device, launch)),
            split,
            kind,
            op,
            fused_kernel,
            dst,
            srcs,
            bytes,
            flops,
            fallback: false,
            remote: None,
        })
    }

    fn prepare(
        &self,
        split: usize,
        index: usize,
        step: &Step,
    ) -> Result<PreparedStep, RuntimeError> {
        let device = self.plan.splits[split].device.index();
        if let Some(remote) = self.remote.get(device).and_then(Option::as_ref) {
            return self.prepare_remote(split, index, step, remote);
        }
        if let Some(gpu) = self.cuda.get(device).and_then(Option::as_ref) {
            return self.prepare_cuda(split, step, gpu);
        }
        match step {
            Step::Op { op, dst, srcs } => {
                self.check_reads(split, Some(op), srcs)?;
                let d = self.raw(*dst);
                let s: Vec<RawTensor> = srcs.iter().map(|&t| self.raw(t)).collect();
                // A weight (through views): bound before preparation, never
                // written; copies of weights are intermediates.
                let src0_is_weight = srcs.first().is_some_and(|&t| {
                    self.plan.tensors[self.plan.owner(t) as usize].role == Role::Weight
                });
                let (kernel, fallback) = self.op_kernel(op, d, &s, src0_is_weight)?;
                let (bytes, flops) = self.op_costs(op, *dst, srcs);
                Ok(PreparedStep {
                    kernel,
                    split,
                    kind: op.name(),
                    op: Some(*op),
                    fused_kernel: None,
                    dst: *dst,
                    srcs: srcs.clone(),
                    bytes,
                    flops,
                    fallback,
                    remote: None,
                })
            }
            Step::Fused { kernel: index } => {
                let k: &FusedKernel = &self.plan.kernels[*index as usize];
                self.check_reads(split, None, &k.inputs)?;
                let out = self.raw(k.output);
                let inputs: Vec<RawTensor> = k.inputs.iter().map(|&t| self.raw(t)).collect();
                let (kernel, fallback) = match self.fast.fused(&k.body, out, &inputs) {
                    Ok(kn) => (kn, false),
                    Err(RuntimeError::Unsupported { .. }) => (
                        Box::new(ReferenceFusedKernel::new(k.body.clone(), out, inputs))
                            as Box<dyn CpuKernel>,
                        true,
                    ),
                    Err(e) => return Err(e),
                };
                let bytes =
                    self.span(k.output) + k.inputs.iter().map(|&t| self.span(t)).sum::<u64>();
                Ok(PreparedStep {
                    kernel,
                    split,
                    kind: "fused",
                    op: None,
                    fused_kernel: Some(*index),
                    dst: k.output,
                    srcs: k.inputs.clone(),
                    bytes,
                    flops: out.n_elements() as u64 * k.body.len() as u64,
                    fallback,
                    remote: None,
                })
            }
        }
    }

    fn op_kernel(
        &self,
        op: &Op,
        dst: RawTensor,
        srcs: &[RawTensor],
        src0_is_weight: bool,
    ) -> Result<(Box<dyn CpuKernel>, bool), RuntimeError> {
        match self.fast.op(op, dst, srcs, src0_is_weight) {
            Ok(k) => Ok((k, false)),
            Err(RuntimeError::Unsupported { .. }) => Ok((
                Box::new(ReferenceKernel::new(*op, dst, srcs.to_vec())),
                true,
            )),
            Err(e) => Err(e),
        }
    }
}

/// A byte copy between two tensors of one layout (a cross-device copy; all
/// devices are host memory here), split over threads.
struct CopyKernel {
    src: *mut u8,
    dst: *mut u8,
    bytes: usize,
}

// SAFETY: addresses of arena bytes; threads copy disjoint ranges.
unsafe impl Send for CopyKernel {}
// SAFETY: as above.
unsafe impl Sync for CopyKernel {}

impl CpuKernel for CopyKernel {
    unsafe fn run(&self, ctx: &ThreadCtx<'_>, _scratch: *mut u8) {
        let r = ctx.share(self.bytes);
        // SAFETY: both tensors hold `bytes` bytes (the checker proved the copy's
        // size equals both spans) and do not overlap (different arenas).
        unsafe {
            std::ptr::copy_nonoverlapping(self.src.add(r.start), self.dst.add(r.start), r.len())
        };
    }

    fn describe(&self) -> String {
        format!("copy {} bytes", self.bytes)
    }
}

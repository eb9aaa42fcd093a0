//! The CPU device: the whole host, one group of its cores, or one NUMA node,
//! each with its own worker pool (threads pinned to the group's cores where
//! the OS allows) and its own arenas and kernel scratch; a NUMA node's
//! arenas are bound to its memory ([`numa`]) where the kernel allows.
//!
//! Invariants: a group's threads run only its steps; its scratch buffer is
//! sized once, after every step was prepared, for the largest step.

use super::affinity::{allowed_cores, pin_or_warn};
use super::attention::SharedAttentionBuffers;
use super::prepare::{CopyKernel, CpuStep, prepare_step};
use super::{FastKernels, ThreadCtx, ThreadPool, numa};
use crate::RuntimeError;
use crate::device::PreparedStep;
use crate::device::load::{WeightPlacement, WeightRequest};
use crate::device::{
    Caps, CopyEnd, Device, DeviceInfo, DeviceStep, PrepareCtx, TensorBytes, own_step,
};
use crate::memory::AlignedBuffer;
use crate::state::StateStore;
use crate::weights::BoundWeight;
use ir::Layout;
use ir::plan::{Step, Usage};
use std::any::Any;
use std::sync::{Arc, Mutex, OnceLock};

/// The host CPU, a group of its cores or a NUMA node.
pub struct CpuDevice {
    info: DeviceInfo,
    pool: Arc<ThreadPool>,
    /// The kernel families its steps are prepared with (shared by every
    /// runtime of a job: one JIT cache, one copy of each repacked weight).
    kernels: Arc<FastKernels>,
    /// Its arenas, owned until the device is dropped.
    arenas: Mutex<Vec<AlignedBuffer>>,
    scratch: OnceLock<AlignedBuffer>,
    /// The intermediates its attention steps share (`attention.rs`).
    attention: SharedAttentionBuffers,
    /// The NUMA node whose memory the arenas are bound to.
    node: Option<u32>,
    /// What the user should know (an arena left unbound, and why).
    notes: Mutex<Vec<String>>,
}

impl CpuDevice {
    /// A device over `info.cores` running on `pool`, preparing its steps
    /// with `kernels`.
    pub fn new(info: DeviceInfo, pool: Arc<ThreadPool>, kernels: Arc<FastKernels>) -> CpuDevice {
        CpuDevice {
            info,
            pool,
            kernels,
            arenas: Mutex::new(Vec::new()),
            scratch: OnceLock::new(),
            attention: SharedAttentionBuffers::default(),
            node: None,
            notes: Mutex::new(Vec::new()),
        }
    }

    /// A one-thread device named `name` on the first core, for tests.
    #[cfg(test)]
    pub(crate) fn for_tests(name: &str, kernels: Arc<FastKernels>) -> CpuDevice {
        let info = DeviceInfo {
            name: name.to_string(),
            description: "a test device".to_string(),
            memory_total: 1 << 30,
            memory_free: 1 << 30,
            alignment: 64,
            max_buffer_bytes: 1 << 30,
            cores: vec![0],
            caps: cpu_caps(),
        };
        CpuDevice::new(info, Arc::new(ThreadPool::new(1)), kernels)
    }

    /// This device with its arenas bound to NUMA node `node`.
    pub fn bound_to_node(mut self, node: u32) -> CpuDevice {
        self.node = Some(node);
        self
    }

    /// The NUMA node the arenas are bound to, if any.
    pub fn node(&self) -> Option<u32> {
        self.node
    }

    /// Allocates the kernel scratch (once; later calls keep the first).
    fn set_scratch(&self, bytes: usize) -> Result<(), RuntimeError> {
        let buffer = self.alloc(bytes as u64, 64, "kernel scratch")?;
        let _ = self.scratch.set(buffer);
        Ok(())
    }

    /// The scratch buffer's address (null before `finish_prepare` sized it).
    pub fn scratch(&self) -> *mut u8 {
        self.scratch
            .get()
            .map_or(std::ptr::null_mut(), AlignedBuffer::as_ptr)
    }

    /// Pins the calling thread to the group's cores (the thread that drives
    /// a pool job is its thread 0) until the returned guard is dropped, which
    /// gives the thread back the cores it had: the caller of a run must not
    /// stay confined to one device's cores afterwards.
    #[must_use = "the pinning ends when the guard is dropped"]
    pub fn pin_caller(&self) -> Pinned {
        let before = allowed_cores();
        pin_or_warn(&self.info.cores);
        Pinned { before }
    }
}

/// The thread's cores before [`CpuDevice::pin_caller`]; restored on drop.
pub struct Pinned {
    before: Vec<usize>,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        pin_or_warn(&self.before);
    }
}

impl CpuDevice {
    /// A zeroed buffer of `bytes` aligned to `alignment`, for `usage`,
    /// bound to the device's NUMA node where it has one.
    pub fn alloc(
        &self,
        bytes: u64,
        alignment: u64,
        usage: &str,
    ) -> Result<AlignedBuffer, RuntimeError> {
        let fail = || RuntimeError::Alloc {
            arena: usize::MAX,
            bytes,
            usage: usage.to_string(),
            device: self.info.name.clone(),
        };
        if bytes > self.info.max_buffer_bytes {
            return Err(fail());
        }
        let len = usize::try_from(bytes).map_err(|_| fail())?;
        let Some(node) = self.node else {
            return AlignedBuffer::zeroed(len, alignment as usize).ok_or_else(fail);
        };
        // Page-aligned, so every page of the arena is bound before first touch.
        let align = (alignment as usize).max(numa::page_size());
        let buf = AlignedBuffer::zeroed(len, align).ok_or_else(fail)?;
        if let Err(why) = numa::bind(buf.as_ptr(), len, node) {
            let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
            if notes.is_empty() {
                notes.push(format!(
                    "{}: arenas not bound to NUMA node {node}: {why}",
                    self.info.name
                ));
            }
        }
        Ok(buf)
    }

    /// The CPU kernel of a step this device prepared.
    fn kernel<'s>(&self, step: &'s PreparedStep) -> &'s CpuStep {
        own_step::<CpuStep>(&self.info.name, &*step.kernel)
    }
}

impl Device for CpuDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    fn alloc_arena(
        &self,
        arena: usize,
        bytes: u64,
        usage: Usage,
        _may_defer: bool,
    ) -> Result<Option<*mut u8>, RuntimeError> {
        let buffer = (self.alloc(bytes, self.info.alignment, &format!("{usage:?}"))).map_err(
            |e| match e {
                RuntimeError::Alloc {
                    bytes,
                    usage,
                    device,
                    ..
                } => RuntimeError::Alloc {
                    arena,
                    bytes,
                    usage,
                    device,
                },
                other => other,
            },
        )?;
        let base = buffer.as_ptr();
        self.arenas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(buffer);
        Ok(Some(base))
    }

    fn place_weight<'w>(
        &self,
        request: &WeightRequest<'_, 'w>,
    ) -> Result<WeightPlacement<'w>, RuntimeError> {
        Ok(match request.bind()? {
            BoundWeight::InPlace(bytes) => WeightPlacement::InPlace(bytes),
            BoundWeight::Copy(bytes) => WeightPlacement::Write(bytes),
        })
    }

    fn bind_state(
        &self,
        store: &StateStore,
        name: &str,
        layout: &Layout,
    ) -> Result<*mut u8, RuntimeError> {
        store.bind(name, layout)
    }

    fn prepare_step(
        &self,
        ctx: &PrepareCtx<'_>,
        split: usize,
        _index: usize,
        step: &Step,
    ) -> Result<PreparedStep, RuntimeError> {
        prepare_step(ctx, (&self.kernels, &self.attention), split, step)
    }

    fn prepare_copy(
        &self,
        from: CopyEnd<'_>,
        to: CopyEnd<'_>,
        bytes: usize,
    ) -> Result<Box<dyn DeviceStep>, RuntimeError> {
        if !(from.is_host() && to.is_host()) {
            return Err(RuntimeError::Unsupported {
                op: "copy".to_string(),
                detail: format!(
                    "{} copies only between host arenas, not from '{}' to '{}'",
                    self.info.name,
                    from.device.info().name,
                    to.device.info().name
                ),
            });
        }
        let kernel = CopyKernel {
            src: from.addr,
            dst: to.addr,
            bytes,
        };
        Ok(Box::new(CpuStep(Box::new(kernel))))
    }

    fn finish_prepare(&self, scratch_bytes: usize) -> Result<(), RuntimeError> {
        self.set_scratch(scratch_bytes)
    }

    fn pool(&self) -> Option<&Arc<ThreadPool>> {
        Some(&self.pool)
    }

    fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn run_steps(&self, steps: &[PreparedStep], after_step: &(dyn Fn(usize) + Sync)) {
        let scratch = ScratchPtr(self.scratch());
        self.pool.run(&|ctx| {
            for (i, step) in steps.iter().enumerate() {
                let kernel = &self.kernel(step).0;
                // SAFETY: kernels were prepared over the runtime's live
                // buffers; the executor ran this segment's waits, so every
                // byte a step reads was written and no other stream writes
                // what it touches (the plan checker's race family).
                unsafe { kernel.run(ctx, scratch.get()) };
                ctx.barrier();
                if ctx.ith == 0 {
                    after_step(i);
                }
            }
        });
    }

    fn pin_stream_thread(&self) -> Option<Pinned> {
        Some(self.pin_caller())
    }

    fn copy(&self, copy: &PreparedStep) {
        let kernel = &self.kernel(copy).0;
        // SAFETY: as in run_steps; a copy kernel runs on one thread.
        ThreadCtx::single(|ctx| unsafe { kernel.run(ctx, std::ptr::null_mut()) });
    }

    fn set_tensor(
        &self,
        tensor: TensorBytes,
        offset: usize,
        data: &[u8],
    ) -> Result<(), RuntimeError> {
        let dst = tensor.range(&self.info.name, "set_tensor", offset, data.len())?;
        // SAFETY: `dst..dst + data.len()` lies inside the tensor (checked),
        // which `TensorBytes::new`'s caller vouched is host memory of ours.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    fn get_tensor(
        &self,
        tensor: TensorBytes,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), RuntimeError> {
        let src = tensor.range(&self.info.name, "get_tensor", offset, out.len())?;
        // SAFETY: as in set_tensor.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Nothing is ever queued: steps and copies finish before they return.
    fn synchronize(&self) {}
}

/// Caps of every CPU device: host memory and host events; not asynchronous
/// (a copy is a memcpy run by the thread that needs it, as ggml's CPU backend
/// has no async copies either).
pub fn cpu_caps() -> Caps {
    Caps {
        asynchronous: false,
        events: true,
        host_buffer: true,
        buffer_from_host_ptr: true,
    }
}

/// A kernel scratch address that closures on pool threads may share.
#[derive(Clone, Copy)]
struct ScratchPtr(*mut u8);

impl ScratchPtr {
    /// A method, so closures capture the whole (Sync) wrapper, not the field.
    fn get(self) -> *mut u8 {
        self.0
    }
}
// SAFETY: the scratch buffer outlives the run; kernels share it by contract.
unsafe impl Send for ScratchPtr {}
// SAFETY: as above.
unsafe impl Sync for ScratchPtr {}

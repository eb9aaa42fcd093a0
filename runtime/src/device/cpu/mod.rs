//! The CPU device: the whole host, one group of its cores, or one NUMA node,
//! each with its own worker pool (threads pinned to the group's cores where
//! the OS allows) and its own arenas and kernel scratch; a NUMA node's
//! arenas are bound to its memory ([`numa`]) where the kernel allows.
//!
//! Invariants: a group's threads run only its steps; its scratch buffer is
//! sized once, after every step was prepared, for the largest step.

use super::{Caps, Device, DeviceInfo, TensorBytes};
use crate::RuntimeError;
use crate::cpu::{ThreadCtx, ThreadPool};
use crate::execute::ScratchPtr;
use crate::memory::AlignedBuffer;
use crate::steps::PreparedStep;
use std::sync::{Arc, Mutex, OnceLock};

pub mod numa;

/// The host CPU, a group of its cores or a NUMA node.
pub struct CpuDevice {
    info: DeviceInfo,
    pool: Arc<ThreadPool>,
    scratch: OnceLock<AlignedBuffer>,
    /// The NUMA node whose memory the arenas are bound to.
    node: Option<u32>,
    /// What the user should know (an arena left unbound, and why).
    notes: Mutex<Vec<String>>,
}

impl CpuDevice {
    /// A device over `info.cores` running on `pool`.
    pub fn new(info: DeviceInfo, pool: Arc<ThreadPool>) -> CpuDevice {
        CpuDevice {
            info,
            pool,
            scratch: OnceLock::new(),
            node: None,
            notes: Mutex::new(Vec::new()),
        }
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

    /// The notes gathered so far (an arena left unbound, and why), taken.
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Its worker pool.
    pub fn pool(&self) -> &Arc<ThreadPool> {
        &self.pool
    }

    /// Allocates the kernel scratch (once; later calls keep the first).
    pub fn set_scratch(&self, bytes: usize) -> Result<(), RuntimeError> {
        let buffer = self.alloc(bytes as u64, 64, "kernel scratch")?;
        let _ = self.scratch.set(buffer);
        Ok(())
    }

    /// The scratch buffer's address (null before [`CpuDevice::set_scratch`]).
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
        pin_current_thread(&self.info.cores);
        Pinned { before }
    }
}

/// The thread's cores before [`CpuDevice::pin_caller`]; restored on drop.
pub struct Pinned {
    before: Vec<usize>,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        pin_current_thread(&self.before);
    }
}

impl Device for CpuDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn alloc(
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

    fn run_steps(&self, steps: &[PreparedStep], after_step: &(dyn Fn(usize) + Sync)) {
        let scratch = ScratchPtr(self.scratch());
        self.pool.run(&|ctx| {
            for (i, step) in steps.iter().enumerate() {
                // SAFETY: kernels were prepared over the runtime's live
                // buffers; the executor ran this segment's waits, so every
                // byte a step reads was written and no other stream writes
                // what it touches (the plan checker's race family).
                unsafe { step.kernel.run(ctx, scratch.get()) };
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
        // SAFETY: as in run_steps; a copy kernel runs on one thread.
        ThreadCtx::single(|ctx| unsafe { copy.kernel.run(ctx, std::ptr::null_mut()) });
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

/// The cores this process may run on, in order.
pub fn allowed_cores() -> Vec<usize> {
    // SAFETY: `set` is a plain bit set the call fills; size is its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            let cores: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect();
            if !cores.is_empty() {
                return cores;
            }
        }
    }
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

/// Pins the calling thread to `cores` (best effort: a sandbox may refuse).
pub fn pin_current_thread(cores: &[usize]) {
    if cores.is_empty() {
        return;
    }
    // SAFETY: as in allowed_cores; core numbers come from the affinity mask.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cores {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
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

#[cfg(test)]
mod tests;

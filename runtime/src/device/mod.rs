//! The device layer: everything that differs between kinds of device, in
//! the shape of ggml's device / buffer / backend interfaces, and the
//! registry that opens a plan's devices.
//!
//! A [`Device`] owns its arenas ([`Device::alloc_arena`]), decides where a
//! weight or a state tensor lives ([`Device::place_weight`],
//! [`Device::bind_state`]), uploads ([`Device::load_tensors`]), prepares the
//! steps and copies of its splits into device-neutral [`PreparedStep`]s
//! whose kernel is a [`DeviceStep`] only it knows how to run
//! ([`Device::prepare_step`], [`Device::prepare_copy`]), runs them on its
//! compute and copy streams, and keeps a run's first failure. Streams and
//! events belong to the executor (`crate::executor`): a device never decides
//! order, it only runs what the executor hands it, in the order handed.
//!
//! One room per kind, each with the same shape: `cpu/` (the host, a group
//! of its cores or a NUMA node, with its pool and every CPU kernel), `cuda/`
//! (a GPU through the driver API), `rpc/` (a remote host's ggml RPC server).
//! [`registry`] opens a plan's devices by asking each [`backend::DeviceBackend`]
//! in turn; `prepare` holds what step preparation shares; `host` describes
//! the machine. Nothing outside this folder names a device kind.
//!
//! Invariants: a device's arenas never move while the device lives (kernels
//! hold their addresses); `run_steps` returns only when every step is done
//! or queued behind an order the device keeps itself (a remote server serves
//! calls in order); a step is only ever run by the device that prepared it.

pub mod backend;
pub mod cpu;
pub mod cuda;
pub mod host;
pub mod load;
pub mod prepare;
mod prepare_attention;
#[cfg(test)]
mod recording;
pub mod registry;
pub mod rpc;
pub mod staging;
pub mod step;

use crate::RuntimeError;
use crate::executor::event::Event;
use crate::state::StateStore;
use cpu::ThreadPool;
use ir::Layout;
use ir::plan::{Step, Usage};
pub use load::{WeightPlacement, WeightRequest};
pub use prepare::{CopyEnd, PrepareCtx};
use std::any::Any;
use std::sync::Arc;
pub(crate) use step::own_step;
pub use step::{DeviceStep, PreparedStep};

/// A tensor's bytes in a device's memory (ggml's tensor `data` and
/// `nbytes`): what [`Device::set_tensor`] and [`Device::get_tensor`] address,
/// with an offset and a size checked against it.
#[derive(Clone, Copy, Debug)]
pub struct TensorBytes {
    addr: *mut u8,
    len: usize,
}

impl TensorBytes {
    /// The `len` bytes at `addr`.
    ///
    /// # Safety
    /// `addr..addr + len` must lie in one buffer of the device it is used
    /// with, and stay allocated while it is used.
    pub unsafe fn new(addr: *mut u8, len: usize) -> TensorBytes {
        TensorBytes { addr, len }
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty tensor.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of `offset..offset + n`, or why it is out of bounds.
    fn range(
        &self,
        device: &str,
        what: &'static str,
        offset: usize,
        n: usize,
    ) -> Result<*mut u8, RuntimeError> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(self.addr.wrapping_add(offset)),
            _ => Err(RuntimeError::TensorAccess {
                device: device.to_string(),
                what,
                len: n,
                offset,
                size: self.len,
            }),
        }
    }
}

/// What a device can do beyond running steps (ggml's device caps).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Caps {
    /// Copies and steps can be queued without blocking the caller.
    pub asynchronous: bool,
    /// Events can be recorded and waited on across streams.
    pub events: bool,
    /// Its buffers are host memory, readable without a copy.
    pub host_buffer: bool,
    /// It can wrap a host pointer as a buffer (weights mapped from a file).
    pub buffer_from_host_ptr: bool,
}

/// A device as the registry describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceInfo {
    /// `cpu`, `cpu0`, `numa0`, `cuda0`, ...
    pub name: String,
    /// What it is, in words (CPU model and cores, GPU name).
    pub description: String,
    /// Bytes of memory in all.
    pub memory_total: u64,
    /// Bytes free now.
    pub memory_free: u64,
    /// Alignment of its buffers.
    pub alignment: u64,
    /// Largest single buffer.
    pub max_buffer_bytes: u64,
    /// Cores it computes with (CPU devices).
    pub cores: Vec<usize>,
    /// What it can do.
    pub caps: Caps,
}

/// One device of a loaded plan: everything kind-specific (module doc).
pub trait Device: Send + Sync {
    /// Name, memory, capabilities.
    fn info(&self) -> &DeviceInfo;

    /// The device as `Any`: a copy's preparer finds the other end's own type.
    fn as_any(&self) -> &dyn Any;

    /// The shared device as `Any`, for a step that keeps the other end of a
    /// copy alive.
    fn as_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;

    /// Allocates plan arena `arena` (`bytes`, for `usage`), zeroed, owned by
    /// the device until it is dropped, and returns its base address in the
    /// device's address space (a host pointer, or a device or server address
    /// that only this device dereferences). With `may_defer`, a device may
    /// answer `None` for an arena it allocates only if a tensor still needs
    /// it once weights are placed (a remote weights arena whose weights the
    /// server already holds); the loader then asks again without it.
    fn alloc_arena(
        &self,
        arena: usize,
        bytes: u64,
        usage: Usage,
        may_defer: bool,
    ) -> Result<Option<*mut u8>, RuntimeError>;

    /// Where weight `request` lives on this device: read in place from the
    /// mapped file, written into its arena slot at load, or held by the
    /// device already.
    fn place_weight<'w>(
        &self,
        request: &WeightRequest<'_, 'w>,
    ) -> Result<WeightPlacement<'w>, RuntimeError>;

    /// The address of shared state tensor `name` (a KV cache that every
    /// runtime of a job reads and writes) on this device, from `store`.
    fn bind_state(
        &self,
        store: &StateStore,
        name: &str,
        layout: &Layout,
    ) -> Result<*mut u8, RuntimeError>;

    /// Prepares `step` (global index `index`, of split `split`, which this
    /// device runs).
    fn prepare_step(
        &self,
        ctx: &PrepareCtx<'_>,
        split: usize,
        index: usize,
        step: &Step,
    ) -> Result<PreparedStep, RuntimeError>;

    /// Prepares a copy of `bytes` from `from` to `to`, one end of which is
    /// this device (`crate::steps` says which end prepares).
    fn prepare_copy(
        &self,
        from: CopyEnd<'_>,
        to: CopyEnd<'_>,
        bytes: usize,
    ) -> Result<Box<dyn DeviceStep>, RuntimeError>;

    /// Called once after every step was prepared, with the most scratch any
    /// of this device's steps needs (a GPU compiles its kernels here).
    fn finish_prepare(&self, _scratch_bytes: usize) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// The worker pool its steps run on, for a device with threads of its own.
    fn pool(&self) -> Option<&Arc<ThreadPool>> {
        None
    }

    /// True for a device on which a run can fail halfway (a server that
    /// dies, a GPU fault): the runtime then saves the host state a run
    /// writes, to put it back ([`crate::state`]'s journal).
    fn can_fail_mid_run(&self) -> bool {
        false
    }

    /// Keeps `e`, the first failure of a run, for [`Device::take_failure`];
    /// a device whose calls cannot fail drops it.
    fn fail(&self, _e: RuntimeError) {}

    /// Waits for what the device still runs, then returns (and clears) the
    /// first failure of the run, so the next run starts clean.
    fn take_failure(&self) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// Zeroes the shared state the device keeps beyond the store's own
    /// buffers (a server's KV caches).
    fn clear_shared_state(&self) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// What the user should know about the device since opening (an arena
    /// left unbound from its NUMA node), taken.
    fn take_notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Runs `steps` in order on the compute stream, each finished before the
    /// next starts; `after_step(i)` is called once step `i` is done
    /// (profiling and traces).
    fn run_steps(&self, steps: &[PreparedStep], after_step: &(dyn Fn(usize) + Sync));

    /// Runs a prepared copy on the copy stream (bytes from another device of
    /// the same host here; a device with its own memory uploads or downloads).
    fn copy(&self, copy: &PreparedStep);

    /// Writes `data` into `tensor` from byte `offset` (ggml `set_tensor`);
    /// refused, with nothing written, when it would run past the tensor.
    fn set_tensor(
        &self,
        tensor: TensorBytes,
        offset: usize,
        data: &[u8],
    ) -> Result<(), RuntimeError>;

    /// Writes each `(tensor, bytes)` of a load (weights and constants, the
    /// whole tensor each) and returns once all are written; `progress` sees
    /// the bytes of each piece written. By default one [`Device::set_tensor`]
    /// each; a GPU stages them through page-locked buffers ([`staging`]).
    fn load_tensors(
        &self,
        items: &[(TensorBytes, &[u8])],
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), RuntimeError> {
        for (tensor, bytes) in items {
            self.set_tensor(*tensor, 0, bytes)?;
            progress(bytes.len() as u64);
        }
        Ok(())
    }

    /// Reads `out.len()` bytes of `tensor` from byte `offset` (ggml
    /// `get_tensor`); refused when it would run past the tensor.
    fn get_tensor(
        &self,
        tensor: TensorBytes,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), RuntimeError>;

    /// Queues the write on the copy stream and records `done` once it landed
    /// (ggml `set_tensor_async` then `event_record`); `data` must stay
    /// unchanged until then. A device without asynchronous copies
    /// ([`Caps::asynchronous`] false, the default here) writes before
    /// returning.
    fn set_tensor_async(
        &self,
        tensor: TensorBytes,
        offset: usize,
        data: &[u8],
        done: &Event,
    ) -> Result<(), RuntimeError> {
        self.set_tensor(tensor, offset, data)?;
        done.record();
        Ok(())
    }

    /// Queues the read on the copy stream and records `done` once `out` holds
    /// the bytes (ggml `get_tensor_async` then `event_record`); by default,
    /// read before returning.
    fn get_tensor_async(
        &self,
        tensor: TensorBytes,
        offset: usize,
        out: &mut [u8],
        done: &Event,
    ) -> Result<(), RuntimeError> {
        self.get_tensor(tensor, offset, out)?;
        done.record();
        Ok(())
    }

    /// Returns once everything queued on the device's streams is done
    /// (ggml `synchronize`).
    fn synchronize(&self);

    /// Pins the thread that drives this device's compute stream to the
    /// device's cores for a run (restored when the guard drops); `None` for a
    /// device with no cores of its own (a remote one: its thread only waits).
    fn pin_stream_thread(&self) -> Option<cpu::Pinned> {
        None
    }
}

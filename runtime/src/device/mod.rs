//! The device layer: what the executor needs from a device, in the shape of
//! ggml's device / buffer / backend interfaces, and the registry that finds
//! devices at start-up.
//!
//! A [`Device`] allocates buffers (honouring alignment and its largest
//! buffer), runs a run of prepared steps on its compute stream, and moves
//! bytes on its copy stream. Streams and events belong to the executor
//! (`crate::executor`): a device never decides order, it only runs what the
//! executor hands it, in the order handed. One folder per device kind:
//! `cpu/` (the host or a group of its cores), `cuda/` (the driver probe; the
//! backend comes in its own issue), `rpc/` (a remote host's ggml RPC server);
//! `host` describes the machine.
//!
//! Invariants: a device's buffers never move while the device lives (kernels
//! hold their addresses); `run_steps` returns only when every step is done.

pub mod cpu;
pub mod cuda;
pub mod host;
pub mod registry;
pub mod rpc;
pub mod staging;

use crate::RuntimeError;
use crate::executor::event::Event;
use crate::memory::AlignedBuffer;
use crate::steps::PreparedStep;

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

/// One device of a loaded plan.
pub trait Device: Send + Sync {
    /// Name, memory, capabilities.
    fn info(&self) -> &DeviceInfo;

    /// A zeroed buffer of `bytes` aligned to `alignment`, for arena `usage`.
    fn alloc(&self, bytes: u64, alignment: u64, usage: &str)
    -> Result<AlignedBuffer, RuntimeError>;

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

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
//! backend comes in its own issue); `host` describes the machine.
//!
//! Invariants: a device's buffers never move while the device lives (kernels
//! hold their addresses); `run_steps` returns only when every step is done.

pub mod cpu;
pub mod cuda;
pub mod host;
pub mod registry;

use crate::RuntimeError;
use crate::memory::AlignedBuffer;
use crate::steps::PreparedStep;

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
}

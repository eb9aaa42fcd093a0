//! [`LoadOptions`]: how a plan is loaded (threads, shared pool, kernels and
//! state, precision, progress callbacks, remote servers, extra device
//! backends, test hooks). Read by `Runtime::load` and its stages in `load.rs`.

use crate::device::backend::DeviceBackend;
use crate::device::cpu::matmul::Precision;
use crate::device::cpu::{FastKernels, ThreadPool};
use crate::device::rpc::RemoteServers;
use crate::state::StateStore;
use std::sync::Arc;

/// How to load a plan.
#[derive(Clone)]
pub struct LoadOptions {
    /// Threads to run steps on (ignored when `pool` is given).
    pub threads: usize,
    /// A pool to share with other runtimes (generation: prefill and decode).
    pub pool: Option<Arc<ThreadPool>>,
    /// Kernel families (and the JIT cache) to share with other runtimes.
    pub kernels: Option<Arc<FastKernels>>,
    /// A state store to share with other runtimes (their KV cache).
    pub state: Option<Arc<StateStore>>,
    /// Quantized matmuls: fast (8-bit activations) or exact (f32); used when
    /// `kernels` is not given.
    pub precision: Precision,
    /// Called with (steps prepared, steps in all) while kernels are prepared
    /// (JIT compilation included), for progress bars.
    pub on_prepare: Option<Arc<dyn Fn(usize, usize) + Send + Sync>>,
    /// Called with (bytes written, bytes in all) while a load writes weights
    /// and constants into arenas (the weights a GPU or a remote server holds;
    /// a CPU maps its weights in place), for progress bars.
    pub on_upload: Option<Arc<dyn Fn(u64, u64) + Send + Sync>>,
    /// Test hook: with a seed, every segment of a run starts after a random
    /// delay (see `executor`), to shake out missing events; such a runtime
    /// always runs through the executor ([`crate::Runtime::injected_delays`] counts).
    pub fault_injection: Option<u64>,
    /// Test hook: in a multi-stream run, the thread reaching this prepared
    /// step (or copy) panics instead of running it, to prove that a failing
    /// stream stops the others and the panic reaches the caller.
    pub fault_panic_at: Option<usize>,
    /// The remote servers (`--rpc`), connected once and shared by every
    /// runtime of a job: plan device `Remote { server: i }` runs on server `i`.
    pub rpc: Option<Arc<RemoteServers>>,
    /// Device backends consulted before the built-in ones (CPU, CUDA, RPC)
    /// when the plan's devices are opened: a device kind of an embedder's
    /// own, or a test's device that records its calls.
    pub backends: Vec<Arc<dyn DeviceBackend>>,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            pool: None,
            kernels: None,
            state: None,
            precision: Precision::Fast,
            on_prepare: None,
            on_upload: None,
            fault_injection: None,
            fault_panic_at: None,
            rpc: None,
            backends: Vec::new(),
        }
    }
}

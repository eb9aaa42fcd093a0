//! What the runtimes of one job share: one thread pool, one JIT cache (each
//! distinct kernel compiled once) and one state store (generation's prefill
//! and decode plans share the KV cache). Graphs are compiled for the `cpu`
//! preset, or for the target and options the job names (a tensor split over
//! core groups: `cpu0+cpu1 --split-mode row`), and loaded through it.

use crate::{CompileOptions, Error, Graph, Plan, Result, Target};
use runtime::{FastKernels, LoadOptions, Precision, Runtime, StateStore, Weights};
use std::sync::Arc;

/// Called with (done, in all) while a plan loads: a progress bar's hook
/// (see [`Session::load`] for the units).
pub type Progress = Arc<dyn Fn(usize, usize) + Send + Sync>;

/// The runtime's upload hook (bytes written, bytes in all).
type UploadHook = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// The runtimes of one job: shared pool, kernels and state.
pub struct Session {
    options: LoadOptions,
    /// What graphs are compiled for, and how.
    target: Target,
    compile: CompileOptions,
}

impl Session {
    /// A pool of `threads` (all cores when `None`), kernels at `precision`.
    pub fn new(threads: Option<usize>, precision: Precision) -> Result<Session> {
        let target = crate::target::resolve("cpu")?;
        Session::for_target(threads, precision, target, CompileOptions::default())
    }

    /// As [`Session::new`], with graphs compiled for `target` with `compile`
    /// (a multi-device target's devices each run their own pool; `threads`
    /// sizes the pool of a one-device plan).
    pub fn for_target(
        threads: Option<usize>,
        precision: Precision,
        target: Target,
        compile: CompileOptions,
    ) -> Result<Session> {
        let threads = threads
            .unwrap_or_else(|| LoadOptions::default().threads)
            .max(1);
        Ok(Session {
            options: LoadOptions {
                threads,
                pool: Some(Arc::new(runtime::device::cpu::ThreadPool::new(threads))),
                kernels: Some(Arc::new(FastKernels::new(precision)?)),
                state: Some(Arc::new(StateStore::new())),
                precision,
                ..LoadOptions::default()
            },
            target,
            compile,
        })
    }

    /// This session with the ggml RPC servers `endpoints` for the target's
    /// remote devices (connected now, once for every plan of the job: a
    /// server serves one connection at a time); none given, unchanged.
    pub fn with_rpc(mut self, endpoints: &[String]) -> Result<Session> {
        if !endpoints.is_empty() {
            let servers = runtime::device::rpc::RemoteServers::connect(
                endpoints,
                runtime::device::rpc::device::DEFAULT_TIMEOUT,
            )?;
            self.options.rpc = Some(Arc::new(servers));
        }
        Ok(self)
    }

    /// Threads in the pool.
    pub fn threads(&self) -> usize {
        self.options.threads
    }

    /// The JIT's count of distinct kernels compiled so far.
    pub fn kernels_compiled(&self) -> usize {
        self.options
            .kernels
            .as_ref()
            .map_or(0, |k| k.jit().stats().kernels_compiled)
    }

    /// Compiles `graph` for the CPU and loads it with `weights`; `progress`
    /// sees the weights' upload to a GPU or remote server (in MiB) and then
    /// the kernels' preparation (in steps).
    pub fn load(
        &self,
        graph: &Graph,
        weights: &Weights,
        progress: Option<Progress>,
    ) -> Result<Runtime> {
        let plan = crate::compile(graph, &self.target, &self.compile)?.plan;
        let mut options = self.options.clone();
        options.on_upload = progress.clone().map(|p| -> UploadHook {
            Arc::new(move |done, total| p((done >> 20) as usize, (total >> 20) as usize))
        });
        options.on_prepare = progress;
        Runtime::load(Arc::new(plan), weights.clone(), &options).map_err(Error::from)
    }
}

/// `graph` compiled for this machine's CPU (the `cpu` preset, cost policy).
pub fn compile_cpu(graph: &Graph) -> Result<Plan> {
    let target = crate::target::resolve("cpu")?;
    Ok(crate::compile(graph, &target, &crate::CompileOptions::default())?.plan)
}

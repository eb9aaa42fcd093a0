//! Compiling a model graph for this CPU and loading it: the steps `embed` and
//! `generate` share. Runtimes loaded through one [`Shared`] use one thread
//! pool, one JIT cache (each distinct kernel compiled once) and one state
//! store (generation's prefill and decode plans share the KV cache).

use anyhow::{Context, Result};
use compiler::pipeline::{CompileOptions, compile};
use ir::Graph;
use ir::plan::Plan;
use runtime::{FastKernels, LoadOptions, Precision, Runtime, StateStore, Weights};
use std::sync::Arc;

/// What runtimes of one job share.
pub struct Shared {
    options: LoadOptions,
}

impl Shared {
    /// A pool of `threads` (all cores when `None`), kernels at `precision`.
    pub fn new(threads: Option<usize>, precision: Precision) -> Result<Shared> {
        let threads = threads
            .unwrap_or_else(|| LoadOptions::default().threads)
            .max(1);
        Ok(Shared {
            options: LoadOptions {
                threads,
                pool: Some(Arc::new(runtime::cpu::ThreadPool::new(threads))),
                kernels: Some(Arc::new(FastKernels::new(precision)?)),
                state: Some(Arc::new(StateStore::new())),
                precision,
                on_prepare: None,
                fault_injection: None,
                fault_panic_at: None,
            },
        })
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

    /// Compiles `graph` for the CPU and loads it with `weights` (a progress
    /// bar over kernel preparation when stderr is a terminal).
    pub fn load(&self, graph: &Graph, weights: &Weights) -> Result<Runtime> {
        let plan = compile_cpu(graph)?;
        with_progress(
            &self.options,
            &format!("loading '{}'", graph.name),
            |options| load_plan(plan, graph, weights, options),
        )
    }

    /// [`Shared::load`] without a progress bar, for plans loaded while text
    /// is being streamed to the terminal (a bar would overwrite it).
    pub fn load_quietly(&self, graph: &Graph, weights: &Weights) -> Result<Runtime> {
        load_plan(compile_cpu(graph)?, graph, weights, &self.options)
    }
}

/// Loads a compiled `plan` of `graph` (errors name the graph).
fn load_plan(
    plan: Plan,
    graph: &Graph,
    weights: &Weights,
    options: &LoadOptions,
) -> Result<Runtime> {
    Runtime::load(Arc::new(plan), weights.clone(), options)
        .with_context(|| format!("loading the plan of '{}'", graph.name))
}

/// `graph` compiled for this machine's CPU (the `cpu` preset, cost policy).
pub fn compile_cpu(graph: &Graph) -> Result<Plan> {
    let target = compiler::target::Target::preset("cpu").expect("the cpu preset exists");
    let options = CompileOptions {
        spelled: vec!["--target cpu".into()],
        ..CompileOptions::default()
    };
    Ok(compile(graph, &target, &options)
        .with_context(|| format!("compiling '{}'", graph.name))?
        .plan)
}

/// Runs `load` with `options` plus a progress bar over kernel preparation
/// (hidden unless stderr is a terminal).
pub fn with_progress<T>(
    options: &LoadOptions,
    message: &str,
    load: impl FnOnce(&LoadOptions) -> Result<T>,
) -> Result<T> {
    let bar = crate::progress::bar(0, message);
    let shown = bar.clone();
    let mut options = options.clone();
    options.on_prepare = Some(Arc::new(move |done, total| {
        shown.set_length(total as u64);
        shown.set_position(done as u64);
    }));
    let result = load(&options);
    bar.finish_and_clear();
    result
}

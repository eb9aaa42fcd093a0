//! # ggplan: compile a model's compute graph once, run the plan many times
//!
//! ggml decides at every evaluation which device runs each node, where the
//! graph splits between devices, which tensors are copied and where every
//! intermediate lives. ggplan makes those decisions once, ahead of time, and
//! writes them down as a typed, versioned, readable plan that an independent
//! checker proves and a thin runtime executes.
//!
//! ```text
//!  model file ──graph::from_gguf──▶ Graph ─┐
//!  graph text ──graph::read───────▶ Graph ─┤
//!                                          ├─ compile ─▶ Plan ──plan::write──▶ plan.ron
//!  target::resolve("cpu+cuda0") ─▶ Target ─┘              │
//!                                                         ├─ plan::verify / Gates / PlanKey
//!                                                         └─ Runtime::load ─▶ set inputs ─▶ run ─▶ outputs
//!                                                             (feature `runtime`)
//! ```
//!
//! Inside [`compile`]: verify the graph, cut micro-batches (`--pipeline N`),
//! assign each node a device (ggml's policy or the cost model), order the
//! steps, cut splits and insert copies, fuse elementwise chains, place every
//! tensor in an arena (five memory algorithms, the best kept, beside its
//! lower bound), add the events between streams, and check the result.
//!
//! ## Ten lines
//!
//! ```
//! use std::sync::Arc;
//! let graph = ggplan::graph::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/graphs/mlp.ron"))?;
//! let target = ggplan::target::resolve("cpu")?;
//! let plan = ggplan::compile(&graph, &target, &ggplan::CompileOptions::default())?.plan;
//! print!("{}", ggplan::plan::summary(&plan)); // splits, copies, memory against the bound
//! # #[cfg(feature = "runtime")] {
//! let mut runtime = ggplan::Runtime::load(Arc::new(plan), ggplan::Weights::Random { seed: 7 }, &Default::default())?;
//! runtime.set_input_f32("x", &vec![0.5; 64 * 16])?;
//! runtime.run()?;
//! let probs = runtime.output_f32("probs")?;
//! assert_eq!(probs.len(), 10 * 16);
//! # }
//! # Ok::<(), ggplan::Error>(())
//! ```
//!
//! ## Where to go next
//! - [`build`]: compile plans in `build.rs` and embed them, with a staleness
//!   key ([`PlanKey`]) checked at load.
//! - `testing` (feature `testing`): snapshot tests of your model's plan
//!   with insta, and quality [`Gates`].
//! - [`target`]: presets, target files and (feature `runtime`) `host`, this
//!   machine measured.
//! - `jobs` (feature `runtime`): `Generator` (greedy generation with a
//!   llama-family GGUF) and `Embedder` (sentence embeddings with a BERT
//!   encoder), what `ggplan generate` and `ggplan embed` run.
//!
//! ## Features
//! - `jit` (default): the runtime with the LLVM JIT (LLVM 19 through
//!   inkwell, gemm). Without it, graphs, compilation, plans, keys and gates
//!   build with no LLVM.
//! - `runtime`: the runtime without the LLVM JIT (CPU steps take plain-Rust
//!   kernels), for a GPU host without libLLVM.
//! - `cuda` (default): CUDA devices (cudarc's driver API and NVRTC, loaded at
//!   run time; no CUDA toolkit is needed to build): `host` targets and the
//!   registry list them, and plans for `cuda0` run on them. Without it
//!   nothing of cudarc is compiled.
//! - `testing`: the `testing` module and `assert_plan_snapshot!`.
//!
//! Every file is untrusted input: readers check sizes before use, the runtime
//! runs the checker on every plan before touching memory, and errors name
//! the file, tensor and what is wrong.
#![deny(missing_docs)]

pub mod against;
pub mod build;
mod critical;
mod dot;
mod error;
pub mod gates;
pub mod graph;
#[cfg(feature = "runtime")]
mod host;
#[cfg(feature = "runtime")]
pub mod jobs;
mod key;
pub mod plan;
mod summary;
pub mod target;
#[cfg(test)]
mod test_plans;
#[cfg(feature = "testing")]
pub mod testing;

pub use ::compiler::assign::Policy;
pub use ::compiler::pipeline::{CompileOptions, Compiled, PassTiming};
pub use ::compiler::placement::{PinRule, PlacementOptions};
pub use error::{Error, Result};
pub use gates::Gates;
pub use graph::{Graph, ModelShape};
pub use key::{PlanKey, compile_command};
pub use plan::Plan;
pub use target::Target;

#[cfg(feature = "runtime")]
pub use jobs::{
    Embedder, Embedding, GenerateOptions, Generation, Generator, ImportedGenerator, StopReason,
};
#[cfg(feature = "runtime")]
pub use runtime::{Flow, LoadOptions, LoadReport, Observer, Precision, Runtime, StepInfo, Weights};

pub use models::{StreamDecoder, Tokenizer};

/// The compiler's version, which every plan it makes records.
pub const COMPILER_VERSION: &str = ::compiler::pipeline::VERSION;

/// How many times the compiler has run in this process: a program that loads
/// precompiled plans can show (and its tests assert) that it compiled none.
pub fn compiler_calls() -> usize {
    ::compiler::pipeline::compilations()
}

/// Compiles `graph` for `target`: the plan, checked, and how long each pass
/// took. When `options.spelled` is empty it is filled with the flags that
/// would make the same plan from the command line, so the plan says how it
/// was made.
///
/// ```
/// let graph = ggplan::graph::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/graphs/llama2l.ron"))?;
/// let target = ggplan::target::resolve("cpu0+cpu1")?;
/// let options = ggplan::CompileOptions {
///     placement: ggplan::PlacementOptions { layer_split: Some(vec![1.0, 1.0]), ..Default::default() },
///     ..Default::default()
/// };
/// let compiled = ggplan::compile(&graph, &target, &options)?;
/// assert_eq!(compiled.plan.devices.len(), 2);
/// assert!(compiled.plan.options.contains(&"--split-mode layer".to_string()));
/// # Ok::<(), ggplan::Error>(())
/// ```
pub fn compile(graph: &Graph, target: &Target, options: &CompileOptions) -> Result<Compiled> {
    if options.spelled.is_empty() {
        let mut options = options.clone();
        options.spelled = options.flags(&target.name);
        return Ok(::compiler::pipeline::compile(graph, target, &options)?);
    }
    Ok(::compiler::pipeline::compile(graph, target, options)?)
}

//! The ahead-of-time compiler: graph + target + options -> plan.
//!
//! The pipeline is [`pipeline::compile`], in pass order:
//! - [`assign`]: a device for every tensor (policy `ggml` reproduces
//!   ggml_backend_sched's passes; policy `cost` is an exact min cut for two
//!   devices, alpha-expansion beyond), using [`placement`] rules and [`cost`];
//! - [`schedule`]: a topological order grouping nodes per device;
//! - [`split`]: maximal same-device runs and deduplicated, early copies;
//! - [`fuse`]: elementwise chains and norm-then-mul as expression kernels;
//! - [`emit`]: the plan: copies, views, lifetimes with in-place reuse, arenas
//!   from [`memory`], stats;
//! - [`check`]: the independent checker (`ir::plan::check`) plus op support
//!   on the target.
//!
//! Also: [`target`] (target descriptions and presets) and [`liveness`] (the
//! graph-level lifetime analysis and the in-place rules `emit` shares).
//!
//! Invariant: this crate never opens a device or LLVM. A target is a
//! description, so a plan for `cpu+cuda0` can be made on a machine without a GPU.

pub mod assign;
pub mod check;
pub mod cost;
pub mod emit;
pub mod fuse;
pub mod liveness;
pub mod memory;
pub mod micro_batch;
pub mod pipeline;
pub mod placement;
pub mod schedule;
pub mod split;
pub mod sync;
pub mod target;
pub mod tensor_split;

pub use placement::{PinRule, Pins, PlacementOptions, layer_of, n_layers, pinned_device};
pub use target::{Device, DeviceId, DeviceKind, Link, Target};

/// Everything that can go wrong in the compiler crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input graph breaks invariants; every violation is listed.
    #[error("graph '{graph}' is invalid:\n{}", ir::error::list_violations(.violations))]
    InvalidGraph {
        /// The graph's name.
        graph: String,
        /// What `ir::verify` found.
        violations: Vec<ir::Violation>,
    },
    /// `--pipeline N` cannot cut the graph into micro-batches.
    #[error("--pipeline {micro_batches}: graph '{graph}'{}: {reason}",
        if .tensor.is_empty() { String::new() } else { format!(", tensor '{}'", .tensor) })]
    Pipeline {
        /// The graph's name.
        graph: String,
        /// The N asked for.
        micro_batches: u32,
        /// The tensor that cannot be cut (empty when the whole graph cannot).
        tensor: String,
        /// Why.
        reason: String,
    },
    /// A tensor split (`--split-mode row`, `--split`, `--tensor-split`) cannot apply.
    #[error("{rule}{}: {reason}",
        if .tensor.is_empty() { String::new() } else { format!(": tensor '{}'", .tensor) })]
    TensorSplit {
        /// The rule or flag as written.
        rule: String,
        /// The tensor it fails on (empty when it is about the whole graph or target).
        tensor: String,
        /// Why.
        reason: String,
    },
    /// A device's compute buffers could not be planned.
    #[error("memory plan for {device}: {problem}")]
    Memory {
        /// The device.
        device: String,
        /// What went wrong.
        problem: String,
    },
    /// A pass broke an invariant the next one relies on: a compiler bug.
    #[error("internal error in pass {pass}: {problem}")]
    Internal {
        /// The pass that noticed.
        pass: &'static str,
        /// What is inconsistent.
        problem: String,
    },
    /// A target description breaks its rules; every problem is listed.
    #[error("target '{target}' is invalid ({} problem{}):\n{}",
        .problems.len(),
        if .problems.len() == 1 { "" } else { "s" },
        .problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    InvalidTarget {
        /// The target's name (or its file).
        target: String,
        /// Every problem found, in device order.
        problems: Vec<String>,
    },
    /// A target file is not well-formed RON for a [`Target`].
    #[error("{path}:{line}:{col}: {message}")]
    TargetSyntax {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What the parser expected.
        message: String,
    },
    /// `--target NAME`: neither a built-in preset nor an existing file.
    #[error("target '{name}' is neither a built-in target ({presets}) nor an existing file")]
    UnknownTarget {
        /// What was asked for.
        name: String,
        /// The preset names, comma-separated.
        presets: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A `--pin REGEX=DEVICE` rule cannot be used.
    #[error("pin rule '{rule}': {problem}")]
    Pin {
        /// The rule as written.
        rule: String,
        /// What is wrong with it.
        problem: String,
    },
    /// `--offload-layers N` cannot apply to this target.
    #[error("--offload-layers {layers}: {problem}")]
    OffloadLayers {
        /// The N asked for.
        layers: u32,
        /// Why it cannot apply.
        problem: String,
    },
    /// No device of the target runs a node's op with its src0 dtype.
    #[error(
        "tensor '{tensor}': no device of target '{target}' runs {op} with src0 {src0} (devices: {devices})"
    )]
    UnsupportedOp {
        /// The node.
        tensor: String,
        /// Its op's name.
        op: String,
        /// The dtype of its src0 (what support is keyed on).
        src0: String,
        /// The target's name.
        target: String,
        /// The target's devices, comma-separated.
        devices: String,
    },
    /// The ops writing into one tensor must run where its bytes are, but no
    /// device runs all of them (together with the tensor's own op, if any).
    #[error(
        "'{root}' is written by {writers}, which must run on the device holding '{root}', but no device of target '{target}' runs all of them"
    )]
    NoDeviceForWrites {
        /// The tensor written into.
        root: String,
        /// Each writing op: name, op and src0 dtype.
        writers: String,
        /// The target's name.
        target: String,
    },
    /// A weight fits in no device's free memory (or largest buffer).
    #[error(
        "weight '{tensor}' ({bytes} bytes{context}) fits no device of target '{target}': {free}"
    )]
    WeightDoesNotFit {
        /// The weight.
        tensor: String,
        /// Its size.
        bytes: u64,
        /// What else constrains it (its block, a pin rule), starting with ", " or "; "; may be empty.
        context: String,
        /// The target's name.
        target: String,
        /// Every device's free memory and largest buffer at that point.
        free: String,
    },
    /// Without `--fit` or `--offload-layers`, the weights go to the first
    /// device, and they do not fit there.
    #[error(
        "the weights need {bytes} bytes but {device} has {free} bytes free ({memory} bytes of memory less a {reserve}-byte compute reserve), or one is over its largest buffer; use --fit to spread them over the devices, or --offload-layers N"
    )]
    WeightsExceedFirstDevice {
        /// The first (highest-priority) device.
        device: String,
        /// The weights' total size (those not pinned elsewhere).
        bytes: u64,
        /// Its free memory after pinned weights and the reserve.
        free: u64,
        /// Its memory.
        memory: u64,
        /// The compute reserve kept free on every device.
        reserve: u64,
    },
}

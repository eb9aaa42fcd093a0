//! The ahead-of-time compiler (issue 3): so far, its inputs only.
//!
//! What exists now:
//! - [`target`]: target descriptions as plain data (devices in priority order,
//!   their op support, memory, alignment, throughput; links between them), with
//!   validation, built-in presets and the RON files of `examples/targets/`;
//! - [`placement`]: weight placement options (`--pin REGEX=DEVICE`,
//!   `--offload-layers N`, `--fit`) and the rule that says which weights they pin;
//! - [`liveness`]: lifetimes of compute tensors over an execution order, views
//!   keeping their root alive, in-place reuse where the op allows it;
//! - [`memory`]: arena offsets from several algorithms (the smallest wins) and
//!   the lower bound, for one arena.
//!
//! What does not exist yet: the passes assign, schedule, split and copies and
//! fuse, the pipeline that joins them, the plan checker and plan writing. Nothing
//! here produces a plan.
//!
//! Invariant: this crate never opens a device or LLVM. A target is a
//! description, so a plan for `cpu+cuda0` can be made on a machine without a GPU.

pub mod assign;
pub mod liveness;
pub mod memory;
pub mod placement;
pub mod target;

pub use placement::{PinRule, Pins, PlacementOptions, layer_of, n_layers, pinned_device};
pub use target::{Device, DeviceId, DeviceKind, Link, Target};

/// Everything that can go wrong in the compiler crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
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
}

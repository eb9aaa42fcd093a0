//! Everything that can go wrong loading or running a plan. Every message
//! names what is wrong: the file, tensor, op, device or shapes.

use ir::plan::check::PlanViolation;
use thiserror::Error;

/// A runtime error.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// The plan file could not be read or parsed (names file, line and column).
    #[error(transparent)]
    PlanFile(#[from] ir::Error),
    /// The plan was written for another plan format.
    #[error(
        "plan format_version {found} is not supported (this runtime reads version {supported})"
    )]
    PlanVersion {
        /// The plan's version.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The plan checker found broken invariants (e.g. a plan edited by hand).
    #[error("plan '{graph}' is invalid ({} violations):\n{}", .violations.len(), list(.violations))]
    InvalidPlan {
        /// The plan's graph name.
        graph: String,
        /// Every violation the checker found.
        violations: Vec<PlanViolation>,
    },
    /// The plan needs a device this runtime or machine does not have.
    #[error("the plan runs on device '{device}' ({kind}), which this machine does not have: {why}")]
    NoDevice {
        /// The plan's device name.
        device: String,
        /// Its kind, in words.
        kind: String,
        /// Why it is not available.
        why: String,
    },
    /// A CUDA device failed a driver call, a kernel, or a compilation, or a
    /// step has no CUDA kernel.
    #[error("CUDA device {device}: {what}")]
    Cuda {
        /// The plan's device name (`cuda0`).
        device: String,
        /// What failed, with the driver's or NVRTC's words.
        what: String,
    },
    /// A remote device (ggml's RPC server) failed a call, refused it, or
    /// stopped answering.
    #[error("remote device {device} at {endpoint}: {what} failed: {detail}")]
    Remote {
        /// The plan's device name (`rpc0`), or the endpoint when there is none yet.
        device: String,
        /// The server's `host:port`.
        endpoint: String,
        /// The call (`hello`, `alloc_buffer`, `set_tensor 'l0.wq'`, ...).
        what: String,
        /// What went wrong.
        detail: String,
    },
    /// The arenas do not fit in the memory available.
    #[error(
        "the plan's arenas need {needed} bytes ({needed_mib:.1} MiB) but only {available} bytes ({available_mib:.1} MiB) are available",
        needed_mib = *.needed as f64 / 1048576.0, available_mib = *.available as f64 / 1048576.0
    )]
    OutOfMemory {
        /// Bytes the arenas need.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// A tensor file could not be opened or read.
    #[error(transparent)]
    File(#[from] ir::files::FileError),
    /// A weight the plan needs is not in the weights file.
    #[error("weight '{name}' is not in {file}")]
    MissingWeight {
        /// The tensor's name.
        name: String,
        /// The weights file.
        file: String,
    },
    /// The stored tensor a weight shard is cut from is not in the weights file.
    #[error("weight shard '{name}' is cut from '{of}', which is not in {file}")]
    MissingShardSource {
        /// The shard's name.
        name: String,
        /// The stored tensor it is cut from.
        of: String,
        /// The weights file.
        file: String,
    },
    /// The stored tensor a weight shard is cut from has another dtype or
    /// shape than the shard says its source has.
    #[error(
        "weight shard '{name}' is cut from {stored}, which is {found}, but the plan expects {expected}"
    )]
    ShardSourceMismatch {
        /// The shard's name.
        name: String,
        /// The stored tensor it is cut from and its file (`'w' in model.gguf`).
        stored: String,
        /// What the file stores.
        found: String,
        /// The shard's dtype and its source's full extents.
        expected: String,
    },
    /// A weight shard whose slice does not fit its source (the plan checker
    /// refuses such plans; named here rather than cut wrong).
    #[error("weight shard '{name}' of '{of}': {why}")]
    InvalidShard {
        /// The shard's name.
        name: String,
        /// The stored tensor it is cut from.
        of: String,
        /// What is wrong with the slice.
        why: String,
    },
    /// A weight, input or state tensor has another dtype or shape than the plan says.
    #[error("{what} '{name}'{origin} is {found}, but the plan expects {expected}")]
    Mismatch {
        /// `weight`, `input` or `state`.
        what: &'static str,
        /// The tensor's name.
        name: String,
        /// Where it came from (` in FILE`), or empty.
        origin: String,
        /// What was given.
        found: String,
        /// What the plan declares.
        expected: String,
    },
    /// No graph tensor has this name.
    #[error("the plan has no tensor named '{name}'")]
    NoSuchTensor {
        /// The name asked for.
        name: String,
    },
    /// The tensor exists but cannot be used this way.
    #[error("tensor '{name}' {why}")]
    WrongUse {
        /// The tensor's name.
        name: String,
        /// What is wrong (`is a weight, not an input`, `is fused away: it has no bytes`).
        why: String,
    },
    /// An input was never set before `run`.
    #[error("input '{name}' ({expected}) was never set")]
    InputNotSet {
        /// The input's name.
        name: String,
        /// Its dtype and shape.
        expected: String,
    },
    /// An index input holds a value outside the rows of the table it indexes.
    #[error(
        "input '{name}' element {index} is {value}, outside 0..{bound} (the rows of '{table}')"
    )]
    IndexOutOfRange {
        /// The input's name.
        name: String,
        /// The element's flat index.
        index: usize,
        /// Its value.
        value: i64,
        /// Rows of the indexed tensor.
        bound: i64,
        /// The indexed tensor.
        table: String,
    },
    /// No CPU kernel for this op with these dtypes or layouts.
    #[error("no CPU kernel for {op}: {detail}")]
    Unsupported {
        /// The op (`mul_mat`, `rope`, ...).
        op: String,
        /// What is not supported (dtypes, layouts).
        detail: String,
    },
    /// A step reads a tensor held on another device: only a collective's
    /// participant may, and only between CPU devices (one host's memory,
    /// read in place).
    #[error("{reader} on device '{device}' reads '{tensor}' on device '{held_on}': {why}")]
    PeerRead {
        /// The op name, or `fused`.
        reader: &'static str,
        /// The step's device.
        device: String,
        /// The tensor read.
        tensor: String,
        /// The device holding its bytes.
        held_on: String,
        /// Why that read is refused.
        why: &'static str,
    },
    /// Preparing a step failed; names the step and its tensor.
    #[error("step {step} ('{tensor}'): {source}")]
    Step {
        /// Global step index.
        step: usize,
        /// The tensor the step writes.
        tensor: String,
        /// What failed.
        #[source]
        source: Box<RuntimeError>,
    },
    /// The reference evaluator (for `--check`) failed.
    #[error("reference evaluation: {0}")]
    Reference(String),
    /// LLVM failed to set up or to compile a kernel.
    #[error("JIT: {0}")]
    Jit(String),
    /// A tensor read or write that would leave the tensor's bytes.
    #[error(
        "{device}: {what} of {len} bytes at offset {offset} of a {size}-byte tensor runs past its end"
    )]
    TensorAccess {
        /// The device.
        device: String,
        /// `set_tensor` or `get_tensor`.
        what: &'static str,
        /// Bytes asked for.
        len: usize,
        /// Offset into the tensor.
        offset: usize,
        /// The tensor's size in bytes.
        size: usize,
    },
    /// An arena could not be allocated.
    #[error("could not allocate {bytes} bytes for arena {arena} ({usage} on {device})")]
    Alloc {
        /// Arena index.
        arena: usize,
        /// Its size.
        bytes: u64,
        /// Its usage, in words.
        usage: String,
        /// Its device's name.
        device: String,
    },
}

fn list(violations: &[PlanViolation]) -> String {
    violations
        .iter()
        .map(|v| format!("  - [{}] {v}", v.what))
        .collect::<Vec<_>>()
        .join("\n")
}

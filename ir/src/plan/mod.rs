//! The plan: every decision the compiler made, in the form the runtime executes
//! and people read. This is the one stable serialized contract between
//! `compiler` (which writes plans) and `runtime` (which only reads them).
//!
//! Invariants of a plan the compiler emits (re-proved by [`check`],
//! which shares no code with the passes):
//! - `tensors[i]` for `i < n_graph_tensors` are the graph's tensors in id order;
//!   later entries are copies of a tensor on another device (`copy_of`);
//! - every tensor has exactly one placement: bytes in an arena, a view of a
//!   tensor with bytes, or `Fused` (an intermediate inside a fused kernel, no bytes);
//! - the plan's *global order* (splits in order; each split's copies, then its
//!   steps) is its meaning: running everything in that order, one at a time,
//!   computes the outputs (the reference plan evaluator does exactly that);
//! - execution is concurrent: each device has a compute stream (its splits'
//!   steps, in global order) and a copy stream (copies, in global order), and
//!   the only order between streams is the events the plan states (a copy or
//!   step records an event after it runs; another waits on it before it
//!   runs). Every event is recorded once, by something earlier in global order
//!   than every waiter, so no schedule deadlocks;
//! - two accesses to overlapping bytes on different streams, one of them a
//!   write, are ordered by events in their global order (happens-before), so
//!   every schedule the events allow computes what the global order computes;
//! - a step reads only tensors on its split's device, except a collective's
//!   participant (`all_reduce_sum`, `all_gather`, `reduce_scatter_sum`), which
//!   reads its parts in
//!   place on other devices that share its memory (CPU devices of one host);
//! - two tensors of one arena whose lifetimes (in global step order) overlap
//!   never share bytes;
//! - the text form is canonical: the same graph, target and options give the
//!   same bytes.

pub mod check;
mod fused;
mod index;
mod order;
mod text;
mod words;

pub use fused::{BinaryFn, Expr, FusedKernel, UnaryFn};
pub use order::{GlobalItem, Work, global_order};
pub use text::{PLAN_FORMAT_VERSION, parse_plan, plan_to_ron, read_plan, write_plan};
pub use words::events_in_words;

use crate::dtype::DType;
use crate::op::{GluKind, Op};
use crate::tensor::{ConstInit, Role};
use serde::{Deserialize, Serialize};

/// Dense index of a device in a target (and in a plan's `devices`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeviceId(pub u32);

impl DeviceId {
    /// The id as a vector index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "d{}", self.0)
    }
}

/// Why a step that `collective`ly reads or not (a collective's participant,
/// or any other step) on a device of kind `reader` may not read bytes held
/// on another device of kind `held`; `None` when it may. Only a collective's
/// participant reads across devices, and only where both are CPU devices
/// (one host's memory, so the part's address is valid on the reader's
/// threads); every other cross-device read needs a copy. The runtime and
/// the reference plan evaluator both refuse by this rule (the checker proves
/// it on its own, family 3).
pub fn peer_read_refusal(
    collective: bool,
    reader: DeviceKind,
    held: DeviceKind,
) -> Option<&'static str> {
    if !collective {
        Some("only collectives read tensors on other devices (others need a copy)")
    } else if !(reader.is_cpu() && held.is_cpu()) {
        Some("collectives read parts in place only between CPU devices (one host's memory)")
    } else {
        None
    }
}

/// What kind of device, and which one of its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeviceKind {
    /// The host CPU, all its cores (ggml's CPU backend).
    Cpu,
    /// Group `group` of `groups` equal groups of the host's cores, with its
    /// own worker threads and arenas (at load, the host's cores are shared out
    /// in order; more groups than cores share cores). How one machine runs
    /// multi-device plans, and what a multi-socket host wants per socket.
    CpuCores {
        /// This group's index, `0..groups`.
        group: u32,
        /// How many groups the host's cores are cut into.
        groups: u32,
    },
    /// The cores of NUMA node `node` (one socket of a multi-socket host), with
    /// its own worker threads and arenas bound to the node's memory where the
    /// kernel allows. A host's CPU devices are all nodes, all core groups,
    /// or the one whole-host `Cpu`.
    CpuNode {
        /// The node number (`/sys/devices/system/node/node{node}`).
        node: u32,
    },
    /// A CUDA GPU.
    Cuda {
        /// The CUDA device ordinal (`cudaSetDevice` number).
        ordinal: u32,
    },
    /// The first device of a remote host's ggml RPC server (llama.cpp's
    /// `ggml-rpc-server`): server `server` of the endpoints the runtime is
    /// given at load (`--rpc host:port,...`, in that order). A plan names no
    /// address, so one plan serves any servers. Its memory is the server's and
    /// shares nothing with the host: every byte it reads or hands back
    /// crosses the link as a copy, and it runs whole ops only (no fused
    /// kernels, no collectives).
    Remote {
        /// Index into the endpoints given at load.
        server: u32,
    },
}

impl DeviceKind {
    /// True for the host CPU, its core groups and its NUMA nodes.
    pub fn is_cpu(self) -> bool {
        matches!(
            self,
            DeviceKind::Cpu | DeviceKind::CpuCores { .. } | DeviceKind::CpuNode { .. }
        )
    }

    /// True for a device of a remote RPC server.
    pub fn is_remote(self) -> bool {
        matches!(self, DeviceKind::Remote { .. })
    }
}

/// Which arena of its device a tensor's bytes live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Usage {
    /// Weights: immutable, loaded once.
    Weights,
    /// Persistent mutable state (KV caches), kept between runs.
    State,
    /// Inputs the caller sets before each run, and constants.
    Io,
    /// Intermediates and outputs, reused across lifetimes.
    Compute,
}

impl Usage {
    /// The arena a tensor of role `role` lives in (views live in their root's).
    pub fn of(role: Role) -> Usage {
        match role {
            Role::Weight => Usage::Weights,
            Role::State => Usage::State,
            Role::Input | Role::Constant => Usage::Io,
            Role::Intermediate | Role::Output => Usage::Compute,
        }
    }
}

/// A device as the runtime needs to know it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanDevice {
    /// `cpu`, `cuda0`, ...
    pub name: String,
    /// Kind and ordinal.
    pub kind: DeviceKind,
    /// Bytes of memory the plan may use on it.
    pub memory_bytes: u64,
    /// Alignment of every arena offset.
    pub alignment: u64,
    /// Largest single buffer; larger arenas are split into chunks.
    pub max_buffer_bytes: u64,
}

/// Where a tensor's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    /// In arena `arena` at byte `offset`.
    Arena {
        /// Index into [`Plan::arenas`].
        arena: u32,
        /// Byte offset inside the arena.
        offset: u64,
    },
    /// Inside tensor `of`'s bytes (which has an arena placement) at `offset`.
    View {
        /// Index of the tensor owning the bytes.
        of: u32,
        /// Byte offset inside it.
        offset: u64,
    },
    /// An intermediate computed inside a fused kernel: it takes no memory.
    Fused,
}

/// One tensor of the plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanTensor {
    /// The graph's name; a copy is `name@device`.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Extents (ggml order).
    pub ne: [i64; 4],
    /// Byte strides.
    pub nb: [u64; 4],
    /// Role in the graph (copies: Intermediate).
    pub role: Role,
    /// The device holding its bytes.
    pub device: DeviceId,
    /// Where its bytes are.
    pub placement: Placement,
    /// For a copy: the tensor it copies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_of: Option<u32>,
    /// For constants: how their values are defined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<ConstInit>,
    /// For a weight that is one slice of a stored tensor (tensor
    /// parallelism): which tensor and which slice the loader binds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<crate::shard::WeightShard>,
    /// In a tensor-split plan: what this tensor holds of a value of the
    /// original graph (a slice, a full copy, or a partial sum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<SplitPart>,
    /// Why it is on this device (the assign pass's words).
    pub reason: String,
}

/// What one device's tensor holds of a value `of` of the original graph when
/// the compiler split the graph over devices (tensor parallelism).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SplitPart {
    /// Values `[start, start + ne[axis])` along `axis` of `of`.
    Slice {
        /// The original value.
        of: String,
        /// The axis it is cut along.
        axis: u8,
        /// First index of the slice.
        start: i64,
    },
    /// All of `of`: this device's own copy (computed here, or a mirror).
    Mirror {
        /// The original value.
        of: String,
    },
    /// One device's partial sum: the sum of every part of `of` (an
    /// all-reduce) is `of`. Only linear steps and all-reduces may read it.
    Partial {
        /// The original value.
        of: String,
    },
    /// One device's share of `of` under expert parallelism: the rows of the
    /// (slot, token) pairs routed to experts `[first, first + count)`, zeros
    /// in every other row. The parts never overlap, so they add up to `of`
    /// (a partial sum that an op keeping zeros, such as a GLU, may read).
    Routed {
        /// The original value.
        of: String,
        /// The first expert of this device's share.
        first: i64,
        /// How many experts it holds.
        count: i64,
    },
}

/// One arena: a buffer of one device for one usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arena {
    /// The device it lives on.
    pub device: DeviceId,
    /// What it holds.
    pub usage: Usage,
    /// Bytes.
    pub size: u64,
}

/// Which in-order queue of its device a stream is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum StreamKind {
    /// Runs the steps of the device's splits (ggml: the backend's queue).
    Compute,
    /// Runs copies between devices (ggml: `cpy_tensor_async`).
    Copy,
}

/// One in-order queue of work on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanStream {
    /// The device it runs on.
    pub device: DeviceId,
    /// Compute or copy.
    pub kind: StreamKind,
}

/// A cross-device copy: listed with the split that first reads it, run on a
/// copy stream as soon as its waits allow (usually long before that split).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Copy {
    /// The tensor read (on another device).
    pub src: u32,
    /// The tensor written (a copy on this split's device).
    pub dst: u32,
    /// Bytes moved.
    pub bytes: u64,
    /// Index into [`Plan::streams`]: a copy stream of the source's or the
    /// destination's device.
    pub stream: u32,
    /// Events waited on before the copy starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wait: Vec<u32>,
    /// The event recorded when the copy is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<u32>,
}

/// A split waits on `event` before its step `before` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Wait {
    /// Index of the split's step the wait precedes.
    pub before: u32,
    /// The event waited on.
    pub event: u32,
}

/// A split records `event` once its step `after` is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Record {
    /// Index of the split's step the record follows.
    pub after: u32,
    /// The event recorded.
    pub event: u32,
}

/// One step: an op or a fused kernel writing `dst`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Step {
    /// One graph node computed by its op.
    Op {
        /// The op and its parameters.
        op: Op,
        /// The tensor written.
        dst: u32,
        /// Operands, in the op's order.
        srcs: Vec<u32>,
    },
    /// Several elementwise nodes computed by one kernel.
    Fused {
        /// Index into [`Plan::kernels`].
        kernel: u32,
    },
    /// A `mul_mat` whose product is added to a tensor of the product's
    /// extents before it is stored, as one kernel (an output projection and
    /// its residual add):
    /// `dst = srcs[0] · srcs[1] + srcs[2]`. The product is never stored: its
    /// tensor is placed `Fused`.
    MulMatAdd {
        /// The `mul_mat` node computed inside the step (no bytes).
        product: u32,
        /// The tensor written: the `add` node.
        dst: u32,
        /// The product's weight and activations, then the addend.
        srcs: [u32; 3],
    },
    /// Attention over a KV cache as one kernel (`compiler::fuse::attention`
    /// states when): `scores = mul_mat(k, q)`, `probs = soft_max(scores ·
    /// scale (+ mask))`, `product = mul_mat(v, probs)`, `permuted` = the
    /// product with axes 1 and 2 swapped, `dst = cont(permuted)`. The four
    /// intermediates are never stored: they are placed `Fused`.
    Attention {
        /// The `mul_mat(k, q)` node (no bytes).
        scores: u32,
        /// The `soft_max` node (no bytes).
        probs: u32,
        /// The `mul_mat(v, probs)` node (no bytes).
        product: u32,
        /// The `permute(product, 0, 2, 1, 3)` view (no bytes).
        permuted: u32,
        /// The tensor written: the `cont` node.
        dst: u32,
        /// `k`, `q`, `v`, then the softmax's mask when it has one.
        srcs: Vec<u32>,
        /// The softmax's scale.
        scale: f32,
        /// The softmax's ALiBi maximum bias (0: none).
        max_bias: f32,
    },
    /// Two products of the same activations and their gated linear unit as
    /// one kernel (a feed-forward block's gate and up projections):
    /// `dst = act(srcs[0] · srcs[2]) * (srcs[1] · srcs[2])`, `act` the
    /// activation of `kind`. The products, and `inner`, are never stored:
    /// their tensors are placed `Fused`.
    MulMatGlu {
        /// The activation applied to the gate product.
        kind: GluKind,
        /// The gate and up `mul_mat` nodes computed inside the step.
        products: [u32; 2],
        /// The graph nodes between the products and `dst` that the step
        /// computes too (the activation node when the graph spells the unit
        /// as `act` then `mul`); no bytes.
        inner: Vec<u32>,
        /// The tensor written: the unit's output node.
        dst: u32,
        /// The gate weight, the up weight, then the activations.
        srcs: [u32; 3],
    },
    /// Products of one activation tensor as one kernel (a block's Q, K and
    /// V projections): `dsts[i] = srcs[i] · srcs[n]` for each of the `n`
    /// results (2 to 5), each stored.
    MulMatMany {
        /// The `mul_mat` nodes written, one per weight.
        dsts: Vec<u32>,
        /// The weights, one per result, then the activations.
        srcs: Vec<u32>,
    },
    /// A block's rotary embeddings and KV-cache stores as one kernel
    /// (`compiler::fuse::rope_store` states when): 2 to 4 `rope` and
    /// `set_rows` nodes, each computed as its own `Op` step would compute it
    /// and each stored. No op reads bytes another writes, except a `set_rows`
    /// whose rows are a packed view of an earlier `rope`'s result: it
    /// rotates the rope's source itself, so the ops may run at once.
    RopeStore {
        /// Each op and how many of `srcs` are its operands, in order.
        ops: Vec<RowOp>,
        /// Each op's result, in order.
        dsts: Vec<u32>,
        /// Every op's operands, in op order, each in its op's order.
        srcs: Vec<u32>,
    },
}

/// One op of a [`Step::RopeStore`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowOp {
    /// `rope` or `set_rows`, with its parameters.
    pub op: Op,
    /// How many operands it takes from the step's `srcs` (`rope`: 2, or 3
    /// with frequency factors; `set_rows`: 3).
    pub n_srcs: u32,
}

impl Step {
    /// The ops this step runs as their own `Op` steps would, each with its
    /// result and operands: an `Op` step's op, each op of a `RopeStore`
    /// (cut short where its counts disagree: the checker reports that);
    /// none for other steps.
    pub fn ops(&self) -> Vec<(&Op, u32, &[u32])> {
        match self {
            Step::Op { op, dst, srcs } => vec![(op, *dst, srcs.as_slice())],
            Step::RopeStore { ops, dsts, srcs } => {
                let mut out = Vec::with_capacity(ops.len());
                let mut at = 0usize;
                for (row, &dst) in ops.iter().zip(dsts) {
                    let Some(operands) = srcs.get(at..at.saturating_add(row.n_srcs as usize))
                    else {
                        break;
                    };
                    out.push((&row.op, dst, operands));
                    at += row.n_srcs as usize;
                }
                out
            }
            _ => Vec::new(),
        }
    }
}

/// A maximal run of steps on one device's compute stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Split {
    /// Where the steps run.
    pub device: DeviceId,
    /// Index into [`Plan::streams`]: the device's compute stream.
    pub stream: u32,
    /// Copies into this device, before the steps in global order (each on
    /// its own copy stream, with its own events).
    pub copies: Vec<Copy>,
    /// Events waited on before given steps, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<Wait>,
    /// Events recorded after given steps, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<Record>,
    /// Steps, in order.
    pub steps: Vec<Step>,
}

/// Bytes per device and how close they are to the bound.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceStats {
    /// The device.
    pub device: DeviceId,
    /// Compute arena bytes.
    pub compute_bytes: u64,
    /// Lower bound of the compute arena (max live bytes at one step).
    pub compute_lower_bound: u64,
    /// Weights, state and io bytes.
    pub resident_bytes: u64,
    /// The memory algorithm that won.
    pub algorithm: String,
}

/// Copies over one link direction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkStats {
    /// From device.
    pub from: DeviceId,
    /// To device.
    pub to: DeviceId,
    /// Number of copies.
    pub copies: u32,
    /// Bytes moved per run.
    pub bytes: u64,
}

/// Figures people read first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Per device memory.
    pub devices: Vec<DeviceStats>,
    /// Number of splits.
    pub n_splits: u32,
    /// Copies per link direction.
    pub links: Vec<LinkStats>,
    /// Number of graph nodes that became fused-kernel members (a
    /// `MulMatAdd` step's two nodes count too, an `Attention` step's five, a
    /// `MulMatGlu` step's, and a `MulMatMany` step's products).
    pub fused_nodes: u32,
    /// Estimated time of one run, microseconds (the cost model's figure).
    pub estimated_us: f64,
    /// Per split, in plan order: the estimated time of its copies and steps,
    /// microseconds (the same model; empty in plans written before it was
    /// recorded). Splits on different devices may overlap, so these can add
    /// up to more than `estimated_us`'s share of the wall time.
    #[serde(default)]
    pub split_us: Vec<f64>,
}

/// The compiled plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// [`PLAN_FORMAT_VERSION`].
    pub format_version: u32,
    /// The compiler that wrote it (crate version).
    pub compiler_version: String,
    /// The graph's name.
    pub graph_name: String,
    /// FNV-1a 64 of the graph's canonical text, hex.
    pub graph_hash: String,
    /// The target's name.
    pub target_name: String,
    /// The options that shaped it, as the command line spelled them.
    pub options: Vec<String>,
    /// Devices, indexed by [`DeviceId`].
    pub devices: Vec<PlanDevice>,
    /// How many leading `tensors` are the graph's own.
    pub n_graph_tensors: u32,
    /// Tensors: the graph's in id order, then copies.
    pub tensors: Vec<PlanTensor>,
    /// Arenas.
    pub arenas: Vec<Arena>,
    /// Fused kernels, referenced by `Step::Fused`.
    pub kernels: Vec<FusedKernel>,
    /// Streams, indexed by the `stream` of splits and copies.
    pub streams: Vec<PlanStream>,
    /// Events, numbered `0..n_events`; each is recorded once per run.
    pub n_events: u32,
    /// Splits, in global order.
    pub splits: Vec<Split>,
    /// Summary figures.
    pub stats: Stats,
}

/// FNV-1a 64-bit hash of `bytes`, as 16 hex digits: a stable fingerprint
/// (std's hasher may change between releases).
pub fn fingerprint(bytes: &[u8]) -> String {
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{h:016x}")
}

//! Plan steps as ggml graph nodes: op numbers, op parameters and the tensor
//! records of `GRAPH_COMPUTE`, for a `ggml-rpc-server` of protocol 7.0.0
//! whose backend is ggml's CPU backend (`GGML_OP_COUNT` = 101).
//!
//! # What a step becomes
//!
//! [`step_records`] turns one `Step::Op` into a [`StepGraph`]: one *node*
//! record for the step's result and one *leaf* record (op `GGML_OP_NONE`)
//! per ggml source slot. Every record carries the plan tensor's own dtype,
//! extents, byte strides, name and server address (buffer handle and data
//! pointer from the caller's `locate`). Sources are always sent as leafs at
//! their own address, views included (a plan view has its own `ne`/`nb` and
//! address), so no record sets `view_src`: ggml's CPU kernels never read
//! `view_src` or `view_offs` (they read `data`, `ne` and `nb`), and ggml's
//! write-into results (`cpy`, `set_rows`) only need the node's `data` to be
//! the destination's address, which [`step_records`] checks.
//!
//! Views (`view`, `reshape`, `permute`, `transpose`) are placements, not
//! computations: [`node_op`] maps them to `GGML_OP_NONE` and their steps give
//! an empty [`StepGraph`] that contributes nothing to a payload (the CPU
//! backend skips NONE/VIEW/RESHAPE/PERMUTE/TRANSPOSE nodes anyway).
//!
//! Node flags are `OUTPUT | COMPUTE`. `COMPUTE` (16) is required: this ggml
//! version's CPU backend skips every node without it (ggml's graph builder
//! sets it on the client side; the server keeps the flags as sent).
//! `OUTPUT` keeps the CPU backend from fusing `rms_norm` + `mul` (which
//! would skip writing the `rms_norm` result); fusion is also ruled out by the
//! node's use count of 0 and by the `mul` reading its own leaf record rather
//! than the `rms_norm` node. Use counts: the server reads them only for
//! nodes (for that fusion check); a node's is 0 (every reader gets a leaf
//! record of its own) and a leaf's is 1 (its one node).
//!
//! # Ids
//!
//! Slot `k` of step `s` (`k` = 0 for the node, `1 + i` for ggml source slot
//! `i`) has id `16 s + k + 1`: non-zero, and unique per (step, slot), so a
//! tensor written by one step and read by a later step of the same payload
//! is two records with two ids (the server keys records by id). Step indices
//! must be unique among the steps of one payload.
//!
//! # `GRAPH_COMPUTE` payload ([`graph_payload`])
//!
//! All little-endian, packed:
//!
//! | field       | bytes            | meaning                                   |
//! |-------------|------------------|-------------------------------------------|
//! | `device`    | 4 (u32)          | the server's device index                 |
//! | `n_nodes`   | 4 (u32)          | nodes to compute                          |
//! | node ids    | 8 × `n_nodes`    | in execution order (the steps' order)     |
//! | `n_tensors` | 4 (u32)          | records that follow                       |
//! | records     | 296 × `n_tensors`| every leaf and node record, each once     |
//!
//! # Invariants
//!
//! - every record in a payload has a distinct non-zero id, and every id a
//!   record names as a source is the id of a record of the same payload;
//! - every node's sources are leafs of its own step, so nodes run in the
//!   order given, with no dependency between records other than addresses;
//! - nothing here panics, whatever the plan: a step the CPU backend would not
//!   compute exactly as our reference kernels do is refused with
//!   [`Unsupported`] before anything is sent (a failed kernel assertion on
//!   the server aborts the whole server process).
//!
//! # Refused, and why
//!
//! - collectives (`all_reduce_sum`, `all_gather`): not ggml ops;
//! - extents below 1 or above 2^31 - 1 (records hold u32 extents, and the
//!   CPU kernels count extents, rows and elements with C `int`), strides
//!   above u32, results of more than 2^31 - 1 blocks;
//! - dtypes a CPU kernel has no case for (it would abort): `scale` in f16;
//!   `rms_norm`, `norm`, `soft_max`, `sum_rows`, `mean`, `argmax`,
//!   `diag_mask_inf` other than f32; `rope` in bf16; `set_rows` rows other
//!   than f32/f16; binary ops other than equal dtypes or an f32 src1;
//!   `mul_mat` f16 × bf16, bf16 × f16 and quantized × f16/bf16; i32 `cpy` or
//!   `set_rows` destinations;
//! - layouts a CPU kernel reads differently from ours or asserts against:
//!   a row whose elements are strided (`nb0` not the element size) where the
//!   kernel reads rows packed (every op but `cpy`, `cont`, `concat` of plain
//!   dtypes and `norm`); a non-contiguous `scale` or `diag_mask_inf` source;
//!   `glu` operands whose rows are not evenly strided (ggml steps rows by
//!   `nb1` alone); a transposed `mul_mat` src0; `argmax` over more than a
//!   matrix; a quantized `cont` that is neither a plain copy of a contiguous
//!   source nor of the same shape; `cpy` into a quantized destination that is
//!   not contiguous, or from rows that do not split into its blocks;
//! - parameters ggml cannot express: `diag_mask_inf` with a negative
//!   `n_past`, `rope` with `n_dims` or `n_ctx_orig` above 2^31 - 1, a
//!   negative or NaN norm `eps` (the kernel asserts `eps >= 0`).

use super::tensor::{MAX_OP_PARAMS, MAX_SRC, RpcTensor};
use ir::plan::{Plan, PlanTensor};
use ir::{DType, Op};
use std::collections::HashSet;
use std::fmt;

mod numbers;
mod ops;
#[cfg(test)]
mod tests;

pub use numbers::*;
pub use ops::node_op;
use ops::{check_result, count_blocks, ggml_sources};

/// Ids reserved per step: the node and up to [`MAX_SRC`] leafs.
const IDS_PER_STEP: u64 = 16;
const _: () = assert!(IDS_PER_STEP > MAX_SRC as u64);

/// The largest extent, row count or element count ggml's CPU kernels count
/// without overflow (they use C `int`).
const MAX_COUNT: i64 = i32::MAX as i64;

/// A step a ggml RPC server cannot compute as the plan means it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// The op's name (`mul_mat`, `rope`, ...).
    pub op: &'static str,
    /// Why, naming the tensor or parameter at fault.
    pub reason: String,
}

impl Unsupported {
    fn new(op: &Op, reason: impl Into<String>) -> Unsupported {
        Unsupported {
            op: op.name(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cannot run on a ggml RPC server: {}",
            self.op, self.reason
        )
    }
}

impl std::error::Error for Unsupported {}

/// Where a plan tensor's bytes are on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteAddr {
    /// The server's handle of the buffer holding them.
    pub buffer: u64,
    /// The server address of the first byte (inside that buffer).
    pub data: u64,
    /// The server holds the tensor's values as packed F32: a dequantized
    /// copy of a block-quantized weight (exact precision), which its record
    /// describes as F32 with packed strides.
    pub as_f32: bool,
}

/// One step's records: its node and its sources' leafs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepGraph {
    /// The node computing the step's result; `None` for a view step, which
    /// has nothing to compute.
    pub node: Option<RpcTensor>,
    /// One leaf per ggml source slot the node uses, in slot order (empty
    /// for a view step).
    pub leafs: Vec<RpcTensor>,
}

impl StepGraph {
    /// True when the step sends nothing (a view).
    pub fn is_empty(&self) -> bool {
        self.node.is_none()
    }
}

/// The ggml type number of `dtype` (GGUF's numbering).
pub fn ggml_type(dtype: DType) -> u32 {
    dtype.ggml_type()
}

/// The node and leaf records of one step: `op` writing plan tensor `dst`
/// from plan tensors `srcs` (our order), as step `step_index` of its plan
/// (unique among the plan's steps; it makes the records' ids). `locate`
/// gives each plan tensor's server address; a tensor it does not know is
/// refused. A view step gives an empty [`StepGraph`].
pub fn step_records(
    plan: &Plan,
    step_index: usize,
    op: &Op,
    dst: u32,
    srcs: &[u32],
    locate: &dyn Fn(u32) -> Option<RemoteAddr>,
) -> Result<StepGraph, Unsupported> {
    if op.is_view() {
        return Ok(StepGraph {
            node: None,
            leafs: Vec::new(),
        });
    }
    let tensor = |t: u32| {
        plan.tensors.get(t as usize).ok_or_else(|| {
            Unsupported::new(
                op,
                format!(
                    "tensor {t} is not in the plan ({} tensors)",
                    plan.tensors.len()
                ),
            )
        })
    };
    let address = |t: u32| {
        locate(t).ok_or_else(|| {
            let name = plan
                .tensors
                .get(t as usize)
                .map_or("?", |x| x.name.as_str());
            Unsupported::new(op, format!("tensor '{name}' has no address on the server"))
        })
    };
    let dst_t = tensor(dst)?;
    let src_ts = srcs
        .iter()
        .map(|&t| tensor(t))
        .collect::<Result<Vec<_>, _>>()?;
    let (number, params) = node_op(op, &src_ts)?;
    check_result(op, &src_ts, dst_t)?;

    let id = |slot: usize| {
        u64::try_from(step_index)
            .ok()
            .and_then(|s| s.checked_mul(IDS_PER_STEP))
            .and_then(|base| base.checked_add(slot as u64 + 1))
            .ok_or_else(|| Unsupported::new(op, format!("step index {step_index} is too large")))
    };
    let mut node = record(op, dst_t, id(0)?, address(dst)?)?;
    let blocks = count_blocks(dst_t).filter(|&n| n <= MAX_COUNT as u64);
    if blocks.is_none() {
        return Err(Unsupported::new(
            op,
            format!(
                "result '{}' has more than 2^31 - 1 blocks (ggml's CPU kernels count them \
                 with C int)",
                dst_t.name
            ),
        ));
    }
    node.op = number;
    node.op_params = params;
    node.flags = GGML_TENSOR_FLAG_OUTPUT | GGML_TENSOR_FLAG_COMPUTE;

    let mut leafs = Vec::with_capacity(srcs.len());
    for (slot, &ours) in ggml_sources(op, srcs.len()).iter().enumerate() {
        let (Some(&t), Some(&pt)) = (srcs.get(ours), src_ts.get(ours)) else {
            return Err(Unsupported::new(op, "a source slot has no source"));
        };
        let mut leaf = record(op, pt, id(slot + 1)?, address(t)?)?;
        leaf.use_count = 1;
        node.src[slot] = leaf.id;
        leafs.push(leaf);
    }
    if let Some(k) = op.writes_into_source() {
        let dest = srcs
            .get(k)
            .map(|&t| address(t))
            .transpose()?
            .ok_or_else(|| Unsupported::new(op, "the destination source is missing"))?;
        if (dest.buffer, dest.data) != (node.buffer, node.data) {
            return Err(Unsupported::new(
                op,
                format!(
                    "result '{}' is not at its destination's address (ggml writes the \
                     result's own data)",
                    dst_t.name
                ),
            ));
        }
    }
    Ok(StepGraph {
        node: Some(node),
        leafs,
    })
}

/// `GRAPH_COMPUTE`'s payload for `steps` computed in order on server device
/// `device` (layout in the module doc). Empty steps (views) add nothing; a
/// record whose id an earlier one already has is written once (step indices
/// are unique, so this happens only when a step is passed twice). Counts are
/// u32 on the wire; a payload never comes near 2^32 records (1.2 TB).
pub fn graph_payload(device: u32, steps: &[&StepGraph]) -> Vec<u8> {
    let mut seen = HashSet::new();
    let mut nodes = Vec::new();
    let mut records = Vec::new();
    for step in steps {
        for leaf in &step.leafs {
            if seen.insert(leaf.id) {
                records.push(leaf);
            }
        }
        if let Some(node) = &step.node
            && seen.insert(node.id)
        {
            nodes.push(node.id);
            records.push(node);
        }
    }
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(12 + 8 * nodes.len() + RpcTensor::BYTES * records.len());
    out.extend_from_slice(&device.to_le_bytes());
    out.extend_from_slice(&count(nodes.len()).to_le_bytes());
    for id in &nodes {
        out.extend_from_slice(&id.to_le_bytes());
    }
    out.extend_from_slice(&count(records.len()).to_le_bytes());
    for r in records {
        r.encode(&mut out);
    }
    out
}

/// A leaf record of plan tensor `t` (op NONE) at `addr` with id `id`.
fn record(op: &Op, t: &PlanTensor, id: u64, addr: RemoteAddr) -> Result<RpcTensor, Unsupported> {
    let mut ne = [0u32; 4];
    let mut nb = [0u32; 4];
    for i in 0..4 {
        ne[i] = u32::try_from(t.ne[i])
            .ok()
            .filter(|&n| n >= 1 && i64::from(n) <= MAX_COUNT)
            .ok_or_else(|| {
                Unsupported::new(
                    op,
                    format!(
                        "'{}' has extent {} in dim {i}: records hold u32 extents and ggml's \
                         CPU kernels count with C int (1..=2^31-1)",
                        t.name, t.ne[i]
                    ),
                )
            })?;
        nb[i] = u32::try_from(t.nb[i]).map_err(|_| {
            Unsupported::new(
                op,
                format!(
                    "'{}' has stride {} in dim {i}, which does not fit a record's u32",
                    t.name, t.nb[i]
                ),
            )
        })?;
    }
    let dtype = if addr.as_f32 {
        // Packed F32 strides over the same extents (which fit u32, above).
        nb[0] = 4;
        for i in 1..4 {
            nb[i] = (u64::from(nb[i - 1]) * u64::from(ne[i - 1]))
                .try_into()
                .map_err(|_| {
                    Unsupported::new(
                        op,
                        format!("'{}' as F32 exceeds a record's strides", t.name),
                    )
                })?;
        }
        DType::F32
    } else {
        t.dtype
    };
    Ok(RpcTensor {
        id,
        dtype: ggml_type(dtype),
        buffer: addr.buffer,
        ne,
        nb,
        op: GGML_OP_NONE,
        op_params: [0; MAX_OP_PARAMS],
        flags: 0,
        src: [0; MAX_SRC],
        view_src: 0,
        view_offs: 0,
        data: addr.data,
        name: t.name.clone(),
        use_count: 0,
    })
}

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
use ir::{DType, GluKind, Op, RopeMode};
use std::collections::HashSet;
use std::fmt;

/// `GGML_OP_NONE`: a leaf (and what views map to).
pub const GGML_OP_NONE: u32 = 0;
/// `GGML_OP_ADD`.
pub const GGML_OP_ADD: u32 = 2;
/// `GGML_OP_SUB`.
pub const GGML_OP_SUB: u32 = 6;
/// `GGML_OP_MUL`.
pub const GGML_OP_MUL: u32 = 7;
/// `GGML_OP_DIV`.
pub const GGML_OP_DIV: u32 = 8;
/// `GGML_OP_SQR`.
pub const GGML_OP_SQR: u32 = 9;
/// `GGML_OP_SQRT`.
pub const GGML_OP_SQRT: u32 = 10;
/// `GGML_OP_SUM_ROWS`.
pub const GGML_OP_SUM_ROWS: u32 = 15;
/// `GGML_OP_MEAN`.
pub const GGML_OP_MEAN: u32 = 17;
/// `GGML_OP_ARGMAX`.
pub const GGML_OP_ARGMAX: u32 = 18;
/// `GGML_OP_CONCAT` (params: dim).
pub const GGML_OP_CONCAT: u32 = 22;
/// `GGML_OP_NORM` (params: eps).
pub const GGML_OP_NORM: u32 = 24;
/// `GGML_OP_RMS_NORM` (params: eps).
pub const GGML_OP_RMS_NORM: u32 = 25;
/// `GGML_OP_MUL_MAT`.
pub const GGML_OP_MUL_MAT: u32 = 29;
/// `GGML_OP_SCALE` (params: scale, bias).
pub const GGML_OP_SCALE: u32 = 32;
/// `GGML_OP_CPY` (sources: value, destination).
pub const GGML_OP_CPY: u32 = 34;
/// `GGML_OP_CONT`.
pub const GGML_OP_CONT: u32 = 35;
/// `GGML_OP_GET_ROWS`.
pub const GGML_OP_GET_ROWS: u32 = 40;
/// `GGML_OP_SET_ROWS` (sources: rows, indices, destination).
pub const GGML_OP_SET_ROWS: u32 = 42;
/// `GGML_OP_DIAG_MASK_INF` (params: n_past).
pub const GGML_OP_DIAG_MASK_INF: u32 = 44;
/// `GGML_OP_SOFT_MAX` (params: scale, max_bias).
pub const GGML_OP_SOFT_MAX: u32 = 46;
/// `GGML_OP_ROPE` (params: see [`node_op`]).
pub const GGML_OP_ROPE: u32 = 48;
/// `GGML_OP_UNARY` (params: the unary op).
pub const GGML_OP_UNARY: u32 = 91;
/// `GGML_OP_GLU` (params: the glu op, swapped).
pub const GGML_OP_GLU: u32 = 100;
/// `GGML_OP_COUNT`, which protocol 7.0.0 pins.
pub const GGML_OP_COUNT: u32 = 101;

/// `GGML_UNARY_OP_TANH`.
pub const GGML_UNARY_OP_TANH: i32 = 4;
/// `GGML_UNARY_OP_RELU`.
pub const GGML_UNARY_OP_RELU: i32 = 6;
/// `GGML_UNARY_OP_GELU` (tanh approximation).
pub const GGML_UNARY_OP_GELU: i32 = 8;
/// `GGML_UNARY_OP_SILU`.
pub const GGML_UNARY_OP_SILU: i32 = 10;
/// `GGML_UNARY_OP_GELU_ERF`.
pub const GGML_UNARY_OP_GELU_ERF: i32 = 16;

/// `GGML_GLU_OP_GEGLU` (tanh gelu).
pub const GGML_GLU_OP_GEGLU: i32 = 1;
/// `GGML_GLU_OP_SWIGLU`.
pub const GGML_GLU_OP_SWIGLU: i32 = 2;
/// `GGML_GLU_OP_GEGLU_ERF`.
pub const GGML_GLU_OP_GEGLU_ERF: i32 = 4;

/// `GGML_ROPE_TYPE_NORMAL`: adjacent pairs.
pub const GGML_ROPE_TYPE_NORMAL: i32 = 0;
/// `GGML_ROPE_TYPE_NEOX`: pairs half a rotation apart.
pub const GGML_ROPE_TYPE_NEOX: i32 = 2;

/// `GGML_TENSOR_FLAG_OUTPUT`: the node's result is wanted (never fused away).
pub const GGML_TENSOR_FLAG_OUTPUT: i32 = 2;
/// `GGML_TENSOR_FLAG_COMPUTE`: the CPU backend computes only nodes with it.
pub const GGML_TENSOR_FLAG_COMPUTE: i32 = 16;

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

/// The ggml op number and `op_params` of `op` over `srcs` (the plan tensors
/// of its sources, in our order), or why the CPU backend cannot compute it
/// as our reference kernels do.
///
/// Parameters as ggml's constructors store them (floats by their bits):
/// - `rope`: `[0 (n_past), n_dims, mode, 0 (n_ctx), n_ctx_orig, freq_base,
///   freq_scale, ext_factor, attn_factor, beta_fast, beta_slow, 0, 0, 0, 0
///   (sections), 0 (n_offs)]`;
/// - `soft_max`: `[scale, max_bias]`; `scale`: `[scale, bias]`;
/// - `rms_norm`, `norm`: `[eps]`; `concat`: `[dim]`; `diag_mask_inf`: `[n_past]`;
/// - unary ops (`silu`, `gelu`, `gelu_erf`, `relu`, `tanh`): `GGML_OP_UNARY`
///   with `[unary op]`; `glu`: `GGML_OP_GLU` with `[glu op, swapped]`
///   (swapped is 0 in the two-source form, which ignores it);
/// - every other op: all zero. Views give `GGML_OP_NONE`.
pub fn node_op(op: &Op, srcs: &[&PlanTensor]) -> Result<(u32, [i32; MAX_OP_PARAMS]), Unsupported> {
    if op.collective().is_some() {
        return Err(Unsupported::new(
            op,
            "collectives are not ggml ops (a remote device joins no collective)",
        ));
    }
    let arity = ir::rules::arity(op);
    if !arity.contains(&srcs.len()) {
        return Err(Unsupported::new(
            op,
            format!(
                "it takes {} to {} sources, the step has {}",
                arity.start(),
                arity.end(),
                srcs.len()
            ),
        ));
    }
    let c = Checks { op, srcs };
    let mut p = [0i32; MAX_OP_PARAMS];
    let number = match *op {
        Op::View { .. } | Op::Reshape | Op::Permute { .. } | Op::Transpose => GGML_OP_NONE,
        Op::AllReduceSum { .. } | Op::AllGather { .. } => {
            return Err(Unsupported::new(op, "collectives are not ggml ops"));
        }
        Op::GetRows => {
            c.rows_packed(0, "table (src0)")?;
            c.dtype(1, "indices (src1)", &[DType::I32])?;
            GGML_OP_GET_ROWS
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            let (a, b) = (c.src(0)?, c.src(1)?);
            c.dtype(0, "src0", &FLOATS)?;
            c.dtype(1, "src1", &FLOATS)?;
            if a.dtype != b.dtype && b.dtype != DType::F32 {
                return Err(c.no(format!(
                    "src0 '{}' is {} and src1 '{}' is {}; ggml's CPU binary ops take equal \
                     dtypes or an f32 src1",
                    a.name, a.dtype, b.name, b.dtype
                )));
            }
            c.rows_packed(0, "src0")?;
            match op {
                Op::Add => GGML_OP_ADD,
                Op::Sub => GGML_OP_SUB,
                Op::Mul => GGML_OP_MUL,
                _ => GGML_OP_DIV,
            }
        }
        Op::Scale { scale, bias } => {
            c.dtype(0, "src0", &[DType::F32, DType::BF16])?;
            c.contiguous(0, "src0", 0)?;
            p[0] = f32_param(scale);
            p[1] = f32_param(bias);
            GGML_OP_SCALE
        }
        Op::Sqr | Op::Sqrt | Op::Silu | Op::Gelu | Op::GeluErf | Op::Relu | Op::Tanh => {
            c.dtype(0, "src0", &FLOATS)?;
            c.rows_packed(0, "src0")?;
            let unary = match op {
                Op::Sqr => return Ok((GGML_OP_SQR, p)),
                Op::Sqrt => return Ok((GGML_OP_SQRT, p)),
                Op::Silu => GGML_UNARY_OP_SILU,
                Op::Gelu => GGML_UNARY_OP_GELU,
                Op::GeluErf => GGML_UNARY_OP_GELU_ERF,
                Op::Relu => GGML_UNARY_OP_RELU,
                _ => GGML_UNARY_OP_TANH,
            };
            p[0] = unary;
            GGML_OP_UNARY
        }
        Op::Glu { kind, swapped } => {
            c.dtype(0, "gate (src0)", &FLOATS)?;
            c.contiguous(0, "gate (src0)", 1)?;
            if let Some(up) = srcs.get(1) {
                let gate = c.src(0)?;
                if up.dtype != gate.dtype {
                    return Err(c.no(format!(
                        "gate '{}' is {} and up '{}' is {}; ggml's CPU glu takes one dtype",
                        gate.name, gate.dtype, up.name, up.dtype
                    )));
                }
                c.contiguous(1, "up (src1)", 1)?;
            }
            p[0] = match kind {
                GluKind::SwiGlu => GGML_GLU_OP_SWIGLU,
                GluKind::GeGlu => GGML_GLU_OP_GEGLU,
                GluKind::GeGluErf => GGML_GLU_OP_GEGLU_ERF,
            };
            p[1] = i32::from(swapped && srcs.len() == 1);
            GGML_OP_GLU
        }
        Op::RmsNorm { eps } | Op::Norm { eps } => {
            c.dtype(0, "src0", &[DType::F32])?;
            if eps.is_nan() || eps < 0.0 {
                return Err(c.no(format!("eps {eps} is not >= 0 (ggml asserts it)")));
            }
            p[0] = f32_param(eps);
            if matches!(op, Op::RmsNorm { .. }) {
                c.rows_packed(0, "src0")?;
                GGML_OP_RMS_NORM
            } else {
                GGML_OP_NORM
            }
        }
        Op::MulMat => {
            let (a, b) = (c.src(0)?, c.src(1)?);
            c.rows_packed(0, "src0")?;
            c.dtype(1, "src1", &FLOATS)?;
            c.rows_packed(1, "src1")?;
            if a.nb[0] > a.nb[1] {
                return Err(c.no(format!(
                    "src0 '{}' is transposed (nb0 {} > nb1 {})",
                    a.name, a.nb[0], a.nb[1]
                )));
            }
            let src1_ok: &[DType] = match a.dtype {
                DType::F32 => &FLOATS,
                DType::F16 => &[DType::F16, DType::F32],
                DType::BF16 => &[DType::BF16, DType::F32],
                DType::I32 => &[],
                _ => &[DType::F32],
            };
            if !src1_ok.contains(&b.dtype) {
                return Err(c.no(format!(
                    "src0 '{}' is {} and src1 '{}' is {}; ggml's CPU mul_mat converts src1 \
                     only from f32 (or widens f16/bf16 for an f32 src0)",
                    a.name, a.dtype, b.name, b.dtype
                )));
            }
            GGML_OP_MUL_MAT
        }
        Op::SoftMax { scale, max_bias } => {
            c.dtype(0, "src0", &[DType::F32])?;
            c.rows_packed(0, "src0")?;
            if srcs.len() == 2 {
                c.dtype(1, "mask (src1)", &[DType::F32, DType::F16])?;
                c.rows_packed(1, "mask (src1)")?;
            }
            p[0] = f32_param(scale);
            p[1] = f32_param(max_bias);
            GGML_OP_SOFT_MAX
        }
        Op::Rope(r) => {
            c.dtype(0, "src0", &[DType::F32, DType::F16])?;
            c.rows_packed(0, "src0")?;
            c.dtype(1, "positions (src1)", &[DType::I32])?;
            c.rows_packed(1, "positions (src1)")?;
            let int = |v: u32, what: &str| {
                i32::try_from(v).map_err(|_| c.no(format!("{what} {v} exceeds ggml's i32")))
            };
            p[1] = int(r.n_dims, "n_dims")?;
            p[2] = match r.mode {
                RopeMode::Normal => GGML_ROPE_TYPE_NORMAL,
                RopeMode::Neox => GGML_ROPE_TYPE_NEOX,
            };
            p[4] = int(r.n_ctx_orig, "n_ctx_orig")?;
            p[5] = f32_param(r.freq_base);
            p[6] = f32_param(r.freq_scale);
            p[7] = f32_param(r.ext_factor);
            p[8] = f32_param(r.attn_factor);
            p[9] = f32_param(r.beta_fast);
            p[10] = f32_param(r.beta_slow);
            GGML_OP_ROPE
        }
        Op::Cpy => {
            let (a, dst) = (c.src(0)?, c.src(1)?);
            c.dtype(0, "src0", &FLOATS)?;
            if dst.dtype == DType::I32 {
                return Err(c.no(format!(
                    "destination '{}' is i32 (our cpy converts only into float or quantized)",
                    dst.name
                )));
            }
            if dst.dtype.is_quantized() {
                c.contiguous(1, "quantized destination (src1)", 0)?;
                c.rows_packed(0, "src0")?;
                let blck = dst.dtype.block_elems() as i64;
                if a.ne[0] % blck != 0 || a.ne[0] > dst.ne[0] {
                    return Err(c.no(format!(
                        "src0 '{}' rows of {} do not quantize into {} blocks of {} within \
                         destination rows of {} (ggml quantizes src0 row by row)",
                        a.name, a.ne[0], dst.dtype, blck, dst.ne[0]
                    )));
                }
            }
            GGML_OP_CPY
        }
        Op::Cont => {
            let a = c.src(0)?;
            if a.dtype.is_quantized() && !contiguous_from(a, 0) && !rows_packed(a) {
                return Err(c.no(format!(
                    "quantized src0 '{}' is neither contiguous nor made of packed rows",
                    a.name
                )));
            }
            GGML_OP_CONT
        }
        Op::SetRows => {
            let dst = c.src(0)?;
            if dst.dtype == DType::I32 {
                return Err(c.no(format!("destination '{}' is i32", dst.name)));
            }
            c.rows_packed(0, "destination (src0)")?;
            c.dtype(1, "rows (src1)", &[DType::F32, DType::F16])?;
            c.rows_packed(1, "rows (src1)")?;
            c.dtype(2, "indices (src2)", &[DType::I32])?;
            GGML_OP_SET_ROWS
        }
        Op::Concat { dim } => {
            let (a, b) = (c.src(0)?, c.src(1)?);
            if dim > 3 {
                return Err(c.no(format!("dim {dim} is not 0..=3")));
            }
            if a.dtype != b.dtype {
                return Err(c.no(format!(
                    "src0 '{}' is {} and src1 '{}' is {}",
                    a.name, a.dtype, b.name, b.dtype
                )));
            }
            if a.dtype.is_quantized() {
                c.rows_packed(0, "quantized src0")?;
                c.rows_packed(1, "quantized src1")?;
            }
            p[0] = i32::from(dim);
            GGML_OP_CONCAT
        }
        Op::SumRows | Op::Mean => {
            c.dtype(0, "src0", &[DType::F32])?;
            c.rows_packed(0, "src0")?;
            if matches!(op, Op::SumRows) {
                GGML_OP_SUM_ROWS
            } else {
                GGML_OP_MEAN
            }
        }
        Op::Argmax => {
            let a = c.src(0)?;
            c.dtype(0, "src0", &[DType::F32])?;
            c.rows_packed(0, "src0")?;
            if a.ne[2] != 1 || a.ne[3] != 1 {
                return Err(c.no(format!(
                    "src0 '{}' is not a matrix (ggml's argmax reads only its first one)",
                    a.name
                )));
            }
            GGML_OP_ARGMAX
        }
        Op::DiagMaskInf { n_past } => {
            c.dtype(0, "src0", &[DType::F32])?;
            c.contiguous(0, "src0", 0)?;
            p[0] = i32::try_from(n_past)
                .ok()
                .filter(|&n| n >= 0)
                .ok_or_else(|| c.no(format!("n_past {n_past} is not in 0..=2^31-1")))?;
            GGML_OP_DIAG_MASK_INF
        }
    };
    Ok((number, p))
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

/// The plain (non-block) float dtypes.
const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// An f32 parameter as ggml stores it: its bits in an i32 slot.
fn f32_param(x: f32) -> i32 {
    i32::from_le_bytes(x.to_le_bytes())
}

/// For each ggml source slot, the index of our source that fills it: ours
/// in order, except `set_rows`, whose ggml sources are (rows, indices,
/// destination) where ours are (destination, rows, indices).
fn ggml_sources(op: &Op, n: usize) -> Vec<usize> {
    match op {
        Op::SetRows if n == 3 => vec![1, 2, 0],
        _ => (0..n).collect(),
    }
}

/// `nb0` is the dtype's block size: a row's elements are packed.
fn rows_packed(t: &PlanTensor) -> bool {
    t.nb[0] == t.dtype.block_bytes()
}

/// ggml's `ggml_is_contiguous_m_n(t, m, 4)`: dims above `m` follow each
/// other packed (unit dims excepted), dims `1..=m` may be strided, and a row
/// is packed unless it is a single block.
fn contiguous_from(t: &PlanTensor, m: usize) -> bool {
    let blck = t.dtype.block_elems();
    let Ok(ne0) = u64::try_from(t.ne[0]) else {
        return false;
    };
    if ne0 != blck && t.nb[0] != t.dtype.block_bytes() {
        return false;
    }
    // The stride dim i must have to follow the dims below it packed.
    let Some(mut next) = t.dtype.block_bytes().checked_mul(ne0 / blck) else {
        return false;
    };
    for i in 1..4 {
        let Ok(ne) = u64::try_from(t.ne[i]) else {
            return false;
        };
        let after = if i > m {
            if ne != 1 && t.nb[i] != next {
                return false;
            }
            next.checked_mul(ne)
        } else {
            ne.checked_mul(t.nb[i])
        };
        let Some(after) = after else {
            return false;
        };
        next = after;
    }
    true
}

/// Elements divided by the block size (the blocks a packed copy holds).
fn count_blocks(t: &PlanTensor) -> Option<u64> {
    let mut n: u64 = 1;
    for &e in &t.ne {
        n = n.checked_mul(u64::try_from(e).ok()?)?;
    }
    Some(n / t.dtype.block_elems())
}

/// The dtype and layout checks [`node_op`] makes of its sources.
struct Checks<'a> {
    op: &'a Op,
    srcs: &'a [&'a PlanTensor],
}

impl<'a> Checks<'a> {
    fn no(&self, reason: String) -> Unsupported {
        Unsupported::new(self.op, reason)
    }

    fn src(&self, i: usize) -> Result<&'a PlanTensor, Unsupported> {
        self.srcs
            .get(i)
            .copied()
            .ok_or_else(|| self.no(format!("source {i} is missing")))
    }

    fn dtype(&self, i: usize, what: &str, allowed: &[DType]) -> Result<(), Unsupported> {
        let t = self.src(i)?;
        if allowed.contains(&t.dtype) {
            return Ok(());
        }
        let names: Vec<&str> = allowed.iter().map(|d| d.name()).collect();
        Err(self.no(format!(
            "{what} '{}' is {}; ggml's CPU {} takes {}",
            t.name,
            t.dtype,
            self.op.name(),
            names.join(" or ")
        )))
    }

    fn rows_packed(&self, i: usize, what: &str) -> Result<(), Unsupported> {
        let t = self.src(i)?;
        if rows_packed(t) {
            return Ok(());
        }
        Err(self.no(format!(
            "{what} '{}' has nb0 {} where a {} element takes {} (ggml's CPU {} reads rows packed)",
            t.name,
            t.nb[0],
            t.dtype,
            t.dtype.block_bytes(),
            self.op.name()
        )))
    }

    fn contiguous(&self, i: usize, what: &str, m: usize) -> Result<(), Unsupported> {
        let t = self.src(i)?;
        if contiguous_from(t, m) {
            return Ok(());
        }
        let need = if m == 0 {
            "contiguous"
        } else {
            "rows evenly strided by nb1"
        };
        Err(self.no(format!(
            "{what} '{}' (strides {:?}) is not {need}, as ggml's CPU {} requires",
            t.name,
            t.nb,
            self.op.name()
        )))
    }
}

/// Checks the result tensor against what ggml computes for `op` over `srcs`:
/// its dtype and extents, packed strides (a write-into result: exactly its
/// destination's layout), and for a quantized `cont` one of the two copies
/// ggml's CPU backend does correctly for block types.
fn check_result(op: &Op, srcs: &[&PlanTensor], dst: &PlanTensor) -> Result<(), Unsupported> {
    let no = |reason: String| Unsupported::new(op, reason);
    let src = |i: usize| {
        srcs.get(i)
            .copied()
            .ok_or_else(|| no(format!("source {i} is missing")))
    };
    if let Some(k) = op.writes_into_source() {
        let dest = src(k)?;
        if (dest.dtype, dest.ne, dest.nb) != (dst.dtype, dst.ne, dst.nb) {
            return Err(no(format!(
                "result '{}' does not have its destination '{}''s layout",
                dst.name, dest.name
            )));
        }
        return Ok(());
    }
    let a = src(0)?;
    let expect: (DType, Option<[i64; 4]>) = match *op {
        Op::GetRows => {
            let idx = src(1)?;
            let dtype = if a.dtype == DType::I32 {
                DType::I32
            } else {
                DType::F32
            };
            (dtype, Some([a.ne[0], idx.ne[0], idx.ne[1], idx.ne[2]]))
        }
        Op::MulMat => {
            let b = src(1)?;
            (DType::F32, Some([a.ne[1], b.ne[1], b.ne[2], b.ne[3]]))
        }
        Op::Glu { .. } if srcs.len() == 1 => {
            (a.dtype, Some([a.ne[0] / 2, a.ne[1], a.ne[2], a.ne[3]]))
        }
        Op::Concat { dim } => {
            let b = src(1)?;
            let mut ne = a.ne;
            let d = usize::from(dim.min(3));
            ne[d] = ne[d]
                .checked_add(b.ne[d])
                .ok_or_else(|| no("the joined extent overflows".to_string()))?;
            (a.dtype, Some(ne))
        }
        Op::SumRows | Op::Mean => (a.dtype, Some([1, a.ne[1], a.ne[2], a.ne[3]])),
        Op::Argmax => (DType::I32, Some([a.ne[1], 1, 1, 1])),
        Op::Cont => (a.dtype, None),
        _ => (a.dtype, Some(a.ne)),
    };
    if dst.dtype != expect.0 || expect.1.is_some_and(|ne| ne != dst.ne) {
        return Err(no(format!(
            "result '{}' is {} {:?}, but ggml computes {} {:?}",
            dst.name,
            dst.dtype,
            dst.ne,
            expect.0,
            expect.1.unwrap_or(dst.ne)
        )));
    }
    if !contiguous_from(dst, 0) {
        return Err(no(format!(
            "result '{}' (strides {:?}) is not packed",
            dst.name, dst.nb
        )));
    }
    if let Op::Cont = op {
        if count_blocks(a) != count_blocks(dst) {
            return Err(no(format!(
                "src0 '{}' and result '{}' differ in element count",
                a.name, dst.name
            )));
        }
        // ggml copies a block type correctly only as one memcpy of a
        // contiguous source or row by row between equal shapes.
        if a.dtype.is_quantized() && !contiguous_from(a, 0) && !(a.ne == dst.ne && rows_packed(a)) {
            return Err(no(format!(
                "quantized src0 '{}' is strided and the result '{}' has another shape \
                 (ggml's CPU copy mis-sizes block rows there)",
                a.name, dst.name
            )));
        }
    }
    Ok(())
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
    Ok(RpcTensor {
        id,
        dtype: ggml_type(t.dtype),
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

#[cfg(test)]
mod tests {
    use super::*;
    use ir::plan::{DeviceId, PLAN_FORMAT_VERSION, Placement, Stats};
    use ir::{Layout, Role, RopeParams};

    /// `enum ggml_op` of the server's ggml.h, in order (GGML_OP_ prefix dropped).
    const GGML_OPS: [&str; 101] = [
        "NONE",
        "DUP",
        "ADD",
        "ADD_ID",
        "ADD1",
        "ACC",
        "SUB",
        "MUL",
        "DIV",
        "SQR",
        "SQRT",
        "LOG",
        "SIN",
        "COS",
        "SUM",
        "SUM_ROWS",
        "CUMSUM",
        "MEAN",
        "ARGMAX",
        "COUNT_EQUAL",
        "REPEAT",
        "REPEAT_BACK",
        "CONCAT",
        "SILU_BACK",
        "NORM",
        "RMS_NORM",
        "RMS_NORM_BACK",
        "GROUP_NORM",
        "L2_NORM",
        "MUL_MAT",
        "MUL_MAT_ID",
        "OUT_PROD",
        "SCALE",
        "SET",
        "CPY",
        "CONT",
        "RESHAPE",
        "VIEW",
        "PERMUTE",
        "TRANSPOSE",
        "GET_ROWS",
        "GET_ROWS_BACK",
        "SET_ROWS",
        "DIAG",
        "DIAG_MASK_INF",
        "DIAG_MASK_ZERO",
        "SOFT_MAX",
        "SOFT_MAX_BACK",
        "ROPE",
        "ROPE_BACK",
        "CLAMP",
        "CONV_TRANSPOSE_1D",
        "IM2COL",
        "IM2COL_BACK",
        "IM2COL_3D",
        "COL2IM_1D",
        "CONV_2D",
        "CONV_3D",
        "CONV_2D_DW",
        "CONV_TRANSPOSE_2D",
        "POOL_1D",
        "POOL_2D",
        "POOL_2D_BACK",
        "UPSCALE",
        "PAD",
        "PAD_REFLECT_1D",
        "ROLL",
        "ARANGE",
        "TIMESTEP_EMBEDDING",
        "ARGSORT",
        "TOP_K",
        "LEAKY_RELU",
        "TRI",
        "FILL",
        "FLASH_ATTN_EXT",
        "FLASH_ATTN_BACK",
        "SSM_CONV",
        "SSM_SCAN",
        "WIN_PART",
        "WIN_UNPART",
        "GET_REL_POS",
        "ADD_REL_POS",
        "RWKV_WKV6",
        "GATED_LINEAR_ATTN",
        "RWKV_WKV7",
        "SOLVE_TRI",
        "GATED_DELTA_NET",
        "LIGHTNING_INDEXER",
        "DSV4_HC_COMB",
        "DSV4_HC_PRE",
        "DSV4_HC_POST",
        "UNARY",
        "MAP_CUSTOM1",
        "MAP_CUSTOM2",
        "MAP_CUSTOM3",
        "CUSTOM",
        "CROSS_ENTROPY_LOSS",
        "CROSS_ENTROPY_LOSS_BACK",
        "OPT_STEP_ADAMW",
        "OPT_STEP_SGD",
        "GLU",
    ];

    fn position(names: &[&str], name: &str) -> u32 {
        names.iter().position(|n| *n == name).expect(name) as u32
    }

    #[test]
    fn op_numbers_match_the_servers_enum() {
        assert_eq!(GGML_OPS.len() as u32, GGML_OP_COUNT);
        let ours = [
            ("NONE", GGML_OP_NONE),
            ("ADD", GGML_OP_ADD),
            ("SUB", GGML_OP_SUB),
            ("MUL", GGML_OP_MUL),
            ("DIV", GGML_OP_DIV),
            ("SQR", GGML_OP_SQR),
            ("SQRT", GGML_OP_SQRT),
            ("SUM_ROWS", GGML_OP_SUM_ROWS),
            ("MEAN", GGML_OP_MEAN),
            ("ARGMAX", GGML_OP_ARGMAX),
            ("CONCAT", GGML_OP_CONCAT),
            ("NORM", GGML_OP_NORM),
            ("RMS_NORM", GGML_OP_RMS_NORM),
            ("MUL_MAT", GGML_OP_MUL_MAT),
            ("SCALE", GGML_OP_SCALE),
            ("CPY", GGML_OP_CPY),
            ("CONT", GGML_OP_CONT),
            ("GET_ROWS", GGML_OP_GET_ROWS),
            ("SET_ROWS", GGML_OP_SET_ROWS),
            ("DIAG_MASK_INF", GGML_OP_DIAG_MASK_INF),
            ("SOFT_MAX", GGML_OP_SOFT_MAX),
            ("ROPE", GGML_OP_ROPE),
            ("UNARY", GGML_OP_UNARY),
            ("GLU", GGML_OP_GLU),
        ];
        for (name, number) in ours {
            assert_eq!(position(&GGML_OPS, name), number, "GGML_OP_{name}");
        }
        // The values counted by hand from ggml.h.
        assert_eq!(
            (GGML_OP_MUL_MAT, GGML_OP_ROPE, GGML_OP_SOFT_MAX),
            (29, 48, 46)
        );
        assert_eq!((GGML_OP_UNARY, GGML_OP_GLU), (91, 100));

        let unary = [
            "ABS",
            "SGN",
            "NEG",
            "STEP",
            "TANH",
            "ELU",
            "RELU",
            "SIGMOID",
            "GELU",
            "GELU_QUICK",
            "SILU",
            "HARDSWISH",
            "HARDSIGMOID",
            "EXP",
            "EXPM1",
            "SOFTPLUS",
            "GELU_ERF",
        ];
        for (name, n) in [
            ("TANH", GGML_UNARY_OP_TANH),
            ("RELU", GGML_UNARY_OP_RELU),
            ("GELU", GGML_UNARY_OP_GELU),
            ("SILU", GGML_UNARY_OP_SILU),
            ("GELU_ERF", GGML_UNARY_OP_GELU_ERF),
        ] {
            assert_eq!(position(&unary, name) as i32, n, "GGML_UNARY_OP_{name}");
        }
        let glu = ["REGLU", "GEGLU", "SWIGLU", "SWIGLU_OAI", "GEGLU_ERF"];
        for (name, n) in [
            ("GEGLU", GGML_GLU_OP_GEGLU),
            ("SWIGLU", GGML_GLU_OP_SWIGLU),
            ("GEGLU_ERF", GGML_GLU_OP_GEGLU_ERF),
        ] {
            assert_eq!(position(&glu, name) as i32, n, "GGML_GLU_OP_{name}");
        }
    }

    fn tensor(name: &str, dtype: DType, ne: [i64; 4]) -> PlanTensor {
        let nb = Layout::contiguous(dtype, ne).map_or([4, 4, 4, 4], |l| l.nb);
        PlanTensor {
            name: name.to_string(),
            dtype,
            ne,
            nb,
            role: Role::Intermediate,
            device: DeviceId(0),
            placement: Placement::Arena {
                arena: 0,
                offset: 0,
            },
            copy_of: None,
            init: None,
            shard: None,
            part: None,
            reason: String::new(),
        }
    }

    fn plan(tensors: Vec<PlanTensor>) -> Plan {
        Plan {
            format_version: PLAN_FORMAT_VERSION,
            compiler_version: "test".to_string(),
            graph_name: "g".to_string(),
            graph_hash: "0000000000000000".to_string(),
            target_name: "rpc".to_string(),
            options: vec![],
            devices: vec![],
            n_graph_tensors: tensors.len() as u32,
            tensors,
            arenas: vec![],
            kernels: vec![],
            streams: vec![],
            n_events: 0,
            splits: vec![],
            stats: Stats {
                devices: vec![],
                n_splits: 0,
                links: vec![],
                fused_nodes: 0,
                estimated_us: 0.0,
                split_us: vec![],
            },
        }
    }

    /// Tensor `t` lives at 0x1000 + 0x100 t in buffer 7.
    fn locate(t: u32) -> Option<RemoteAddr> {
        Some(RemoteAddr {
            buffer: 7,
            data: 0x1000 + 0x100 * u64::from(t),
        })
    }

    fn bits(x: f32) -> i32 {
        x.to_bits() as i32
    }

    #[test]
    fn rope_parameters_are_ggmls_rope_ext_layout() {
        let x = tensor("q", DType::F32, [8, 2, 3, 1]);
        let pos = tensor("pos", DType::I32, [3, 1, 1, 1]);
        let op = Op::Rope(RopeParams {
            mode: RopeMode::Neox,
            n_dims: 6,
            freq_base: 10000.0,
            freq_scale: 0.5,
            n_ctx_orig: 4096,
            ext_factor: 1.0,
            attn_factor: 1.25,
            beta_fast: 32.0,
            beta_slow: 1.0,
        });
        let (number, p) = node_op(&op, &[&x, &pos]).unwrap();
        assert_eq!(number, GGML_OP_ROPE);
        let want = [
            0,
            6,
            2,
            0,
            4096,
            0x461c_4000, // 10000.0
            0x3f00_0000, // 0.5
            0x3f80_0000, // 1.0
            0x3fa0_0000, // 1.25
            0x4200_0000, // 32.0
            0x3f80_0000, // 1.0
            0,
            0,
            0,
            0,
            0,
        ];
        assert_eq!(p, want);
        assert_eq!(want[5], bits(10000.0));
        let normal = Op::Rope(RopeParams::plain(RopeMode::Normal, 8, 500000.0));
        let (_, p) = node_op(&normal, &[&x, &pos]).unwrap();
        assert_eq!((p[1], p[2], p[5]), (8, 0, bits(500000.0)));
    }

    #[test]
    fn soft_max_scale_and_glu_parameters() {
        let kq = tensor("kq", DType::F32, [4, 3, 2, 1]);
        let mask = tensor("mask", DType::F16, [4, 3, 1, 1]);
        let op = Op::SoftMax {
            scale: 0.125,
            max_bias: 8.0,
        };
        let (number, p) = node_op(&op, &[&kq, &mask]).unwrap();
        assert_eq!(number, GGML_OP_SOFT_MAX);
        assert_eq!(p[..3], [0x3e00_0000, 0x4100_0000, 0]);
        assert_eq!(node_op(&op, &[&kq]).unwrap().1[0], bits(0.125));

        let (number, p) = node_op(
            &Op::Scale {
                scale: -2.0,
                bias: 0.5,
            },
            &[&kq],
        )
        .unwrap();
        assert_eq!((number, p[0], p[1]), (GGML_OP_SCALE, bits(-2.0), bits(0.5)));

        let glu = |swapped| Op::Glu {
            kind: GluKind::GeGluErf,
            swapped,
        };
        let (number, p) = node_op(&glu(true), &[&kq]).unwrap();
        assert_eq!(
            (number, p[0], p[1]),
            (GGML_OP_GLU, GGML_GLU_OP_GEGLU_ERF, 1)
        );
        // Two sources: ggml_glu_split never sets swapped.
        assert_eq!(node_op(&glu(true), &[&kq, &kq]).unwrap().1[1], 0);
        let (number, p) = node_op(&Op::Silu, &[&kq]).unwrap();
        assert_eq!((number, p[0]), (GGML_OP_UNARY, GGML_UNARY_OP_SILU));
        let (number, p) = node_op(&Op::RmsNorm { eps: 1e-6 }, &[&kq]).unwrap();
        assert_eq!((number, p[0]), (GGML_OP_RMS_NORM, bits(1e-6)));
        let (number, p) = node_op(&Op::DiagMaskInf { n_past: 5 }, &[&kq]).unwrap();
        assert_eq!((number, p[0]), (GGML_OP_DIAG_MASK_INF, 5));
        let (number, p) = node_op(&Op::Concat { dim: 2 }, &[&kq, &kq]).unwrap();
        assert_eq!((number, p[0]), (GGML_OP_CONCAT, 2));
        assert_eq!(
            node_op(&Op::Transpose, &[&kq]).unwrap(),
            (GGML_OP_NONE, [0; 16])
        );
    }

    /// x, w -> y = mul_mat(w, x) -> r = reshape(y) -> z = silu(r).
    fn small_plan() -> Plan {
        plan(vec![
            tensor("x", DType::F32, [4, 2, 1, 1]),
            tensor("w", DType::Q8_0, [32, 3, 1, 1]),
            tensor("w32", DType::F32, [4, 3, 1, 1]),
            tensor("y", DType::F32, [3, 2, 1, 1]),
            tensor("r", DType::F32, [6, 1, 1, 1]),
            tensor("z", DType::F32, [6, 1, 1, 1]),
        ])
    }

    #[test]
    fn a_payload_holds_every_record_once_with_distinct_ids() {
        let p = small_plan();
        let s0 = step_records(&p, 0, &Op::MulMat, 3, &[2, 0], &locate).unwrap();
        let s1 = step_records(&p, 1, &Op::Reshape, 4, &[3], &locate).unwrap();
        let s2 = step_records(&p, 2, &Op::Silu, 5, &[4], &locate).unwrap();
        assert!(s1.is_empty() && s1.leafs.is_empty());
        let payload = graph_payload(3, &[&s0, &s1, &s2]);

        let u32_at = |at: usize| u32::from_le_bytes(payload[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(payload[at..at + 8].try_into().unwrap());
        assert_eq!(u32_at(0), 3, "device");
        let n_nodes = u32_at(4) as usize;
        assert_eq!(n_nodes, 2, "the reshape sends no node");
        let nodes: Vec<u64> = (0..n_nodes).map(|i| u64_at(8 + 8 * i)).collect();
        let at = 8 + 8 * n_nodes;
        let n_tensors = u32_at(at) as usize;
        assert_eq!(n_tensors, 2 + 3, "two nodes, three leafs");
        assert_eq!(payload.len(), at + 4 + n_tensors * RpcTensor::BYTES);
        let records: Vec<RpcTensor> = (0..n_tensors)
            .map(|i| RpcTensor::decode(&payload[at + 4 + i * RpcTensor::BYTES..]).unwrap())
            .collect();

        let ids: HashSet<u64> = records.iter().map(|r| r.id).collect();
        assert_eq!(ids.len(), n_tensors, "ids are distinct");
        assert!(!ids.contains(&0));
        for r in &records {
            for &s in r.src.iter().filter(|&&s| s != 0) {
                assert!(
                    ids.contains(&s),
                    "{} names source {s}, not in the payload",
                    r.name
                );
            }
            assert_eq!((r.view_src, r.buffer), (0, 7));
        }
        let node = |id: u64| records.iter().find(|r| r.id == id).unwrap();
        let (mm, silu) = (node(nodes[0]), node(nodes[1]));
        assert_eq!((mm.op, mm.name.as_str()), (GGML_OP_MUL_MAT, "y"));
        assert_eq!(mm.flags, GGML_TENSOR_FLAG_OUTPUT | GGML_TENSOR_FLAG_COMPUTE);
        assert_eq!((mm.ne, mm.nb), ([3, 2, 1, 1], [4, 12, 24, 24]));
        assert_eq!((mm.data, mm.use_count), (0x1300, 0));
        let src0 = node(mm.src[0]);
        assert_eq!((src0.name.as_str(), src0.op, src0.use_count), ("w32", 0, 1));
        assert_eq!(node(mm.src[1]).name, "x");
        assert_eq!(mm.src[2], 0);
        assert_eq!(
            (silu.op, silu.op_params[0]),
            (GGML_OP_UNARY, GGML_UNARY_OP_SILU)
        );
        // The reshape's result is read at its own address, as a leaf.
        let r = node(silu.src[0]);
        assert_eq!((r.name.as_str(), r.data, r.ne), ("r", 0x1400, [6, 1, 1, 1]));
        // The same plan tensor as a node and then as a leaf gets two ids.
        let y_leaf = step_records(&p, 9, &Op::Cont, 5, &[3], &locate).unwrap();
        assert_ne!(y_leaf.leafs[0].id, mm.id);
        assert_eq!(y_leaf.leafs[0].data, mm.data);
        assert_eq!(graph_payload(0, &[&s1]).len(), 12, "views send nothing");
    }

    #[test]
    fn set_rows_sends_ggmls_source_order_and_writes_its_destination() {
        let mut cache = tensor("cache", DType::F16, [8, 16, 1, 1]);
        cache.role = Role::State;
        let mut written = cache.clone();
        written.name = "cache.set".to_string();
        written.placement = Placement::View { of: 0, offset: 0 };
        let p = plan(vec![
            cache,
            tensor("k", DType::F32, [8, 3, 1, 1]),
            tensor("rows", DType::I32, [3, 1, 1, 1]),
            written,
        ]);
        let at = |t: u32| {
            // The result aliases the cache.
            locate(if t == 3 { 0 } else { t })
        };
        let g = step_records(&p, 4, &Op::SetRows, 3, &[0, 1, 2], &at).unwrap();
        let node = g.node.as_ref().unwrap();
        assert_eq!(node.op, GGML_OP_SET_ROWS);
        let name = |id: u64| &g.leafs.iter().find(|l| l.id == id).unwrap().name;
        assert_eq!(
            [name(node.src[0]), name(node.src[1]), name(node.src[2])],
            ["k", "rows", "cache"]
        );
        assert_eq!(node.data, 0x1000);
        // A result elsewhere than its destination is refused.
        let e = step_records(&p, 4, &Op::SetRows, 3, &[0, 1, 2], &locate).unwrap_err();
        assert!(e.reason.contains("destination's address"), "{e}");
    }

    #[test]
    fn collectives_and_unfit_tensors_are_refused() {
        let p = small_plan();
        let reduce = Op::AllReduceSum {
            group: 0,
            rank: 0,
            ranks: 2,
        };
        let e = step_records(&p, 0, &reduce, 5, &[4, 3], &locate).unwrap_err();
        assert_eq!(e.op, "all_reduce_sum");
        let gather = Op::AllGather {
            dim: 0,
            group: 1,
            rank: 1,
            ranks: 2,
        };
        let x = tensor("x", DType::F32, [4, 2, 1, 1]);
        assert!(node_op(&gather, &[&x, &x]).is_err());

        // Extents and strides beyond a record's u32.
        let mut big = tensor("big", DType::F32, [1 << 33, 1, 1, 1]);
        big.nb = [4, 1 << 35, 1 << 35, 1 << 35];
        let out = tensor("out", DType::F32, [1 << 33, 1, 1, 1]);
        let p = plan(vec![big, out]);
        let e = step_records(&p, 0, &Op::Sqr, 1, &[0], &locate).unwrap_err();
        assert!(e.reason.contains("extent 8589934592"), "{e}");
        let mut strided = tensor("s", DType::F32, [4, 2, 1, 1]);
        strided.nb = [4, 1 << 32, 1 << 33, 1 << 33];
        let p = plan(vec![strided, tensor("o", DType::F32, [4, 2, 1, 1])]);
        let e = step_records(&p, 0, &Op::Sqr, 1, &[0], &locate).unwrap_err();
        assert!(e.reason.contains("u32"), "{e}");

        // A tensor the server does not hold, and indices outside the plan.
        let p = small_plan();
        let nowhere = |_| None;
        assert!(step_records(&p, 0, &Op::Sqr, 5, &[4], &nowhere).is_err());
        assert!(step_records(&p, 0, &Op::Sqr, 99, &[4], &locate).is_err());
        assert!(step_records(&p, 0, &Op::Sqr, 5, &[4, 4], &locate).is_err());
        assert!(step_records(&p, usize::MAX, &Op::Sqr, 5, &[4], &locate).is_err());
    }

    #[test]
    fn dtypes_and_layouts_the_cpu_backend_lacks_are_refused() {
        let f32m = tensor("a", DType::F32, [32, 4, 1, 1]);
        let f16m = tensor("h", DType::F16, [32, 4, 1, 1]);
        let bf16m = tensor("b", DType::BF16, [32, 4, 1, 1]);
        let q = tensor("q", DType::Q4_0, [32, 4, 1, 1]);
        let refused = |op: Op, srcs: &[&PlanTensor]| node_op(&op, srcs).is_err();
        assert!(refused(
            Op::Scale {
                scale: 2.0,
                bias: 0.0
            },
            &[&f16m]
        ));
        assert!(refused(
            Op::SoftMax {
                scale: 1.0,
                max_bias: 0.0
            },
            &[&f16m]
        ));
        assert!(refused(Op::RmsNorm { eps: 1e-5 }, &[&bf16m]));
        assert!(refused(Op::RmsNorm { eps: -1.0 }, &[&f32m]));
        assert!(refused(Op::MulMat, &[&q, &f16m]));
        assert!(refused(Op::MulMat, &[&f16m, &bf16m]));
        assert!(!refused(Op::MulMat, &[&q, &f32m]));
        assert!(!refused(Op::MulMat, &[&f32m, &f16m]));
        assert!(refused(Op::Add, &[&f32m, &f16m]));
        assert!(!refused(Op::Add, &[&f16m, &f32m]));
        assert!(refused(Op::DiagMaskInf { n_past: -1 }, &[&f32m]));
        assert!(refused(
            Op::Rope(RopeParams::plain(RopeMode::Normal, 32, 1e4)),
            &[&bf16m, &tensor("p", DType::I32, [1, 1, 1, 1])]
        ));
        assert!(refused(Op::SetRows, &[&f16m, &bf16m, &f32m]));
        // A permuted source (elements strided within a row).
        let mut t = f32m.clone();
        t.ne = [4, 32, 1, 1];
        t.nb = [128, 4, 512, 512];
        assert!(refused(Op::Silu, &[&t]));
        assert!(!refused(Op::Cont, &[&t]));
        assert!(!refused(Op::Norm { eps: 0.0 }, &[&t]));
        // glu rows must follow each other by nb1 alone.
        let mut gaps = tensor("g", DType::F32, [4, 2, 3, 1]);
        gaps.nb = [4, 16, 64, 192];
        assert!(refused(
            Op::Glu {
                kind: GluKind::SwiGlu,
                swapped: false
            },
            &[&gaps]
        ));
    }

    #[test]
    fn quantized_copies_are_checked_against_the_result() {
        // A strided quantized source packed into another shape is refused;
        // into its own shape (row by row) it is fine.
        let mut src = tensor("w", DType::Q8_0, [32, 2, 2, 1]);
        src.nb = [34, 68, 272, 544];
        let p = plan(vec![
            src,
            tensor("flat", DType::Q8_0, [64, 2, 1, 1]),
            tensor("same", DType::Q8_0, [32, 2, 2, 1]),
        ]);
        assert!(step_records(&p, 0, &Op::Cont, 1, &[0], &locate).is_err());
        assert!(step_records(&p, 0, &Op::Cont, 2, &[0], &locate).is_ok());
        // Copying f32 rows into a q8_0 tensor: rows must be whole blocks.
        let mut dest = tensor("kq", DType::Q8_0, [64, 1, 1, 1]);
        dest.role = Role::State;
        let p = plan(vec![
            tensor("v", DType::F32, [16, 4, 1, 1]),
            dest.clone(),
            tensor("v32", DType::F32, [32, 2, 1, 1]),
        ]);
        let mut written = dest;
        written.name = "kq.cpy".to_string();
        let mut p2 = p;
        p2.tensors.push(written);
        // The result aliases its destination.
        let at = |t: u32| locate(if t == 3 { 1 } else { t });
        assert!(step_records(&p2, 0, &Op::Cpy, 3, &[0, 1], &at).is_err());
        let g = step_records(&p2, 0, &Op::Cpy, 3, &[2, 1], &at).unwrap();
        assert_eq!(g.node.unwrap().src[1], g.leafs[1].id);
    }
}

//! ggml's numbers for the server's build (101 ops): op, unary-op, glu-op,
//! rope-mode and tensor-flag values as `ggml.h` numbers them (checked by a
//! test against the whole op list).

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
/// `GGML_OP_MUL_MAT_ID` (sources: experts, activations, ids).
pub const GGML_OP_MUL_MAT_ID: u32 = 30;
/// `GGML_OP_CLAMP` (params: min, max).
pub const GGML_OP_CLAMP: u32 = 50;
/// `GGML_OP_ARGSORT` (params: order, 1 descending).
pub const GGML_OP_ARGSORT: u32 = 69;
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
/// `GGML_OP_ROPE` (params: see [`super::node_op`]).
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

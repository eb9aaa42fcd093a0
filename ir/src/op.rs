//! The closed set of operations, with typed parameters and ggml's semantics.
//!
//! Every consumer matches `Op` exhaustively: adding a variant is meant to break
//! the build everywhere a decision about it must be made. Shape and dtype rules
//! live in [`crate::rules`]; numeric semantics in `kernels::reference`.

use serde::{Deserialize, Serialize};

/// The pattern of every elementwise op of one source, the one list of them:
/// `match op { unary_op!() => .., _ => .. }` in `ir::rules`, the compiler's
/// cost and liveness models and the CPU kernels' dispatch. A new unary op is
/// added here, to [`Op::unary_fn`] and to [`crate::plan::UnaryFn`] (whose matches are
/// exhaustive, so every evaluator is then told by the compiler).
#[macro_export]
macro_rules! unary_op {
    () => {
        $crate::Op::Scale { .. }
            | $crate::Op::Sqr
            | $crate::Op::Sqrt
            | $crate::Op::Silu
            | $crate::Op::Gelu
            | $crate::Op::GeluErf
            | $crate::Op::Relu
            | $crate::Op::Tanh
            | $crate::Op::Clamp { .. }
    };
}

/// Which rotation pairs rope uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RopeMode {
    /// ggml mode 0 (llama): rotates adjacent pairs `(x[2i], x[2i+1])`.
    Normal,
    /// ggml mode 2 (GPT-NeoX, qwen2): rotates `(x[i], x[i + n_dims/2])`.
    Neox,
}

/// Rotary position embedding parameters (ggml_rope_ext).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RopeParams {
    /// Pairing of rotated elements.
    pub mode: RopeMode,
    /// Number of leading elements of each row that rotate; the rest pass through.
    pub n_dims: u32,
    /// Base of the frequency ladder: theta_i = pos * base^(-2i/n_dims).
    pub freq_base: f32,
    /// Position scale (linear rope scaling); 1 for none.
    pub freq_scale: f32,
    /// Original training context for YaRN; 0 when unused.
    pub n_ctx_orig: u32,
    /// YaRN extrapolation mix; 0 disables YaRN.
    pub ext_factor: f32,
    /// Magnitude scale applied to sin and cos.
    pub attn_factor: f32,
    /// YaRN ramp start (in rotations).
    pub beta_fast: f32,
    /// YaRN ramp end (in rotations).
    pub beta_slow: f32,
}

impl RopeParams {
    /// Plain rope (no scaling, no YaRN), as llama-family models use.
    pub fn plain(mode: RopeMode, n_dims: u32, freq_base: f32) -> RopeParams {
        RopeParams {
            mode,
            n_dims,
            freq_base,
            freq_scale: 1.0,
            n_ctx_orig: 0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }
}

/// The activation of a gated linear unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GluKind {
    /// silu(gate) * up (llama FFN).
    SwiGlu,
    /// gelu(gate) * up, tanh approximation.
    GeGlu,
    /// gelu(gate) * up, exact erf form.
    GeGluErf,
}

/// One operation of the graph.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// Rows of src0 selected by the I32 indices in src1 (embedding lookup).
    GetRows,
    /// src0 + src1, src1 broadcast over src0.
    Add,
    /// src0 - src1, broadcast.
    Sub,
    /// src0 * src1, broadcast.
    Mul,
    /// src0 / src1, broadcast.
    Div,
    /// src0 * scale + bias.
    Scale {
        /// Multiplier.
        scale: f32,
        /// Added after scaling.
        bias: f32,
    },
    /// x^2.
    Sqr,
    /// sqrt(x).
    Sqrt,
    /// x * sigmoid(x).
    Silu,
    /// gelu, tanh approximation.
    Gelu,
    /// gelu, exact: 0.5 x (1 + erf(x / sqrt 2)).
    GeluErf,
    /// max(x, 0).
    Relu,
    /// tanh(x).
    Tanh,
    /// Gated linear unit. With one source the row is split in halves
    /// (gate = first half unless `swapped`); with two, src0 is the gate, src1 the up.
    Glu {
        /// Activation applied to the gate.
        kind: GluKind,
        /// One-source form: the gate is the second half.
        swapped: bool,
    },
    /// x / sqrt(mean(x^2) + eps) over each row.
    RmsNorm {
        /// Added to the mean square.
        eps: f32,
    },
    /// (x - mean) / sqrt(var + eps) over each row.
    Norm {
        /// Added to the variance.
        eps: f32,
    },
    /// src1 x src0^T per matrix: result[i, j] = dot(src0 row i, src1 row j),
    /// src0 broadcast over src1's dims 2 and 3.
    MulMat,
    /// softmax(src0 * scale + mask) over each row; the optional src1 is the mask.
    SoftMax {
        /// Applied to the logits before the mask.
        scale: f32,
        /// ALiBi maximum bias; 0 disables ALiBi.
        max_bias: f32,
    },
    /// Rotary position embedding of src0 [head_dim, n_head, n_tokens] at the
    /// I32 positions in src1 `[n_tokens]`.
    Rope(RopeParams),
    /// Copies src0 into src1's memory, converting dtype; the result is a view of src1.
    Cpy,
    /// Packs a strided tensor into contiguous memory, in element order; the
    /// result may take another shape with the same element count (ggml_cont_4d).
    Cont,
    /// Writes the rows of src1 into src0 at the row indices in src2; the result
    /// is a view of src0.
    SetRows,
    /// A view of src0's memory; the tensor's own ne and nb give its shape.
    View {
        /// Byte offset from the start of src0's view.
        offset: u64,
    },
    /// A contiguous tensor seen with another shape (same element count).
    Reshape,
    /// Axes moved: source axis i becomes result axis `axes[i]`.
    Permute {
        /// A permutation of 0..4.
        axes: [u8; 4],
    },
    /// Swaps axes 0 and 1.
    Transpose,
    /// src0 and src1 joined along `dim`.
    Concat {
        /// Axis to join along.
        dim: u8,
    },
    /// Sum of each row: result ne0 = 1.
    SumRows,
    /// Mean of each row: result ne0 = 1.
    Mean,
    /// Index of the largest element of each row (I32).
    Argmax,
    /// Sets element (i, j) of each matrix to -inf where i > n_past + j.
    DiagMaskInf {
        /// Positions already in the cache before this batch.
        n_past: i64,
    },
    /// One participant's share of an all-reduce: the f32 sum of every source
    /// (the parts, one per device holding a partial sum), added in source
    /// order from the first, so every participant gets the same bits. The
    /// participants of `group` are ranks `0..ranks`, each on its own device,
    /// all with the same sources.
    AllReduceSum {
        /// Which collective this participant belongs to.
        group: u32,
        /// This participant's index in the group.
        rank: u32,
        /// How many participants the group has.
        ranks: u32,
    },
    /// One participant's share of an all-gather: the sources (the parts,
    /// one per device holding a slice) joined along `dim` in source order.
    /// Group, rank and ranks as for [`Op::AllReduceSum`].
    AllGather {
        /// Axis the parts are joined along.
        dim: u8,
        /// Which collective this participant belongs to.
        group: u32,
        /// This participant's index in the group.
        rank: u32,
        /// How many participants the group has.
        ranks: u32,
    },
    /// One participant's share of a reduce-scatter: the f32 sum of every
    /// source (full-shape partial sums, one per device holding one), added in
    /// source order as for [`Op::AllReduceSum`], of which this participant
    /// keeps only `len` values along `dim` from `start`. The participants'
    /// slices tile the axis in rank order (the checker proves it), so an
    /// all-gather of their results is the all-reduce's result, bit for bit.
    /// Group, rank and ranks as for [`Op::AllReduceSum`].
    ReduceScatterSum {
        /// Axis the sum is cut along.
        dim: u8,
        /// First index along `dim` this participant keeps.
        start: i64,
        /// How many indices along `dim` it keeps (at least 1).
        len: i64,
        /// Which collective this participant belongs to.
        group: u32,
        /// This participant's index in the group.
        rank: u32,
        /// How many participants the group has.
        ranks: u32,
    },
    /// One device's part of a `get_rows` from a table cut along its rows
    /// (tensor parallelism): src0 holds rows `[start, start + src0.ne1)` of
    /// the full table; an index in that range gives its row, any other
    /// index a row of zeros. Exactly one device's part holds each row, so the
    /// parts add up to the whole `get_rows` exactly: the result is a partial
    /// sum. The result is f32.
    GetRowsPart {
        /// The full table's row that src0's first row is.
        start: i64,
    },
    /// min(max(x, min), max), elementwise.
    Clamp {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// The indices (I32) that sort each row of src0: ascending, or descending
    /// when `descending` (ggml's argsort; equal values keep index order). The
    /// first k of a descending row are a top-k selection.
    Argsort {
        /// Largest first.
        descending: bool,
    },
    /// A mixture of experts' product (ggml's `mul_mat_id`): src0 holds one
    /// matrix per expert `[k, n, n_expert]`, src1 the activations `[k, b1, t]`
    /// (b1 is 1 or the number of experts used per token), src2 the I32 expert
    /// ids `[n_used, t]`. Result `[n, n_used, t]`: slot `e` of token `t` is
    /// expert `ids[e, t]`'s matrix times src1 row `e % b1` of token `t`.
    MulMatId,
    /// One device's part of a `mul_mat_id` whose experts are shared out
    /// whole between devices (expert parallelism): src0 holds experts
    /// `[first, first + src0.ne2)` of `experts`; a slot routed to one of them
    /// gets its product as in [`Op::MulMatId`], a slot routed to another
    /// expert a row of zeros, and an id outside `0..experts` is refused as
    /// `mul_mat_id` refuses it. Parts holding every expert once add up to the
    /// whole `mul_mat_id` exactly (each row is computed by one part, zeros
    /// elsewhere): the result is a partial sum. The result is f32.
    MulMatIdPart {
        /// The full expert set's expert that src0's first expert is.
        first: i64,
        /// How many experts the full set has (the ids' range).
        experts: i64,
    },
}

/// Who takes part in a collective, as [`Op::collective`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CollectiveRank {
    /// The collective's number in its plan.
    pub group: u32,
    /// This participant's index.
    pub rank: u32,
    /// How many participants the collective has.
    pub ranks: u32,
}

impl Op {
    /// The op's name as written in errors and summaries (`mul_mat`, `rope`, ...).
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// Ops whose result is only a new way of looking at a source's bytes:
    /// they run no kernel and own no memory.
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Op::View { .. } | Op::Reshape | Op::Permute { .. } | Op::Transpose
        )
    }

    /// Ops that write into a destination source's memory (ggml returns a
    /// view of that destination): the index of that destination source.
    pub fn writes_into_source(&self) -> Option<usize> {
        match self {
            Op::Cpy => Some(1),
            Op::SetRows => Some(0),
            _ => None,
        }
    }

    /// For a collective's participant: its group, rank and group size.
    /// Collectives are the only steps that read tensors on other devices
    /// (in place, where the devices share memory).
    pub fn collective(&self) -> Option<CollectiveRank> {
        match *self {
            Op::AllReduceSum { group, rank, ranks }
            | Op::AllGather {
                group, rank, ranks, ..
            }
            | Op::ReduceScatterSum {
                group, rank, ranks, ..
            } => Some(CollectiveRank { group, rank, ranks }),
            _ => None,
        }
    }

    /// Elementwise ops of one source (same shape in and out): [`unary_op!`].
    pub fn is_unary(&self) -> bool {
        matches!(self, unary_op!())
    }

    /// Elementwise ops of two sources with src1 broadcast over src0.
    pub fn is_binary(&self) -> bool {
        matches!(self, Op::Add | Op::Sub | Op::Mul | Op::Div)
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

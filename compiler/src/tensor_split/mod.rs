//! Pass `tensor-split` (`ggplan compile --split-mode row`, `--split REGEX=AXIS`):
//! one model split over several CPU devices, every device holding a slice of
//! each large matrix (tensor parallelism; ggml's meta backend, decided here
//! ahead of time).
//!
//! # What it does
//! The graph is rewritten into one whose every tensor lives on one device,
//! plus the device of every tensor (this pass replaces `assign`); the rest of
//! the pipeline (schedule, split, fuse, emit, sync, check) plans it as any
//! multi-device graph. Each value of the original graph gets a *split
//! state*, as the seed's meta backend defines them:
//! - **whole**: one tensor (inputs, constants, weights and state not split,
//!   and what only they produce), computed once on device 0, copied where read;
//! - **mirrored**: a full copy on every device, each computed there (the
//!   residual stream after an all-reduce, norms of it);
//! - **split** along an axis with one extent per device (0: no part there);
//! - **segmented**: segments along an axis, each split on its own (the
//!   seed's `n_segments`: a fused QKV matrix's Q, K and V rows, and its
//!   products; `rewrite/segments.rs`);
//! - **partial**: every device holds a full-shape partial sum.
//!
//! Leafs get their states from [`rules`]; a split weight becomes one weight
//! shard per device (`NAME#d`, an `ir::WeightShard` of the stored tensor);
//! a split state one state tensor per device. Whole weights and constants
//! read on other devices are mirrored as their own leafs there (weights as
//! full-range shards), so no weight is copied per run.
//!
//! # Rules per op (`rewrite/`)
//! Elementwise ops keep a split (a whole operand is sliced by a view), and a
//! partial sum times a whole value (the router's weights) stays partial; row
//! ops (norms, soft_max, rope, reductions) keep a split that is not along
//! their rows; `reshape`, shaped `cont`, `permute` and strided `view`s move
//! the axis (`axis.rs`); `set_rows` writes a split cache part by part;
//! `mul_mat` maps (rows-split weight, mirrored input) to split output rows,
//! (input-split weight, input split alike or whole and sliced) to a partial
//! sum, and heads-split
//! batched products (GQA: query heads per KV head kept together) to
//! heads-split results; `mul_mat_id` over experts shared out whole (axis 2)
//! to *routed* parts that GLUs and products keep (`rewrite/experts.rs`,
//! expert parallelism; `--experts` chooses it or rows for `--split-mode
//! row`). When no rule fits:
//! 1. with reduce-scatters allowed, a partial sum that the op could read cut
//!    along an axis but the rows (the tokens of `[hidden, tokens]`: residual
//!    adds, norms, their scales) is cut there by a **reduce-scatter** (one
//!    `reduce_scatter_sum` participant per device, each keeping its slice of
//!    the sum), and the op keeps the cut;
//! 2. an op with a split weight gets its other operands whole (below) and
//!    keeps the weight's split (so a product after a cut gathers its input,
//!    never its weight);
//! 3. otherwise the operands are made whole on every device: a partial sum
//!    by an **all-reduce** (one `all_reduce_sum` participant per device,
//!    reading the parts in place), a split value by an **all-gather**; then
//!    the op runs on every device (mirrored), or once when all its operands
//!    are whole.
//!
//! A graph output is made whole on device 0 under its own name (a
//! one-participant gather or reduce when it was split).
//!
//! # Which collectives (`--collectives`)
//! A reduce-scatter and an all-gather move the bytes of one all-reduce but
//! cost a second synchronisation; in return what runs between them (residual
//! add, norm, scale) runs on a slice of the tokens instead of whole on every
//! device, and holds a slice. `auto` rewrites the graph both ways and keeps
//! the one the cost model finishes sooner (`estimate.rs`); one-token steps
//! have no cut and get all-reduces either way.
//!
//! With `auto` and `--split-mode row` the cost model also decides which parts
//! of the model are split at all: each of attention, FFN, token tables and
//! output head is kept whole (computed once, or by token slices with its
//! weights mirrored) when the plan is then estimated clearly sooner
//! ([`KEEP_WHOLE_GAIN`]), as with slow links or tiny matrices. Attention with
//! a KV cache is always split: the cache's layout is shared by every plan of
//! a generation, whatever its token count. A part kept whole says so in its
//! leafs' reasons (`ggplan explain`).
//!
//! Every new tensor is annotated with what it holds of the original value
//! (`ir::plan::SplitPart`: a slice, a mirror, a partial sum), which the plan
//! records and the checker's partial-sum rule reads.
//!
//! **Invariants** of the result: a verified graph computing the original's
//! outputs under their names from the same inputs; every original leaf that
//! stays whole keeps its name; every collective's parts are packed f32 on
//! CPU devices of one host; the same graph, target and options give the same
//! graph (no hash maps are iterated).

mod axis;
mod choose;
mod estimate;
mod rewrite;
pub mod rules;

pub use rules::{LeafSplit, SplitRule, partition};

use crate::Error;
use crate::assign::Assignment;
use crate::target::Target;
use ir::Graph;
use std::collections::BTreeMap;

/// How to split (`--split-mode row` or `--split` rules, `--tensor-split`).
#[derive(Clone, Debug, Default)]
pub struct TensorSplitOptions {
    /// Share of each device (`--tensor-split 3,1`); empty: equal shares.
    pub shares: Vec<f64>,
    /// Explicit rules; empty: the block roles of `--split-mode row`.
    pub rules: Vec<SplitRule>,
    /// How partial sums are completed (`--collectives`).
    pub collectives: Collectives,
    /// How `--split-mode row` cuts a mixture of experts (`--experts`).
    pub experts: ExpertSplit,
}

/// How `--split-mode row` cuts each block's stacked experts (`--experts
/// auto|rows|whole`). Explicit `--split` rules say it themselves (axis 2 of
/// an expert tensor shares its experts out whole).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExpertSplit {
    /// The sooner of the two below by the cost model's estimate of the whole
    /// plan; rows on a tie (ggml's meta backend's way).
    #[default]
    Auto,
    /// Every expert alike, by rows (gate/up) and along K (down), as ggml's
    /// meta backend cuts them: each device computes its rows of every
    /// routed expert.
    Rows,
    /// Whole experts per device (expert parallelism): each device computes
    /// the tokens routed to its own experts (`rewrite/experts.rs`).
    Whole,
}

impl ExpertSplit {
    /// The choice as `--experts` spells it.
    pub fn name(self) -> &'static str {
        match self {
            ExpertSplit::Auto => "auto",
            ExpertSplit::Rows => "rows",
            ExpertSplit::Whole => "whole",
        }
    }

    /// Parses `auto`, `rows` or `whole`.
    pub fn parse(text: &str) -> Result<ExpertSplit, String> {
        match text {
            "auto" => Ok(ExpertSplit::Auto),
            "rows" => Ok(ExpertSplit::Rows),
            "whole" => Ok(ExpertSplit::Whole),
            _ => Err(format!(
                "'{text}' is not an expert split (auto, rows, whole)"
            )),
        }
    }
}

/// Which collective completes a partial sum that an op cannot read as parts
/// (`--collectives auto|all-reduce|reduce-scatter`), and with `auto` and
/// `--split-mode row`, which parts of the model are split at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Collectives {
    /// The cheaper of the two below by the cost model's estimate of the whole
    /// plan (`estimate.rs`); all-reduce on a tie. With `--split-mode row` the
    /// attention (without a KV cache), the FFN, the token tables and the
    /// output head are each kept whole when the plan is then estimated at
    /// least [`KEEP_WHOLE_GAIN`] sooner.
    #[default]
    Auto,
    /// An all-reduce: every device gets the whole sum, and what reads it runs
    /// on every device (mirrored). Every part the mode names is split.
    AllReduce,
    /// A reduce-scatter where the reader keeps a cut along some axis but the
    /// rows (tokens, for a `[hidden, tokens]` activation): every device sums
    /// and keeps its slice, the element-wise and norm steps after it run on
    /// slices, and an all-gather makes the value whole where a product needs
    /// it (an all-reduce elsewhere, a one-token decode included). Every part
    /// the mode names is split.
    ReduceScatter,
}

impl Collectives {
    /// The choice as `--collectives` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Collectives::Auto => "auto",
            Collectives::AllReduce => "all-reduce",
            Collectives::ReduceScatter => "reduce-scatter",
        }
    }

    /// Parses `auto`, `all-reduce` or `reduce-scatter`.
    pub fn parse(text: &str) -> Result<Collectives, String> {
        match text {
            "auto" => Ok(Collectives::Auto),
            "all-reduce" => Ok(Collectives::AllReduce),
            "reduce-scatter" => Ok(Collectives::ReduceScatter),
            _ => Err(format!(
                "'{text}' is not a collective choice (auto, all-reduce, reduce-scatter)"
            )),
        }
    }
}

/// The rewritten graph and where each of its tensors lives.
#[derive(Clone, Debug)]
pub struct Sharded {
    /// The graph with shards, per-device nodes and collectives.
    pub graph: Graph,
    /// Device and reason per tensor of `graph`.
    pub assignment: Assignment,
}

/// How much sooner (a fraction of the estimate) a plan must be estimated
/// with a part of the model kept whole before the part is kept whole. The
/// estimate is a roofline: on a 2-core Xeon the example graphs' FFN (bert2l)
/// and output head (llama2l), estimated 4% and 0.3% sooner whole, measured
/// slower whole than split (fastest of 30 runs, two alternations: bert2l
/// 10–28%, llama2l 2–5%), and a whole weight read by token slices is
/// mirrored on every device, so small margins are not trusted.
pub const KEEP_WHOLE_GAIN: f64 = 0.10;

/// Splits `graph` over every device of `target` (all CPU devices).
pub fn split_tensors(
    graph: &Graph,
    target: &Target,
    options: &TensorSplitOptions,
) -> Result<Sharded, Error> {
    let n = target.devices.len();
    if let Some(d) = target.devices.iter().find(|d| !d.is_cpu()) {
        return Err(rules::split_error(
            "--split-mode row",
            "",
            &format!(
                "device '{}' is not a CPU device; collectives read parts in place, so \
                 every device of a tensor split must share the host's memory",
                d.name
            ),
        ));
    }
    if n < 2 {
        return Err(rules::split_error(
            "--split-mode row",
            "",
            &format!(
                "target '{}' has one device; a tensor split needs two or more",
                target.name
            ),
        ));
    }
    let shares = if options.shares.is_empty() {
        vec![1.0; n]
    } else if options.shares.len() != n || options.shares.iter().any(|s| s.is_nan() || *s <= 0.0) {
        return Err(rules::split_error(
            "--tensor-split",
            "",
            &format!(
                "{} shares for {n} devices (give one positive share per device)",
                options.shares.len()
            ),
        ));
    } else {
        options.shares.clone()
    };
    let leafs = if options.rules.is_empty() {
        rules::row_mode(graph, &shares)?
    } else {
        rules::explicit(graph, &options.rules, &shares)?
    };
    let rewrite =
        |leafs: &BTreeMap<_, _>, scatter| rewrite::rewrite(graph, target, leafs, &shares, scatter);
    let rows_mode = options.rules.is_empty();
    let split = |leafs: BTreeMap<_, _>| match options.collectives {
        Collectives::AllReduce => rewrite(&leafs, false),
        Collectives::ReduceScatter => rewrite(&leafs, true),
        Collectives::Auto => choose::cheapest(graph, target, leafs, &shares, rows_mode),
    };
    let whole_experts = if rows_mode {
        rules::experts_whole(graph, &leafs, &shares)
    } else {
        None
    };
    match (options.experts, whole_experts) {
        (ExpertSplit::Whole, None) => Err(rules::split_error(
            "--experts whole",
            "",
            &format!(
                "graph '{}' has no stacked experts (ffn_gate_exps, ffn_up_exps, \
                 ffn_down_exps of two or more experts) to share out",
                graph.name
            ),
        )),
        (ExpertSplit::Rows, _) | (_, None) => split(leafs),
        (ExpertSplit::Whole, Some(whole)) => split(whole),
        (ExpertSplit::Auto, Some(whole)) => {
            choose::experts(graph, target, split(leafs)?, split(whole)?)
        }
    }
}

//! Which leafs are split, along which axis, with which extents per device.
//!
//! Two sources of rules:
//! - `--split-mode row`: the roles of a transformer block, found by weight
//!   name (llama.cpp's GGUF names, ggml's example names, Hugging Face BERT
//!   names): Q, K, V and the FFN's gate/up matrices (and their biases) split
//!   along their output rows; a fused QKV matrix (`attn_qkv`, `wqkv`, and
//!   its bias) by segments, its Q, K and V rows each cut by the block's KV
//!   heads (segments and heads read from the views of its product; a fused
//!   matrix whose views do not show them stays whole); the attention output
//!   and FFN down matrices along their input (they then produce partial
//!   sums); a mixture of experts' stacked matrices as ggml's meta backend
//!   cuts them, every expert alike: gate/up experts by rows, down experts
//!   along their input (the router stays whole, so every device routes
//!   alike); KV caches by heads;
//!   the output head along its rows (it is found by use: the matrix whose
//!   product is a graph output); token tables (read by `get_rows`) along
//!   their columns, except a head that is one (tied embeddings): along its
//!   rows, its lookups then `get_rows_part`s adding up to the rows.
//!   Everything else stays whole.
//! - `--split REGEX=AXIS`: every weight or state whose name matches is split
//!   along AXIS in equal units (a dtype block along axis 0, else one).
//!
//! Extents come from one partition per *group* so that the tensors that
//! meet in an op are cut alike: a block's attention is cut by KV heads (Q
//! and the attention output by the query heads of those KV heads, so GQA
//! groups stay on one device), its FFN by units of the down matrix's block.
//! KV heads that do not divide over the devices are shared out unevenly
//! rather than refused (SmolLM2's 3 over 2 devices: 2 and 1; over 4, one
//! device gets none and holds no attention part): refusing would leave such
//! models unsplit, and the imbalance is measured in the README.
//! **Invariant:** within a group every member's extents are the same
//! partition of units, scaled by the member's unit size; a partition is
//! deterministic (largest remainder, ties to the lower device).

use crate::Error;
use ir::{Graph, Op, Role, TensorId};
use regex::Regex;
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// A leaf's split: the axis and one extent per device (0: no part there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafSplit {
    /// Axis cut.
    pub axis: usize,
    /// Extent per device, adding up to the leaf's extent along `axis`.
    pub extents: Vec<i64>,
    /// Segments along `axis`, each cut on its own (the seed's `n_segments`:
    /// the Q, K and V rows of a fused QKV matrix): `segments[s][d]` is
    /// device `d`'s extent in segment `s`, and `extents[d]` their sum. Empty
    /// for one segment.
    pub segments: Vec<Vec<i64>>,
}

impl LeafSplit {
    /// One segment along `axis`, device `d` holding `extents[d]`.
    pub fn along(axis: usize, extents: Vec<i64>) -> LeafSplit {
        LeafSplit {
            axis,
            extents,
            segments: vec![],
        }
    }
}

/// A user's `--split REGEX=AXIS` rule.
#[derive(Clone, Debug)]
pub struct SplitRule {
    /// Matched against weight and state names.
    pub pattern: Regex,
    /// The axis, 0..=3.
    pub axis: u8,
}

impl SplitRule {
    /// Parses `REGEX=AXIS`.
    pub fn parse(text: &str) -> Result<SplitRule, String> {
        let (re, axis) = text
            .rsplit_once('=')
            .ok_or_else(|| format!("'{text}' is not REGEX=AXIS"))?;
        let axis: u8 = axis
            .trim()
            .parse()
            .ok()
            .filter(|a| *a < 4)
            .ok_or_else(|| format!("'{text}': the axis must be 0, 1, 2 or 3, not '{axis}'"))?;
        let pattern = Regex::new(re).map_err(|e| format!("'{text}': {e}"))?;
        Ok(SplitRule { pattern, axis })
    }
}

/// The role of a leaf in a transformer block, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    /// A fused Q, K and V matrix (or its bias), cut by segments.
    Qkv,
    Q,
    Kv,
    AttnOut,
    FfnIn,
    FfnOut,
    /// Stacked gate/up experts `[n_embd, n_ff_exp, n_expert]`.
    ExpertsIn,
    /// Stacked down experts `[n_ff_exp, n_embd, n_expert]`.
    ExpertsOut,
    CacheK,
    CacheV,
}

static PARTS: LazyLock<Vec<(Part, Regex)>> = LazyLock::new(|| {
    let re = |s: &str| Regex::new(s).expect("a valid built-in pattern");
    vec![
        (Part::Qkv, re(r"(attn_qkv\.(weight|bias)|\.wqkv|\.bqkv)$")),
        (
            Part::Q,
            re(r"(attn_q\.(weight|bias)|\.wq|\.bq|attention\.self\.query\.(weight|bias))$"),
        ),
        (
            Part::Kv,
            re(
                r"(attn_[kv]\.(weight|bias)|\.w[kv]|\.b[kv]|attention\.self\.(key|value)\.(weight|bias))$",
            ),
        ),
        (
            Part::AttnOut,
            re(r"(attn_output\.weight|\.wo|attention\.output\.dense\.weight)$"),
        ),
        (
            Part::FfnIn,
            re(r"(ffn_(gate|up)\.(weight|bias)|intermediate\.dense\.(weight|bias))$"),
        ),
        (
            Part::FfnOut,
            re(r"(ffn_down(\.weight)?|layer\.\d+\.output\.dense\.weight)$"),
        ),
        (Part::ExpertsIn, re(r"ffn_(gate|up)_exps(\.weight)?$")),
        (Part::ExpertsOut, re(r"ffn_down_exps(\.weight)?$")),
        (Part::CacheK, re(r"cache_k$")),
        (Part::CacheV, re(r"cache_v$")),
    ]
});

fn part_of(name: &str) -> Option<Part> {
    PARTS
        .iter()
        .find(|(_, re)| re.is_match(name))
        .map(|(p, _)| *p)
}

/// The block a name belongs to: its first number (`blk.3.…`, `l3.…`,
/// `encoder.layer.3.…`).
fn block_of(name: &str) -> Option<u32> {
    let start = name.find(|c: char| c.is_ascii_digit())?;
    let digits: String = name[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Units per device: `n` units shared in proportion to `shares`.
pub fn partition(n: i64, shares: &[f64]) -> Vec<i64> {
    let total: f64 = shares.iter().sum();
    let ideal: Vec<f64> = shares.iter().map(|s| n as f64 * s / total).collect();
    let mut units: Vec<i64> = ideal.iter().map(|x| x.floor() as i64).collect();
    let mut order: Vec<usize> = (0..shares.len()).collect();
    // Largest remainder first; ties to the lower device.
    order.sort_by(|&a, &b| {
        let (ra, rb) = (ideal[a] - ideal[a].floor(), ideal[b] - ideal[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    let missing = n - units.iter().sum::<i64>();
    for &d in order.iter().cycle().take(missing.max(0) as usize) {
        units[d] += 1;
    }
    units
}

/// A head layout found in the graph: `[head_dim, heads, …]` reshapes of a
/// projection's product.
#[derive(Clone, Copy, Debug, Default)]
struct Heads {
    head_dim: i64,
    q: i64,
    kv: i64,
}

/// The `[head_dim, heads]` the product of weight `w` is reshaped to (after
/// an optional bias add), if any.
fn heads_of(graph: &Graph, users: &[Vec<TensorId>], w: TensorId) -> Option<(i64, i64)> {
    let rows = graph.tensor(w).ne()[1];
    let product = users[w.index()]
        .iter()
        .copied()
        .find(|&u| graph.tensor(u).op == Some(Op::MulMat) && graph.tensor(u).srcs[0] == w)?;
    let mut frontier = vec![product];
    for _ in 0..2 {
        let mut next = vec![];
        for &t in &frontier {
            for &u in &users[t.index()] {
                let ut = graph.tensor(u);
                match ut.op {
                    // A head is more than one value (the V cache's `[1, C, t]`
                    // view is not a head layout); one head is a layout
                    // (Gemma 3 270M's single KV head: `[256, 1, t]`).
                    Some(Op::Reshape) if ut.ne()[0] * ut.ne()[1] == rows && ut.ne()[0] > 1 => {
                        return Some((ut.ne()[0], ut.ne()[1]));
                    }
                    Some(Op::Add) => next.push(u),
                    _ => {}
                }
            }
        }
        frontier = next;
    }
    None
}

/// The Q, K and V segments of fused matrix `w`'s product, as the views
/// reading them (after an optional bias add) show them: `(head_dim, query
/// heads, KV heads)` when three views of `[head_dim, heads, …]` or `[rows,
/// …]` tile its rows from 0 in Q, K, V order with K and V alike. Only a
/// 3-D Q view shows the head width: with 2-D views alone the K rows count as
/// one unit (`head_dim` their width), so the attention stays on one device.
fn fused_heads(graph: &Graph, users: &[Vec<TensorId>], w: TensorId) -> Option<(i64, i64, i64)> {
    let rows = graph.tensor(w).ne()[1];
    let product = users[w.index()]
        .iter()
        .copied()
        .find(|&u| graph.tensor(u).op == Some(Op::MulMat) && graph.tensor(u).srcs[0] == w)?;
    let mut value = product;
    if let [only] = users[product.index()][..]
        && graph.tensor(only).op == Some(Op::Add)
    {
        value = only;
    }
    let es = graph.tensor(value).dtype().block_bytes();
    let mut views: Vec<(i64, [i64; 4])> = users[value.index()]
        .iter()
        .map(|&u| graph.tensor(u))
        .filter_map(|t| match t.op {
            Some(Op::View { offset }) if offset % es == 0 => Some(((offset / es) as i64, t.ne())),
            _ => None,
        })
        .collect();
    views.sort_by_key(|v| v.0);
    let [(0, q), (ks, k), (vs, v)] = views[..] else {
        return None;
    };
    // Rows per token of each view: a head layout `[hd, heads, t]` or `[rows, t]`.
    let rows_of = |ne: [i64; 4], hd: i64| -> Option<i64> {
        if ne[0] == hd && ne[2] > 1 {
            Some(hd * ne[1])
        } else if ne[0] % hd == 0 {
            Some(ne[0])
        } else {
            None
        }
    };
    let hd = if q[2] > 1 { q[0] } else { k[0].min(q[0]) };
    let (qr, kr, vr) = (rows_of(q, hd)?, rows_of(k, hd)?, rows_of(v, hd)?);
    if hd < 1 || ks != qr || vs != qr + kr || kr != vr || qr + kr + vr != rows || kr % hd != 0 {
        return None;
    }
    Some((hd, qr / hd, kr / hd))
}

/// The leaf splits for `--split-mode row` over `shares.len()` devices.
pub fn row_mode(graph: &Graph, shares: &[f64]) -> Result<BTreeMap<TensorId, LeafSplit>, Error> {
    let users = users(graph);
    let leafs: Vec<(TensorId, Part)> = graph
        .ids()
        .filter(|&id| matches!(graph.tensor(id).role, Role::Weight | Role::State))
        .filter_map(|id| part_of(&graph.tensor(id).name).map(|p| (id, p)))
        .collect();
    // Head layouts per block, from the Q and K (or V) projections.
    let mut heads: BTreeMap<u32, Heads> = BTreeMap::new();
    for &(id, part) in &leafs {
        let t = graph.tensor(id);
        let (Some(block), true) = (block_of(&t.name), t.role == Role::Weight) else {
            continue;
        };
        if part == Part::Qkv {
            if let Some((hd, q, kv)) = fused_heads(graph, &users, id) {
                heads.insert(
                    block,
                    Heads {
                        head_dim: hd,
                        q,
                        kv,
                    },
                );
            }
            continue;
        }
        if let Some((hd, n)) = heads_of(graph, &users, id) {
            let h = heads.entry(block).or_default();
            h.head_dim = hd;
            match part {
                Part::Q => h.q = n,
                Part::Kv => h.kv = n,
                _ => {}
            }
        }
    }
    // FFN width and its block per block (the down matrix's input is cut).
    let mut ffn_block: BTreeMap<(u32, bool), i64> = BTreeMap::new();
    for &(id, part) in &leafs {
        let t = graph.tensor(id);
        let experts = part == Part::ExpertsOut;
        if let (Part::FfnOut | Part::ExpertsOut, Some(b)) = (part, block_of(&t.name)) {
            ffn_block.insert((b, experts), t.dtype().block_elems() as i64);
        }
    }
    // Each leaf's axis and its units (KV heads or FFN blocks) of `unit` values.
    // (leaf, axis, units, unit)
    let mut cuts: Vec<(TensorId, usize, i64, i64)> = Vec::new();
    // Fused QKV leafs: (leaf, axis, KV heads, each segment's rows per KV head).
    let mut fused: Vec<(TensorId, usize, i64, [i64; 3])> = Vec::new();
    for &(id, part) in &leafs {
        let t = graph.tensor(id);
        let name = &t.name;
        let Some(block) = block_of(name) else {
            continue;
        };
        let is_bias = t.role == Role::Weight && t.ne()[1] == 1;
        if part == Part::Qkv {
            // Views of its product not understood: it stays whole.
            let Some(h) = heads.get(&block).filter(|h| h.kv > 0 && h.q % h.kv == 0) else {
                continue;
            };
            let axis = if is_bias { 0 } else { 1 };
            let per = [h.head_dim * (h.q / h.kv), h.head_dim, h.head_dim];
            if t.ne()[axis] == h.kv * (per[0] + per[1] + per[2]) {
                fused.push((id, axis, h.kv, per));
            }
            continue;
        }
        let axis = match part {
            Part::Qkv => unreachable!("handled above"),
            Part::Q | Part::Kv | Part::FfnIn if is_bias => 0,
            Part::Q | Part::Kv | Part::FfnIn | Part::ExpertsIn => 1,
            Part::AttnOut | Part::FfnOut | Part::ExpertsOut | Part::CacheK => 0,
            Part::CacheV => 1,
        };
        let extent = t.ne()[axis];
        let experts = matches!(part, Part::ExpertsIn | Part::ExpertsOut);
        let attention = !experts && !matches!(part, Part::FfnIn | Part::FfnOut);
        let (units, unit) = if attention {
            let h = heads.get(&block).copied().unwrap_or_default();
            if h.head_dim == 0 || h.q == 0 || h.kv == 0 || h.q % h.kv != 0 {
                return Err(split_error(
                    "--split-mode row",
                    name,
                    &format!(
                        "cannot find block {block}'s heads (Q and K products reshaped to \
                         [head_dim, heads, tokens]); name the splits with --split REGEX=AXIS"
                    ),
                ));
            }
            let per = match part {
                Part::Q | Part::AttnOut => h.head_dim * (h.q / h.kv),
                _ => h.head_dim,
            };
            (h.kv, per)
        } else {
            let unit = ffn_block.get(&(block, experts)).copied().unwrap_or(1);
            (extent / unit, unit)
        };
        if units * unit != extent {
            return Err(split_error(
                "--split-mode row",
                name,
                &format!("its extent {extent} along axis {axis} is not {units} units of {unit}"),
            ));
        }
        cuts.push((id, axis, units, unit));
    }
    // Attention by KV heads, the FFN by its units, each in proportion to
    // the shares. Each phase (attention, FFN) ends in an all-reduce that
    // waits for the slowest device, so each phase is balanced on its own: a
    // GQA block of 3 KV heads over 2 devices gives one device twice the
    // attention, and giving it less FFN to even out its bytes would make the
    // FFN phase wait on the other device instead (measured slower); its
    // memory is the price (the summary and the tensor_split bench show it).
    let mut out = BTreeMap::new();
    for (id, axis, units, unit) in cuts {
        let extents = partition(units, shares).iter().map(|u| u * unit).collect();
        out.insert(id, LeafSplit::along(axis, extents));
    }
    // A fused QKV matrix: its Q, K and V rows each cut by the block's KV
    // heads, alike (device d gets the same heads in every segment).
    for (id, axis, units, per) in fused {
        let heads = partition(units, shares);
        let segments: Vec<Vec<i64>> = per
            .iter()
            .map(|p| heads.iter().map(|h| h * p).collect())
            .collect();
        let extents = (0..shares.len())
            .map(|d| segments.iter().map(|s| s[d]).sum())
            .collect();
        out.insert(
            id,
            LeafSplit {
                axis,
                extents,
                segments,
            },
        );
    }
    // Token tables are cut so that no device holds a whole table: along
    // their columns (each device gathers its columns of every row; one
    // all-gather joins them), or, when the table is also the output head
    // (tied embeddings), along its rows like any head: each device then
    // computes its rows of the logits (no full-size partial logits), and
    // its lookups give its own rows and zeros for the others
    // (`get_rows_part`, a partial sum one all-reduce completes).
    let head = output_head(graph, &users);
    for table in token_tables(graph, &users) {
        let t = graph.tensor(table);
        if Some(table) == head && t.ne()[2] == 1 && t.ne()[3] == 1 {
            let extents = partition(t.ne()[1], shares);
            out.insert(table, LeafSplit::along(1, extents));
            continue;
        }
        let unit = t.dtype().block_elems() as i64;
        let extents = partition(t.ne()[0] / unit, shares)
            .iter()
            .map(|u| u * unit)
            .collect();
        out.insert(table, LeafSplit::along(0, extents));
    }
    if let Some(head) = head.filter(|h| !out.contains_key(h)) {
        let t = graph.tensor(head);
        let extents = partition(t.ne()[1], shares);
        out.insert(head, LeafSplit::along(1, extents));
    }
    Ok(out)
}

/// The leafs of `leafs` (a [`row_mode`] result) by the part of the model
/// they cut, in a fixed order: every block's attention (with its KV cache),
/// every block's FFN, the token tables and an untied output head. Blocks are
/// alike, so the cost model decides per part, not per block.
pub(super) fn row_groups(
    graph: &Graph,
    leafs: &BTreeMap<TensorId, LeafSplit>,
) -> Vec<(&'static str, Vec<TensorId>)> {
    let mut groups: Vec<(&'static str, Vec<TensorId>)> = ["attention", "FFN", "token table"]
        .into_iter()
        .map(|g| (g, Vec::new()))
        .collect();
    let tables = token_tables(graph, &users(graph));
    for &id in leafs.keys() {
        let k = match part_of(&graph.tensor(id).name) {
            Some(Part::FfnIn | Part::FfnOut | Part::ExpertsIn | Part::ExpertsOut) => 1,
            Some(_) => 0,
            None if tables.contains(&id) => 2,
            None => {
                groups.push(("output head", vec![id]));
                continue;
            }
        };
        groups[k].1.push(id);
    }
    groups.retain(|(_, ids)| !ids.is_empty());
    groups
}

/// Weights read as the table of a `get_rows` (token embeddings).
fn token_tables(graph: &Graph, users: &[Vec<TensorId>]) -> Vec<TensorId> {
    graph
        .ids()
        .filter(|&id| {
            let t = graph.tensor(id);
            t.role == Role::Weight
                && t.ne()[1] > 1
                && users[id.index()].iter().any(|&u| {
                    let ut = graph.tensor(u);
                    ut.op == Some(Op::GetRows) && ut.srcs[0] == id
                })
        })
        .collect()
}

/// The weight whose product is a graph output (the logits), if one is.
fn output_head(graph: &Graph, users: &[Vec<TensorId>]) -> Option<TensorId> {
    graph.ids().find(|&id| {
        graph.tensor(id).role == Role::Weight
            && users[id.index()].iter().any(|&u| {
                let ut = graph.tensor(u);
                ut.op == Some(Op::MulMat) && ut.srcs[0] == id && ut.role == Role::Output
            })
    })
}

/// Whether `name` is a block's stacked experts (gate, up or down).
pub(super) fn is_stacked_experts(name: &str) -> bool {
    matches!(part_of(name), Some(Part::ExpertsIn | Part::ExpertsOut))
}

/// Row mode's `leafs` with every block's stacked experts shared out whole
/// along axis 2 (the experts) by `shares` instead of cut by rows (expert
/// parallelism); `None` when the graph has no stacked experts of two or
/// more experts. Each expert tensor of a block holds the block's experts,
/// so one partition of the count serves gate, up and down alike.
pub(super) fn experts_whole(
    graph: &Graph,
    leafs: &BTreeMap<TensorId, LeafSplit>,
    shares: &[f64],
) -> Option<BTreeMap<TensorId, LeafSplit>> {
    let mut out = leafs.clone();
    let mut any = false;
    for id in graph.ids() {
        let t = graph.tensor(id);
        if t.role != Role::Weight || !is_stacked_experts(&t.name) || t.ne()[2] < 2 {
            continue;
        }
        out.insert(id, LeafSplit::along(2, partition(t.ne()[2], shares)));
        any = true;
    }
    any.then_some(out)
}

/// The leaf splits of explicit `--split REGEX=AXIS` rules (the first rule
/// matching a name wins). A rule matching no weight or state is an error.
pub fn explicit(
    graph: &Graph,
    rules: &[SplitRule],
    shares: &[f64],
) -> Result<BTreeMap<TensorId, LeafSplit>, Error> {
    let mut out = BTreeMap::new();
    let mut used = vec![false; rules.len()];
    for id in graph.ids() {
        let t = graph.tensor(id);
        if !matches!(t.role, Role::Weight | Role::State) {
            continue;
        }
        let Some(k) = rules.iter().position(|r| r.pattern.is_match(&t.name)) else {
            continue;
        };
        used[k] = true;
        let rule = &rules[k];
        let spelled = format!("--split {}={}", rule.pattern.as_str(), rule.axis);
        let axis = usize::from(rule.axis);
        let unit = if axis == 0 {
            t.dtype().block_elems() as i64
        } else {
            1
        };
        let units = t.ne()[axis] / unit;
        if units < shares.len() as i64 {
            return Err(split_error(
                &spelled,
                &t.name,
                &format!(
                    "{} {} has {units} units of {unit} along axis {axis}, fewer than the {} devices",
                    t.dtype(),
                    ir::layout::fmt_ne(&t.ne()),
                    shares.len()
                ),
            ));
        }
        let extents = partition(units, shares).iter().map(|u| u * unit).collect();
        out.insert(id, LeafSplit::along(axis, extents));
    }
    if let Some(k) = used.iter().position(|u| !u) {
        let r = &rules[k];
        return Err(split_error(
            &format!("--split {}={}", r.pattern.as_str(), r.axis),
            "",
            "matches no weight or state of the graph",
        ));
    }
    Ok(out)
}

/// Users of every tensor, in id order.
pub(super) fn users(graph: &Graph) -> Vec<Vec<TensorId>> {
    let mut users = vec![Vec::new(); graph.len()];
    for id in graph.ids() {
        for &s in &graph.tensor(id).srcs {
            users[s.index()].push(id);
        }
    }
    users
}

pub(super) fn split_error(rule: &str, tensor: &str, reason: &str) -> Error {
    Error::TensorSplit {
        rule: rule.to_string(),
        tensor: tensor.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_follow_the_shares_and_add_up() {
        assert_eq!(partition(3, &[1.0, 1.0]), vec![2, 1]);
        assert_eq!(partition(3, &[1.0, 1.0, 1.0, 1.0]), vec![1, 1, 1, 0]);
        assert_eq!(partition(8, &[3.0, 1.0]), vec![6, 2]);
        assert_eq!(partition(6, &[1.0, 1.0, 1.0, 1.0]), vec![2, 2, 1, 1]);
    }

    #[test]
    fn names_map_to_block_parts() {
        assert_eq!(part_of("blk.0.attn_q.weight"), Some(Part::Q));
        assert_eq!(part_of("l1.wq"), Some(Part::Q));
        assert_eq!(part_of("l1.wk"), Some(Part::Kv));
        assert_eq!(part_of("blk.2.attn_output.weight"), Some(Part::AttnOut));
        assert_eq!(
            part_of("encoder.layer.0.attention.output.dense.weight"),
            Some(Part::AttnOut)
        );
        assert_eq!(
            part_of("encoder.layer.0.output.dense.weight"),
            Some(Part::FfnOut)
        );
        assert_eq!(part_of("encoder.layer.0.output.dense.bias"), None);
        assert_eq!(part_of("l0.ffn_gate.weight"), Some(Part::FfnIn));
        assert_eq!(part_of("l0.ffn_down"), Some(Part::FfnOut));
        assert_eq!(part_of("l3.cache_v"), Some(Part::CacheV));
        assert_eq!(part_of("blk.0.attn_norm.weight"), None);
        assert_eq!(
            block_of("encoder.layer.11.attention.self.query.weight"),
            Some(11)
        );
    }

    #[test]
    fn explicit_rules_parse_and_refuse_bad_axes() {
        let r = SplitRule::parse(r"ffn_(up|gate)=1").expect("parses");
        assert_eq!(r.axis, 1);
        assert!(
            SplitRule::parse("x=4")
                .unwrap_err()
                .contains("0, 1, 2 or 3")
        );
        assert!(SplitRule::parse("x").unwrap_err().contains("REGEX=AXIS"));
    }
}

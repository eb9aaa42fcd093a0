//! Graphviz pictures of a plan (`ggplan dot`), laid out top to bottom.
//!
//! - [`DotView::Summary`] (the default): one node per split with its device,
//!   its steps grouped by block ("blocks 0–29: 30 × 12 steps"), the cost
//!   model's time for it and the device's compute arena; copies as edges
//!   labelled with their count and bytes; a run of splits that repeats (the
//!   micro-batches of a pipeline) drawn once in a box marked "× N". A
//!   30-layer model on two devices is a handful of boxes.
//! - [`DotView::Detail`]: every step as a box inside its split, copies as red
//!   edges: for small plans and for reading one split closely.
//!
//! Invariant: the text depends only on the plan, and indices out of range in
//! a damaged plan are skipped, never a panic.

use crate::Plan;
use ir::plan::{Step, Usage};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Which picture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DotView {
    /// One node per split (repeats folded), copies as edges with bytes.
    Summary,
    /// Every step of every split.
    Detail,
}

const COLOURS: [&str; 4] = ["#cfe2f3", "#d9ead3", "#fce5cd", "#ead1dc"];

/// The DOT text of `plan` in `view`.
///
/// ```
/// # let graph = ggplan::graph::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/graphs/llama2l.ron"))?;
/// let target = ggplan::target::resolve("cpu")?;
/// let plan = ggplan::compile(&graph, &target, &Default::default())?.plan;
/// let dot = ggplan::plan::dot(&plan, ggplan::plan::DotView::Summary);
/// assert!(dot.contains("blocks 0–1: 2 × "));
/// # Ok::<(), ggplan::Error>(())
/// ```
pub fn dot(plan: &Plan, view: DotView) -> String {
    match view {
        DotView::Summary => summary(plan),
        DotView::Detail => detail(plan),
    }
}

fn device_name(plan: &Plan, device: usize) -> &str {
    plan.devices.get(device).map_or("?", |d| d.name.as_str())
}

fn tensor_name(plan: &Plan, t: u32) -> &str {
    plan.tensors
        .get(t as usize)
        .map_or("?", |t| t.name.as_str())
}

/// Every tensor `step` writes (several for a `mul_mat` x N step).
fn step_outputs(plan: &Plan, step: &Step) -> Vec<u32> {
    match step {
        Step::MulMatMany { dsts, .. } | Step::RopeStore { dsts, .. } => dsts.clone(),
        _ => step_output(plan, step).into_iter().collect(),
    }
}

fn step_output(plan: &Plan, step: &Step) -> Option<u32> {
    match step {
        Step::MulMatMany { dsts, .. } | Step::RopeStore { dsts, .. } => dsts.first().copied(),
        Step::Op { dst, .. }
        | Step::MulMatAdd { dst, .. }
        | Step::MulMatGlu { dst, .. }
        | Step::Attention { dst, .. } => Some(*dst),
        Step::Fused { kernel } => plan.kernels.get(*kernel as usize).map(|k| k.output),
    }
}

fn step_kind(step: &Step) -> String {
    match step {
        Step::Op { op, .. } => op.name().to_string(),
        Step::Fused { .. } => "fused".to_string(),
        Step::MulMatAdd { .. } => "mul_mat + add".to_string(),
        Step::Attention { .. } => "attention".to_string(),
        Step::MulMatGlu { .. } => "mul_mat + glu".to_string(),
        Step::MulMatMany { dsts, .. } => format!("mul_mat x {}", dsts.len()),
        Step::RopeStore { dsts, .. } => format!("rope + set_rows x {}", dsts.len()),
    }
}

fn mib(bytes: u64) -> String {
    if bytes < 1 << 20 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// `K` of a micro-batch part's name, `NAME.mbK`.
fn micro_batch_of(name: &str) -> Option<u32> {
    let (_, k) = name.rsplit_once(".mb")?;
    k.parse().ok()
}

fn steps_text(n: usize) -> String {
    format!("{n} step{}", if n == 1 { "" } else { "s" })
}

/// What a split's steps do, by block: "input: 5 steps", "blocks 0–29:
/// 30 × 12 steps", "head: 2 steps" (steps of no block before the first
/// block are the input's, after it the head's).
fn step_groups(plan: &Plan, steps: &[Step]) -> Vec<String> {
    let layers: Vec<Option<u32>> = steps
        .iter()
        .map(|s| step_output(plan, s).and_then(|t| compiler::layer_of(tensor_name(plan, t))))
        .collect();
    let (first, last) = match (layers.iter().flatten().min(), layers.iter().flatten().max()) {
        (Some(&a), Some(&b)) => (a, b),
        _ => return vec![steps_text(steps.len())],
    };
    let mut per_block: BTreeMap<u32, usize> = BTreeMap::new();
    let (mut before, mut after, mut first_seen) = (0, 0, false);
    for layer in &layers {
        match layer {
            Some(l) => {
                *per_block.entry(*l).or_default() += 1;
                first_seen = true;
            }
            None if !first_seen => before += 1,
            None => after += 1,
        }
    }
    let mut lines = Vec::new();
    let micro_batches = steps
        .iter()
        .filter_map(|s| step_output(plan, s))
        .filter_map(|t| micro_batch_of(tensor_name(plan, t)))
        .max();
    if let Some(last) = micro_batches {
        lines.push(format!("{} micro-batches", last + 1));
    }
    if before > 0 {
        lines.push(format!("input: {}", steps_text(before)));
    }
    let counts: Vec<usize> = per_block.values().copied().collect();
    let n = per_block.len();
    let range = if first == last {
        format!("block {first}")
    } else {
        format!("blocks {first}–{last}")
    };
    if counts.iter().all(|&c| c == counts[0]) && n > 1 {
        lines.push(format!("{range}: {n} × {}", steps_text(counts[0])));
    } else {
        lines.push(format!("{range}: {}", steps_text(counts.iter().sum())));
    }
    if after > 0 {
        lines.push(format!("head: {}", steps_text(after)));
    }
    lines
}

/// Per split, what makes it the same as another for folding: its device and
/// the kinds of its steps.
fn signature(plan: &Plan, split: usize) -> (usize, Vec<String>) {
    let s = &plan.splits[split];
    (s.device.index(), s.steps.iter().map(step_kind).collect())
}

/// Runs of repeating splits: `(start, period, repetitions)`, covering every
/// split in order; a split that does not repeat is a run of period 1, once.
fn folds(plan: &Plan) -> Vec<(usize, usize, usize)> {
    let n = plan.splits.len();
    let sigs: Vec<_> = (0..n).map(|i| signature(plan, i)).collect();
    let mut runs = Vec::new();
    let mut i = 0;
    while i < n {
        let mut best = (1, 1);
        for period in 1..=4.min(n - i) {
            let mut reps = 1;
            while i + (reps + 1) * period <= n
                && (0..period).all(|k| sigs[i + reps * period + k] == sigs[i + k])
            {
                reps += 1;
            }
            if reps >= 2 && reps * period > best.0 * best.1 {
                best = (period, reps);
            }
        }
        runs.push((i, best.0, best.1));
        i += best.0 * best.1;
    }
    runs
}

fn summary(plan: &Plan) -> String {
    let mut s = String::from(
        "digraph plan {\n  rankdir=TB; nodesep=0.8; ranksep=0.6;\n  node [shape=box, style=\"rounded,filled\", fontname=Helvetica, fontsize=11];\n  edge [fontname=Helvetica, fontsize=10];\n",
    );
    let arena = |device: usize| -> u64 {
        plan.arenas
            .iter()
            .filter(|a| a.device.index() == device && a.usage == Usage::Compute)
            .map(|a| a.size)
            .sum()
    };
    // Which drawn node stands for each split.
    let mut node_of = vec![0usize; plan.splits.len()];
    for (start, period, reps) in folds(plan) {
        for k in 0..period * reps {
            node_of[start + k] = start + k % period;
        }
        if reps > 1 {
            let _ = writeln!(
                s,
                "  subgraph cluster_{start} {{\n    label=\"× {reps}: splits {start}–{}\"; style=dashed; fontname=Helvetica;",
                start + period * reps - 1
            );
        }
        for i in start..start + period {
            let split = &plan.splits[i];
            let device = split.device.index();
            let mut lines = vec![format!("split {i} · {}", device_name(plan, device))];
            lines.extend(step_groups(plan, &split.steps));
            let time = |j: usize| plan.stats.split_us.get(j).copied();
            if let Some(us) = time(i) {
                let each = if reps > 1 { " each" } else { "" };
                lines.push(format!("~{us:.0} µs{each} (cost model)"));
            }
            lines.push(format!(
                "{} arena {}",
                device_name(plan, device),
                mib(arena(device))
            ));
            let _ = writeln!(
                s,
                "    n{i} [label=\"{}\", fillcolor=\"{}\"];",
                lines.join("\\n").replace('"', "'"),
                COLOURS[device % COLOURS.len()]
            );
        }
        if reps > 1 {
            s += "  }\n";
        }
    }
    // Which split writes each tensor (copies from a tensor no step writes
    // come from the device's inputs and weights).
    let mut writer: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, split) in plan.splits.iter().enumerate() {
        for step in &split.steps {
            for t in step_outputs(plan, step) {
                writer.insert(t, i);
            }
        }
    }
    let mut edges: BTreeMap<(String, usize), (u32, u64)> = BTreeMap::new();
    let joined = |edges: &BTreeMap<(String, usize), (u32, u64)>, a: usize, b: usize| {
        edges.contains_key(&(format!("n{a}"), b))
    };
    let mut sources = BTreeMap::new();
    for (i, split) in plan.splits.iter().enumerate() {
        for c in &split.copies {
            let from = match writer.get(&c.src) {
                Some(&w) => format!("n{}", node_of[w]),
                None => {
                    let device = plan
                        .tensors
                        .get(c.src as usize)
                        .map_or(0, |t| t.device.index());
                    let name = format!("leaves{device}");
                    sources.insert(name.clone(), device);
                    name
                }
            };
            let e = edges.entry((from, node_of[i])).or_default();
            e.0 += 1;
            e.1 += c.bytes;
        }
    }
    for (name, device) in sources {
        let _ = writeln!(
            s,
            "  {name} [shape=ellipse, style=filled, fillcolor=white, label=\"inputs and weights on {}\"];",
            device_name(plan, device)
        );
    }
    for ((from, to), &(copies, bytes)) in &edges {
        let plural = if copies == 1 { "copy" } else { "copies" };
        let _ = writeln!(
            s,
            "  {from} -> n{to} [label=\"{copies} {plural}, {} per run\"];",
            mib(bytes)
        );
    }
    // Splits run in order on each device: a dotted edge keeps the picture
    // in plan order where no copy joins them.
    for w in node_of.windows(2) {
        if w[1] > w[0] && !joined(&edges, w[0], w[1]) {
            let _ = writeln!(
                s,
                "  n{} -> n{} [style=dotted, arrowhead=none];",
                w[0], w[1]
            );
        }
    }
    s += "}\n";
    s
}

fn detail(plan: &Plan) -> String {
    let mut s = String::from(
        "digraph plan {\n  rankdir=TB;\n  node [shape=box, style=filled, fontname=monospace];\n",
    );
    let step_label = |step: &Step| match step {
        Step::Op { op, dst, .. } => format!("{} ({})", tensor_name(plan, *dst), op.name()),
        Step::Fused { kernel } => match plan.kernels.get(*kernel as usize) {
            Some(k) => format!("{} (fused x{})", tensor_name(plan, k.output), k.nodes.len()),
            None => "?".to_string(),
        },
        Step::MulMatAdd { dst, .. } => format!("{} (mul_mat + add)", tensor_name(plan, *dst)),
        Step::Attention { dst, .. } => format!("{} (attention)", tensor_name(plan, *dst)),
        Step::MulMatGlu { dst, .. } => format!("{} (mul_mat + glu)", tensor_name(plan, *dst)),
        Step::MulMatMany { dsts, .. } => {
            let names: Vec<&str> = dsts.iter().map(|&d| tensor_name(plan, d)).collect();
            format!("{} (mul_mat x {})", names.join(", "), dsts.len())
        }
        Step::RopeStore { dsts, .. } => {
            let names: Vec<&str> = dsts.iter().map(|&d| tensor_name(plan, d)).collect();
            format!("{} (rope + set_rows x {})", names.join(", "), dsts.len())
        }
    };
    let mut writer = BTreeMap::new();
    for (i, split) in plan.splits.iter().enumerate() {
        let device = split.device.index();
        let _ = writeln!(
            s,
            "  subgraph cluster_{i} {{\n    label=\"split {i}: {}\"; style=filled; color=\"{}\";",
            device_name(plan, device),
            COLOURS[device % COLOURS.len()]
        );
        for (k, step) in split.steps.iter().enumerate() {
            let _ = writeln!(
                s,
                "    s{i}_{k} [label=\"{}\", fillcolor=white];",
                step_label(step).replace('"', "'")
            );
            for t in step_outputs(plan, step) {
                writer.insert(t, format!("s{i}_{k}"));
            }
        }
        s += "  }\n";
    }
    for (i, split) in plan.splits.iter().enumerate() {
        if split.steps.is_empty() {
            continue;
        }
        for c in &split.copies {
            let from = writer.get(&c.src).cloned().unwrap_or_else(|| {
                let leaf = format!("leaf_{}", c.src);
                let _ = writeln!(
                    s,
                    "  {leaf} [label=\"{}\", shape=ellipse];",
                    tensor_name(plan, c.src)
                );
                leaf
            });
            let _ = writeln!(
                s,
                "  {from} -> s{i}_0 [label=\"copy {} ({} B)\", color=red];",
                tensor_name(plan, c.src),
                c.bytes
            );
        }
    }
    s += "}\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_plans::llama2l_offloaded;

    #[test]
    fn the_summary_has_a_node_per_split_and_copies_with_bytes() {
        let plan = llama2l_offloaded();
        let dot = dot(&plan, DotView::Summary);
        assert_eq!(plan.splits.len(), 2);
        assert!(dot.contains("n0 [label=\"split 0 · cpu"), "{dot}");
        assert!(
            dot.contains("n1 [label=\"split 1 · cuda0\\nblock 1: "),
            "{dot}"
        );
        let copies: u64 = plan.splits[1].copies.iter().map(|c| c.bytes).sum();
        assert!(dot.contains("-> n1 [label=\""), "{dot}");
        assert!(copies > 0);
        assert!(dot.contains("µs (cost model)"), "{dot}");
        assert!(!dot.contains("cluster"), "nothing repeats: {dot}");
        let detail = super::dot(&plan, DotView::Detail);
        assert!(detail.matches("fillcolor=white").count() > 20, "{detail}");
    }

    #[test]
    fn repeating_splits_fold_into_one_box() {
        let mut plan = llama2l_offloaded();
        let pair = plan.splits.clone();
        plan.splits = [pair.clone(), pair.clone(), pair].concat();
        plan.stats.split_us = vec![1.0; plan.splits.len()];
        assert_eq!(folds(&plan), [(0, 2, 3)]);
        let dot = dot(&plan, DotView::Summary);
        assert!(dot.contains("label=\"× 3: splits 0–5\""), "{dot}");
        assert!(dot.contains("µs each"), "{dot}");
        assert!(!dot.contains("n2 ["), "folded splits are drawn once: {dot}");
    }

    #[test]
    fn a_damaged_plan_draws_what_it_can() {
        let mut plan = llama2l_offloaded();
        plan.splits[1].copies[0].src = u32::MAX;
        plan.kernels.clear();
        for view in [DotView::Summary, DotView::Detail] {
            assert!(dot(&plan, view).starts_with("digraph plan {"));
        }
    }
}

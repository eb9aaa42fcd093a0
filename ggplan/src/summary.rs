//! Human-readable and JSON summaries of a plan (`compile`, `show`).

use ir::plan::{Placement, Plan, Step, Usage};

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// A device's name; `?` for an index a damaged plan has out of range (the
/// summary is printed for plans the checker has not passed).
fn device(plan: &Plan, index: usize) -> &str {
    plan.devices.get(index).map_or("?", |d| d.name.as_str())
}

/// The summary `ggplan show` prints.
pub fn summary(plan: &Plan) -> String {
    let mut out = String::new();
    let s = &plan.stats;
    out += &format!(
        "plan for graph '{}' ({}) on target '{}' [{}]\n",
        plan.graph_name,
        plan.graph_hash,
        plan.target_name,
        plan.options.join(" ")
    );
    let fused = plan
        .tensors
        .iter()
        .filter(|t| t.placement == Placement::Fused)
        .count();
    let n_steps: usize = plan.splits.iter().map(|sp| sp.steps.len()).sum();
    let product_adds = (plan.splits.iter().flat_map(|sp| &sp.steps))
        .filter(|st| matches!(st, Step::MulMatAdd { .. }))
        .count();
    let product_glus = (plan.splits.iter().flat_map(|sp| &sp.steps))
        .filter(|st| matches!(st, Step::MulMatGlu { .. }))
        .count();
    let product_manys = (plan.splits.iter().flat_map(|sp| &sp.steps))
        .filter(|st| matches!(st, Step::MulMatMany { .. }))
        .count();
    let rope_stores = (plan.splits.iter().flat_map(|sp| &sp.steps))
        .filter(|st| matches!(st, Step::RopeStore { .. }))
        .count();
    let and_product_adds = match product_adds {
        0 => String::new(),
        n => format!(" and {}", count(n, "mul_mat + add", "mul_mat + adds")),
    } + &match product_glus {
        0 => String::new(),
        n => format!(" and {}", count(n, "mul_mat + glu", "mul_mat + glus")),
    } + &match product_manys {
        0 => String::new(),
        n => format!(" and {}", count(n, "mul_mat x N", "mul_mat x Ns")),
    } + &match rope_stores {
        0 => String::new(),
        n => format!(
            " and {}",
            count(n, "rope + set_rows", "rope + set_rows steps")
        ),
    };
    let attentions = (plan.splits.iter().flat_map(|sp| &sp.steps))
        .filter(|st| matches!(st, Step::Attention { .. }))
        .count();
    let and_attentions = match attentions {
        0 => String::new(),
        n => format!(" and {}", count(n, "attention", "attentions")),
    };
    out += &format!(
        "{} splits, {} steps ({} fused kernels{and_product_adds}{and_attentions} covering {} nodes; {} intermediates take no memory), estimated {:.1} us\n",
        s.n_splits,
        n_steps,
        plan.kernels.len(),
        s.fused_nodes,
        fused,
        s.estimated_us
    );
    for d in &s.devices {
        let dev = device(plan, d.device.index());
        let over = if d.compute_lower_bound > 0 {
            format!(
                "{:+.2}%",
                (d.compute_bytes as f64 / d.compute_lower_bound as f64 - 1.0) * 100.0
            )
        } else {
            "n/a".to_string()
        };
        out += &format!(
            "  {:<6} compute {} (lower bound {}, {over}, {}), resident {}\n",
            dev,
            mib(d.compute_bytes),
            mib(d.compute_lower_bound),
            d.algorithm,
            mib(d.resident_bytes)
        );
    }
    out += &cuda_launches(plan);
    out += &tensor_split(plan);
    for l in &s.links {
        out += &format!(
            "  copies {} -> {}: {} ({})\n",
            device(plan, l.from.index()),
            device(plan, l.to.index()),
            l.copies,
            mib(l.bytes)
        );
    }
    for (i, sp) in plan.splits.iter().enumerate() {
        let ops = sp
            .steps
            .iter()
            .filter(|st| matches!(st, Step::Op { .. }))
            .count();
        out += &format!(
            "  split {i}: {} — {} in, {} ({}, {} fused)\n",
            device(plan, sp.device.index()),
            count(sp.copies.len(), "copy", "copies"),
            count(sp.steps.len(), "step", "steps"),
            count(ops, "op", "ops"),
            sp.steps.len() - ops
        );
        for (k, c) in sp.copies.iter().enumerate() {
            if !c.wait.is_empty() || c.record.is_some() {
                let mut sync = Vec::new();
                if !c.wait.is_empty() {
                    sync.push(format!("waits for {}", ir::plan::events_in_words(&c.wait)));
                }
                if let Some(e) = c.record {
                    sync.push(format!("records event {e}"));
                }
                out += &format!(
                    "    copy {k} '{}' on stream {}: {}\n",
                    plan.tensors
                        .get(c.src as usize)
                        .map_or("?", |t| t.name.as_str()),
                    c.stream,
                    sync.join(", ")
                );
            }
        }
        for w in &sp.waits {
            out += &format!(
                "    before step {}: waits for event {}\n",
                w.before, w.event
            );
        }
        for r in &sp.records {
            out += &format!("    after step {}: records event {}\n", r.after, r.event);
        }
    }
    if plan.n_events > 0 {
        out += &format!(
            "  {} streams, {} events between them\n",
            plan.streams.len(),
            plan.n_events
        );
    }
    if let Some(path) = crate::plan::critical_path(plan)
        && plan.splits.len() > 1
    {
        let chain: Vec<String> = path.splits.iter().map(ToString::to_string).collect();
        out += &format!(
            "  critical path: splits {}, {:.1} us of {:.1} us of split work (cost model)\n",
            chain.join(" -> "),
            path.us,
            path.serial_us
        );
    }
    out
}

/// A tensor split's decisions: each stored tensor's slices per device (full
/// copies marked as mirrors), then each collective with its participants.
/// Empty for plans without shards or collectives.
fn tensor_split(plan: &Plan) -> String {
    use std::collections::BTreeMap;
    let mut out = String::new();
    let mut by_source: BTreeMap<&str, Vec<(usize, &ir::WeightShard, i64)>> = BTreeMap::new();
    for t in &plan.tensors {
        if let Some(s) = &t.shard {
            let extent = t.ne.get(s.axis as usize).copied().unwrap_or(0);
            by_source
                .entry(s.of.as_str())
                .or_default()
                .push((t.device.index(), s, extent));
        }
    }
    if !by_source.is_empty() {
        out += &format!(
            "  tensor split: {} weights cut or mirrored\n",
            by_source.len()
        );
    }
    for (of, shards) in &by_source {
        let parts: Vec<String> = shards
            .iter()
            .map(|(d, s, extent)| {
                if s.full_ne.get(s.axis as usize) == Some(extent) {
                    format!("{} mirror", device(plan, *d))
                } else {
                    format!("{} [{}, {})", device(plan, *d), s.start, s.start + extent)
                }
            })
            .collect();
        let axis = shards.first().map_or(0, |s| s.1.axis);
        out += &format!("    '{of}' axis {axis}: {}\n", parts.join(", "));
    }
    // Collectives: group -> (kind, rank 0's result, devices by rank, parts' devices).
    type Group = (String, String, BTreeMap<u32, String>, Vec<String>);
    let mut groups: BTreeMap<u32, Group> = BTreeMap::new();
    for sp in &plan.splits {
        for st in &sp.steps {
            let Step::Op { op, dst, srcs } = st else {
                continue;
            };
            let Some(c) = op.collective() else { continue };
            let name = |i: u32| {
                plan.tensors
                    .get(i as usize)
                    .map_or("?", |t| t.name.as_str())
            };
            let dev = |i: u32| {
                plan.tensors.get(i as usize).map_or("?".to_string(), |t| {
                    device(plan, t.device.index()).to_string()
                })
            };
            let entry = groups.entry(c.group).or_default();
            entry.0 = op.name().to_string();
            if c.rank == 0 {
                entry.1 = name(*dst).to_string();
                entry.3 = srcs.iter().map(|&s| dev(s)).collect();
            }
            entry
                .2
                .insert(c.rank, device(plan, sp.device.index()).to_string());
        }
    }
    for (g, (kind, first, ranks, parts)) in &groups {
        let ranks: Vec<&str> = ranks.values().map(String::as_str).collect();
        out += &format!(
            "    collective {g}: {kind} '{first}' on {} of parts on {}\n",
            ranks.join(", "),
            parts.join(", ")
        );
    }
    out
}

/// The JSON object `ggplan show --json` prints.
pub fn json(plan: &Plan) -> serde_json::Value {
    let s = &plan.stats;
    let devices: serde_json::Map<String, serde_json::Value> = s
        .devices
        .iter()
        .map(|d| {
            let name = device(plan, d.device.index()).to_string();
            let arena = |u: Usage| {
                plan.arenas
                    .iter()
                    .filter(|a| a.device == d.device && a.usage == u)
                    .map(|a| a.size)
                    .sum::<u64>()
            };
            (
                name,
                serde_json::json!({
                    "arena_bytes": d.compute_bytes,
                    "lower_bound_bytes": d.compute_lower_bound,
                    "weights_bytes": arena(Usage::Weights),
                    "state_bytes": arena(Usage::State),
                    "io_bytes": arena(Usage::Io),
                    "algorithm": d.algorithm,
                }),
            )
        })
        .collect();
    serde_json::json!({
        "graph": plan.graph_name,
        "target": plan.target_name,
        "n_splits": s.n_splits,
        "n_copies": s.links.iter().map(|l| l.copies).sum::<u32>(),
        "copy_bytes": s.links.iter().map(|l| l.bytes).sum::<u64>(),
        "fused_nodes": s.fused_nodes,
        "estimated_us": s.estimated_us,
        "devices": devices,
        "cuda_launches_per_run": (cuda_launches_per_run(plan).into_iter())
            .map(|(device, n)| (device, n.into()))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
    })
}

/// `1 copy`, `2 copies`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Kernel launches per run on each CUDA device: every step a CUDA device
/// runs is one kernel (`tests/cuda_kernels.rs` proves it for every example
/// and model plan), so launch overhead is read off the plan.
pub fn cuda_launches_per_run(plan: &Plan) -> Vec<(String, usize)> {
    (plan.devices.iter().enumerate())
        .filter(|(_, d)| matches!(d.kind, ir::plan::DeviceKind::Cuda { .. }))
        .map(|(i, d)| {
            let steps: usize = (plan.splits.iter())
                .filter(|sp| sp.device.index() == i)
                .map(|sp| sp.steps.len())
                .sum();
            (d.name.clone(), steps)
        })
        .collect()
}

/// The `show` line of [`cuda_launches_per_run`] (empty without CUDA devices).
fn cuda_launches(plan: &Plan) -> String {
    let launches = cuda_launches_per_run(plan);
    if launches.is_empty() {
        return String::new();
    }
    let each: Vec<String> = (launches.iter())
        .map(|(device, n)| format!("{device} {n}"))
        .collect();
    format!("CUDA kernel launches per run: {}\n", each.join(", "))
}

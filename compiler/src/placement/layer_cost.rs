//! The cost policy's layer split: how many units (input layer, blocks, output
//! head) each device gets, chosen by estimated time instead of memory.
//!
//! `--split-mode layer` without `--tensor-split` under `--policy cost` asks
//! this module. llama.cpp (and `--policy ggml`) share the blocks out in
//! proportion to device memory, whatever the devices' speed or links; here the
//! cost model ([`crate::cost`]) prices every unit on every device and every
//! boundary between two devices, and a dynamic program picks the contiguous
//! split with the least estimated time for one run of the graph, among the
//! splits whose weights fit (the same memory rule as `--fit`: weights plus a
//! compute reserve, every weight within the device's largest buffer).
//!
//! The model, per unit `u` and device `d`:
//! - compute: the sum of [`op_time_us`] over the nodes of `u` (a node belongs
//!   to the latest unit among the weights it reads and its sources, so a tied
//!   output head, which reads the token table, counts with the head; leafs
//!   that are not weights belong to the unit their name names, the input
//!   layer otherwise). A node `d` cannot run makes `u` impossible there;
//! - boundary: when unit `u` starts a new device, the bytes that earlier units
//!   produce and `u` or later units read cross it, priced by [`copy_time_us`]
//!   from the previous device (tensors read across several boundaries are
//!   counted at each: a run copies them once per device that reads them).
//!
//! A run executes the units one after another, so with room enough the
//! fastest device takes everything; a split happens when memory forces it or
//! when a device is fast enough for some units to pay for the copies.
//!
//! Invariants: units stay contiguous and devices are used in target order
//! (priority order, as the memory split does), so a plan crosses each device
//! boundary once; the same graph and target give the same split (ties go to
//! the earlier start and the lower device index); when no contiguous split
//! fits, [`best_split`] returns `None` and the caller keeps the memory split.

use super::compute_reserve_bytes;
use super::layer_of;
use super::units::Units;
use crate::cost::{copy_time_us, op_time_us};
use crate::target::{DeviceId, Target, cannot_run};
use ir::{Graph, Role};

/// What each unit costs where, and what crosses between units.
#[derive(Clone, Debug)]
pub struct UnitCosts {
    /// `[unit][device]`: estimated µs of the unit's nodes on the device
    /// (infinite where one of them cannot run).
    pub compute_us: Vec<Vec<f64>>,
    /// Bytes of the unit's weights.
    pub weight_bytes: Vec<u64>,
    /// The unit's largest single weight.
    pub largest_weight: Vec<u64>,
    /// `[u]`: bytes produced before unit `u` and read by `u` or later (0 for
    /// unit 0).
    pub crossing_bytes: Vec<u64>,
}

impl UnitCosts {
    /// Prices every unit of `graph` on every device of `target`.
    pub fn of(graph: &Graph, target: &Target, units: &Units) -> UnitCosts {
        let n_units = units.count();
        let n_devices = target.devices.len();
        let mut unit = vec![0usize; graph.len()];
        let mut weight_bytes = vec![0u64; n_units];
        let mut largest_weight = vec![0u64; n_units];
        for id in graph.ids() {
            let t = graph.tensor(id);
            if t.is_leaf() {
                unit[id.index()] = match t.role {
                    Role::Weight => units.unit(&t.name),
                    _ => layer_of(&t.name).map_or(0, |_| units.unit(&t.name)),
                };
                if t.role == Role::Weight {
                    let u = unit[id.index()];
                    let bytes = t.layout.span_bytes();
                    weight_bytes[u] += bytes;
                    largest_weight[u] = largest_weight[u].max(bytes);
                }
                continue;
            }
            let roots = t.srcs.iter().map(|&s| graph.storage_of(s).root);
            let of_weights = roots
                .clone()
                .filter(|&r| graph.tensor(r).role == Role::Weight)
                .map(|r| unit[r.index()])
                .max();
            let latest = roots.map(|r| unit[r.index()]).max().unwrap_or(0);
            // Never before its sources: a tied output head reads the token
            // table (the input layer's) but runs after the last block.
            unit[id.index()] = of_weights.map_or(latest, |w| w.max(latest));
        }
        let mut compute_us = vec![vec![0.0; n_devices]; n_units];
        // The latest unit reading each non-weight root, to price crossings.
        let mut last_reader: Vec<Option<usize>> = vec![None; graph.len()];
        for id in graph.nodes() {
            let u = unit[id.index()];
            for d in target.device_ids() {
                let time = if cannot_run(graph, target, d, id) {
                    f64::INFINITY
                } else {
                    op_time_us(target, d, graph, id)
                };
                compute_us[u][d.index()] += time;
            }
            for &s in &graph.tensor(id).srcs {
                let root = graph.storage_of(s).root;
                if graph.tensor(root).role != Role::Weight {
                    let seen = &mut last_reader[root.index()];
                    *seen = Some(seen.map_or(u, |r| r.max(u)));
                }
            }
        }
        let mut crossing_bytes = vec![0u64; n_units];
        for root in graph.ids().filter(|&id| graph.storage_of(id).root == id) {
            let Some(reader) = last_reader[root.index()] else {
                continue;
            };
            let bytes = graph.tensor(root).layout.span_bytes();
            // Readers never come before their source's unit (see above).
            for crossing in crossing_bytes
                .iter_mut()
                .take(reader + 1)
                .skip(unit[root.index()] + 1)
            {
                *crossing += bytes;
            }
        }
        UnitCosts {
            compute_us,
            weight_bytes,
            largest_weight,
            crossing_bytes,
        }
    }

    /// Estimated µs of one run with unit `u` on `devices[u]`.
    pub fn time_us(&self, target: &Target, devices: &[usize]) -> f64 {
        let mut total = 0.0;
        for (u, &d) in devices.iter().enumerate() {
            total += self.compute_us[u][d];
            if u > 0 && devices[u - 1] != d {
                total += self.boundary_us(target, devices[u - 1], d, u);
            }
        }
        total
    }

    fn boundary_us(&self, target: &Target, from: usize, to: usize, unit: usize) -> f64 {
        let (from, to) = (DeviceId(from as u32), DeviceId(to as u32));
        copy_time_us(target, from, to, self.crossing_bytes[unit])
    }
}

/// The device of every unit with the least estimated time (see the module
/// doc), or `None` when no contiguous split in target order fits memory.
pub fn best_split(graph: &Graph, target: &Target, costs: &UnitCosts) -> Option<Vec<usize>> {
    let n_units = costs.compute_us.len();
    let n_devices = target.devices.len();
    let reserve = compute_reserve_bytes(graph);
    let free: Vec<u64> = target
        .devices
        .iter()
        .map(|d| d.memory_bytes.saturating_sub(reserve))
        .collect();
    // best[u][d]: least time for units 0..u with unit u-1 on device d, and
    // where that last device's run of units starts (and the device before).
    let mut best = vec![vec![(f64::INFINITY, 0usize, None::<usize>); n_devices]; n_units + 1];
    for end in 1..=n_units {
        for d in 0..n_devices {
            let (mut compute, mut bytes, mut largest) = (0.0, 0u64, 0u64);
            // Units start..end on d, growing the run backwards from `end`.
            for start in (0..end).rev() {
                compute += costs.compute_us[start][d];
                bytes += costs.weight_bytes[start];
                largest = largest.max(costs.largest_weight[start]);
                let dev = &target.devices[d];
                if bytes > free[d] || largest > dev.max_buffer_bytes || !compute.is_finite() {
                    break;
                }
                let candidates: Vec<(f64, Option<usize>)> = if start == 0 {
                    vec![(compute, None)]
                } else {
                    let before = best[start][..d].iter().enumerate().rev();
                    before
                        .map(|(prev, &(time, _, _))| {
                            let cross = costs.boundary_us(target, prev, d, start);
                            (time + cross + compute, Some(prev))
                        })
                        .collect()
                };
                for (time, prev) in candidates {
                    // `<=` with `start` falling and the previous device
                    // falling: among equal times the earliest start wins,
                    // then the lowest previous device.
                    if time.is_finite() && time <= best[end][d].0 {
                        best[end][d] = (time, start, prev);
                    }
                }
            }
        }
    }
    let mut last = None;
    for d in 0..n_devices {
        if best[n_units][d].0.is_finite()
            && last.is_none_or(|l: usize| best[n_units][d].0 < best[n_units][l].0)
        {
            last = Some(d);
        }
    }
    let mut devices = vec![0; n_units];
    let (mut end, mut d) = (n_units, last?);
    loop {
        let (_, start, prev) = best[end][d];
        devices[start..end].fill(d);
        match prev {
            Some(p) => (end, d) = (start, p),
            None => break,
        }
    }
    Some(devices)
}

/// "cpu: the input layer, blocks 0-11; rpc0: blocks 12-29, the output head".
pub fn describe(target: &Target, devices: &[usize]) -> String {
    let n_units = devices.len();
    let unit_name = |u: usize| match u {
        0 => "the input layer".to_string(),
        u if u + 1 == n_units => "the output head".to_string(),
        u => format!("block {}", u - 1),
    };
    let mut parts = Vec::new();
    let mut start = 0;
    while start < n_units {
        let d = devices[start];
        let end = (start..n_units)
            .find(|&u| devices[u] != d)
            .unwrap_or(n_units);
        let blocks: Vec<usize> = (start..end).filter(|&u| u > 0 && u + 1 < n_units).collect();
        let mut what = Vec::new();
        if start == 0 {
            what.push(unit_name(0));
        }
        match (blocks.first(), blocks.last()) {
            (Some(a), Some(b)) if a == b => what.push(unit_name(*a)),
            (Some(a), Some(b)) => what.push(format!("blocks {}-{}", a - 1, b - 1)),
            _ => {}
        }
        if end == n_units && n_units > 1 {
            what.push(unit_name(n_units - 1));
        }
        parts.push(format!("{}: {}", target.devices[d].name, what.join(", ")));
        start = end;
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::units::Units;

    fn llama2l() -> Graph {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/graphs/llama2l.ron"
        );
        ir::text::read_graph(std::path::Path::new(path)).expect("example graph")
    }

    /// Every contiguous split in target order (non-decreasing device per
    /// unit) that fits memory, with its time: the brute force the dynamic
    /// program must agree with.
    fn brute_force(graph: &Graph, target: &Target, costs: &UnitCosts) -> Option<f64> {
        let n_units = costs.compute_us.len();
        let n_devices = target.devices.len();
        let reserve = compute_reserve_bytes(graph);
        let mut best: Option<f64> = None;
        let mut devices = vec![0usize; n_units];
        loop {
            let fits = (0..n_devices).all(|d| {
                let units = (0..n_units).filter(|&u| devices[u] == d);
                let bytes: u64 = units.clone().map(|u| costs.weight_bytes[u]).sum();
                let largest = units.map(|u| costs.largest_weight[u]).max().unwrap_or(0);
                let dev = &target.devices[d];
                bytes <= dev.memory_bytes.saturating_sub(reserve) && largest <= dev.max_buffer_bytes
            });
            let time = costs.time_us(target, &devices);
            if fits && time.is_finite() && best.is_none_or(|b| time < b) {
                best = Some(time);
            }
            // Next non-decreasing sequence, last unit fastest.
            let Some(u) = (0..n_units).rev().find(|&u| devices[u] + 1 < n_devices) else {
                return best;
            };
            let next = devices[u] + 1;
            devices[u..].fill(next);
        }
    }

    /// A small xorshift, so the property below needs no crate and is the
    /// same on every run.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn the_fastest_device_takes_everything_when_it_has_room() {
        let g = llama2l();
        let t = Target::preset("cpu+rpc0").expect("preset");
        let costs = UnitCosts::of(&g, &t, &Units::of(&g));
        let split = best_split(&g, &t, &costs).expect("fits");
        // The preset's server multiplies at half the CPU's rate, and crossing
        // to it costs a network copy: everything on the CPU (device 1).
        assert_eq!(split, vec![1; 4]);
        assert_eq!(
            describe(&t, &split),
            "cpu: the input layer, blocks 0-1, the output head"
        );
        assert!(costs.crossing_bytes[0] == 0 && costs.crossing_bytes[1..].iter().all(|&b| b > 0));
    }

    #[test]
    fn memory_forces_a_split_and_the_split_fits() {
        let g = llama2l();
        let mut t = Target::preset("cpu+rpc0").expect("preset");
        let costs = UnitCosts::of(&g, &t, &Units::of(&g));
        let reserve = compute_reserve_bytes(&g);
        // The CPU holds the input layer and one block, no more.
        let room = costs.weight_bytes[0] + costs.weight_bytes[1];
        t.devices[1].memory_bytes = reserve + room;
        let split = best_split(&g, &t, &costs).expect("fits");
        // The CPU (second in target order) takes the last units that fit
        // it: the output head, the largest matmul, fits there alone.
        assert_eq!(split, vec![0, 0, 0, 1], "{}", describe(&t, &split));
        let on_cpu: u64 = (0..4)
            .filter(|&u| split[u] == 1)
            .map(|u| costs.weight_bytes[u])
            .sum();
        assert!(on_cpu <= room);
        let text = describe(&t, &split);
        assert_eq!(
            text,
            "rpc0: the input layer, blocks 0-1; cpu: the output head"
        );
        // No room anywhere: no split.
        t.devices[0].memory_bytes = reserve;
        t.devices[1].memory_bytes = reserve;
        assert_eq!(best_split(&g, &t, &costs), None);
    }

    #[test]
    fn a_tied_head_counts_with_the_last_unit() {
        // The head multiplies by the token table (the input layer's weight)
        // after the last block: it must not count as input-layer work, and
        // the hidden state crosses every boundary up to it.
        let mut b = ir::GraphBuilder::new("tied");
        let ids = b.input("ids", ir::DType::I32, [4, 1, 1, 1]).expect("ids");
        let table = b
            .weight("token_embd.weight", ir::DType::F32, [64, 100, 1, 1])
            .expect("t");
        let w = b
            .weight("blk.0.ffn.weight", ir::DType::F32, [64, 64, 1, 1])
            .expect("w");
        let x = b.get_rows("x", table, ids).expect("x");
        let h = b.mul_mat("h", w, x).expect("h");
        let norm = b
            .weight("output_norm.weight", ir::DType::F32, [64, 1, 1, 1])
            .expect("n");
        let hn = b.mul("hn", h, norm).expect("hn");
        let logits = b.mul_mat("logits", table, hn).expect("logits");
        b.mark_output(logits).expect("out");
        let g = b.finish().expect("graph");
        let t = Target::preset("cpu+rpc0").expect("preset");
        let costs = UnitCosts::of(&g, &t, &Units::of(&g));
        // Units: input layer, block 0, head (the norm, and the product by
        // the token table, the largest matmul).
        assert_eq!(costs.compute_us.len(), 3);
        assert!(costs.compute_us[2][1] > costs.compute_us[1][1], "{costs:?}");
        assert!(
            costs.crossing_bytes[1] > 0 && costs.crossing_bytes[2] > 0,
            "{costs:?}"
        );
        assert!(best_split(&g, &t, &costs).is_some());
    }

    #[test]
    fn the_dynamic_program_finds_the_brute_force_optimum() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for graph in ["llama2l", "bert2l"] {
            let path = format!(
                "{}/../examples/graphs/{graph}.ron",
                env!("CARGO_MANIFEST_DIR")
            );
            let g = ir::text::read_graph(std::path::Path::new(&path)).expect("example");
            for round in 0..40 {
                let mut t = Target::preset("cpu+rpc0+rpc1").expect("preset");
                let weights: u64 = g
                    .with_role(Role::Weight)
                    .map(|w| g.tensor(w).layout.span_bytes())
                    .sum();
                let reserve = compute_reserve_bytes(&g);
                for d in &mut t.devices {
                    let m = &mut d.throughput.matmul_gflops;
                    m.f32 = 1.0 + (next(&mut state) % 400) as f64;
                    d.throughput.memory_gbps = 1.0 + (next(&mut state) % 100) as f64;
                    d.memory_bytes = reserve + next(&mut state) % (weights + 1);
                }
                for l in &mut t.links {
                    l.bandwidth_gbps = 0.01 + (next(&mut state) % 100) as f64 / 10.0;
                    l.latency_us = (next(&mut state) % 500) as f64;
                }
                let costs = UnitCosts::of(&g, &t, &Units::of(&g));
                let want = brute_force(&g, &t, &costs);
                let got = best_split(&g, &t, &costs);
                let got_time = got.as_ref().map(|s| costs.time_us(&t, s));
                match (want, got_time) {
                    (None, None) => {}
                    (Some(w), Some(g)) => assert!(
                        (w - g).abs() <= 1e-9 * w.max(1.0),
                        "{graph} round {round}: brute force {w} µs, dynamic program {g} µs"
                    ),
                    other => panic!("{graph} round {round}: {other:?}"),
                }
                assert_eq!(got, best_split(&g, &t, &costs), "deterministic");
            }
        }
    }
}

//! The cost model: how long one op takes on one device, and one copy between
//! two devices.
//!
//! **These are estimates**, a roofline from the target's throughput figures
//! (see [`crate::target::throughput`]), good for comparing placements, not for
//! predicting wall-clock time:
//! - `mul_mat`: `2·M·N·K` flops (every output element is a K-long dot
//!   product) at the device's matmul rate for the dtype class of src0 (the
//!   weight);
//! - every other kernel: (bytes read + bytes written) at the device's memory
//!   rate, where `get_rows` reads only the rows it selects, `cpy` does not read
//!   its destination and `set_rows` writes only the rows it sets;
//! - each kernel adds the device's `launch_overhead_us`; a fused step of
//!   several nodes is one kernel, its nodes' work plus one launch
//!   ([`step_time_us`]);
//! - view ops (`view`, `reshape`, `permute`, `transpose`) and leafs run no
//!   kernel: 0;
//! - a copy moves `bytes` at the link's bandwidth plus its latency; a copy
//!   to the same device is free.
//!
//! Invariants: every time is >= 0; for a validated target (finite positive
//! rates, a link between every pair of devices) every time is finite. An id
//! out of range or a missing link gives `f64::INFINITY`, never a panic.

use crate::target::{DeviceId, Target};
use ir::{Graph, Op, TensorId};

/// Estimated time, in µs, of `node` running on `device`: see the module doc.
/// Support is not checked here ([`Target::supports`] answers that); leafs and
/// views cost 0.
pub fn op_time_us(target: &Target, device: DeviceId, graph: &Graph, node: TensorId) -> f64 {
    let tensor = graph.tensor(node);
    let Some(op) = &tensor.op else {
        return 0.0;
    };
    let Some(dev) = target.get(device) else {
        return f64::INFINITY;
    };
    let rates = &dev.throughput;
    let work_us = match work(graph, node, op) {
        Work::None => return 0.0,
        // GFLOP/s = 10^3 flop per µs; GB/s = 10^3 bytes per µs.
        Work::Flops { flops, src0 } => flops / (rates.matmul_gflops(src0) * 1e3),
        Work::Bytes(bytes) => bytes as f64 / (rates.memory_gbps * 1e3),
    };
    work_us + rates.launch_overhead_us
}

/// Estimated time, in µs, of one step computing `nodes` on `device`: every
/// node's work as [`op_time_us`] prices it, but one launch for the step (a
/// fused step runs one kernel however many nodes it computes).
pub fn step_time_us(target: &Target, device: DeviceId, graph: &Graph, nodes: &[TensorId]) -> f64 {
    let Some(dev) = target.get(device) else {
        return f64::INFINITY;
    };
    let times: Vec<f64> = (nodes.iter())
        .map(|&n| op_time_us(target, device, graph, n))
        .collect();
    let kernels = times.iter().filter(|&&t| t > 0.0).count();
    let extra_launches = kernels.saturating_sub(1) as f64;
    (times.iter().sum::<f64>() - extra_launches * dev.throughput.launch_overhead_us).max(0.0)
}

/// Estimated time, in µs, of copying `bytes` from device `from` to device
/// `to`: bytes over the link's bandwidth plus its latency; 0 when `from == to`.
pub fn copy_time_us(target: &Target, from: DeviceId, to: DeviceId, bytes: u64) -> f64 {
    if from == to {
        return 0.0;
    }
    let (Some(a), Some(b)) = (target.get(from), target.get(to)) else {
        return f64::INFINITY;
    };
    match target.link(&a.name, &b.name) {
        Some(link) => bytes as f64 / (link.bandwidth_gbps * 1e3) + link.latency_us,
        None => f64::INFINITY,
    }
}

/// What one op does, in the units its rate is quoted in.
enum Work {
    /// No kernel (views).
    None,
    /// Matmul flops, at the rate for the weight's dtype.
    Flops { flops: f64, src0: ir::DType },
    /// Memory traffic: bytes read plus bytes written.
    Bytes(u64),
}

fn work(graph: &Graph, node: TensorId, op: &Op) -> Work {
    let tensor = graph.tensor(node);
    let span = |i: usize| {
        tensor
            .srcs
            .get(i)
            .map_or(0, |&s| graph.tensor(s).layout.span_bytes())
    };
    let all_srcs: u64 = (0..tensor.srcs.len()).map(span).sum();
    let written = tensor.layout.span_bytes();
    // Exhaustive on purpose: a new op must say how it moves bytes.
    match op {
        Op::View { .. } | Op::Reshape | Op::Permute { .. } | Op::Transpose => Work::None,
        // Every token's slots are products with one expert's matrix each.
        Op::MulMat | Op::MulMatId => {
            let src0 = tensor.srcs.first().map(|&s| graph.tensor(s));
            let k = src0.map_or(0, |s| s.layout.ne[0].max(0)) as f64;
            let flops = 2.0 * k * tensor.layout.n_elements() as f64;
            let dtype = src0.map_or(tensor.layout.dtype, |s| s.layout.dtype);
            Work::Flops { flops, src0: dtype }
        }
        // A part of the experts computes the slots routed to its experts:
        // priced at the busiest part's expected load when the router spreads
        // the `N` (slot, token) pairs evenly, its share `p` plus one standard
        // deviation of a binomial, `p + sqrt(p (1 - p) / N)`: a decode step's
        // 8 slots over two halves load one side 35% above half, a prefill's
        // thousands 3%.
        Op::MulMatIdPart { experts, .. } => {
            let src0 = tensor.srcs.first().map(|&s| graph.tensor(s));
            let k = src0.map_or(0, |s| s.layout.ne[0].max(0)) as f64;
            let held = src0.map_or(0, |s| s.layout.ne[2].max(0)) as f64;
            let p = (held / (*experts).max(1) as f64).min(1.0);
            let pairs = (tensor.layout.ne[1] * tensor.layout.ne[2]).max(1) as f64;
            let busiest = (p + (p * (1.0 - p) / pairs).sqrt()).min(1.0);
            let flops = 2.0 * k * tensor.layout.n_elements() as f64 * busiest;
            let dtype = src0.map_or(tensor.layout.dtype, |s| s.layout.dtype);
            Work::Flops { flops, src0: dtype }
        }
        Op::GetRows | Op::GetRowsPart { .. } => {
            // Reads the selected rows of the table, not the whole table
            // (a part: at most as many).
            let row = tensor
                .srcs
                .first()
                .map_or(0, |&s| graph.tensor(s).layout.row_bytes());
            Work::Bytes(tensor.layout.n_rows() * row + span(1) + written)
        }
        // Reads the source, writes the destination view; never reads it.
        Op::Cpy => Work::Bytes(span(0) + written),
        Op::SetRows => {
            // Reads the rows and indices, writes as many rows of the destination.
            let rows = tensor
                .srcs
                .get(1)
                .map_or(0, |&s| graph.tensor(s).layout.n_rows());
            let dst_row = tensor
                .srcs
                .first()
                .map_or(0, |&s| graph.tensor(s).layout.row_bytes());
            Work::Bytes(span(1) + span(2) + rows * dst_row)
        }
        Op::Add
        | Op::Sub
        | Op::Mul
        | Op::Div
        | ir::unary_op!()
        | Op::Glu { .. }
        | Op::RmsNorm { .. }
        | Op::Norm { .. }
        | Op::SoftMax { .. }
        | Op::Rope(_)
        | Op::Cont
        | Op::Concat { .. }
        | Op::SumRows
        | Op::Mean
        | Op::Argmax
        | Op::Argsort { .. }
        | Op::DiagMaskInf { .. } => Work::Bytes(all_srcs + written),
        // A participant reads every part (some on other devices) and writes its result.
        Op::AllReduceSum { .. } | Op::AllGather { .. } => Work::Bytes(all_srcs + written),
        // A reduce-scatter reads only its slice of every part.
        Op::ReduceScatterSum { .. } => Work::Bytes((tensor.srcs.len() as u64 + 1) * written),
    }
}

/// A duration in µs for reasons: `6.3 µs`, `1.25 ms`.
pub(crate) fn fmt_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ir::{DType, GraphBuilder};

    fn cuda_cpu() -> Target {
        Target::preset("cpu+cuda0").expect("preset")
    }

    #[test]
    fn matmul_is_flops_over_the_rate_plus_launch() {
        let mut b = GraphBuilder::new("mm");
        let w = b.weight("w", DType::F32, [512, 256, 1, 1]).expect("w");
        let x = b.input("x", DType::F32, [512, 128, 1, 1]).expect("x");
        let y = b.mul_mat("y", w, x).expect("y");
        b.mark_output(y).expect("out");
        let g = b.finish().expect("graph");
        let t = cuda_cpu();
        let cpu = t.cpu().expect("cpu");
        // 2 * 256 * 128 * 512 flop at 480 GFLOP/s, plus 2 µs.
        let want = 2.0 * 256.0 * 128.0 * 512.0 / 480e3 + 2.0;
        assert!((op_time_us(&t, cpu, &g, y) - want).abs() < 1e-9);
        assert_eq!(op_time_us(&t, cpu, &g, w), 0.0, "leafs cost nothing");
    }

    #[test]
    fn memory_bound_ops_count_bytes_read_and_written() {
        let mut b = GraphBuilder::new("ew");
        let x = b.input("x", DType::F32, [1000, 1, 1, 1]).expect("x");
        let s = b.silu("s", x).expect("s");
        let r = b.reshape("r", s, [500, 2, 1, 1]).expect("r");
        b.mark_output(r).expect("out");
        let g = b.finish().expect("graph");
        let t = cuda_cpu();
        let cpu = t.cpu().expect("cpu");
        // 4000 bytes read + 4000 written at 43 GB/s, plus 2 µs.
        let want = 8000.0 / 43e3 + 2.0;
        assert!((op_time_us(&t, cpu, &g, s) - want).abs() < 1e-9);
        assert_eq!(op_time_us(&t, cpu, &g, r), 0.0, "views run no kernel");
        assert_eq!(op_time_us(&t, DeviceId(9), &g, s), f64::INFINITY);
    }

    #[test]
    fn a_fused_step_pays_its_nodes_work_and_one_launch() {
        let mut b = GraphBuilder::new("fused");
        let x = b.input("x", DType::F32, [1000, 1, 1, 1]).expect("x");
        let s = b.silu("s", x).expect("s");
        let r = b.reshape("r", s, [500, 2, 1, 1]).expect("r");
        let m = b.mul("m", r, r).expect("m");
        b.mark_output(m).expect("out");
        let g = b.finish().expect("graph");
        let t = cuda_cpu();
        let gpu = DeviceId(0);
        let apart: f64 = [s, m].iter().map(|&n| op_time_us(&t, gpu, &g, n)).sum();
        // Two kernels become one (the view runs none): one 5 µs launch less.
        let fused = step_time_us(&t, gpu, &g, &[s, r, m]);
        assert!((apart - fused - 5.0).abs() < 1e-9, "{apart} {fused}");
        assert_eq!(step_time_us(&t, gpu, &g, &[s]), op_time_us(&t, gpu, &g, s));
        assert_eq!(step_time_us(&t, DeviceId(9), &g, &[s]), f64::INFINITY);
    }

    #[test]
    fn copies_pay_bandwidth_and_latency() {
        let t = cuda_cpu();
        let (gpu, cpu) = (DeviceId(0), DeviceId(1));
        // 25 GB/s and 10 µs.
        assert!((copy_time_us(&t, cpu, gpu, 1_000_000) - 50.0).abs() < 1e-9);
        assert_eq!(copy_time_us(&t, gpu, gpu, 1_000_000), 0.0);
        assert_eq!(copy_time_us(&t, gpu, DeviceId(7), 1), f64::INFINITY);
    }
}

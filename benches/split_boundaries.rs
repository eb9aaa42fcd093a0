//! What the executor adds at a split boundary: events and the copy between
//! devices. A chain of tiny blocks (one 8x8 matrix-vector product each) is
//! pinned alternately to `cpu0` and `cpu1`, so every block is its own split
//! and every boundary is an event record, a wait, a copy on the copy stream
//! and another wait. The same chain on `cpu` with one thread runs the same
//! steps without boundaries; the difference per boundary is the executor's
//! cost (starting the stream threads included). Chains of 100 and 1,000
//! blocks, since the cost per boundary changes with the run's length on a
//! shared virtual machine. Target: at most 2 µs per boundary.
//!
//! Run: `cargo bench --bench split_boundaries`.

use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::{PinRule, PlacementOptions};
use compiler::target::Target;
use ir::{DType, Graph, GraphBuilder};
use runtime::{LoadOptions, Runtime, Weights};
use std::sync::Arc;
use std::time::Instant;

const RUNS: usize = 300;

fn chain(blocks: usize) -> Graph {
    let mut b = GraphBuilder::new("boundaries");
    let mut h = b.input("x", DType::F32, [8, 1, 1, 1]).unwrap();
    for l in 0..blocks {
        let w = b
            .weight(format!("blk.{l}.w"), DType::F32, [8, 8, 1, 1])
            .unwrap();
        h = b.mul_mat(format!("blk.{l}.h"), w, h).unwrap();
    }
    b.mark_output(h).unwrap();
    b.finish().unwrap()
}

/// Median and 10th-percentile run time, µs.
fn time_runs(plan: ir::plan::Plan, threads: usize) -> (f64, f64, usize) {
    let options = LoadOptions {
        threads,
        ..LoadOptions::default()
    };
    let plan = Arc::new(plan);
    let splits = plan.splits.len();
    let mut rt = Runtime::load(plan, Weights::Random { seed: 0 }, &options).unwrap();
    rt.set_input_f32("x", &[0.5; 8]).unwrap();
    for _ in 0..20 {
        rt.run().unwrap();
    }
    let mut us: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            rt.run().unwrap();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    us.sort_by(f64::total_cmp);
    (us[us.len() / 2], us[us.len() / 10], splits)
}

/// (median µs of the chain on `cpu`, on `cpu0+cpu1`, and its boundaries).
fn measure(blocks: usize) -> (f64, f64, f64) {
    let graph = chain(blocks);
    let one = Target::preset("cpu").unwrap();
    let single = compile(&graph, &one, &CompileOptions::default())
        .unwrap()
        .plan;
    let two = Target::preset("cpu0+cpu1").unwrap();
    let pins = vec![
        PinRule::parse(r"^blk\.\d*[02468]\.=cpu0", &two).unwrap(),
        PinRule::parse(r"^blk\.\d*[13579]\.=cpu1", &two).unwrap(),
    ];
    let options = CompileOptions {
        placement: PlacementOptions {
            pins,
            ..PlacementOptions::default()
        },
        ..CompileOptions::default()
    };
    let split = compile(&graph, &two, &options).unwrap().plan;
    let (base, base_p10, _) = time_runs(single, 1);
    let (multi, multi_p10, splits) = time_runs(split, 2);
    println!(
        "{blocks} blocks: cpu (1 thread) median {base:.1} us (p10 {base_p10:.1}); \
         cpu0+cpu1 ({splits} splits) median {multi:.1} us (p10 {multi_p10:.1})"
    );
    (base, multi, splits.saturating_sub(1) as f64)
}

fn main() {
    println!("{}", runtime::ceiling::measure());
    for blocks in [100, 1000] {
        let (base, multi, boundaries) = measure(blocks);
        println!(
            "executor cost, {blocks} blocks: {:.2} us per split boundary (target <= 2 us)",
            (multi - base) / boundaries
        );
    }
}

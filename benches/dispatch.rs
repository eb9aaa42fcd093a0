//! Per-step dispatch overhead of the CPU runtime: a plan of 1,000 tiny steps
//! (soft_max over one row of 8 floats, which no pass fuses), timed per run
//! on 1 and 2 threads. The work per step is a few nanoseconds, so the time
//! per step is the dispatch overhead (barrier + kernel call). Target: under
//! 2 microseconds per step with 2 threads.
//!
//! Run: `cargo bench --bench dispatch`.

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use ir::{DType, GraphBuilder};
use runtime::{LoadOptions, Runtime, Weights};
use std::sync::Arc;
use std::time::Instant;

const STEPS: usize = 1000;

fn main() {
    let mut b = GraphBuilder::new("tiny1000");
    let mut x = b.input("x", DType::F32, [8, 1, 1, 1]).unwrap();
    for i in 0..STEPS {
        x = b.soft_max(format!("s{i}"), x, None, 1.0, 0.0).unwrap();
    }
    b.mark_output(x).unwrap();
    let graph = b.finish().unwrap();
    let plan = compile(
        &graph,
        &Target::preset("cpu").unwrap(),
        &CompileOptions::default(),
    )
    .unwrap()
    .plan;
    println!("{}", runtime::ceiling::measure());
    let plan = Arc::new(plan);
    for threads in [1, 2] {
        let options = LoadOptions {
            threads,
            ..LoadOptions::default()
        };
        let mut rt =
            Runtime::load(Arc::clone(&plan), Weights::Random { seed: 0 }, &options).unwrap();
        assert_eq!(rt.steps().len(), STEPS);
        rt.set_input_f32("x", &[0.5; 8]).unwrap();
        for _ in 0..20 {
            rt.run().unwrap();
        }
        let mut per_step = Vec::new();
        for _ in 0..200 {
            let t = Instant::now();
            rt.run().unwrap();
            per_step.push(t.elapsed().as_secs_f64() * 1e6 / STEPS as f64);
        }
        per_step.sort_by(f64::total_cmp);
        println!(
            "{STEPS} tiny steps, {threads} thread(s): median {:.3} us per step (min {:.3}, p90 {:.3}); target < 2 us",
            per_step[per_step.len() / 2],
            per_step[0],
            per_step[per_step.len() * 9 / 10]
        );
    }
}

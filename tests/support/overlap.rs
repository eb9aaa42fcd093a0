//! How much two devices' compute streams ran at the same time, from traced
//! runs: the tests' evidence that the executor runs streams concurrently
//! (an executor that ran them one after another would pass every
//! output-equality test, and shows no overlap here).

use ir::plan::StreamKind;
use runtime::Runtime;

/// The least share of the less busy device's step time that two compute
/// streams must run together in the best of 10 runs, in the tests that assert
/// concurrency (measured 0.77-0.92 on a 2-core host with a CI run beside them;
/// a sequential executor gives 0).
pub const MIN_OVERLAP: f64 = 0.2;

/// The largest share, over `runs` traced runs, of the less busy compute
/// stream's step time during which the first two compute streams both ran
/// steps (0.0 to 1.0). Inputs must be set. Best of several: on a loaded
/// machine one run's threads may be descheduled; a sequential executor
/// scores 0 in every run.
pub fn best_compute_overlap(rt: &mut Runtime, runs: usize) -> f64 {
    let compute: Vec<u32> = (rt.plan().streams.iter().enumerate())
        .filter(|(_, s)| s.kind == StreamKind::Compute)
        .map(|(i, _)| i as u32)
        .collect();
    assert!(compute.len() >= 2, "a plan with one compute stream");
    let (a, b) = (compute[0], compute[1]);
    let mut best: f64 = 0.0;
    for _ in 0..runs {
        let trace = rt.run_traced().expect("a traced run");
        let busy = trace.busy_per_stream();
        let busy_of = |s: u32| busy.iter().find(|(t, _)| *t == s).map_or(0, |&(_, ns)| ns);
        let shorter = busy_of(a).min(busy_of(b)).max(1);
        best = best.max(trace.overlap_ns(a, b) as f64 / shorter as f64);
    }
    best
}

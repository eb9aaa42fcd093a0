//! Runtimes timed side by side for the benchmarks: they take turns in
//! blocks of runs, so the drifts of a shared machine hit all of them.

use runtime::Runtime;
use std::time::Instant;

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median ms per run of each runtime after one warm-up run each, taking
/// turns in `blocks` blocks of `per_block` runs.
pub fn race(rts: &mut [Runtime], blocks: usize, per_block: usize) -> Vec<f64> {
    let mut ms = vec![Vec::new(); rts.len()];
    for rt in rts.iter_mut() {
        rt.run().unwrap();
    }
    for _ in 0..blocks {
        for (rt, times) in rts.iter_mut().zip(ms.iter_mut()) {
            for _ in 0..per_block {
                let t = Instant::now();
                rt.run().unwrap();
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    ms.into_iter().map(median).collect()
}

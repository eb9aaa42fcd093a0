//! A short calibration of this host's CPU for the cost model: the rates a
//! [`Throughput`] holds, measured by compiling and running tiny plans on the
//! runtime, so what is measured is what plans will run (the same kernels, the
//! same thread pool, every core).
//!
//! Each rate is the best of a few timed runs after a warm-up run (the best,
//! because a calibration wants what the machine can do, not the noise of the
//! moment). The whole calibration takes well under a second of runs plus the
//! kernels' preparation.
//!
//! Invariant: every rate returned is finite and > 0 (a measurement that came
//! out as zero time is clamped), so the target built from it validates.

use crate::{Error, Result};
use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::{PinRule, PlacementOptions};
use compiler::target::{MatmulGflops, Target, Throughput};
use ir::{DType, Graph, GraphBuilder};
use runtime::{LoadOptions, Runtime, Weights};
use std::sync::Arc;
use std::time::Instant;

/// Matmul shape of the rate measurements: a 1024x1024 weight times 128
/// columns (a prefill-sized product that fits no cache level entirely).
const MM_K: i64 = 1024;
const MM_M: i64 = 1024;
const MM_N: i64 = 128;
/// Elements of each operand of the memory-rate measurement (32 MiB of f32:
/// far beyond the caches).
const MEM_ELEMENTS: i64 = 8 << 20;
/// Steps of the launch-overhead measurement, and their (tiny) size.
const LAUNCH_STEPS: usize = 64;
const LAUNCH_SIZE: i64 = 32;
/// Timed runs per measurement (after one warm-up).
const RUNS: usize = 5;

/// What the calibration measured, with the figures it came from.
#[derive(Clone, Debug)]
pub struct Calibration {
    /// The rates, as the cost model reads them.
    pub throughput: Throughput,
    /// Wall time of the whole calibration, ms.
    pub took_ms: f64,
}

/// One matmul of a `dtype` weight: `w · x`.
fn matmul_graph(dtype: DType) -> Result<Graph, ir::Error> {
    let mut b = GraphBuilder::new(format!("calibrate_mul_mat_{dtype}"));
    let w = b.weight("w", dtype, [MM_K, MM_M, 1, 1])?;
    let x = b.weight("x", DType::F32, [MM_K, MM_N, 1, 1])?;
    let y = b.mul_mat("y", w, x)?;
    b.mark_output(y)?;
    b.finish()
}

/// One memory-bound add: reads two big operands, writes a third.
fn memory_graph() -> Result<Graph, ir::Error> {
    let mut b = GraphBuilder::new("calibrate_memory");
    let x = b.weight("x", DType::F32, [MEM_ELEMENTS, 1, 1, 1])?;
    let z = b.weight("z", DType::F32, [MEM_ELEMENTS, 1, 1, 1])?;
    let y = b.add("y", x, z)?;
    b.mark_output(y)?;
    b.finish()
}

/// A chain of tiny matrix-vector products (matmuls are never fused, so each
/// is its own step): the time per step is the cost of starting one.
fn launch_graph() -> Result<Graph, ir::Error> {
    let mut b = GraphBuilder::new("calibrate_launch");
    let w = b.weight("w", DType::F32, [LAUNCH_SIZE, LAUNCH_SIZE, 1, 1])?;
    let mut h = b.weight("h0", DType::F32, [LAUNCH_SIZE, 1, 1, 1])?;
    for i in 0..LAUNCH_STEPS {
        h = b.mul_mat(format!("h{}", i + 1), w, h)?;
    }
    b.mark_output(h)?;
    b.finish()
}

/// Compiles `graph` for the `cpu` preset, loads it with random weights on
/// `threads` threads, and returns the best time of [`RUNS`] runs, in seconds.
fn best_run_seconds(graph: &Graph, threads: usize) -> Result<f64> {
    let target = Target::preset("cpu")
        .ok_or_else(|| Error::Usage("the cpu target preset is missing".to_string()))?;
    let options = LoadOptions {
        threads,
        ..LoadOptions::default()
    };
    best_run_seconds_on(graph, &target, &CompileOptions::default(), &options)
}

/// The best of [`RUNS`] timed runs (after a warm-up) of `graph` compiled for
/// `target` with `compile_options` and loaded with random weights, in seconds.
fn best_run_seconds_on(
    graph: &Graph,
    target: &Target,
    compile_options: &CompileOptions,
    options: &LoadOptions,
) -> Result<f64> {
    let plan = compile(graph, target, compile_options)?.plan;
    let mut rt = Runtime::load(Arc::new(plan), Weights::Random { seed: 1 }, options)?;
    rt.run()?;
    let mut best = f64::INFINITY;
    for _ in 0..RUNS {
        let t = Instant::now();
        rt.run()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    // A run never takes zero time; clamp so every rate stays finite.
    Ok(best.max(1e-9))
}

/// Measures this host's CPU rates on `threads` threads.
pub fn calibrate(threads: usize) -> Result<Calibration> {
    let start = Instant::now();
    let mm_flops = 2.0 * (MM_K * MM_M * MM_N) as f64;
    let gflops = |dtype| -> Result<f64> {
        Ok(mm_flops / best_run_seconds(&matmul_graph(dtype)?, threads)? / 1e9)
    };
    let matmul_gflops = MatmulGflops {
        f32: gflops(DType::F32)?,
        f16: gflops(DType::F16)?,
        quantized: gflops(DType::Q4_0)?,
    };
    // Two operands read, one written (the Throughput doc's byte count).
    let mem_bytes = 3.0 * 4.0 * MEM_ELEMENTS as f64;
    let memory_gbps = mem_bytes / best_run_seconds(&memory_graph()?, threads)? / 1e9;
    let launch = best_run_seconds(&launch_graph()?, threads)?;
    let launch_overhead_us = launch / LAUNCH_STEPS as f64 * 1e6;
    Ok(Calibration {
        throughput: Throughput {
            matmul_gflops,
            memory_gbps,
            launch_overhead_us,
        },
        took_ms: start.elapsed().as_secs_f64() * 1e3,
    })
}

/// Measures the matmul rates of the first device of the ggml RPC server
/// `servers` holds (one server): the same products as [`calibrate`], every
/// operand on the server (`cpu+rpc0` with every weight pinned to `rpc0`), so a
/// run is one graph sent and its result read back. `transfer_us(bytes)` is
/// the link's time for reading back `bytes` (from the measured link), taken
/// off each run so that the rate is the server's alone.
pub fn remote_matmul_gflops(
    servers: Arc<runtime::device::rpc::device::RemoteServers>,
    transfer_us: &dyn Fn(u64) -> f64,
) -> Result<MatmulGflops> {
    let target = Target::preset("cpu+rpc0")
        .ok_or_else(|| Error::Usage("the cpu+rpc0 target preset is missing".to_string()))?;
    let everything_remote = PinRule::parse(".=rpc0", &target)?;
    let compile_options = CompileOptions {
        placement: PlacementOptions {
            pins: vec![everything_remote],
            ..PlacementOptions::default()
        },
        ..CompileOptions::default()
    };
    let options = LoadOptions {
        threads: 1,
        rpc: Some(servers),
        ..LoadOptions::default()
    };
    let mm_flops = 2.0 * (MM_K * MM_M * MM_N) as f64;
    let result_bytes = (4 * MM_M * MM_N) as u64;
    let gflops = |dtype| -> Result<f64> {
        let run = best_run_seconds_on(&matmul_graph(dtype)?, &target, &compile_options, &options)?;
        // What is left after the read-back, never below a tenth of the run
        // (a link measured slower than it is must not make the rate absurd).
        let compute = (run - transfer_us(result_bytes) * 1e-6).max(run / 10.0);
        Ok(mm_flops / compute / 1e9)
    };
    Ok(MatmulGflops {
        f32: gflops(DType::F32)?,
        f16: gflops(DType::F16)?,
        quantized: gflops(DType::Q4_0)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_graphs_are_valid_and_measure_positive_rates() {
        for g in [
            matmul_graph(DType::F32),
            matmul_graph(DType::Q4_0),
            memory_graph(),
            launch_graph(),
        ] {
            g.expect("a valid calibration graph");
        }
        let c = calibrate(1).expect("calibration runs");
        let t = &c.throughput;
        let m = &t.matmul_gflops;
        for rate in [
            m.f32,
            m.f16,
            m.quantized,
            t.memory_gbps,
            t.launch_overhead_us,
        ] {
            assert!(rate.is_finite() && rate > 0.0, "{t:?}");
        }
        // Sanity, not speed: a 2-core host does neither 10 TFLOP/s nor 10 MFLOP/s.
        assert!(m.f32 > 0.01 && m.f32 < 10_000.0, "{t:?}");
    }
}

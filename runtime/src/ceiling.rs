//! The machine's ceilings, measured in the same run as a benchmark so that
//! every speed we print stands beside what this machine can do at that moment:
//! memory bandwidth (memcpy, counted as bytes read + bytes written) and one
//! core's f32 FMA peak (an FMA loop with enough independent chains to hide
//! latency, at the widest vector width the CPU has).

use std::time::Instant;

/// What one measurement found.
#[derive(Clone, Copy, Debug)]
pub struct Ceilings {
    /// memcpy of a buffer far larger than the caches, one thread: GB/s of
    /// traffic (read + write, so a copy of N bytes moves 2N).
    pub memcpy_gbps: f64,
    /// One core's f32 FMA throughput, GFLOP/s (an FMA counts 2 flops).
    pub fma_gflops_per_core: f64,
    /// The vector width the FMA loop used: "avx512", "avx2" or "scalar".
    pub fma_isa: &'static str,
}

impl std::fmt::Display for Ceilings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "machine ceiling (this run): memcpy {:.1} GB/s (read+write, 1 thread), f32 FMA peak {:.1} GFLOP/s per core ({})",
            self.memcpy_gbps, self.fma_gflops_per_core, self.fma_isa
        )
    }
}

/// Measures both ceilings (about half a second).
pub fn measure() -> Ceilings {
    let (fma_gflops_per_core, fma_isa) = fma_peak_gflops();
    Ceilings {
        memcpy_gbps: memcpy_gbps(256 << 20, 5),
        fma_gflops_per_core,
        fma_isa,
    }
}

/// Best of `runs` copies of a `bytes`-sized buffer: GB/s of read + write traffic.
pub fn memcpy_gbps(bytes: usize, runs: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let mut best = f64::INFINITY;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        std::hint::black_box(&mut dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    2.0 * bytes as f64 / best / 1e9
}

/// Like [`memcpy_gbps`], with the buffer split into `threads` equal parts
/// copied at the same time by as many threads: the bandwidth the whole
/// machine reaches with that many cores.
pub fn memcpy_gbps_threads(bytes: usize, runs: usize, threads: usize) -> f64 {
    let threads = threads.max(1);
    let part = bytes / threads;
    let src = vec![1u8; part * threads];
    let mut dst = vec![0u8; part * threads];
    let mut best = f64::INFINITY;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        std::thread::scope(|s| {
            for (d, s_) in dst.chunks_mut(part).zip(src.chunks(part)) {
                s.spawn(move || d.copy_from_slice(s_));
            }
        });
        std::hint::black_box(&mut dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    2.0 * (part * threads) as f64 / best / 1e9
}

/// One core's FMA peak, GFLOP/s, and the ISA used.
pub fn fma_peak_gflops() -> (f64, &'static str) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature was detected just above.
            return (best_of(|| unsafe { x86::fma_loop_avx512() }), "avx512");
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features were detected just above.
            return (best_of(|| unsafe { x86::fma_loop_avx2() }), "avx2");
        }
    }
    (best_of(scalar_fma_loop), "scalar")
}

/// Best GFLOP/s of a few timings of `f`, which returns the flops it did.
fn best_of(f: impl Fn() -> f64) -> f64 {
    let mut best: f64 = 0.0;
    for _ in 0..5 {
        let t = Instant::now();
        let flops = f();
        best = best.max(flops / t.elapsed().as_secs_f64() / 1e9);
    }
    best
}

const FMA_ITERATIONS: usize = 4_000_000;

fn scalar_fma_loop() -> f64 {
    let mut acc = [0.0f32; 8];
    let x = std::hint::black_box(0.999_999f32);
    for _ in 0..FMA_ITERATIONS / 8 {
        for a in &mut acc {
            *a = a.mul_add(x, 1e-7);
        }
    }
    std::hint::black_box(acc);
    (FMA_ITERATIONS * 2) as f64
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// 12 independent accumulators: enough to cover FMA latency (4 cycles)
    /// times two FMA ports.
    macro_rules! fma_loop {
        ($set1:ident, $fma:ident, $zero:ident, $lanes:expr) => {{
            let x = $set1(std::hint::black_box(0.999_999f32));
            let y = $set1(1e-7);
            let mut a = [$zero(); 12];
            for _ in 0..super::FMA_ITERATIONS / 12 {
                for v in &mut a {
                    *v = $fma(*v, x, y);
                }
            }
            std::hint::black_box(&a);
            (super::FMA_ITERATIONS / 12 * 12 * $lanes * 2) as f64
        }};
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn fma_loop_avx2() -> f64 {
        fma_loop!(_mm256_set1_ps, _mm256_fmadd_ps, _mm256_setzero_ps, 8)
    }

    #[target_feature(enable = "avx512f")]
    pub(super) fn fma_loop_avx512() -> f64 {
        fma_loop!(_mm512_set1_ps, _mm512_fmadd_ps, _mm512_setzero_ps, 16)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ceilings_are_positive_and_finite() {
        let gbps = super::memcpy_gbps(1 << 20, 2);
        let split = super::memcpy_gbps_threads(1 << 20, 2, 2);
        assert!(split.is_finite() && split > 0.0);
        let (gflops, _) = super::fma_peak_gflops();
        assert!(gbps.is_finite() && gbps > 0.0);
        assert!(gflops.is_finite() && gflops > 0.0);
    }
}

//! JIT kernels vs the machine's ceilings: silu(a) * b over 16M floats (1 and 2
//! threads, with and without streaming stores, each beside memcpy on as many
//! threads measured just before it; and in L2, for its compute alone),
//! rms_norm(x) * weight, soft_max at 128x128x8 with a mask, and the compile
//! time per kernel.
//!
//! GB/s count bytes read + bytes written once each (what the kernel must move),
//! beside memcpy's GB/s measured in the same run (also read + write).

use ir::DType;
use ir::plan::{BinaryFn, Expr, UnaryFn};
use runtime::device::cpu::jit::{Jit, JitOptions, StreamingStores};
use runtime::device::cpu::{CpuKernel, RawTensor, ThreadPool};
use std::time::Instant;

/// A packed F32 or F16 tensor in a 64-byte-aligned buffer.
struct Tensor {
    mem: Vec<u64>,
    dtype: DType,
    ne: [i64; 4],
}

impl Tensor {
    fn new(dtype: DType, ne: [i64; 4], fill: f32) -> Tensor {
        let n = ne.iter().product::<i64>() as usize;
        let es = if dtype == DType::F16 { 2 } else { 4 };
        let mut t = Tensor {
            mem: vec![0; (n * es).div_ceil(8) + 8],
            dtype,
            ne,
        };
        let base = t.base();
        for i in 0..n {
            // SAFETY: i < n elements fit in the buffer past the alignment offset.
            unsafe {
                if dtype == DType::F16 {
                    let v = half::f16::from_f32(fill * ((i % 97) as f32 / 97.0 - 0.5));
                    base.cast::<u16>().add(i).write(v.to_bits());
                } else {
                    base.cast::<f32>()
                        .add(i)
                        .write(fill * ((i % 97) as f32 / 97.0 - 0.5));
                }
            }
        }
        t
    }

    fn base(&mut self) -> *mut u8 {
        let p = self.mem.as_mut_ptr().cast::<u8>();
        p.wrapping_add(p.align_offset(64))
    }

    fn bytes(&self) -> u64 {
        let es = if self.dtype == DType::F16 { 2 } else { 4 };
        self.ne.iter().product::<i64>() as u64 * es
    }

    fn raw(&mut self) -> RawTensor {
        let es = if self.dtype == DType::F16 { 2 } else { 4 };
        let ne = self.ne;
        let nb1 = es * ne[0] as u64;
        RawTensor {
            data: self.base(),
            dtype: self.dtype,
            ne,
            nb: [es, nb1, nb1 * ne[1] as u64, nb1 * (ne[1] * ne[2]) as u64],
        }
    }
}

/// Best wall time of `runs` runs, seconds.
fn best_of(kernel: &dyn CpuKernel, pool: &ThreadPool, runs: usize) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..runs {
        let t = Instant::now();
        pool.run(&|ctx| {
            // SAFETY: the tensors outlive the benchmark; no scratch is needed.
            unsafe { kernel.run(ctx, std::ptr::null_mut()) }
        });
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

fn main() {
    let ceilings = runtime::ceiling::measure();
    println!("{ceilings}");
    let memcpy = ceilings.memcpy_gbps;
    let report = |name: &str, secs: f64, bytes: u64| {
        let gbps = bytes as f64 / secs / 1e9;
        println!(
            "{name:<48} {:>9.3} ms {:>7.1} GB/s  {:>5.1}% of memcpy ({memcpy:.1} GB/s)",
            secs * 1e3,
            gbps,
            100.0 * gbps / memcpy
        );
    };

    // silu(a) * b over 16M floats.
    let n = 16 << 20;
    let ne = [4096, (n / 4096) as i64, 1, 1];
    let mut a = Tensor::new(DType::F32, ne, 8.0);
    let mut b = Tensor::new(DType::F32, ne, 2.0);
    let mut out = Tensor::new(DType::F32, ne, 0.0);
    let silu_mul = [
        Expr::Input(0),
        Expr::Input(1),
        Expr::Unary(UnaryFn::Silu, 0),
        Expr::Binary(BinaryFn::Mul, 2, 1),
    ];
    let traffic = a.bytes() + b.bytes() + out.bytes();
    for streaming in [StreamingStores::Never, StreamingStores::Always] {
        let jit = Jit::with_options(JitOptions { streaming }).expect("LLVM JIT");
        let kernel = jit
            .prepare_fused(&silu_mul, out.raw(), &[a.raw(), b.raw()])
            .expect("prepare");
        for threads in [1, 2] {
            let pool = ThreadPool::new(threads);
            best_of(&*kernel, &pool, 2);
            // The ceiling for this row: memcpy on as many threads, measured
            // just before it (the machine's bandwidth drifts by ~10% over
            // seconds), and the better of two measurements.
            let copy = (0..2)
                .map(|_| runtime::ceiling::memcpy_gbps_threads(256 << 20, 3, threads))
                .fold(0.0, f64::max);
            let secs = best_of(&*kernel, &pool, 10);
            let gbps = traffic as f64 / secs / 1e9;
            println!(
                "silu(a)*b 16M f32, {threads} thr, {:<17} {:>9.3} ms {:>7.1} GB/s  {:>5.1}% of memcpy on {threads} thr ({copy:.1} GB/s, just before)",
                if streaming == StreamingStores::Always {
                    "streaming stores"
                } else {
                    "normal stores"
                },
                secs * 1e3,
                gbps,
                100.0 * gbps / copy
            );
        }
    }

    // The same kernel over 32K floats (384 KiB in all, L2-resident): its
    // compute speed without DRAM, to tell compute-bound from memory-bound.
    let small = [4096, 8, 1, 1];
    let (mut sa, mut sb, mut so) = (
        Tensor::new(DType::F32, small, 8.0),
        Tensor::new(DType::F32, small, 2.0),
        Tensor::new(DType::F32, small, 0.0),
    );
    let jit = Jit::new().expect("LLVM JIT");
    let kernel = jit
        .prepare_fused(&silu_mul, so.raw(), &[sa.raw(), sb.raw()])
        .expect("prepare");
    let pool = ThreadPool::new(1);
    best_of(&*kernel, &pool, 100);
    let secs = best_of(&*kernel, &pool, 2000);
    let elems = 4096.0 * 8.0;
    println!(
        "{:<48} {:>9.3} ns per element (in L2), {:.1} ms-equivalent for 16M",
        "silu(a)*b 32K f32, 1 thr",
        secs * 1e9 / elems,
        secs / elems * n as f64 * 1e3
    );

    // rms_norm(x) * weight over 4096 rows of 4096.
    let jit = Jit::new().expect("LLVM JIT");
    let rms_mul = [
        Expr::RmsNorm {
            input: 0,
            eps: 1e-6,
        },
        Expr::Input(1),
        Expr::Binary(BinaryFn::Mul, 0, 1),
    ];
    let mut w = Tensor::new(DType::F32, [4096, 1, 1, 1], 1.0);
    let kernel = jit
        .prepare_fused(&rms_mul, out.raw(), &[a.raw(), w.raw()])
        .expect("prepare");
    for threads in [1, 2] {
        let pool = ThreadPool::new(threads);
        best_of(&*kernel, &pool, 2);
        let secs = best_of(&*kernel, &pool, 10);
        let label = format!("rms_norm(x)*w 4096x4096 f32, {threads} thr");
        report(&label, secs, a.bytes() + out.bytes() + w.bytes());
    }

    // soft_max(x * scale + mask) at 128 x 128 x 8 heads, F16 mask.
    let sne = [128, 128, 8, 1];
    let mut logits = Tensor::new(DType::F32, sne, 6.0);
    let mut probs = Tensor::new(DType::F32, sne, 0.0);
    let mut mask = Tensor::new(DType::F16, [128, 128, 1, 1], 1.0);
    let kernel = jit
        .prepare_soft_max(0.088, 0.0, probs.raw(), logits.raw(), Some(mask.raw()))
        .expect("prepare");
    for threads in [1, 2] {
        let pool = ThreadPool::new(threads);
        best_of(&*kernel, &pool, 20);
        let secs = best_of(&*kernel, &pool, 200);
        let label = format!("soft_max 128x128x8 f32, f16 mask, {threads} thr");
        report(&label, secs, logits.bytes() + probs.bytes() + mask.bytes());
        let elems = 128.0 * 128.0 * 8.0;
        println!(
            "{:<48} {:>9.2} ns per element (in cache)",
            "",
            secs * 1e9 / elems
        );
    }

    // Compile time: every distinct kernel above, plus a fresh JIT per body.
    let stats = jit.stats();
    println!(
        "JIT: {} kernels compiled in {:.1} ms ({:.1} ms each), {} cache hits",
        stats.kernels_compiled,
        stats.compile_time.as_secs_f64() * 1e3,
        stats.compile_time.as_secs_f64() * 1e3 / stats.kernels_compiled.max(1) as f64,
        stats.cache_hits
    );
    for (name, body) in [
        ("silu(a)*b", &silu_mul[..]),
        ("rms_norm(x)*w", &rms_mul[..]),
    ] {
        let jit = Jit::new().expect("LLVM JIT");
        let t = Instant::now();
        let second = if name == "silu(a)*b" {
            b.raw()
        } else {
            w.raw()
        };
        let inputs = [a.raw(), second];
        drop(
            jit.prepare_fused(body, out.raw(), &inputs)
                .expect("prepare"),
        );
        println!(
            "compile {name:<16} {:>7.1} ms (generate + O3 + codegen, host {} lanes)",
            t.elapsed().as_secs_f64() * 1e3,
            jit.vector_width()
        );
    }
    println!("{ceilings}");
}

//! mul_mat speed beside this machine's ceilings (measured in the same run).
//!
//! - f32 1024^3 (gemm): GFLOP/s and % of the FMA peak of the cores used;
//! - Q8_0 / Q4_0 / Q4_1 / Q4_K / Q5_K / Q6_K 4096 x 4096 matrix-vector
//!   (decode): GB/s of weight
//!   bytes read and % of the memcpy ceiling (read + write, 1 thread). Several
//!   weight copies, together larger than the L3 cache, are used in turn so
//!   that each product reads its weights from memory;
//! - llama2l's f32 weight products (N = 128): GFLOP/s, on one product
//!   repeated (its weights partly in L2) or, with `MATMUL_COMPUTE_COPIES=N`,
//!   on N distinct products in turn (weights from L3, as in a model);
//! - Q4_1 prefill (N = 128) at a small model's FFN sizes: GFLOP/s (K-quants
//!   on both their routes, the integer one and f32 gemm);
//! - SmolLM2 Q4_K_M's `ffn_down` (1536 x 576) as Q4_1, Q4_K, Q6_K and Q5_0
//!   and its `ffn_up` (576 x 1536) as Q4_1 and Q5_0: matrix-vector products
//!   on 1 and 2 threads;
//! - Gemma 3 270M Q4_K_M's weight products at N = 128 (`gemma3`);
//! - SmolLM2-135M's exact shapes (Q4_1 layers, Q8_0 tied output head) for
//!   N = 1 (weights from memory, as in decode) and N = 128 (prefill), and the
//!   tokens/s those timings add up to for the whole model's mul_mats
//!   (30 layers of q, k, v, o, gate, up, down, then the head).
//!
//! Run: `cargo bench -p ggplan-runtime --bench matmul`.

use ir::{DType, Layout};
use runtime::ceiling::{self, Ceilings};
use runtime::device::cpu::matmul::packed::RepackCache;
use runtime::device::cpu::matmul::{Precision, Route, prepare_mul_mat_on, prepare_mul_mat_weights};
use runtime::device::cpu::{CpuKernel, RawTensor, ThreadPool};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// 64-byte aligned bytes.
struct Buf(Vec<[u64; 8]>);

impl Buf {
    fn new(bytes: usize) -> Buf {
        Buf(vec![[0; 8]; bytes.div_ceil(64).max(1)])
    }
    fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr() as *mut u8
    }
}

/// A packed tensor of `dtype` with pseudo-random values in [-1, 1).
fn tensor(dtype: DType, ne: [i64; 4], seed: u64) -> (Buf, RawTensor) {
    let layout = Layout::contiguous(dtype, ne).unwrap();
    let mut buf = Buf::new(layout.span_bytes() as usize);
    let mut rng = kernels::testing::Rng::new(seed);
    let k = ne[0] as usize;
    let row_bytes = layout.row_bytes() as usize;
    let mut x = vec![0f32; k];
    for r in 0..layout.n_rows() as usize {
        for v in &mut x {
            *v = rng.uniform(-1.0, 1.0) as f32;
        }
        // SAFETY: row r of the packed buffer.
        let out =
            unsafe { std::slice::from_raw_parts_mut(buf.ptr().add(r * row_bytes), row_bytes) };
        kernels::quant::quantize_row(dtype, &x, out);
    }
    let raw = RawTensor {
        data: buf.ptr(),
        dtype,
        ne,
        nb: layout.nb,
    };
    (buf, raw)
}

/// This thread's CPU time, seconds.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Seconds per run of `kernels` (used in turn) on a pool of `nth`: the best
/// wall time, and the best over runs of the slowest thread's CPU time (what
/// an otherwise idle machine would take: the CPU time excludes the slices
/// when other processes had the core).
fn time(kernels: &[Box<dyn CpuKernel>], nth: usize, runs: usize) -> (f64, f64) {
    let pool = ThreadPool::new(nth);
    let mut scratch = Buf::new(kernels.iter().map(|k| k.scratch_bytes()).max().unwrap());
    let sp = scratch.ptr() as usize;
    let (mut wall, mut cpu) = (f64::INFINITY, f64::INFINITY);
    for i in 0..runs + kernels.len() {
        let kernel = &kernels[i % kernels.len()];
        let slowest = AtomicU64::new(0);
        let t = Instant::now();
        pool.run(&|ctx| {
            let c = thread_cpu_seconds();
            // SAFETY: tensors and scratch outlive the run.
            unsafe { kernel.run(ctx, sp as *mut u8) };
            slowest.fetch_max(((thread_cpu_seconds() - c) * 1e9) as u64, Relaxed);
        });
        if i >= kernels.len() {
            wall = wall.min(t.elapsed().as_secs_f64());
            cpu = cpu.min(slowest.load(Relaxed) as f64 * 1e-9);
        }
    }
    (wall, cpu)
}

/// `copies` independent products dst = src0 x src1 (distinct src0 each),
/// src0 prepared as a weight, as the runtime does (repacked on AVX2), on
/// the runtime's route or on `route`.
fn products_on(
    t0: DType,
    (k, m, n): (i64, i64, i64),
    copies: usize,
    route: Option<Route>,
) -> (Vec<Buf>, Vec<Box<dyn CpuKernel>>, String) {
    let mut keep = Vec::new();
    let mut kernels = Vec::new();
    let repack = RepackCache::new();
    for c in 0..copies {
        let (b0, a) = tensor(t0, [k, m, 1, 1], 1 + c as u64);
        let (b1, b) = tensor(DType::F32, [k, n, 1, 1], 1000 + c as u64);
        let (b2, d) = tensor(DType::F32, [m, n, 1, 1], 2000 + c as u64);
        // SAFETY: src0 is written above and never again; its buffer lives
        // as long as the kernel (both returned together).
        let kernel = unsafe {
            match route {
                None => prepare_mul_mat_weights(d, a, b, Precision::Fast, &repack),
                Some(r) => prepare_mul_mat_on(d, a, b, r, Some(&repack)),
            }
        }
        .unwrap();
        keep.extend([b0, b1, b2]);
        kernels.push(kernel);
    }
    let what = kernels[0].describe();
    (keep, kernels, what)
}

/// CPU seconds per product of the slowest thread, for 1 and 2 threads.
fn compute_bound(c: &Ceilings, t0: DType, kmn: (i64, i64, i64), runs: usize) -> [f64; 2] {
    compute_bound_on(c, t0, kmn, runs, None)
}

/// [`compute_bound`] on `route` (None: the runtime's choice).
fn compute_bound_on(
    c: &Ceilings,
    t0: DType,
    kmn: (i64, i64, i64),
    runs: usize,
    route: Option<Route>,
) -> [f64; 2] {
    // One product's weights stay in L2 between runs (for the smaller
    // shapes); in a model they come from L3: `MATMUL_COMPUTE_COPIES=32`
    // runs that many distinct products in turn.
    let copies = std::env::var("MATMUL_COMPUTE_COPIES").map_or(1, |v| v.parse().unwrap());
    let (_keep, kernels, what) = products_on(t0, kmn, copies, route);
    let (k, m, n) = kmn;
    let flops = 2.0 * (k * m * n) as f64;
    let mut secs = [0.0; 2];
    for nth in [1, 2] {
        let (wall, cpu) = time(&kernels, nth, runs);
        secs[nth - 1] = cpu;
        let (g_wall, g_cpu) = (flops / wall / 1e9, flops / cpu / 1e9);
        let peak = nth as f64 * c.fma_gflops_per_core;
        println!(
            "{what:36} K={k} M={m} N={n} {nth} thr: {g_cpu:6.1} GFLOP/s = {:5.1}% of {nth} x FMA peak {:.1} (CPU time; wall {g_wall:.1} = {:.1}%)",
            100.0 * g_cpu / peak,
            c.fma_gflops_per_core,
            100.0 * g_wall / peak
        );
    }
    secs
}

/// CPU seconds per product of the slowest thread, for 1 and 2 threads.
fn memory_bound(c: &Ceilings, t0: DType, k: i64, m: i64) -> [f64; 2] {
    memory_bound_on(c, t0, k, m, None)
}

/// [`memory_bound`] on `route` (None: the runtime's choice).
fn memory_bound_on(c: &Ceilings, t0: DType, k: i64, m: i64, route: Option<Route>) -> [f64; 2] {
    let weight_bytes = (Layout::contiguous(t0, [k, m, 1, 1]).unwrap().span_bytes()) as f64;
    // Enough copies to exceed the L3 cache (at least 96 MB in all).
    let copies = match std::env::var("MATMUL_BENCH_COPIES") {
        Ok(v) => v.parse().unwrap(),
        Err(_) => ((96e6 / weight_bytes).ceil() as usize).max(2),
    };
    let (_keep, kernels, what) = products_on(t0, (k, m, 1), copies, route);
    let mut secs = [0.0; 2];
    for nth in [1, 2] {
        let (wall, cpu) = time(&kernels, nth, 40);
        secs[nth - 1] = cpu;
        let (g_wall, g_cpu) = (weight_bytes / wall / 1e9, weight_bytes / cpu / 1e9);
        println!(
            "{what:36} {k}x{m} matvec {nth} thr: {g_cpu:5.1} GB/s of weights = {:5.1}% of memcpy {:.1} GB/s (CPU time; wall {g_wall:.1} = {:.1}%)",
            100.0 * g_cpu / c.memcpy_gbps,
            c.memcpy_gbps,
            100.0 * g_wall / c.memcpy_gbps
        );
    }
    secs
}

/// SmolLM2-135M's mul_mats: (dtype, K, M, uses per token: 30 layers or the head).
const SMOLLM2: [(DType, i64, i64, usize); 5] = [
    (DType::Q4_1, 576, 576, 60),  // attn_q, attn_output
    (DType::Q4_1, 576, 192, 60),  // attn_k, attn_v
    (DType::Q4_1, 576, 1536, 60), // ffn_gate, ffn_up
    (DType::Q4_1, 1536, 576, 30), // ffn_down
    (DType::Q8_0, 576, 49152, 1), // token embedding as the output head
];

/// Every SmolLM2 shape at N = 1 and N = 128, then the model's mul_mat time
/// per token (decode) and per 128-token prefill, as tokens/s.
fn smollm2(c: &Ceilings) {
    let (mut decode, mut prefill) = ([0.0; 2], [0.0; 2]);
    for (t, k, m, uses) in SMOLLM2 {
        let d = memory_bound(c, t, k, m);
        let p = compute_bound(c, t, (k, m, 128), 10);
        for i in 0..2 {
            decode[i] += uses as f64 * d[i];
            prefill[i] += uses as f64 * p[i];
        }
    }
    for nth in [1, 2] {
        println!(
            "SmolLM2-135M mul_mats only, {nth} thr: decode {:.1} tokens/s ({:.2} ms/token), pp128 {:.1} tokens/s (CPU time)",
            1.0 / decode[nth - 1],
            1e3 * decode[nth - 1],
            128.0 / prefill[nth - 1]
        );
    }
}

/// The two routes for quantized weights against the number of src1 columns:
/// where `f32_route_min_columns` should sit on this machine.
fn crossover(c: &Ceilings) {
    for (t, k, m) in [
        (DType::Q4_1, 576, 1536),
        (DType::Q5_0, 576, 1536),
        (DType::Q5_1, 576, 1536),
        (DType::Q8_0, 576, 4096),
        (DType::Q4_K, 1536, 1536),
        (DType::Q5_K, 1536, 1536),
        (DType::Q6_K, 1536, 1536),
    ] {
        let integer = match t {
            DType::Q4_K | DType::Q5_K | DType::Q6_K => Route::KQuantDot,
            _ => Route::Int8Dot,
        };
        // K-quants also past 512: their integer route still led there.
        let beyond: &[i64] = if integer == Route::KQuantDot {
            &[1024, 2048]
        } else {
            &[]
        };
        let common = [
            1, 2, 3, 4, 5, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512,
        ];
        for n in common.into_iter().chain(beyond.iter().copied()) {
            let mut line = format!("crossover {t} K={k} M={m} N={n:3} 1 thr:");
            for route in [integer, Route::F32Gemm] {
                let (b0, a) = tensor(t, [k, m, 1, 1], 1);
                let (b1, b) = tensor(DType::F32, [k, n, 1, 1], 2);
                let (b2, d) = tensor(DType::F32, [m, n, 1, 1], 3);
                let repack = RepackCache::default();
                // SAFETY: the weights stay unchanged while the kernel lives.
                let kernel = unsafe { prepare_mul_mat_on(d, a, b, route, Some(&repack)) };
                let kernels = vec![kernel.unwrap()];
                let (_, cpu) = time(&kernels, 1, 20);
                drop((b0, b1, b2));
                let g = 2.0 * (k * m * n) as f64 / cpu / 1e9;
                line += &format!(
                    " {route:?} {g:6.1} GFLOP/s ({:4.1}% of peak)",
                    100.0 * g / c.fma_gflops_per_core
                );
            }
            println!("{line}");
        }
    }
}

fn main() {
    // Optional filters (`cargo bench ... -- f32 q4_0`): run only the cases
    // whose label contains one of them (ignoring case: `q4_k` finds q4_K).
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(|a| a.to_lowercase())
        .collect();
    let want = |label: &str| {
        let label = label.to_lowercase();
        filters.is_empty() || filters.iter().any(|f| label.contains(f.as_str()))
    };
    let c = ceiling::measure();
    println!("{c}");
    if want("f32") {
        compute_bound(&c, DType::F32, (1024, 1024, 1024), 10);
    }
    // llama2l's weight products at 128 tokens (f32 and f16 weights), on
    // gemm and on the runtime's route (panels where the host has them).
    for t in [DType::F32, DType::F16] {
        for kmn in [
            (512, 512, 128),
            (512, 1536, 128),
            (1536, 512, 128),
            (512, 8000, 128),
        ] {
            if want(&format!("{t} llama2l")) {
                let _ = compute_bound_on(&c, t, kmn, 20, Some(Route::F32Gemm));
                let _ = compute_bound(&c, t, kmn, 20);
            }
        }
    }
    for t in [
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::F16,
        DType::F32,
    ] {
        if want(&format!("{t} matvec")) {
            if !t.is_quantized() {
                let _ = memory_bound_on(&c, t, 4096, 4096, Some(Route::F32Gemm));
            }
            let _ = memory_bound(&c, t, 4096, 4096);
        }
    }
    for (t, kmn, runs) in [
        (DType::Q4_1, (576, 1536, 128), 20),
        (DType::Q4_1, (1536, 576, 128), 20),
        (DType::Q8_0, (1536, 576, 128), 20),
        (DType::Q4_0, (1536, 576, 128), 20),
        (DType::Q5_0, (1536, 576, 128), 20),
        (DType::Q5_1, (1536, 576, 128), 20),
        (DType::F16, (1024, 1024, 128), 10),
    ] {
        if want(&format!("{t} prefill")) {
            let _ = compute_bound(&c, t, kmn, runs);
        }
    }
    for t in [DType::Q4_K, DType::Q5_K, DType::Q6_K] {
        for kmn in [(1536, 576, 128), (4096, 4096, 128)] {
            if want(&format!("{t} prefill")) {
                for route in [Route::KQuantDot, Route::F32Gemm] {
                    let _ = compute_bound_on(&c, t, kmn, 10, Some(route));
                }
            }
        }
    }
    // Gemma 3 270M Q4_K_M's weight products at 128 tokens (n_embd 640,
    // ffn 2048, 4 query heads and 1 KV head of 256): Q5_0 q / gate / up,
    // Q8_0 v, Q4_K attn_output, Q4_K and Q6_K ffn_down; and Q5_0 at K = 768
    // and 512 (no pair tail) beside K = 640 (two groups and a pair tail).
    for (t, kmn) in [
        (DType::Q5_0, (640, 2048, 128)),
        (DType::Q5_0, (640, 1024, 128)),
        (DType::Q5_0, (640, 256, 128)),
        (DType::Q5_0, (768, 2048, 128)),
        (DType::Q5_0, (512, 2048, 128)),
        (DType::Q8_0, (640, 256, 128)),
        (DType::Q4_K, (1024, 640, 128)),
        (DType::Q4_K, (2048, 640, 128)),
        (DType::Q6_K, (2048, 640, 128)),
    ] {
        if want(&format!("{t} gemma3")) {
            let _ = compute_bound(&c, t, kmn, 20);
        }
    }
    if want("smollm2") {
        smollm2(&c);
    }
    // SmolLM2 Q4_K_M's ffn_down (K = 1536, M = 576) in each of its formats,
    // against Q4_1: how the K-quant matrix-vector products scale to 2 threads.
    for t in [DType::Q4_1, DType::Q4_K, DType::Q6_K, DType::Q5_0] {
        if want(&format!("{t} ffn_down")) {
            let _ = memory_bound(&c, t, 1536, 576);
        }
    }
    // Its ffn_gate / ffn_up (K = 576, M = 1536; rows end in a pair tail),
    // Q5_0 in Q4_K_M's mix, against Q4_1.
    for t in [DType::Q4_1, DType::Q5_0] {
        if want(&format!("{t} ffn_up")) {
            let _ = memory_bound(&c, t, 576, 1536);
        }
    }
    if want("crossover") {
        crossover(&c);
    }
    println!("{}", ceiling::measure());
}

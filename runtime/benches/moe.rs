//! mul_mat_id (a mixture of experts' product) beside this machine's
//! ceilings, measured in the same run: memcpy bandwidth (read + write, on 1
//! and on 2 threads) and one core's f32 FMA peak.
//!
//! Shapes: Qwen3-30B-A3B's expert `ffn_up` (k = 2048, n = 768, 128 experts,
//! 8 used per token) and a smaller mixture (k = 1024, n = 512, 32 experts, 4
//! used), experts Q4_K or Q8_0, one activation row per token (`b1 = 1`, as
//! llama.cpp's gate and up products), for
//! - decode (`t = 1`): the ids rotate through the experts, so each run reads
//!   experts that the last 15 runs did not (from memory, as a model's layers
//!   do), and
//! - prefill (`t = 128`): each token's experts drawn uniformly, or with
//!   expert 0 in every token (one expert taking a sixth to a quarter of the
//!   pairs: the skewed load);
//!
//! on 1 and 2 threads, through three kernels:
//! - `rows`: the row-by-row kernel (the one before the grouped path: each
//!   expert row dequantized per token, f64 sums);
//! - `f32`: the grouped kernel's f32 route (experts widened to f32, gemm):
//!   what `prepare_op` gives, not knowing the precision;
//! - `int8`: the grouped kernel with 8-bit activations and the experts
//!   repacked as a weight (`Precision::Fast`), mul_mat's integer tiles.
//!
//! Printed per row: time (CPU time of the slowest thread, best of the runs,
//! and wall time), GB/s of expert bytes the run touches (distinct experts
//! used x bytes per expert) against the memcpy ceiling of as many threads,
//! and GFLOP/s (`2 k n n_used t`) against the FMA peak of as many cores.
//!
//! Run: `cargo bench -p ggplan-runtime --bench moe` (arguments filter rows:
//! a row runs when its label, shape, dtype, load and path, contains every
//! argument, e.g. `-- decode q4_k int8`).

use ir::{DType, Layout};
use runtime::ceiling;
use runtime::device::cpu::matmul::Precision;
use runtime::device::cpu::matmul::packed::RepackCache;
use runtime::device::cpu::ops::mul_mat_id_grouped::{prepare_mul_mat_id, prepare_mul_mat_id_rows};
use runtime::device::cpu::{RawTensor, ThreadPool};
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

/// A packed tensor and its view.
struct Tensor {
    buf: Buf,
    raw: RawTensor,
}

impl Tensor {
    fn zeroed(dtype: DType, ne: [i64; 4]) -> Tensor {
        let layout = Layout::contiguous(dtype, ne).unwrap();
        let mut buf = Buf::new(layout.span_bytes() as usize);
        let raw = RawTensor {
            data: buf.ptr(),
            dtype,
            ne,
            nb: layout.nb,
        };
        Tensor { buf, raw }
    }

    fn bytes(&mut self) -> &mut [u8] {
        let n = self.raw.span_bytes() as usize;
        // SAFETY: the buffer holds the tensor's span.
        unsafe { std::slice::from_raw_parts_mut(self.buf.ptr(), n) }
    }
}

/// Experts `[k, n, n_expert]` of `dtype`: four distinct experts of values
/// in [-1, 1), quantized, repeated (the bytes read are what counts).
fn experts(dtype: DType, k: i64, n: i64, n_expert: i64) -> Tensor {
    let mut t = Tensor::zeroed(dtype, [k, n, n_expert, 1]);
    let row_bytes = dtype.row_bytes(k as u64).unwrap() as usize;
    let expert_bytes = row_bytes * n as usize;
    let mut rng = kernels::testing::Rng::new(7);
    let mut x = vec![0f32; k as usize];
    let bytes = t.bytes();
    for r in 0..4.min(n_expert as usize) * n as usize {
        for v in &mut x {
            *v = rng.uniform(-1.0, 1.0) as f32;
        }
        kernels::quant::quantize_row(dtype, &x, &mut bytes[r * row_bytes..(r + 1) * row_bytes]);
    }
    for e in 4..n_expert as usize {
        bytes.copy_within(
            (e % 4) * expert_bytes..(e % 4 + 1) * expert_bytes,
            e * expert_bytes,
        );
    }
    t
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

/// A mixture's shape.
struct Shape {
    name: &'static str,
    k: i64,
    n: i64,
    n_expert: usize,
    n_used: usize,
}

const SHAPES: [Shape; 2] = [
    Shape {
        name: "qwen3-30b-a3b up",
        k: 2048,
        n: 768,
        n_expert: 128,
        n_used: 8,
    },
    Shape {
        name: "small moe",
        k: 1024,
        n: 512,
        n_expert: 32,
        n_used: 4,
    },
];

/// Token loads.
#[derive(Clone, Copy, PartialEq)]
enum Load {
    /// One token, experts rotating run by run.
    Decode,
    /// 128 tokens, experts uniform.
    Prefill,
    /// 128 tokens, expert 0 in every token.
    Skewed,
}

impl Load {
    fn label(self) -> &'static str {
        match self {
            Load::Decode => "decode t=1",
            Load::Prefill => "prefill t=128",
            Load::Skewed => "prefill t=128 skewed",
        }
    }
    fn tokens(self) -> usize {
        if self == Load::Decode { 1 } else { 128 }
    }
}

/// The ids of run `run`: `n_used` distinct experts per token.
fn ids_for(s: &Shape, load: Load, run: usize, rng: &mut kernels::testing::Rng) -> Vec<i32> {
    match load {
        // Runs walk the experts n_used at a time: 16 runs before a repeat
        // for the large shape (8 of its experts are ~7 MB as Q4_K).
        Load::Decode => (0..s.n_used)
            .map(|j| ((run * s.n_used + j) % s.n_expert) as i32)
            .collect(),
        _ => {
            let mut ids = Vec::with_capacity(s.n_used * load.tokens());
            for _ in 0..load.tokens() {
                let mut row: Vec<usize> = if load == Load::Skewed {
                    vec![0]
                } else {
                    vec![]
                };
                while row.len() < s.n_used {
                    let e = rng.below(s.n_expert);
                    if !row.contains(&e) {
                        row.push(e);
                    }
                }
                ids.extend(row.iter().map(|&e| e as i32));
            }
            ids
        }
    }
}

/// The kernels compared.
#[derive(Clone, Copy, PartialEq)]
enum Kernel {
    Rows,
    F32,
    Int8,
}

impl Kernel {
    fn label(self) -> &'static str {
        match self {
            Kernel::Rows => "rows (old)",
            Kernel::F32 => "grouped f32",
            Kernel::Int8 => "grouped int8",
        }
    }
}

/// The operands of one shape and load.
struct Operands {
    /// Each layer's experts.
    layers: Vec<Tensor>,
    b: Tensor,
    ids: Tensor,
    dst: Tensor,
}

/// Ceilings of this run.
struct Ceil {
    memcpy: [f64; 2],
    fma: f64,
}

/// One table row: times `kernel` on `nth` threads and prints it. `ops`:
/// the layers' experts (used in turn, so that their bytes exceed the L3
/// cache, as a model's layers do), the activations, ids and dst.
#[allow(clippy::too_many_arguments)]
fn bench_row(
    c: &Ceil,
    s: &Shape,
    dtype: DType,
    load: Load,
    kernel: Kernel,
    nth: usize,
    ops: &mut Operands,
    repack: &RepackCache,
) {
    let Operands {
        layers,
        b,
        ids,
        dst,
    } = ops;
    let kernels: Vec<_> = layers
        .iter()
        .map(|a| {
            let srcs = [a.raw, b.raw, ids.raw];
            // SAFETY: the experts are written before and never again; they
            // outlive the kernel.
            unsafe {
                match kernel {
                    Kernel::Rows => prepare_mul_mat_id_rows(dst.raw, &srcs),
                    Kernel::F32 => prepare_mul_mat_id(dst.raw, &srcs, Precision::Exact, None),
                    Kernel::Int8 => {
                        prepare_mul_mat_id(dst.raw, &srcs, Precision::Fast, Some(repack))
                    }
                }
            }
            .unwrap()
        })
        .collect();
    let runs = match (kernel, load) {
        (Kernel::Int8, Load::Decode) => 64,
        (_, Load::Decode) => 16,
        (Kernel::Int8, _) => 6,
        (Kernel::F32, _) => 2,
        (Kernel::Rows, _) => 1,
    };
    let pool = ThreadPool::new(nth);
    let mut scratch = Buf::new(kernels[0].scratch_bytes());
    let sp = scratch.ptr() as usize;
    let mut rng = kernels::testing::Rng::new(11);
    let t = load.tokens();
    let expert_bytes = (dtype.row_bytes(s.k as u64).unwrap() * s.n as u64) as f64;
    let (mut cpu, mut wall, mut touched) = (f64::INFINITY, f64::INFINITY, 0.0);
    let fixed = ids_for(s, load, 0, &mut rng);
    for run in 0..runs + 1 {
        let k = &kernels[run % kernels.len()];
        let v = if load == Load::Decode {
            ids_for(s, load, run / kernels.len(), &mut rng)
        } else {
            fixed.clone()
        };
        let bytes: Vec<u8> = v.iter().flat_map(|i| i.to_le_bytes()).collect();
        ids.bytes().copy_from_slice(&bytes);
        let distinct = v.iter().collect::<std::collections::BTreeSet<_>>().len();
        let slowest = AtomicU64::new(0);
        let start = Instant::now();
        pool.run(&|ctx| {
            let c0 = thread_cpu_seconds();
            // SAFETY: tensors and scratch outlive the run.
            unsafe { k.run(ctx, sp as *mut u8) };
            slowest.fetch_max(((thread_cpu_seconds() - c0) * 1e9) as u64, Relaxed);
        });
        let w = start.elapsed().as_secs_f64();
        // The first run warms up (page faults, repacking is done at prepare).
        if run > 0 || runs == 1 {
            cpu = cpu.min(slowest.load(Relaxed) as f64 * 1e-9);
            wall = wall.min(w);
            touched = distinct as f64 * expert_bytes;
        }
    }
    let flops = 2.0 * (s.k * s.n) as f64 * (s.n_used * t) as f64;
    let gbps = touched / cpu / 1e9;
    let gflops = flops / cpu / 1e9;
    println!(
        "{:17} {:5} {:21} {} thr {:12} {:9.3} {:9.3} {:7.1} {:5.1}% {:8.1} {:5.1}%   {}",
        s.name,
        format!("{dtype}"),
        load.label(),
        nth,
        kernel.label(),
        cpu * 1e3,
        wall * 1e3,
        gbps,
        100.0 * gbps / c.memcpy[nth - 1],
        gflops,
        100.0 * gflops / (nth as f64 * c.fma),
        kernels[0].describe()
    );
}

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(|a| a.to_lowercase())
        .collect();
    let want = |label: &str| {
        let label = label.to_lowercase();
        filters.is_empty() || filters.iter().all(|f| label.contains(f.as_str()))
    };
    let c0 = ceiling::measure();
    let two = ceiling::memcpy_gbps_threads(256 << 20, 5, 2);
    println!("{c0}; memcpy on 2 threads {two:.1} GB/s");
    let c = Ceil {
        memcpy: [c0.memcpy_gbps, two],
        fma: c0.fma_gflops_per_core,
    };
    println!(
        "{:17} {:5} {:21} {:5} {:12} {:>9} {:>9} {:>7} {:>6} {:>8} {:>6}   kernel",
        "shape",
        "dtype",
        "load",
        "thr",
        "path",
        "cpu ms",
        "wall ms",
        "GB/s",
        "%mcpy",
        "GFLOP/s",
        "%FMA"
    );
    const LOADS: [Load; 3] = [Load::Decode, Load::Prefill, Load::Skewed];
    const KERNELS: [Kernel; 3] = [Kernel::Rows, Kernel::F32, Kernel::Int8];
    let label = |s: &Shape, dtype: DType, load: Load, kernel: Kernel| {
        format!("{} {dtype} {} {}", s.name, load.label(), kernel.label())
    };
    for s in &SHAPES {
        for dtype in [DType::Q4_K, DType::Q8_0] {
            let wanted = |load| KERNELS.iter().any(|&k| want(&label(s, dtype, load, k)));
            if !LOADS.into_iter().any(wanted) {
                continue;
            }
            // Layers enough for 96 MB of experts (at least one).
            let one =
                dtype.row_bytes(s.k as u64).unwrap() as f64 * (s.n * s.n_expert as i64) as f64;
            let n_layers = (96e6 / one).ceil().max(1.0) as usize;
            let mut layers: Vec<Tensor> = (0..n_layers)
                .map(|_| experts(dtype, s.k, s.n, s.n_expert as i64))
                .collect();
            let repack = RepackCache::new();
            for load in LOADS {
                if !wanted(load) {
                    continue;
                }
                let t = load.tokens() as i64;
                let mut b = Tensor::zeroed(DType::F32, [s.k, 1, t, 1]);
                let mut rng = kernels::testing::Rng::new(5);
                for v in b.bytes().chunks_exact_mut(4) {
                    v.copy_from_slice(&(rng.uniform(-1.0, 1.0) as f32).to_le_bytes());
                }
                let mut ops = Operands {
                    layers: std::mem::take(&mut layers),
                    b,
                    ids: Tensor::zeroed(DType::I32, [s.n_used as i64, t, 1, 1]),
                    dst: Tensor::zeroed(DType::F32, [s.n, s.n_used as i64, t, 1]),
                };
                for kernel in KERNELS {
                    if !want(&label(s, dtype, load, kernel)) {
                        continue;
                    }
                    for nth in [1, 2] {
                        bench_row(&c, s, dtype, load, kernel, nth, &mut ops, &repack);
                    }
                }
                layers = ops.layers;
            }
            println!(
                "({} {dtype}: {n_layers} layers of experts used in turn)",
                s.name
            );
        }
    }
    println!("{}", ceiling::measure());
}

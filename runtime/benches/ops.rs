//! Throughput of the `cpu::ops` kernels on 1 and 2 threads, printed beside the
//! machine's memcpy ceiling measured in the same run (pool sizes from
//! `OPS_BENCH_THREADS`, default `1,2`; `OPS_BENCH_FILTER` picks cases). Traffic counts bytes
//! read + bytes written, as the ceiling does.

use ir::{DType, Layout, Op, RopeMode, RopeParams};
use runtime::device::cpu::ops::prepare_op;
use runtime::device::cpu::{RawTensor, ThreadPool};
use std::time::Instant;

/// Owned, 64-byte aligned memory for a tensor, filled with small finite values.
struct Buf {
    mem: Vec<u64>,
    layout: Layout,
}

impl Buf {
    fn new(dtype: DType, ne: [i64; 4], fill: u64) -> Buf {
        let layout = Layout::contiguous(dtype, ne).expect("valid extents");
        Buf::with_layout(layout, layout.span_bytes() as usize, fill)
    }

    fn with_layout(layout: Layout, bytes: usize, fill: u64) -> Buf {
        // 0x3C00 is f16 1.0; 0x3F80 is bf16 1.0; as f32 both halves are tiny
        // normal numbers. Quantized blocks get f16 scales of 1.0.
        Buf {
            mem: vec![fill; bytes.div_ceil(8) + 8],
            layout,
        }
    }

    fn raw(&mut self) -> RawTensor {
        RawTensor {
            data: self.mem.as_mut_ptr().cast::<u8>(),
            dtype: self.layout.dtype,
            ne: self.layout.ne,
            nb: self.layout.nb,
        }
    }
}

const ONES: u64 = 0x3C00_3C00_3C00_3C00;

/// Best time of `runs` runs of the step on `pool`, seconds.
fn time(op: &Op, dst: RawTensor, srcs: &[RawTensor], pool: &ThreadPool, runs: usize) -> f64 {
    let k = prepare_op(op, dst, srcs).expect("prepare");
    let mut best = f64::INFINITY;
    for _ in 0..runs {
        let t = Instant::now();
        // SAFETY: every tensor outlives the run; no kernel here needs scratch.
        pool.run(&|ctx| unsafe { k.run(ctx, std::ptr::null_mut()) });
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

struct Case {
    name: &'static str,
    op: Op,
    dst: Buf,
    srcs: Vec<Buf>,
    /// Bytes read + written by one run.
    traffic: f64,
}

fn case(name: &'static str, op: Op, dst: Buf, srcs: Vec<Buf>, traffic: Option<f64>) -> Case {
    let traffic = traffic.unwrap_or_else(|| {
        let t = |b: &Buf| b.layout.span_bytes() as f64;
        t(&dst) + srcs.iter().map(t).sum::<f64>()
    });
    Case {
        name,
        op,
        dst,
        srcs,
        traffic,
    }
}

fn main() {
    let ceiling = runtime::ceiling::measure();
    println!("{ceiling}");
    let m = 16 << 20; // 16M elements
    let idx = |n: i64, below: i64| {
        let mut b = Buf::new(DType::I32, [n, 1, 1, 1], 0);
        for i in 0..n as usize {
            let v = ((i as i64 * 7919) % below) as i32;
            // SAFETY: i < n elements of the I32 buffer.
            unsafe { *b.mem.as_mut_ptr().cast::<i32>().add(i) = v };
        }
        b
    };
    let transposed = |dtype: DType, ne: [i64; 4]| {
        let base = Layout::contiguous(dtype, [ne[1], ne[0], ne[2], ne[3]]).unwrap();
        Buf::with_layout(
            base.permuted([1, 0, 2, 3]).unwrap(),
            base.span_bytes() as usize,
            ONES,
        )
    };
    let rope = RopeParams::plain(RopeMode::Neox, 128, 10000.0);
    let mut cases = vec![
        case(
            "cpy f32 -> f16, 16M contiguous",
            Op::Cpy,
            Buf::new(DType::F16, [m, 1, 1, 1], 0),
            vec![
                Buf::new(DType::F32, [m, 1, 1, 1], ONES),
                Buf::new(DType::F16, [m, 1, 1, 1], 0),
            ],
            Some(m as f64 * 6.0),
        ),
        case(
            "cpy f32 -> q8_0, 16M contiguous",
            Op::Cpy,
            Buf::new(DType::Q8_0, [m, 1, 1, 1], ONES),
            vec![
                Buf::new(DType::F32, [m, 1, 1, 1], ONES),
                Buf::new(DType::Q8_0, [m, 1, 1, 1], ONES),
            ],
            Some(m as f64 * (4.0 + 34.0 / 32.0)),
        ),
        case(
            "cont f32 transposed [4096, 4096]",
            Op::Cont,
            Buf::new(DType::F32, [4096, 4096, 1, 1], 0),
            vec![transposed(DType::F32, [4096, 4096, 1, 1])],
            None,
        ),
        case(
            "get_rows q8_0 [4096, 32000] x 512 -> f32",
            Op::GetRows,
            Buf::new(DType::F32, [4096, 512, 1, 1], 0),
            vec![
                Buf::new(DType::Q8_0, [4096, 32000, 1, 1], ONES),
                idx(512, 32000),
            ],
            Some(512.0 * 4096.0 * (4.0 + 34.0 / 32.0)),
        ),
        case(
            "set_rows f32 -> f16 512 rows of 4096",
            Op::SetRows,
            Buf::new(DType::F16, [4096, 4096, 1, 1], 0),
            vec![
                Buf::new(DType::F16, [4096, 4096, 1, 1], 0),
                Buf::new(DType::F32, [4096, 512, 1, 1], ONES),
                idx(512, 4096),
            ],
            Some(512.0 * 4096.0 * 6.0),
        ),
        case(
            "rope neox f32 [128, 32, 512]",
            Op::Rope(rope),
            Buf::new(DType::F32, [128, 32, 512, 1], 0),
            vec![
                Buf::new(DType::F32, [128, 32, 512, 1], ONES),
                idx(512, 4096),
            ],
            None,
        ),
        case(
            "soft_max f32 [4096, 512, 8] mask f16 (fallback)",
            Op::SoftMax {
                scale: 0.125,
                max_bias: 0.0,
            },
            Buf::new(DType::F32, [4096, 512, 8, 1], 0),
            vec![
                Buf::new(DType::F32, [4096, 512, 8, 1], ONES),
                Buf::new(DType::F16, [4096, 512, 1, 1], 0),
            ],
            None,
        ),
        case(
            "rms_norm f32 [4096, 4096] (fallback)",
            Op::RmsNorm { eps: 1e-6 },
            Buf::new(DType::F32, [4096, 4096, 1, 1], 0),
            vec![Buf::new(DType::F32, [4096, 4096, 1, 1], ONES)],
            None,
        ),
        case(
            "silu f32 16M (fallback)",
            Op::Silu,
            Buf::new(DType::F32, [m, 1, 1, 1], 0),
            vec![Buf::new(DType::F32, [m, 1, 1, 1], ONES)],
            None,
        ),
        case(
            "add f32 [4096, 4096] + [4096] (fallback)",
            Op::Add,
            Buf::new(DType::F32, [4096, 4096, 1, 1], 0),
            vec![
                Buf::new(DType::F32, [4096, 4096, 1, 1], ONES),
                Buf::new(DType::F32, [4096, 1, 1, 1], ONES),
            ],
            None,
        ),
        case(
            "argmax f32 [32000, 512]",
            Op::Argmax,
            Buf::new(DType::I32, [512, 1, 1, 1], 0),
            vec![Buf::new(DType::F32, [32000, 512, 1, 1], ONES)],
            None,
        ),
    ];
    // OPS_BENCH_THREADS=1,4,8 picks the pool sizes (default 1 and 2).
    let threads: Vec<usize> = std::env::var("OPS_BENCH_THREADS")
        .ok()
        .map(|v| v.split(',').filter_map(|t| t.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2]);
    // OPS_BENCH_FILTER=cont runs only the cases whose name contains it.
    let filter = std::env::var("OPS_BENCH_FILTER").ok();
    for threads in threads {
        let pool = ThreadPool::new(threads);
        for c in cases.iter_mut() {
            if !filter.as_deref().is_none_or(|f| c.name.contains(f)) {
                continue;
            }
            let srcs: Vec<RawTensor> = c.srcs.iter_mut().map(Buf::raw).collect();
            // cpy and set_rows write through the view of their destination source.
            let dst = match c.op.writes_into_source() {
                Some(i) => srcs[i],
                None => c.dst.raw(),
            };
            let t = time(&c.op, dst, &srcs, &pool, 5);
            let gbps = c.traffic / t / 1e9;
            println!(
                "{:<48} {threads} thr: {:>8.3} ms  {:>6.1} GB/s  ({:>4.0}% of memcpy {:.1} GB/s)",
                c.name,
                t * 1e3,
                gbps,
                100.0 * gbps / ceiling.memcpy_gbps,
                ceiling.memcpy_gbps
            );
        }
    }
}

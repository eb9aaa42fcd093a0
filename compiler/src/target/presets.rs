//! Built-in targets: `cpu`, `cuda0`, `cpu+cuda0`, `cpu+cuda0+cuda1`, the
//! host cut into core groups, `cpu0+cpu1` and `cpu0+cpu1+cpu2+cpu3` (how
//! multi-device plans run on a machine without a GPU), and NUMA nodes:
//! `numa0` (node 0 alone, which every Linux host has) and `numa0+numa1`
//! (a two-socket host, one device per socket); and remote RPC servers
//! (`cpu+rpc0`, `cpu+rpc0+rpc1`: llama.cpp's `--rpc`, servers first as
//! llama.cpp lists them before the local CPU).
//!
//! Invariant: `examples/targets/{name}.ron` is byte for byte
//! [`Target::to_ron`] of [`preset`]`(name)` for every name of [`NAMES`]
//! (the test `preset_files_match_presets` fails on drift; run it with
//! `GGPLAN_BLESS=1` to rewrite the files).
//!
//! Where the numbers come from. Measured figures are from `shared/DESIGN.md`
//! ("Reference facts") and `shared/references/README.md`; everything else is an
//! estimate, marked as such, to be replaced by `ggplan devices` measurements.
//!
//! CPU (2 cores, AMD Zen 5, AVX-512, 24 GiB):
//! - matmul f32 480 GFLOP/s: measured `gemm` x86-v4 1024³ at ~240 GFLOP/s on
//!   one core (94 % of the 257 GFLOP/s FMA peak), times two cores;
//! - matmul f16 400 GFLOP/s: estimate (Zen 5 has no AVX-512 FP16 arithmetic;
//!   halves are widened to f32, which costs some of the f32 rate);
//! - matmul quantized 120 GFLOP/s: llama.cpp's Q4_1 prefill on this machine,
//!   436 tokens/s x ~0.27 GFLOP/token with 2 threads (whole-model rate);
//! - memory 43 GB/s: measured one-thread memcpy (read + write);
//! - launch 2 µs per parallel step: estimate (one thread-pool barrier);
//! - alignment 64 B: ggml's CPU buffer `TENSOR_ALIGNMENT` in the
//!   `ggml-backend.c` of `shared/seeds/` ("should be enough for AVX 512"): one
//!   zmm register, one cache line.
//!
//! CUDA (one H100-class GPU; all estimates, not measured):
//! - memory 80 GB (80·10⁹ B): below the card's ~85.5·10⁹ B so the CUDA context
//!   and cuBLAS workspace keep their room; max buffer = memory; not host-visible;
//! - memory 3000 GB/s: HBM3 peak is 3.35 TB/s, streaming kernels reach ~90 %;
//! - matmul f16/bf16 400 TFLOP/s: ~40 % of the 989 TFLOP/s dense tensor-core
//!   peak, what cuBLAS reaches on LLM-sized products; f32 50 TFLOP/s: ~75 % of
//!   the 67 TFLOP/s FP32 peak (no TF32); quantized 100 TFLOP/s-equivalent:
//!   int8 tensor-core kernels (ggml's MMQ) after dequantization overhead;
//! - launch 5 µs: a typical kernel launch without CUDA graphs;
//! - alignment 256 B: the alignment `cudaMalloc` guarantees, so every tensor
//!   in an arena is aligned like a fresh allocation, whatever a kernel or
//!   cuBLAS assumes. ggml's CUDA buffer type uses 128 B; 256 wastes at most
//!   128 more bytes per tensor, and makes CUDA arena sizes not byte-comparable
//!   with ggml's;
//! - support: every op for F32/F16/BF16 src0; `mul_mat` and `get_rows` for
//!   Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; view ops (no kernel) for
//!   every dtype.
//!   Everything else (I32 src0 outside views, quantized src0 of any other op)
//!   is unsupported and falls back to the CPU. This describes ggplan's CUDA
//!   runtime, not ggml's: ggml-cuda's `supports_op` refuses `get_rows` of
//!   K-quants (Q4_K, Q5_K, Q6_K), so a target reproducing ggml exactly drops
//!   those three from the `get_rows` entry.
//!
//! Links (estimates): host <-> GPU over PCIe, 25 GB/s and 10 µs per copy. The
//! two-GPU preset joins the GPUs over PCIe peer-to-peer (no NVLink), also
//! 25 GB/s and 10 µs; an NVLink machine (H100 SXM: ~450 GB/s each way) is a
//! target file away.

use super::{
    DTypeSet, Device, DeviceKind, Link, MatmulGflops, OpKind, OpSet, OpSupport, Target, Throughput,
};
use ir::DType;

/// The preset names.
pub const NAMES: [&str; 10] = [
    "cpu",
    "cuda0",
    "cpu+cuda0",
    "cpu+cuda0+cuda1",
    "cpu0+cpu1",
    "cpu0+cpu1+cpu2+cpu3",
    "numa0",
    "numa0+numa1",
    "cpu+rpc0",
    "cpu+rpc0+rpc1",
];

const GIB: u64 = 1 << 30;
const CPU_MEMORY: u64 = 24 * GIB;
const GPU_MEMORY: u64 = 80_000_000_000;

/// The built-in target called `name`.
pub fn preset(name: &str) -> Option<Target> {
    let (devices, links) = match name {
        "cpu" => (vec![cpu()], vec![]),
        "cuda0" => (vec![cuda(0)], vec![]),
        "cpu+cuda0" => (vec![cuda(0), cpu()], vec![pcie("cuda0", "cpu")]),
        "cpu+cuda0+cuda1" => (
            vec![cuda(0), cuda(1), cpu()],
            vec![
                pcie("cuda0", "cpu"),
                pcie("cuda1", "cpu"),
                pcie("cuda0", "cuda1"),
            ],
        ),
        "cpu0+cpu1" => cpu_groups(2),
        "cpu0+cpu1+cpu2+cpu3" => cpu_groups(4),
        "numa0" => numa_nodes(1),
        "numa0+numa1" => numa_nodes(2),
        "cpu+rpc0" => (vec![remote(0), cpu()], vec![network("rpc0", "cpu")]),
        "cpu+rpc0+rpc1" => (
            vec![remote(0), remote(1), cpu()],
            vec![
                network("rpc0", "cpu"),
                network("rpc1", "cpu"),
                through_host("rpc0", "rpc1"),
            ],
        ),
        _ => return None,
    };
    Some(Target {
        name: name.to_string(),
        devices,
        links,
    })
}

/// The host CPU of this machine class: 2 Zen 5 cores, 24 GiB.
pub fn cpu() -> Device {
    Device {
        name: "cpu".to_string(),
        kind: DeviceKind::Cpu,
        memory_bytes: CPU_MEMORY,
        alignment: 64,
        max_buffer_bytes: CPU_MEMORY,
        host_visible: true,
        supports: vec![OpSupport {
            ops: OpSet::All,
            src0: DTypeSet::All,
        }],
        throughput: Throughput {
            matmul_gflops: MatmulGflops {
                f32: 480.0,
                f16: 400.0,
                quantized: 120.0,
            },
            memory_gbps: 43.0,
            launch_overhead_us: 2.0,
        },
    }
}

/// The host cut into `n` core groups `cpu0..cpu{n-1}`: each has 1/n of the
/// cores' throughput and memory, and every pair is linked by host memory.
fn cpu_groups(n: u32) -> (Vec<Device>, Vec<Link>) {
    host_parts(n, "cpu", |group| DeviceKind::CpuCores { group, groups: n })
}

/// `n` NUMA nodes `numa0..numa{n-1}`, one socket each: each has 1/n of the
/// cores' matmul throughput and of the memory, and its own memory bandwidth
/// (local memory: the preset CPU's figure, an estimate for a socket); the
/// nodes are linked as core groups are (a cross-socket copy; an estimate).
fn numa_nodes(n: u32) -> (Vec<Device>, Vec<Link>) {
    host_parts(n, "numa", |node| DeviceKind::CpuNode { node })
}

/// The preset CPU in `n` parts `{prefix}0..`, part `i` of kind `kind(i)`
/// with 1/n of the matmul throughput and memory, every pair linked by host
/// memory.
fn host_parts(n: u32, prefix: &str, kind: impl Fn(u32) -> DeviceKind) -> (Vec<Device>, Vec<Link>) {
    let devices: Vec<Device> = (0..n)
        .map(|i| {
            let mut d = cpu();
            d.name = format!("{prefix}{i}");
            d.kind = kind(i);
            d.memory_bytes = CPU_MEMORY / u64::from(n);
            d.max_buffer_bytes = d.memory_bytes;
            let share = 1.0 / f64::from(n);
            let m = &mut d.throughput.matmul_gflops;
            (m.f32, m.f16, m.quantized) = (m.f32 * share, m.f16 * share, m.quantized * share);
            d
        })
        .collect();
    let mut links = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            links.push(host_memory(
                &format!("{prefix}{a}"),
                &format!("{prefix}{b}"),
            ));
        }
    }
    (devices, links)
}

/// A copy between two core groups of one host: a memcpy on a copy stream,
/// ~20 GB/s (about half of one thread's 43 GB/s memcpy, since source and
/// destination share the memory bus with compute; an estimate) and 2 µs (an
/// event wait and a wake-up; an estimate).
pub fn host_memory(from: &str, to: &str) -> Link {
    Link {
        from: from.to_string(),
        to: to.to_string(),
        bandwidth_gbps: 20.0,
        latency_us: 2.0,
    }
}

/// One H100-class GPU with CUDA ordinal `ordinal`, named `cuda{ordinal}`.
pub fn cuda(ordinal: u32) -> Device {
    let quantized = vec![
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ];
    Device {
        name: format!("cuda{ordinal}"),
        kind: DeviceKind::Cuda { ordinal },
        memory_bytes: GPU_MEMORY,
        alignment: 256,
        max_buffer_bytes: GPU_MEMORY,
        host_visible: false,
        supports: vec![
            OpSupport {
                ops: OpSet::All,
                src0: DTypeSet::Only(vec![DType::F32, DType::F16, DType::BF16]),
            },
            OpSupport {
                ops: OpSet::Only(vec![OpKind::MulMat, OpKind::MulMatId, OpKind::GetRows]),
                src0: DTypeSet::Only(quantized),
            },
            OpSupport {
                ops: OpSet::Only(vec![
                    OpKind::View,
                    OpKind::Reshape,
                    OpKind::Permute,
                    OpKind::Transpose,
                ]),
                src0: DTypeSet::All,
            },
        ],
        throughput: Throughput {
            matmul_gflops: MatmulGflops {
                f32: 50_000.0,
                f16: 400_000.0,
                quantized: 100_000.0,
            },
            memory_gbps: 3000.0,
            launch_overhead_us: 5.0,
        },
    }
}

/// A PCIe link (host <-> GPU, or GPU <-> GPU peer-to-peer): 25 GB/s, 10 µs.
pub fn pcie(from: &str, to: &str) -> Link {
    Link {
        from: from.to_string(),
        to: to.to_string(),
        bandwidth_gbps: 25.0,
        latency_us: 10.0,
    }
}

/// The first device of remote RPC server `server`, named `rpc{server}`: a
/// host of this machine class running llama.cpp's `ggml-rpc-server` (ggml's
/// CPU backend). Estimates: the preset CPU's memory; ggml's matmul rates
/// (below ours: 240 GFLOP/s f32, 200 f16, 60 quantized, half of the preset
/// CPU's); alignment 64 (ggml's CPU buffers align to 32; a multiple keeps
/// every offset valid there). It runs every op but the collectives,
/// `get_rows_part` and `mul_mat_id_part` (tensor parallelism's, not ggml's),
/// on any dtype;
/// `--target host --rpc` asks each server instead.
pub fn remote(server: u32) -> Device {
    let ops = OpKind::ALL
        .into_iter()
        .filter(|k| !k.is_collective() && !matches!(k, OpKind::GetRowsPart | OpKind::MulMatIdPart))
        .collect();
    let mut d = cpu();
    d.name = format!("rpc{server}");
    d.kind = DeviceKind::Remote { server };
    d.host_visible = false;
    d.supports = vec![OpSupport {
        ops: OpSet::Only(ops),
        src0: DTypeSet::All,
    }];
    let m = &mut d.throughput.matmul_gflops;
    (m.f32, m.f16, m.quantized) = (m.f32 / 2.0, m.f16 / 2.0, m.quantized / 2.0);
    d
}

/// A network link between the host and a remote server: 10 GbE, 1.25 GB/s,
/// and 100 µs per copy (one request and its answer over a LAN); estimates,
/// which `--target host --rpc` replaces with figures measured at connect time.
pub fn network(from: &str, to: &str) -> Link {
    Link {
        from: from.to_string(),
        to: to.to_string(),
        bandwidth_gbps: 1.25,
        latency_us: 100.0,
    }
}

/// Two remote servers: the protocol has no server-to-server copy, so bytes
/// go through the host, two network hops: half the bandwidth, twice the
/// latency of [`network`].
pub fn through_host(from: &str, to: &str) -> Link {
    Link {
        bandwidth_gbps: 0.625,
        latency_us: 200.0,
        ..network(from, to)
    }
}

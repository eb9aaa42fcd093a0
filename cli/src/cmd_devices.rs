//! `ggplan devices`: what this machine offers a plan: the CPU (model, cores,
//! SIMD features, memory), the devices the runtime's registry found (the
//! host, NUMA nodes, core groups) with their capabilities, and CUDA devices,
//! or why there are none.

use anyhow::Result;
use clap::Args;
use runtime::device::cuda::CudaStatus;
use runtime::device::host::HostInfo;
use serde_json::{Value, json};
use std::process::ExitCode;

/// Arguments of `ggplan devices`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  ggplan devices\n  ggplan devices --json\n  \
    ggplan devices --calibrate --write-target host.ron"
)]
pub struct DevicesArgs {
    /// Print one JSON object instead.
    #[arg(long)]
    json: bool,
    /// Measure this host's speed again (for `--target host`) and replace
    /// the cached calibration.
    #[arg(long)]
    calibrate: bool,
    /// Write the `host` target (devices, memory, calibrated speed) to this
    /// file, to compile against elsewhere with `--target FILE`.
    #[arg(long, value_name = "TARGET.ron")]
    write_target: Option<std::path::PathBuf>,
    /// Also ask these ggml RPC servers (llama.cpp's `ggml-rpc-server`) what
    /// they offer: devices rpc0, rpc1, ... of `--rpc`.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',')]
    rpc: Vec<String>,
}

/// What `--rpc` servers say of themselves, as JSON (an unreachable server
/// or another protocol version is an error naming it).
fn remote_json(endpoints: &[String]) -> Result<Vec<Value>> {
    let timeout = runtime::device::rpc::device::DEFAULT_TIMEOUT;
    endpoints
        .iter()
        .enumerate()
        .map(|(i, endpoint)| {
            let mut c = runtime::device::rpc::client::RpcClient::connect(endpoint, timeout)?;
            let (major, minor, patch) = c.server_version();
            let (free, total) = c.memory(0)?;
            Ok(json!({
                "name": format!("rpc{i}"), "endpoint": endpoint,
                "protocol": format!("{major}.{minor}.{patch}"),
                "server_devices": c.device_count()?,
                "memory_total": total, "memory_free": free,
                "alignment": c.alignment(0)?, "max_buffer_bytes": c.max_size(0)?,
            }))
        })
        .collect()
}

/// `--calibrate` / `--write-target`: the host target, measured or cached.
fn host_target_step(args: &DevicesArgs) -> Result<()> {
    if !args.calibrate && args.write_target.is_none() {
        return Ok(());
    }
    let target = ggplan::target::host_target(args.calibrate, &mut |note| eprintln!("{note}"))?;
    let cpu = target.devices.last().expect("the host target has a CPU");
    let t = &cpu.throughput;
    let m = &t.matmul_gflops;
    eprintln!(
        "host target: cpu matmul {:.1} GFLOP/s f32, {:.1} f16, {:.1} quantized (Q4_0); \
         memory {:.1} GB/s; {:.2} us per step; {} device(s)",
        m.f32,
        m.f16,
        m.quantized,
        t.memory_gbps,
        t.launch_overhead_us,
        target.devices.len()
    );
    if let Some(path) = &args.write_target {
        let text = ron::ser::to_string_pretty(&target, ron::ser::PrettyConfig::default())?;
        ir::text::write_atomically(path, (text + "\n").as_bytes())?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn gib(bytes: Option<u64>) -> String {
    bytes.map_or_else(
        || "unknown".to_string(),
        |b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
    )
}

fn count(n: Option<usize>) -> String {
    n.map_or_else(|| "unknown".to_string(), |n| n.to_string())
}

/// The JSON object `--json` prints under `cpu`.
fn host_json(host: &HostInfo) -> Value {
    json!({
        "model": host.cpu_model,
        "logical_cores": host.logical_cores,
        "physical_cores": host.physical_cores,
        "simd": host.simd,
        "mem_total_bytes": host.mem_total,
        "mem_available_bytes": host.mem_available,
    })
}

/// The JSON object `--json` prints under `cuda`.
fn cuda_json(cuda: &CudaStatus) -> Value {
    match cuda {
        CudaStatus::Unavailable(reason) => json!({ "available": false, "reason": reason }),
        CudaStatus::Found {
            driver_version,
            devices,
        } => json!({
            "available": true,
            "driver_version": driver_version,
            "devices": devices.iter().map(|d| json!({
                "name": format!("cuda{}", d.ordinal),
                "model": d.name,
                "total_mem_bytes": d.total_mem,
                "compute_capability": d.compute_capability.map(|(a, b)| format!("{a}.{b}")),
                "multiprocessors": d.multiprocessors,
            })).collect::<Vec<_>>(),
        }),
    }
}

/// Runs `ggplan devices`.
pub fn run(args: DevicesArgs) -> Result<ExitCode> {
    host_target_step(&args)?;
    let registry = runtime::device::registry::Registry::enumerate();
    let host = &registry.host();
    tracing::debug!(?host, "host read");
    let cuda = registry.probe_cuda();
    tracing::debug!(?cuda, "cuda probed");
    let caps = |c: runtime::device::Caps| {
        json!({
            "async": c.asynchronous, "events": c.events,
            "host_buffer": c.host_buffer, "buffer_from_host_ptr": c.buffer_from_host_ptr,
        })
    };
    let devices: Vec<serde_json::Value> = registry
        .devices
        .iter()
        .map(|d| {
            json!({
                "name": d.name, "description": d.description, "cores": d.cores,
                "memory_total": d.memory_total, "memory_free": d.memory_free,
                "alignment": d.alignment, "max_buffer_bytes": d.max_buffer_bytes,
                "caps": caps(d.caps),
            })
        })
        .collect();
    let remote = remote_json(&args.rpc)?;
    if args.json {
        let doc = json!({
            "cpu": host_json(host), "devices": devices, "cuda": cuda_json(&cuda),
            "remote": remote,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "cpu: {}",
        host.cpu_model.as_deref().unwrap_or("unknown model")
    );
    println!(
        "  cores: {} logical, {} physical",
        count(host.logical_cores),
        count(host.physical_cores)
    );
    println!(
        "  simd:  {}",
        if host.simd.is_empty() {
            "none detected".to_string()
        } else {
            host.simd.join(" ")
        }
    );
    println!(
        "  memory: {} total, {} available",
        gib(host.mem_total),
        gib(host.mem_available)
    );
    println!("runtime devices (the registry; plan targets name them):");
    for d in &registry.devices {
        let c = d.caps;
        let flags: Vec<&str> = [
            (c.asynchronous, "async"),
            (c.events, "events"),
            (c.host_buffer, "host-buffer"),
            (c.buffer_from_host_ptr, "buffer-from-host-ptr"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        println!(
            "  {:<6} {}, {} free, alignment {}; {}",
            d.name,
            d.description,
            gib(Some(d.memory_free)),
            d.alignment,
            flags.join(" ")
        );
    }
    for r in &remote {
        println!(
            "  {:<6} ggml RPC server at {} (protocol {}), {} free of {}, alignment {}",
            r["name"].as_str().unwrap_or("?"),
            r["endpoint"].as_str().unwrap_or("?"),
            r["protocol"].as_str().unwrap_or("?"),
            gib(r["memory_free"].as_u64()),
            gib(r["memory_total"].as_u64()),
            r["alignment"]
        );
    }
    match &cuda {
        CudaStatus::Unavailable(reason) => println!("cuda: {reason}"),
        CudaStatus::Found {
            driver_version,
            devices,
        } => {
            let v = driver_version.map_or_else(
                || "unknown".to_string(),
                |v| format!("{}.{}", v / 1000, v % 1000 / 10),
            );
            println!("cuda: driver {v}, {} device(s)", devices.len());
            for d in devices {
                println!(
                    "  cuda{}: {}, {}, compute capability {}, {} SMs",
                    d.ordinal,
                    d.name,
                    gib(d.total_mem),
                    d.compute_capability
                        .map_or_else(|| "?".to_string(), |(a, b)| format!("{a}.{b}")),
                    d.multiprocessors
                        .map_or_else(|| "?".to_string(), |n| n.to_string())
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

//! `ggplan devices`: what this machine offers a plan: the CPU (model, cores,
//! SIMD features, memory), the devices the runtime's registry found (the
//! host, NUMA nodes, core groups) with their capabilities, and CUDA devices,
//! or why there are none.

use crate::cuda_probe::{CudaStatus, probe};
use crate::host_info::host_info;
use anyhow::Result;
use clap::Args;
use std::process::ExitCode;

/// Arguments of `ggplan devices`.
#[derive(Args)]
#[command(after_help = "Examples:\n  ggplan devices\n  ggplan devices --json")]
pub struct DevicesArgs {
    /// Print one JSON object instead.
    #[arg(long)]
    json: bool,
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

/// Runs `ggplan devices`.
pub fn run(args: DevicesArgs) -> Result<ExitCode> {
    let host = host_info();
    tracing::debug!(?host, "host read");
    let cuda = probe();
    tracing::debug!(?cuda, "cuda probed");
    let registry = runtime::device::registry::Registry::enumerate();
    let caps = |c: runtime::device::Caps| {
        serde_json::json!({
            "async": c.asynchronous, "events": c.events,
            "host_buffer": c.host_buffer, "buffer_from_host_ptr": c.buffer_from_host_ptr,
        })
    };
    let devices: Vec<serde_json::Value> = registry
        .devices
        .iter()
        .map(|d| {
            serde_json::json!({
                "name": d.name, "description": d.description, "cores": d.cores,
                "memory_total": d.memory_total, "memory_free": d.memory_free,
                "alignment": d.alignment, "max_buffer_bytes": d.max_buffer_bytes,
                "caps": caps(d.caps),
            })
        })
        .collect();
    if args.json {
        let doc = serde_json::json!({
            "cpu": host.json(), "devices": devices, "cuda": cuda.json(),
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

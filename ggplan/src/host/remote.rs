//! Remote devices of the `host` target (`--target host --rpc HOST:PORT,...`):
//! each ggml RPC server becomes device `rpc{i}` with the server's own
//! figures, linked to every host device by a link measured now.
//!
//! - memory: the server's total (as the host's: free memory changes from run
//!   to run); largest buffer: the server's; alignment: the larger of the
//!   server's and the preset's 64 bytes;
//! - link to the host: latency is the median of 32 round trips; bandwidth
//!   the best of 3 uploads of 8 MiB into a buffer allocated for the purpose
//!   and freed after; both rounded to two significant digits, so that a
//!   link measured twice gives the same plan unless it really changed;
//! - between two servers: through the host (the protocol has no copy between
//!   servers), the slower link's bandwidth halved, latencies added;
//! - matmul rates (f32, f16, quantized): measured on the server with the
//!   host calibration's products (`calibrate::remote_matmul_gflops`), the
//!   read-back of each result taken off by the measured link, two significant
//!   digits. The memory rate and per-step overhead stay the preset's
//!   estimates (a server runs a whole segment per call, so neither is
//!   visible apart from the link).
//!
//! Invariant: every connection is closed before this returns (a server serves
//! one client at a time, and the runtime connects next).

use super::calibrate::remote_matmul_gflops;
use crate::{Error, Result};
use compiler::target::presets::remote;
use compiler::target::{Link, MatmulGflops, Target};
use runtime::device::rpc::client::RpcClient;
use runtime::device::rpc::device::RemoteServers;
use std::sync::Arc;
use std::time::Duration;

/// What one server says of itself and its link.
struct Measured {
    memory: u64,
    max_buffer: u64,
    alignment: u64,
    link_gbps: f64,
    latency_us: f64,
    matmul: MatmulGflops,
}

const PROBE_BYTES: usize = 8 << 20;

/// Adds one remote device per endpoint to `target`, with links to every
/// device already in it. Notes (what was measured) go to `note`.
pub fn add_remote_devices(
    target: &mut Target,
    endpoints: &[String],
    note: &mut dyn FnMut(&str),
) -> Result<()> {
    let host_devices: Vec<String> = target.devices.iter().map(|d| d.name.clone()).collect();
    let mut measured = Vec::new();
    for (i, endpoint) in endpoints.iter().enumerate() {
        if endpoints[..i].contains(endpoint) {
            return Err(Error::Usage(format!(
                "--rpc lists {endpoint} twice; each remote device needs its own server"
            )));
        }
        let m = measure(endpoint)?;
        note(&format!(
            "rpc{i} at {endpoint}: {:.1} GiB, link {:.2} GB/s, {:.0} µs per call, \
             matmul {} GFLOP/s f32, {} f16, {} quantized",
            m.memory as f64 / (1u64 << 30) as f64,
            m.link_gbps,
            m.latency_us,
            m.matmul.f32,
            m.matmul.f16,
            m.matmul.quantized
        ));
        measured.push(m);
    }
    let mut devices = Vec::new();
    for (i, m) in measured.iter().enumerate() {
        let mut d = remote(i as u32);
        d.memory_bytes = m.memory;
        d.max_buffer_bytes = m.max_buffer.min(m.memory);
        d.alignment = d.alignment.max(m.alignment);
        d.throughput.matmul_gflops = m.matmul.clone();
        for host in &host_devices {
            target
                .links
                .push(link(&d.name, host, m.link_gbps, m.latency_us));
        }
        for (j, other) in measured[..i].iter().enumerate() {
            target.links.push(link(
                &d.name,
                &format!("rpc{j}"),
                m.link_gbps.min(other.link_gbps) / 2.0,
                m.latency_us + other.latency_us,
            ));
        }
        devices.push(d);
    }
    // Servers first, as llama.cpp lists them before the local devices.
    devices.append(&mut target.devices);
    target.devices = devices;
    target.validate()?;
    Ok(())
}

fn link(a: &str, b: &str, gbps: f64, latency_us: f64) -> Link {
    Link {
        from: a.to_string(),
        to: b.to_string(),
        bandwidth_gbps: gbps,
        latency_us,
    }
}

/// `x` to two significant digits.
fn two_digits(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(1 - x.log10().floor() as i32);
    (x * scale).round() / scale
}

fn measure(endpoint: &str) -> Result<Measured> {
    let mut c = RpcClient::connect(endpoint, Duration::from_secs(10))?;
    let (_, total) = c.memory(0)?;
    let max_buffer = c.max_size(0)?;
    let alignment = c.alignment(0)?;
    let link = runtime::device::rpc::link::measure(&mut c, 32, 3, PROBE_BYTES)?;
    // The server serves one connection at a time: close this one before the
    // compute probe connects.
    drop(c);
    let servers = RemoteServers::connect(&[endpoint.to_string()], Duration::from_secs(10))?;
    let transfer_us = |bytes: u64| bytes as f64 / (link.upload_gbps * 1e3) + link.latency_us;
    let rates = remote_matmul_gflops(Arc::new(servers), &transfer_us)?;
    Ok(Measured {
        memory: total,
        max_buffer,
        alignment,
        link_gbps: two_digits(link.upload_gbps),
        latency_us: two_digits(link.latency_us),
        matmul: MatmulGflops {
            f32: two_digits(rates.f32),
            f16: two_digits(rates.f16),
            quantized: two_digits(rates.quantized),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::two_digits;

    #[test]
    fn figures_keep_two_significant_digits() {
        assert_eq!(two_digits(1234.0), 1200.0);
        assert_eq!(two_digits(0.04567), 0.046);
        assert_eq!(two_digits(9.96), 10.0);
    }
}

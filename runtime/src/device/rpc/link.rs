//! Measuring the link to a server: round-trip latency and upload bandwidth,
//! for `--target host --rpc` and the `rpc` benchmark.
//!
//! Invariant: the probe buffer is freed before returning, also when an
//! upload fails (unless the connection itself failed, which frees it on the
//! server).

use super::client::RpcClient;
use super::tensor::RpcTensor;
use crate::RuntimeError;
use std::time::Instant;

/// What [`measure`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkFigures {
    /// Median of the round trips, in µs.
    pub latency_us: f64,
    /// Best upload of `probe_bytes` (each followed by a round trip), in GB/s.
    pub upload_gbps: f64,
}

/// Times `round_trips` round trips and `uploads` uploads of `probe_bytes`
/// into a buffer allocated for the purpose on device 0 of the server.
pub fn measure(
    c: &mut RpcClient,
    round_trips: usize,
    uploads: usize,
    probe_bytes: usize,
) -> Result<LinkFigures, RuntimeError> {
    let mut trips = Vec::with_capacity(round_trips.max(1));
    for _ in 0..round_trips.max(1) {
        let t = Instant::now();
        c.sync()?;
        trips.push(t.elapsed().as_secs_f64() * 1e6);
    }
    trips.sort_by(f64::total_cmp);
    let (handle, _) = c.alloc_buffer(0, probe_bytes.max(1) as u64)?;
    let base = c.buffer_base(handle)?;
    let uploaded = (|| -> Result<f64, RuntimeError> {
        let record =
            RpcTensor::bytes(handle, base, probe_bytes).ok_or_else(|| RuntimeError::Remote {
                device: String::new(),
                endpoint: c.endpoint().to_string(),
                what: "link probe".to_string(),
                detail: format!("{probe_bytes} bytes exceed one call's 4 GiB"),
            })?;
        let data = vec![0x5au8; probe_bytes];
        let mut best = f64::INFINITY;
        for _ in 0..uploads.max(1) {
            let t = Instant::now();
            c.set_tensor_uncached(&record, 0, &data)?;
            c.sync()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok(best)
    })();
    c.free_buffer(handle)?;
    Ok(LinkFigures {
        latency_us: trips[trips.len() / 2],
        upload_gbps: probe_bytes as f64 / uploaded? / 1e9,
    })
}

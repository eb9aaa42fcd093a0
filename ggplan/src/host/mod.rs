//! The `host` target: a target built from what the runtime's registry finds on
//! this machine instead of a static preset.
//!
//! - The CPU: memory is the host's total (read on every use; not what is
//!   free now, which changes from run to run); throughputs come from [`crate::calibrate`], cached on disk so that
//!   only the first use pays for the measurement.
//! - CUDA devices the driver reports: the preset's description of a CUDA
//!   device with the memory the driver reports (their throughputs are the
//!   preset's until the CUDA backend can calibrate them), linked by PCIe.
//! - Remote RPC servers (`--rpc`, [`add_remote_devices`]): each server's
//!   memory and a link measured at connect time.
//!
//! The cache is one RON file, `calibration.ron`, in `$GGPLAN_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/ggplan`, else `~/.cache/ggplan`. It is keyed by what the
//! rates depend on (ggplan's version and build profile, the CPU model, the
//! cores this process may use, the SIMD features): a cache written for another key, or one that
//! does not parse, is measured again and replaced, with a warning. It is
//! written to a temporary file and renamed, so a reader never sees half a file.
//!
//! Invariant: the returned target passed `Target::validate`. A plan compiled
//! for `host` is reproducible on the machine that made it (same cache, same
//! plan); to take it elsewhere, `ggplan devices --write-target FILE` writes
//! the target as a file to compile against.

mod calibrate;
mod remote;

pub use remote::add_remote_devices;

use crate::{Error, Result};
use calibrate::calibrate;
use compiler::target::presets::{cpu, cuda, pcie};
use compiler::target::{Target, Throughput};
use runtime::device::cuda::CudaStatus;
use runtime::device::registry::Registry;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The `--target` name that asks for this machine.
pub const HOST: &str = "host";

/// The cache file's content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CachedCalibration {
    /// What the rates were measured on (see [`cache_key`]; the cores in it
    /// are the threads the calibration ran on).
    key: String,
    /// The rates.
    throughput: Throughput,
}

/// What the CPU rates depend on (a debug build's kernels are slower, so the
/// build profile is part of it).
fn cache_key(registry: &Registry) -> String {
    let host = registry.host();
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    format!(
        "ggplan {} ({build}); cpu '{}'; cores {:?}; simd {}",
        env!("CARGO_PKG_VERSION"),
        host.cpu_model.as_deref().unwrap_or("unknown"),
        registry.cores,
        host.simd.join(" ")
    )
}

/// Where the cache lives (`None`: no cache directory can be named).
pub fn cache_path() -> Option<PathBuf> {
    let env = |k| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let dir = env("GGPLAN_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("ggplan")))
        .or_else(|| env("HOME").map(|d| d.join(".cache").join("ggplan")))?;
    Some(dir.join("calibration.ron"))
}

/// The cached rates for `key`, or why there are none usable.
fn read_cache(path: &Path, key: &str) -> Result<Option<Throughput>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let cached: CachedCalibration = ron::from_str(&text)
        .map_err(|e| format!("{}: not a calibration cache ({e})", path.display()))?;
    if cached.key != key {
        return Err(format!(
            "{} was measured on another machine or build ({}); this one is {key}",
            path.display(),
            cached.key
        ));
    }
    let problems = host_with(cached.throughput.clone(), 1 << 30).validate();
    match problems {
        Ok(()) => Ok(Some(cached.throughput)),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes the cache through a temporary file and a rename.
fn write_cache(path: &Path, cached: &CachedCalibration) -> Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| Error::Usage(format!("{}: no folder", path.display())))?;
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let text = ron::ser::to_string_pretty(cached, ron::ser::PrettyConfig::default())
        .map_err(|e| Error::Usage(format!("cannot write the calibration cache: {e}")))?;
    ir::text::write_atomically(path, (text + "\n").as_bytes())?;
    Ok(())
}

/// The host CPU's rates: from the cache, or measured (and cached) when the
/// cache is missing, stale or `recalibrate` is set.
///
/// What the user should know (a cache that was measured again, a calibration
/// starting, a cache that cannot be written) goes to `note`.
pub fn cpu_throughput(
    registry: &Registry,
    recalibrate: bool,
    note: &mut dyn FnMut(&str),
) -> Result<Throughput> {
    let key = cache_key(registry);
    let path = cache_path();
    if !recalibrate && let Some(path) = &path {
        match read_cache(path, &key) {
            Ok(Some(t)) => {
                tracing::debug!(path = %path.display(), "calibration read from the cache");
                return Ok(t);
            }
            Ok(None) => {}
            Err(why) => note(&format!("warning: {why}; measuring again")),
        }
    }
    let threads = registry.cores.len().max(1);
    note(&format!(
        "calibrating this host ({threads} threads; cached for later runs)..."
    ));
    let measured = calibrate(threads)?;
    tracing::info!(took_ms = measured.took_ms, "host calibrated");
    let cached = CachedCalibration {
        key,
        throughput: measured.throughput.clone(),
    };
    match &path {
        Some(path) => {
            if let Err(e) = write_cache(path, &cached) {
                note(&format!("warning: the calibration is not cached: {e}"));
            }
        }
        None => note("warning: no cache folder (set GGPLAN_CACHE_DIR): not cached"),
    }
    Ok(measured.throughput)
}

/// A `host` target with only the CPU, with these rates and memory.
fn host_with(throughput: Throughput, memory_bytes: u64) -> Target {
    let mut device = cpu();
    device.throughput = throughput;
    device.memory_bytes = memory_bytes.max(1);
    device.max_buffer_bytes = device.memory_bytes;
    Target {
        name: HOST.to_string(),
        devices: vec![device],
        links: Vec::new(),
    }
}

/// The `host` target: this machine's CUDA devices (if the driver reports
/// any) first, then the CPU, every pair linked. Notes for the user (see
/// `cpu_throughput`) go to `note`.
pub fn host_target(recalibrate: bool, note: &mut dyn FnMut(&str)) -> Result<Target> {
    let registry = Registry::enumerate();
    let throughput = cpu_throughput(&registry, recalibrate, note)?;
    let host = &registry.devices[0];
    // Total, not free, memory: free memory changes from run to run, and the
    // same machine must give the same target (plans are deterministic).
    let mut target = host_with(throughput, host.memory_total);
    if let CudaStatus::Found { devices, .. } = registry.probe_cuda() {
        let mut gpus: Vec<_> = devices
            .iter()
            .map(|d| {
                let mut g = cuda(d.ordinal as u32);
                if let Some(bytes) = d.total_mem.filter(|&b| b > 0) {
                    (g.memory_bytes, g.max_buffer_bytes) = (bytes, bytes);
                }
                g
            })
            .collect();
        gpus.append(&mut target.devices);
        target.devices = gpus;
        let names: Vec<String> = target.devices.iter().map(|d| d.name.clone()).collect();
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                target.links.push(pcie(a, b));
            }
        }
    }
    target.validate()?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Throughput {
        let mut t = cpu().throughput;
        t.memory_gbps = 12.5;
        t
    }

    #[test]
    fn the_cache_round_trips_and_refuses_other_keys_and_garbage() {
        let dir = std::env::temp_dir().join(format!("ggplan-cache-test-{}", std::process::id()));
        let path = dir.join("calibration.ron");
        assert_eq!(read_cache(&path, "k"), Ok(None));
        let cached = CachedCalibration {
            key: "k".to_string(),
            throughput: sample(),
        };
        write_cache(&path, &cached).expect("written");
        assert_eq!(read_cache(&path, "k"), Ok(Some(sample())));
        let other = read_cache(&path, "other").expect_err("another key");
        assert!(other.contains("another machine"), "{other}");
        std::fs::write(&path, "(key: \"k\", throughput: (").expect("garbage");
        let garbage = read_cache(&path, "k").expect_err("garbage");
        assert!(garbage.contains("not a calibration cache"), "{garbage}");
        let mut bad = cached.clone();
        bad.throughput.memory_gbps = 0.0;
        write_cache(&path, &bad).expect("written");
        let invalid = read_cache(&path, "k").expect_err("a zero rate");
        assert!(invalid.contains("memory_gbps"), "{invalid}");
        std::fs::remove_dir_all(&dir).expect("cleaned");
    }

    #[test]
    fn the_host_target_validates_with_the_cpu_last() {
        let t = host_with(sample(), 8 << 30);
        t.validate().expect("valid");
        assert_eq!(t.devices.last().map(|d| d.name.as_str()), Some("cpu"));
        assert_eq!(t.devices[0].memory_bytes, 8 << 30);
    }
}

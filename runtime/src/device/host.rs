//! What this machine's CPU and memory are (the registry's host description,
//! printed by `ggplan devices`): the model name and core counts from
//! /proc/cpuinfo, SIMD features detected at run time, memory from /proc/meminfo.
//!
//! Invariant: every field is optional or empty when the source is missing
//! (another OS, a sandbox without /proc): reading never fails.

/// The host CPU and memory.
#[derive(Clone, Debug, PartialEq)]
pub struct HostInfo {
    /// `model name` of the first processor.
    pub cpu_model: Option<String>,
    /// Logical processors the OS runs us on.
    pub logical_cores: Option<usize>,
    /// Distinct (package, core) pairs in /proc/cpuinfo.
    pub physical_cores: Option<usize>,
    /// SIMD features present, in a fixed order.
    pub simd: Vec<&'static str>,
    /// `MemTotal`, bytes.
    pub mem_total: Option<u64>,
    /// `MemAvailable`, bytes.
    pub mem_available: Option<u64>,
}

/// Reads the host's description.
pub fn host_info() -> HostInfo {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let (cpu_model, physical_cores) = parse_cpuinfo(&cpuinfo);
    HostInfo {
        cpu_model,
        logical_cores: std::thread::available_parallelism().ok().map(|n| n.get()),
        physical_cores,
        simd: simd_features(),
        mem_total: meminfo_bytes(&meminfo, "MemTotal"),
        mem_available: meminfo_bytes(&meminfo, "MemAvailable"),
    }
}

/// The model name and the number of distinct physical cores.
fn parse_cpuinfo(text: &str) -> (Option<String>, Option<usize>) {
    let mut model = None;
    let mut cores = std::collections::BTreeSet::new();
    // Each processor block lists its package and core; a block ends at a blank line.
    let (mut package, mut core) = (None, None);
    for line in text.lines().chain(std::iter::once("")) {
        let Some((key, value)) = line.split_once(':') else {
            if let (Some(p), Some(c)) = (package.take(), core.take()) {
                cores.insert((p, c));
            }
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "model name" if model.is_none() => model = Some(value.to_string()),
            "physical id" => package = Some(value.to_string()),
            "core id" => core = Some(value.to_string()),
            _ => {}
        }
    }
    (model, (!cores.is_empty()).then_some(cores.len()))
}

/// A `Key: N kB` line of /proc/meminfo, in bytes.
pub(crate) fn meminfo_bytes(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        kib.checked_mul(1024)
    })
}

/// SIMD features this CPU has, detected now (not the ones compiled for).
#[cfg(target_arch = "x86_64")]
fn simd_features() -> Vec<&'static str> {
    use std::arch::is_x86_feature_detected as has;
    let mut out = Vec::new();
    let checks = [
        ("sse4.2", has!("sse4.2")),
        ("avx", has!("avx")),
        ("avx2", has!("avx2")),
        ("fma", has!("fma")),
        ("f16c", has!("f16c")),
        ("avxvnni", has!("avxvnni")),
        ("avx512f", has!("avx512f")),
        ("avx512bw", has!("avx512bw")),
        ("avx512vl", has!("avx512vl")),
        ("avx512vnni", has!("avx512vnni")),
        ("avx512bf16", has!("avx512bf16")),
        ("avx512fp16", has!("avx512fp16")),
    ];
    out.extend(checks.iter().filter(|c| c.1).map(|c| c.0));
    // std cannot detect AMX on stable yet: CPUID leaf 7 EDX bits 24, 25, 22
    // say whether the CPU has the tile, int8 and bf16 units.
    let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
    for (bit, name) in [(24, "amx-tile"), (25, "amx-int8"), (22, "amx-bf16")] {
        if edx & (1 << bit) != 0 {
            out.push(name);
        }
    }
    out
}

/// SIMD features this CPU has, detected now (not the ones compiled for).
#[cfg(target_arch = "aarch64")]
fn simd_features() -> Vec<&'static str> {
    use std::arch::is_aarch64_feature_detected as has;
    let checks = [
        ("neon", has!("neon")),
        ("fp16", has!("fp16")),
        ("dotprod", has!("dotprod")),
        ("i8mm", has!("i8mm")),
        ("bf16", has!("bf16")),
        ("sve", has!("sve")),
        ("sve2", has!("sve2")),
    ];
    checks.iter().filter(|c| c.1).map(|c| c.0).collect()
}

/// SIMD features this CPU has (none known on this architecture).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn simd_features() -> Vec<&'static str> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_gives_the_model_and_distinct_cores() {
        let text = "processor\t: 0\nmodel name\t: Test CPU @ 3GHz\nphysical id\t: 0\ncore id\t: 0\n\n\
                    processor\t: 1\nmodel name\t: Test CPU @ 3GHz\nphysical id\t: 0\ncore id\t: 0\n\n\
                    processor\t: 2\nmodel name\t: Test CPU @ 3GHz\nphysical id\t: 0\ncore id\t: 1\n";
        assert_eq!(
            parse_cpuinfo(text),
            (Some("Test CPU @ 3GHz".to_string()), Some(2))
        );
        assert_eq!(parse_cpuinfo(""), (None, None));
    }

    #[test]
    fn meminfo_is_read_in_bytes() {
        let text = "MemTotal:       16384 kB\nMemFree: 1 kB\nMemAvailable:    2048 kB\n";
        assert_eq!(meminfo_bytes(text, "MemTotal"), Some(16384 * 1024));
        assert_eq!(meminfo_bytes(text, "MemAvailable"), Some(2048 * 1024));
        assert_eq!(meminfo_bytes(text, "SwapTotal"), None);
    }
}

//! Every rule a target must keep (listed in the `target` module doc), checked
//! together: the result names every problem, in device then link order.

use super::{DTypeSet, DeviceKind, OpKind, OpSet, Target};
use std::collections::BTreeMap;

/// Every problem with `t`; empty when it is valid.
pub(super) fn problems(t: &Target) -> Vec<String> {
    let mut out = Vec::new();
    if t.devices.is_empty() {
        out.push("it has no devices; a target needs at least one".to_string());
    }
    devices(t, &mut out);
    links(t, &mut out);
    out
}

fn devices(t: &Target, out: &mut Vec<String>) {
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let mut ordinals: BTreeMap<u32, &str> = BTreeMap::new();
    let mut servers: BTreeMap<u32, &str> = BTreeMap::new();
    let mut cpus = Vec::new();
    for (i, d) in t.devices.iter().enumerate() {
        let who = format!("device {i} '{}'", d.name);
        if d.name.is_empty() {
            out.push(format!("device {i}: its name is empty"));
        } else if let Some(first) = names.insert(d.name.as_str(), i) {
            out.push(format!("{who}: the name is also used by device {first}"));
        }
        match d.kind {
            DeviceKind::Cpu | DeviceKind::CpuCores { .. } | DeviceKind::CpuNode { .. } => {
                cpus.push((d.name.as_str(), d.kind));
                if !d.host_visible {
                    out.push(format!("{who}: a CPU device must be host_visible"));
                }
            }
            DeviceKind::Cuda { ordinal } => {
                if let Some(other) = ordinals.insert(ordinal, d.name.as_str()) {
                    out.push(format!(
                        "{who}: CUDA ordinal {ordinal} is also device '{other}'"
                    ));
                }
            }
            DeviceKind::Remote { server } => {
                if let Some(other) = servers.insert(server, d.name.as_str()) {
                    out.push(format!(
                        "{who}: remote server {server} is also device '{other}'"
                    ));
                }
                if d.host_visible {
                    out.push(format!(
                        "{who}: a remote device cannot be host_visible (its memory is on another host)"
                    ));
                }
                if d.supports.iter().any(|s| {
                    OpKind::ALL
                        .iter()
                        .any(|&k| k.is_collective() && s.ops.contains(k))
                }) {
                    out.push(format!(
                        "{who}: a remote device cannot run collectives (they read parts in place)"
                    ));
                }
            }
        }
        if !d.alignment.is_power_of_two() {
            out.push(format!(
                "{who}: alignment {} is not a power of two",
                d.alignment
            ));
        }
        if d.memory_bytes == 0 {
            out.push(format!("{who}: memory_bytes is 0"));
        }
        if d.max_buffer_bytes == 0 {
            out.push(format!("{who}: max_buffer_bytes is 0"));
        } else if d.max_buffer_bytes > d.memory_bytes {
            out.push(format!(
                "{who}: max_buffer_bytes {} exceeds memory_bytes {}",
                d.max_buffer_bytes, d.memory_bytes
            ));
        }
        if d.supports.is_empty() {
            out.push(format!("{who}: supports no op (its support list is empty)"));
        }
        for (j, s) in d.supports.iter().enumerate() {
            if s.ops == OpSet::Only(Vec::new()) {
                out.push(format!("{who}: support entry {j} lists no ops"));
            }
            if s.src0 == DTypeSet::Only(Vec::new()) {
                out.push(format!("{who}: support entry {j} lists no dtypes"));
            }
        }
        out.extend(d.throughput.problems(&who));
    }
    host_cpus(&cpus, out);
}

/// The host is one `Cpu` device, core groups `0..groups` each once, or
/// NUMA nodes each once.
fn host_cpus(cpus: &[(&str, DeviceKind)], out: &mut Vec<String>) {
    let names: Vec<&str> = cpus.iter().map(|c| c.0).collect();
    let mut nodes: Vec<u32> = cpus
        .iter()
        .filter_map(|c| match c.1 {
            DeviceKind::CpuNode { node } => Some(node),
            _ => None,
        })
        .collect();
    if !nodes.is_empty() {
        if nodes.len() != cpus.len() {
            out.push(format!(
                "CPU devices ({}) mix NUMA nodes (CpuNode) with other CPU devices",
                names.join(", ")
            ));
        }
        nodes.sort_unstable();
        if nodes.windows(2).any(|w| w[0] == w[1]) {
            out.push(format!(
                "CPU devices ({}) name one NUMA node twice",
                names.join(", ")
            ));
        }
        return;
    }
    let groups: Vec<(u32, u32)> = cpus
        .iter()
        .filter_map(|c| match c.1 {
            DeviceKind::CpuCores { group, groups } => Some((group, groups)),
            _ => None,
        })
        .collect();
    if groups.is_empty() {
        if cpus.len() > 1 {
            out.push(format!(
                "{} CPU devices ({}); a target has one host CPU, or CpuCores groups",
                cpus.len(),
                names.join(", ")
            ));
        }
        return;
    }
    if groups.len() != cpus.len() {
        out.push(format!(
            "CPU devices ({}) mix the whole host (Cpu) with core groups (CpuCores)",
            names.join(", ")
        ));
        return;
    }
    let of = groups[0].1;
    let mut seen: Vec<u32> = groups.iter().map(|g| g.0).collect();
    seen.sort_unstable();
    let complete = seen.iter().copied().eq(0..of);
    if groups.iter().any(|g| g.1 != of) || !complete {
        out.push(format!(
            "core groups ({}) must be groups 0..{of} of {of}, each once",
            names.join(", ")
        ));
    }
}

fn links(t: &Target, out: &mut Vec<String>) {
    let known = |n: &str| t.devices.iter().any(|d| d.name == n);
    let mut pairs: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (i, l) in t.links.iter().enumerate() {
        let who = format!("link {i} '{}' <-> '{}'", l.from, l.to);
        let mut ends_known = true;
        for end in [&l.from, &l.to] {
            if !known(end) {
                out.push(format!("{who}: no device is called '{end}'"));
                ends_known = false;
            }
        }
        if l.from == l.to {
            out.push(format!("{who}: a link joins two different devices"));
        } else if ends_known {
            let key = if l.from < l.to {
                (l.from.as_str(), l.to.as_str())
            } else {
                (l.to.as_str(), l.from.as_str())
            };
            if let Some(first) = pairs.insert(key, i) {
                out.push(format!(
                    "{who}: link {first} already joins these devices (links serve both directions)"
                ));
            }
        }
        if !(l.bandwidth_gbps.is_finite() && l.bandwidth_gbps > 0.0) {
            out.push(format!(
                "{who}: bandwidth_gbps is {}; it must be finite and > 0",
                l.bandwidth_gbps
            ));
        }
        if !(l.latency_us.is_finite() && l.latency_us >= 0.0) {
            out.push(format!(
                "{who}: latency_us is {}; it must be finite and >= 0",
                l.latency_us
            ));
        }
    }
    // Every pair of distinct device names needs a link (a repeated name is
    // reported once, above, not once per pair).
    let mut names: Vec<&str> = Vec::new();
    for d in &t.devices {
        if !names.contains(&d.name.as_str()) {
            names.push(&d.name);
        }
    }
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            if t.link(a, b).is_none() {
                out.push(format!(
                    "no link joins '{a}' and '{b}'; every pair of devices needs one"
                ));
            }
        }
    }
}

//! Every rule a target must keep (listed in the `target` module doc), checked
//! together: the result names every problem, in device then link order.

use super::{DTypeSet, DeviceKind, OpSet, Target};
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
    let mut cpus = Vec::new();
    for (i, d) in t.devices.iter().enumerate() {
        let who = format!("device {i} '{}'", d.name);
        if d.name.is_empty() {
            out.push(format!("device {i}: its name is empty"));
        } else if let Some(first) = names.insert(d.name.as_str(), i) {
            out.push(format!("{who}: the name is also used by device {first}"));
        }
        match d.kind {
            DeviceKind::Cpu => {
                cpus.push(d.name.as_str());
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
    if cpus.len() > 1 {
        out.push(format!(
            "{} CPU devices ({}); a target has at most one (the host)",
            cpus.len(),
            cpus.join(", ")
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

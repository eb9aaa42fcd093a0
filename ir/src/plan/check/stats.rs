//! Family 7, stats: the summary figures agree with the plan they summarise.

use super::Checker;
use super::ViolationKind::Stats;
use crate::plan::Usage;
use std::collections::BTreeMap;

pub(super) fn check(c: &mut Checker<'_>) {
    let plan = c.plan;
    let stats = &plan.stats;
    if stats.n_splits as usize != plan.splits.len() {
        let msg = format!(
            "n_splits is {}, the plan has {} splits",
            stats.n_splits,
            plan.splits.len()
        );
        c.problem(Stats, "stats", msg);
    }
    if !stats.estimated_us.is_finite() || stats.estimated_us < 0.0 {
        let msg = format!("estimated_us {} is not a finite time", stats.estimated_us);
        c.problem(Stats, "stats", msg);
    }
    links(c);
    devices(c);
}

/// Copies and bytes per (from device, to device), from the copies themselves.
fn links(c: &mut Checker<'_>) {
    let plan = c.plan;
    let mut actual: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
    for split in &plan.splits {
        for copy in &split.copies {
            let Some(from) = c.device_of(copy.src) else {
                continue;
            };
            let e = actual.entry((from, split.device.0)).or_default();
            e.0 += 1;
            e.1 = e.1.saturating_add(copy.bytes);
        }
    }
    let mut listed: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
    for l in &plan.stats.links {
        let key = (l.from.0, l.to.0);
        if listed.insert(key, (u64::from(l.copies), l.bytes)).is_some() {
            let msg = format!("link {} -> {} is listed twice", l.from, l.to);
            c.problem(Stats, "stats", msg);
        }
    }
    let keys: std::collections::BTreeSet<_> = actual.keys().chain(listed.keys()).copied().collect();
    for key in keys {
        let want = actual.get(&key).copied().unwrap_or_default();
        let have = listed.get(&key).copied().unwrap_or_default();
        if want != have {
            let msg = format!(
                "link {} -> {}: the stats say {} copies of {} bytes, the splits hold {} copies of {} bytes",
                c.device_name(key.0),
                c.device_name(key.1),
                have.0,
                have.1,
                want.0,
                want.1
            );
            c.problem(Stats, "stats", msg);
        }
    }
}

/// Compute bytes per device, from the arenas.
fn devices(c: &mut Checker<'_>) {
    let plan = c.plan;
    let mut compute: BTreeMap<u32, u64> = BTreeMap::new();
    for arena in plan.arenas.iter().filter(|a| a.usage == Usage::Compute) {
        let sum = compute.entry(arena.device.0).or_default();
        *sum = sum.saturating_add(arena.size);
    }
    let mut seen = std::collections::BTreeSet::new();
    for ds in &plan.stats.devices {
        let d = ds.device.0;
        let name = format!("stats of device {}", c.device_name(d));
        if !seen.insert(d) {
            c.problem(Stats, name.clone(), "are listed twice".to_string());
        }
        let want = compute.get(&d).copied().unwrap_or(0);
        if ds.compute_bytes != want {
            let msg = format!(
                "compute_bytes is {}, its Compute arenas hold {want} bytes",
                ds.compute_bytes
            );
            c.problem(Stats, name.clone(), msg);
        }
        if ds.compute_lower_bound > ds.compute_bytes {
            let msg = format!(
                "compute_lower_bound {} exceeds compute_bytes {}",
                ds.compute_lower_bound, ds.compute_bytes
            );
            c.problem(Stats, name, msg);
        }
    }
    for (&d, &bytes) in &compute {
        if bytes > 0 && !seen.contains(&d) {
            let msg = format!("has {bytes} bytes of Compute arenas but no stats entry");
            c.problem(Stats, format!("device {}", c.device_name(d)), msg);
        }
    }
}

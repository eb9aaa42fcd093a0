//! A plan's decisions beside the ones llama.cpp made on a captured decode
//! (`ggplan show PLAN --against CAPTURE.json`): splits, copies and bytes
//! per link, compute memory per device.
//!
//! llama.cpp names buffers, ggplan names devices; a buffer maps to a device
//! by [`device_of_buffer`]: `CPU*` and `CUDA_Host` to `cpu`, `CUDAk` to
//! `cudak`, `RPCk[host:port]` to `rpcN` where `host:port` is the N-th server
//! of the capture's `--rpc` flag (ggplan's `--rpc` order), anything else
//! lower-cased; an original without a buffer (a graph input reached only
//! through its copies) is on the CPU, where ggml keeps inputs. Known differences the output names rather than hides:
//! llama.cpp reserves compute memory for its largest batch (`n_ubatch`), not
//! the captured one; its I64 cache indices are I32 in an imported graph, so
//! those copies are half the bytes.

use models::capture::Capture;
use std::collections::BTreeMap;
use std::fmt::Write;

use ir::plan::{Plan, Step};

/// One side's decisions, by ggplan device name.
#[derive(Debug, Default, PartialEq)]
pub struct Decisions {
    /// Each split's device and how many graph nodes it computes (views,
    /// reshapes and permutes compute nothing and are not counted; a fused
    /// kernel counts every node it computes).
    pub splits: Vec<(String, usize)>,
    /// `(from, to)` -> (copies, bytes).
    pub links: BTreeMap<(String, String), (u64, u64)>,
    /// Compute memory per device, bytes.
    pub compute: BTreeMap<String, u64>,
}

impl Decisions {
    fn copies(&self) -> (u64, u64) {
        (self.links.values()).fold((0, 0), |(n, b), &(k, x)| (n + k, b + x))
    }
}

/// The ggplan device of a llama.cpp buffer name (see the module doc).
pub fn device_of_buffer(buffer: &str, rpc_servers: &[String]) -> String {
    if buffer.starts_with("CPU") || buffer == "CUDA_Host" {
        return "cpu".into();
    }
    if let Some(rest) = buffer.strip_prefix("RPC")
        && let Some((_, endpoint)) = rest.split_once('[')
        && let Some(endpoint) = endpoint.strip_suffix(']')
        && let Some(i) = rpc_servers.iter().position(|s| s == endpoint)
    {
        return format!("rpc{i}");
    }
    buffer.to_lowercase()
}

/// ggml ops that only describe memory: they compute nothing.
const LAYOUT_ONLY: [&str; 5] = ["NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"];

/// The servers of the capture's `--rpc` flag, in order.
fn rpc_servers(capture: &Capture) -> Vec<String> {
    let at = capture.args.iter().position(|a| a == "--rpc");
    let list = at.and_then(|i| capture.args.get(i + 1));
    list.map_or(Vec::new(), |l| l.split(',').map(str::to_string).collect())
}

/// What llama.cpp decided in `capture`.
pub fn of_capture(capture: &Capture) -> Decisions {
    let servers = rpc_servers(capture);
    let device = |buffer: &str| device_of_buffer(buffer, &servers);
    let splits = (capture.splits.iter())
        .map(|s| {
            let nodes = capture.nodes.get(s.first..s.end).unwrap_or_default();
            let ops = (nodes.iter().filter_map(|&n| capture.tensors.get(n)))
                .filter(|t| !LAYOUT_ONLY.contains(&t.op.as_str()))
                .count();
            (device(&s.buffer), ops)
        })
        .collect();
    let mut links = BTreeMap::new();
    for c in &capture.copies {
        let original = (capture.tensors.get(c.tensor))
            .and_then(|t| t.copy_of)
            .and_then(|o| capture.tensors.get(o));
        let from = match original {
            // An original reached only through its copies (a graph input) has
            // no buffer in the capture; ggml gives inputs to its last backend,
            // the CPU.
            Some(t)
                if t.buffer.is_empty()
                    && (t.reconstructed || t.flags & models::capture::FLAG_INPUT != 0) =>
            {
                "cpu".to_string()
            }
            Some(t) => device(&t.buffer),
            None => "?".to_string(),
        };
        let link: &mut (u64, u64) = links.entry((from, device(&c.backend))).or_default();
        link.0 += 1;
        link.1 += c.bytes;
    }
    // "sched_reserve: RPC0[127.0.0.1:50061] compute buffer size =    10.39 MiB"
    let mut compute = BTreeMap::new();
    for line in &capture.reserve {
        let Some((buffer, size)) = line.split_once(" compute buffer size =") else {
            continue;
        };
        let buffer = buffer.rsplit(": ").next().unwrap_or(buffer).trim();
        let size = size.trim();
        let Some(mib) = size
            .strip_suffix("MiB")
            .and_then(|m| m.trim().parse::<f64>().ok())
        else {
            continue;
        };
        *compute.entry(device(buffer)).or_default() += (mib * 1048576.0).round() as u64;
    }
    Decisions {
        splits,
        links,
        compute,
    }
}

/// What `plan` decides.
pub fn of_plan(plan: &Plan) -> Decisions {
    let name = |i: usize| {
        plan.devices
            .get(i)
            .map_or("?".to_string(), |d| d.name.clone())
    };
    let splits = (plan.splits.iter())
        .map(|sp| {
            // A fused kernel computes several graph nodes: count them all.
            let ops = (sp.steps.iter())
                .map(|s| match s {
                    Step::Op { .. } => 1,
                    Step::MulMatAdd { .. } => 2,
                    Step::Attention { .. } => 4, // the permute is a view, no step
                    Step::MulMatGlu { inner, .. } => 3 + inner.len(),
                    Step::MulMatMany { dsts, .. } | Step::RopeStore { dsts, .. } => dsts.len(),
                    Step::Fused { kernel } => {
                        let k = plan.kernels.get(*kernel as usize);
                        k.map_or(1, |k| k.nodes.len())
                    }
                })
                .sum();
            (name(sp.device.index()), ops)
        })
        .collect();
    let links = (plan.stats.links.iter())
        .map(|l| {
            let key = (name(l.from.index()), name(l.to.index()));
            (key, (u64::from(l.copies), l.bytes))
        })
        .collect();
    let compute = (plan.stats.devices.iter())
        .map(|d| (name(d.device.index()), d.compute_bytes))
        .collect();
    Decisions {
        splits,
        links,
        compute,
    }
}

fn bytes(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    format!("{out} B")
}

fn mib(n: u64) -> String {
    format!("{:.2} MiB", n as f64 / 1048576.0)
}

/// The side-by-side text `ggplan show --against` prints.
pub fn text(plan: &Plan, capture: &Capture) -> String {
    let (ours, theirs) = (of_plan(plan), of_capture(capture));
    let mut out = String::new();
    let flags = capture
        .args
        .iter()
        .skip(2)
        .cloned()
        .collect::<Vec<_>>()
        .join(" ");
    let _ = writeln!(
        out,
        "beside llama.cpp's capture {} ({flags})",
        capture.path.display()
    );
    let mut row = |what: &str, left: String, right: String, compare: bool| {
        let mark = if compare && left != right {
            "  (differs)"
        } else {
            ""
        };
        let _ = writeln!(out, "  {what:<22} {left:<26} {right}{mark}");
    };
    row("", "llama.cpp".into(), "ggplan".into(), false);
    let count = |v: &[(String, usize)]| v.len().to_string();
    row("splits", count(&theirs.splits), count(&ours.splits), true);
    for i in 0..theirs.splits.len().max(ours.splits.len()) {
        let side = |v: &[(String, usize)]| {
            let plural = |n: usize| if n == 1 { "" } else { "s" };
            (v.get(i)).map_or("-".into(), |(d, n)| format!("{d}, {n} op{}", plural(*n)))
        };
        row(
            &format!("  split {i}"),
            side(&theirs.splits),
            side(&ours.splits),
            true,
        );
    }
    let total = |d: &Decisions| {
        let (n, b) = d.copies();
        format!("{n}, {}", bytes(b))
    };
    row("copies", total(&theirs), total(&ours), false);
    let links: std::collections::BTreeSet<&(String, String)> =
        theirs.links.keys().chain(ours.links.keys()).collect();
    for link in links {
        let side = |d: &Decisions| {
            d.links
                .get(link)
                .map_or("-".into(), |&(n, b)| format!("{n}, {}", bytes(b)))
        };
        let counts_differ =
            theirs.links.get(link).map(|l| l.0) != ours.links.get(link).map(|l| l.0);
        let mark = if counts_differ { "  (differs)" } else { "" };
        row(
            &format!("  {} -> {}", link.0, link.1),
            side(&theirs),
            format!("{}{mark}", side(&ours)),
            false,
        );
    }
    row(
        "compute memory",
        "(its largest batch)".into(),
        "(this plan's batch)".into(),
        false,
    );
    let devices: std::collections::BTreeSet<&String> =
        theirs.compute.keys().chain(ours.compute.keys()).collect();
    for d in devices {
        let side = |x: &Decisions| x.compute.get(d).map_or("-".into(), |&b| mib(b));
        row(&format!("  {d}"), side(&theirs), side(&ours), false);
    }
    out
}

/// The same as JSON (`show --json --against`): both sides' splits, links and compute bytes.
pub fn json(plan: &Plan, capture: &Capture) -> serde_json::Value {
    let side = |d: Decisions| {
        let (n_copies, copy_bytes) = d.copies();
        serde_json::json!({
            "n_splits": d.splits.len(),
            "splits": d.splits.iter().map(|(dev, n)| serde_json::json!([dev, n])).collect::<Vec<_>>(),
            "n_copies": n_copies,
            "copy_bytes": copy_bytes,
            "links": d.links.iter().map(|((f, t), (n, b))| {
                serde_json::json!({"from": f, "to": t, "copies": n, "bytes": b})
            }).collect::<Vec<_>>(),
            "compute_bytes": d.compute,
        })
    };
    serde_json::json!({
        "capture": capture.path.display().to_string(),
        "llama_cpp": side(of_capture(capture)),
        "ggplan": side(of_plan(plan)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_map_to_ggplan_devices() {
        let servers = ["127.0.0.1:1".to_string(), "127.0.0.1:2".to_string()];
        let d = |b: &str| device_of_buffer(b, &servers);
        assert_eq!(d("CPU"), "cpu");
        assert_eq!(d("CPU_Mapped"), "cpu");
        assert_eq!(d("CUDA_Host"), "cpu");
        assert_eq!(d("CUDA0"), "cuda0");
        // llama.cpp numbers each server's devices from 0: the endpoint decides.
        assert_eq!(d("RPC0[127.0.0.1:2]"), "rpc1");
        assert_eq!(d("RPC0[127.0.0.1:1]"), "rpc0");
        assert_eq!(d("RPC0[10.0.0.1:9]"), "rpc0[10.0.0.1:9]");
    }

    #[test]
    fn byte_counts_read_with_separators() {
        assert_eq!(bytes(90816), "90,816 B");
        assert_eq!(bytes(999), "999 B");
        assert_eq!(bytes(1_000_000), "1,000,000 B");
    }
}

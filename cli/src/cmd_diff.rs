//! `ggplan diff`: what changed between two plans of the same graph.

use anyhow::Result;
use clap::Args;
use ir::plan::Plan;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `ggplan diff`.
#[derive(Args)]
#[command(after_help = "Example:\n  ggplan diff ggml.plan.ron cost.plan.ron")]
pub struct DiffArgs {
    /// The first plan.
    a: PathBuf,
    /// The second plan.
    b: PathBuf,
}

// Plans are read, not checked, before they are compared: every index is
// looked up with `get`, and what is out of range prints as "?".

fn device(p: &Plan, index: usize) -> &str {
    p.devices.get(index).map_or("?", |d| d.name.as_str())
}

fn devices_by_tensor(p: &Plan) -> BTreeMap<&str, &str> {
    let graph_tensors = (p.n_graph_tensors as usize).min(p.tensors.len());
    p.tensors[..graph_tensors]
        .iter()
        .map(|t| (t.name.as_str(), device(p, t.device.index())))
        .collect()
}

fn copies(p: &Plan) -> BTreeMap<String, u64> {
    p.splits
        .iter()
        .flat_map(|s| s.copies.iter().map(move |c| (s.device, c)))
        .map(|(d, c)| {
            (
                format!(
                    "{} -> {}",
                    p.tensors
                        .get(c.src as usize)
                        .map_or("?", |t| t.name.as_str()),
                    device(p, d.index())
                ),
                c.bytes,
            )
        })
        .collect()
}

fn arenas(p: &Plan) -> BTreeMap<String, u64> {
    p.arenas
        .iter()
        .map(|a| {
            (
                format!("{} {}", device(p, a.device.index()), a.usage),
                a.size,
            )
        })
        .collect()
}

/// Runs `ggplan diff`; exit 0 whether or not they differ (like `diff -q` is not).
pub fn run(args: DiffArgs) -> Result<ExitCode> {
    let (a, b) = (ir::plan::read_plan(&args.a)?, ir::plan::read_plan(&args.b)?);
    if a.graph_hash != b.graph_hash {
        println!(
            "note: the plans are for different graphs ({} vs {})",
            a.graph_hash, b.graph_hash
        );
    }
    let mut same = true;
    let (da, db) = (devices_by_tensor(&a), devices_by_tensor(&b));
    for (name, dev_a) in &da {
        match db.get(name) {
            Some(dev_b) if dev_b != dev_a => {
                println!("placement  {name}: {dev_a} -> {dev_b}");
                same = false;
            }
            None => println!("tensor     {name}: only in the first plan"),
            _ => {}
        }
    }
    if a.splits.len() != b.splits.len() {
        println!("splits     {} -> {}", a.splits.len(), b.splits.len());
        same = false;
    }
    let (ca, cb) = (copies(&a), copies(&b));
    for (k, bytes) in &ca {
        if !cb.contains_key(k) {
            println!("copy       - {k} ({bytes} bytes)");
            same = false;
        }
    }
    for (k, bytes) in &cb {
        if !ca.contains_key(k) {
            println!("copy       + {k} ({bytes} bytes)");
            same = false;
        }
    }
    let (ma, mb) = (arenas(&a), arenas(&b));
    for k in ma
        .keys()
        .chain(mb.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (x, y) = (
            ma.get(k).copied().unwrap_or(0),
            mb.get(k).copied().unwrap_or(0),
        );
        if x != y {
            println!(
                "memory     {k}: {x} -> {y} bytes ({:+})",
                y as i64 - x as i64
            );
            same = false;
        }
    }
    if same {
        println!("no differences in placement, splits, copies or memory");
    }
    Ok(ExitCode::SUCCESS)
}

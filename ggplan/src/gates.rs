//! Quality gates: limits a plan must keep beyond being valid, so that CI
//! notices when a change to the model, the target or ggplan makes a plan
//! worse (more splits, more bytes copied between devices, arenas further
//! above their lower bound). `ggplan verify --max-splits N
//! --max-copy-bytes B --max-arena-over-bound R` runs the same gates.
//!
//! Splits, copy bytes and arena sizes are counted from the plan's body; the
//! lower bound of each device's compute arena is the figure the compiler
//! recorded in the plan's `stats` (the most bytes live at one time).

use crate::{Error, Plan, Result};
use ir::plan::Usage;

/// Limits a plan must keep; `None` checks nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gates {
    /// Most splits (runs of steps on one device between synchronisations).
    pub max_splits: Option<usize>,
    /// Most bytes copied between devices per run.
    pub max_copy_bytes: Option<u64>,
    /// Largest ratio of a device's compute arena to its lower bound
    /// (1.02 allows 2% above the bound).
    pub max_arena_over_bound: Option<f64>,
}

/// The figures the gates compare, measured on one plan.
#[derive(Clone, Debug, PartialEq)]
pub struct GateFigures {
    /// Splits in the plan.
    pub splits: usize,
    /// Bytes copied between devices per run.
    pub copy_bytes: u64,
    /// Per device with a compute arena: its name, arena bytes, lower bound.
    pub arenas: Vec<(String, u64, u64)>,
}

impl GateFigures {
    /// Measures `plan`.
    pub fn of(plan: &Plan) -> GateFigures {
        let copy_bytes = plan
            .splits
            .iter()
            .flat_map(|s| &s.copies)
            .map(|c| c.bytes)
            .sum();
        let arenas = plan
            .stats
            .devices
            .iter()
            .filter_map(|d| {
                let name = plan.devices.get(d.device.index())?.name.clone();
                let bytes: u64 = plan
                    .arenas
                    .iter()
                    .filter(|a| a.device == d.device && a.usage == Usage::Compute)
                    .map(|a| a.size)
                    .sum();
                (bytes > 0).then_some((name, bytes, d.compute_lower_bound))
            })
            .collect();
        GateFigures {
            splits: plan.splits.len(),
            copy_bytes,
            arenas,
        }
    }
}

impl Gates {
    /// Every gate `plan` fails, worded with the measured value and the limit
    /// (empty when it keeps them all).
    pub fn failures(&self, plan: &Plan) -> Vec<String> {
        let figures = GateFigures::of(plan);
        let mut failures = Vec::new();
        if let Some(max) = self.max_splits
            && figures.splits > max
        {
            failures.push(format!(
                "{} splits, more than max_splits {max}",
                figures.splits
            ));
        }
        if let Some(max) = self.max_copy_bytes
            && figures.copy_bytes > max
        {
            failures.push(format!(
                "{} bytes copied between devices per run, more than max_copy_bytes {max}",
                figures.copy_bytes
            ));
        }
        if let Some(max) = self.max_arena_over_bound {
            for (device, bytes, bound) in &figures.arenas {
                // A zero bound with a non-empty arena is infinitely over it.
                let ratio = if *bound == 0 {
                    f64::INFINITY
                } else {
                    *bytes as f64 / *bound as f64
                };
                if ratio > max {
                    failures.push(format!(
                        "{device}: compute arena {bytes} bytes is {ratio:.4}x its lower bound {bound}, more than max_arena_over_bound {max}"
                    ));
                }
            }
        }
        failures
    }

    /// Ok when `plan` keeps every gate, else [`Error::Gates`] listing each
    /// failure; `name` names the plan in the error.
    ///
    /// ```
    /// # let graph = ggplan::graph::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/graphs/llama2l.ron"))?;
    /// let target = ggplan::target::resolve("cpu+cuda0")?;
    /// let options = ggplan::CompileOptions {
    ///     placement: ggplan::PlacementOptions { offload_layers: Some(1), ..Default::default() },
    ///     ..Default::default()
    /// };
    /// let plan = ggplan::compile(&graph, &target, &options)?.plan; // 2 splits: cpu, cuda0
    /// let gates = ggplan::Gates { max_splits: Some(1), ..Default::default() };
    /// let refused = gates.check(&plan, "llama2l").unwrap_err().to_string();
    /// assert!(refused.contains("more than max_splits 1"), "{refused}");
    /// # Ok::<(), ggplan::Error>(())
    /// ```
    pub fn check(&self, plan: &Plan, name: &str) -> Result<()> {
        let failures = self.failures(plan);
        if failures.is_empty() {
            return Ok(());
        }
        Err(Error::Gates {
            name: name.to_string(),
            failures,
        })
    }
}

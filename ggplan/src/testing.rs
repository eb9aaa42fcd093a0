//! Snapshot tests of your own models' plans (feature `testing`).
//!
//! A plan is deterministic: the same graph, target and options give the same
//! bytes. A snapshot test therefore catches every change in scheduling
//! decisions (a device assignment, a new split, an arena that grew) when the
//! model, the target or ggplan changes, and `cargo insta review` shows it as
//! a diff to accept or reject. [`assert_plan_snapshot!`](crate::assert_plan_snapshot)
//! snapshots the summary (splits, copies, memory against its lower bound) by
//! default, or the whole plan text; [`assert_gates`] holds limits that must
//! not be crossed whatever the snapshot says.
//!
//! ```
//! use ggplan::testing::{SnapshotView, snapshot_text};
//! # let graph = ggplan::graph::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/graphs/mlp.ron"))?;
//! let target = ggplan::target::resolve("cpu")?;
//! let plan = ggplan::compile(&graph, &target, &ggplan::CompileOptions::default())?.plan;
//! // In a test: ggplan::assert_plan_snapshot!("mlp_cpu", plan);
//! assert!(snapshot_text(&plan, SnapshotView::Summary).starts_with("plan for graph 'mlp'"));
//! ggplan::testing::assert_gates(&plan, &ggplan::Gates { max_splits: Some(1), ..Default::default() });
//! # Ok::<(), ggplan::Error>(())
//! ```

use crate::{Gates, Plan};

#[doc(hidden)]
pub use insta as __insta;

/// What a plan snapshot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotView {
    /// `ggplan show`'s summary: splits, copies, memory per device against
    /// its lower bound. Short, and what reviewers read.
    Summary,
    /// The whole plan text: every placement, step and event.
    Plan,
}

/// The text a snapshot of `plan` compares.
pub fn snapshot_text(plan: &Plan, view: SnapshotView) -> String {
    match view {
        SnapshotView::Summary => crate::plan::summary(plan),
        SnapshotView::Plan => crate::plan::to_text(plan),
    }
}

/// Panics, listing every failure, when `plan` misses one of `gates`.
#[track_caller]
pub fn assert_gates(plan: &Plan, gates: &Gates) {
    if let Err(e) = gates.check(plan, &plan.graph_name) {
        panic!("{e}");
    }
}

/// Snapshot-tests a plan with insta: `assert_plan_snapshot!("name", plan)`
/// compares the plan's summary with `snapshots/<file>__name.snap` beside the
/// test; `assert_plan_snapshot!("name", plan, SnapshotView::Plan)` compares
/// the whole plan text. Review changes with `cargo insta review`.
#[macro_export]
macro_rules! assert_plan_snapshot {
    ($name:expr, $plan:expr) => {
        $crate::assert_plan_snapshot!($name, $plan, $crate::testing::SnapshotView::Summary)
    };
    ($name:expr, $plan:expr, $view:expr) => {
        $crate::testing::__insta::assert_snapshot!(
            $name,
            $crate::testing::snapshot_text(&$plan, $view)
        )
    };
}

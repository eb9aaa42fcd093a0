//! Checks that an execution order runs every node once, after its sources.

use super::Step;
use ir::{Graph, TensorId};

/// Why an execution order was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderProblem {
    /// The id at `step` is no tensor of the graph, or a node there names one as
    /// a source or view root.
    UnknownTensor {
        /// Position in the order.
        step: Step,
        /// The unknown id.
        id: TensorId,
    },
    /// A leaf was scheduled; leafs are not run.
    Leaf {
        /// Position in the order.
        step: Step,
        /// The leaf's name.
        name: String,
    },
    /// A node appears twice.
    Repeated {
        /// The second position.
        step: Step,
        /// The node's name.
        name: String,
    },
    /// A node of the graph is not in the order.
    Missing {
        /// The node's name.
        name: String,
    },
    /// A node runs before (or without) one of its node sources.
    SourceNotBefore {
        /// Position of the node.
        step: Step,
        /// The node's name.
        name: String,
        /// The source's name.
        source: String,
    },
}

impl std::fmt::Display for OrderProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OrderProblem::UnknownTensor { step, id } => {
                write!(f, "step {step}: unknown tensor {id}")
            }
            OrderProblem::Leaf { step, name } => write!(f, "step {step}: '{name}' is a leaf"),
            OrderProblem::Repeated { step, name } => write!(f, "step {step}: '{name}' runs twice"),
            OrderProblem::Missing { name } => write!(f, "node '{name}' never runs"),
            OrderProblem::SourceNotBefore { step, name, source } => {
                write!(f, "step {step}: '{name}' runs before its source '{source}'")
            }
        }
    }
}

/// An order that is not an execution order of the graph: every problem found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderError {
    /// The graph's name.
    pub graph: String,
    /// Every problem, in step order (missing nodes last, in id order).
    pub problems: Vec<OrderProblem>,
}

impl std::fmt::Display for OrderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid execution order for graph '{}':", self.graph)?;
        for p in &self.problems {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for OrderError {}

/// Checks that `order` runs every node of `graph` once, after its node sources,
/// and that every id it reaches (sources, view roots) exists.
pub(crate) fn check_order(graph: &Graph, order: &[TensorId]) -> Result<(), OrderError> {
    let n = graph.len();
    let mut problems = Vec::new();
    let mut step_of: Vec<Option<Step>> = vec![None; n];
    for (step, &id) in order.iter().enumerate() {
        let Some(t) = graph.tensors().get(id.index()) else {
            problems.push(OrderProblem::UnknownTensor { step, id });
            continue;
        };
        let name = t.name.clone();
        if t.is_leaf() {
            problems.push(OrderProblem::Leaf { step, name });
        } else if step_of[id.index()].is_some() {
            problems.push(OrderProblem::Repeated { step, name });
        } else {
            step_of[id.index()] = Some(step);
        }
    }
    for (step, &id) in order.iter().enumerate() {
        let Some(t) = graph.tensors().get(id.index()) else {
            continue;
        };
        let reached = t.srcs.iter().copied().chain(t.view.map(|v| v.root));
        for src in reached {
            match graph.tensors().get(src.index()) {
                None => problems.push(OrderProblem::UnknownTensor { step, id: src }),
                Some(s) if !s.is_leaf() && step_of[src.index()].is_none_or(|p| p >= step) => {
                    problems.push(OrderProblem::SourceNotBefore {
                        step,
                        name: t.name.clone(),
                        source: s.name.clone(),
                    })
                }
                Some(_) => {}
            }
        }
    }
    for id in graph.nodes() {
        if step_of[id.index()].is_none() {
            let name = graph.tensor(id).name.clone();
            problems.push(OrderProblem::Missing { name });
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(OrderError {
            graph: graph.name.clone(),
            problems,
        })
    }
}

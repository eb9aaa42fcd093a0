//! Builds a group's inputs and expression body from its chain of members
//! (invariants 7 and 8 of the module doc).

use super::{FusedGroup, Member};
use ir::plan::{BinaryFn, Expr};
use ir::{Graph, TensorId};

/// The group of `chain` (members with their kinds, in order), or `None` when a
/// member's sources do not fit its kind (the caller checked they do) or an
/// index does not fit in `u32`.
pub(super) fn build(graph: &Graph, chain: &[(TensorId, Member)]) -> Option<FusedGroup> {
    let mut b = Builder::default();
    for &(id, kind) in chain {
        let srcs = &graph.tensor(id).srcs;
        let value = match (kind, srcs.as_slice()) {
            (Member::RmsNorm(eps), &[x]) => {
                let input = b.input_index(x)?;
                b.push(Expr::RmsNorm { input, eps })?
            }
            (Member::Norm(eps), &[x]) => {
                let input = b.input_index(x)?;
                b.push(Expr::Norm { input, eps })?
            }
            (Member::Unary(f), &[x]) => {
                let x = b.operand(x)?;
                b.push(Expr::Unary(f, x))?
            }
            (Member::Binary(f), &[x, y]) => {
                let (x, y) = (b.operand(x)?, b.operand(y)?);
                b.push(Expr::Binary(f, x, y))?
            }
            (Member::Glu(act), &[gate, up]) => {
                let (gate, up) = (b.operand(gate)?, b.operand(up)?);
                let activated = b.push(Expr::Unary(act, gate))?;
                b.push(Expr::Binary(BinaryFn::Mul, activated, up))?
            }
            _ => return None,
        };
        b.members.push((id, value));
    }
    Some(FusedGroup {
        nodes: chain.iter().map(|&(id, _)| id).collect(),
        inputs: b.inputs,
        body: b.body,
    })
}

#[derive(Default)]
struct Builder {
    inputs: Vec<TensorId>,
    /// The `Expr::Input` of each input, once one was needed.
    input_expr: Vec<Option<u32>>,
    /// Members built so far and the expression holding their value.
    members: Vec<(TensorId, u32)>,
    body: Vec<Expr>,
}

impl Builder {
    /// Appends `e`, returning its index.
    fn push(&mut self, e: Expr) -> Option<u32> {
        let at = u32::try_from(self.body.len()).ok()?;
        self.body.push(e);
        Some(at)
    }

    /// The input index of `id`, adding it on first use.
    fn input_index(&mut self, id: TensorId) -> Option<u32> {
        let at = match self.inputs.iter().position(|&i| i == id) {
            Some(at) => at,
            None => {
                self.inputs.push(id);
                self.input_expr.push(None);
                self.inputs.len() - 1
            }
        };
        u32::try_from(at).ok()
    }

    /// The expression holding the value of `id`: an earlier member's, or the
    /// input's `Expr::Input` (added on first use).
    fn operand(&mut self, id: TensorId) -> Option<u32> {
        if let Some(&(_, value)) = self.members.iter().find(|(m, _)| *m == id) {
            return Some(value);
        }
        let input = self.input_index(id)?;
        let slot = usize::try_from(input).ok()?;
        if let Some(Some(e)) = self.input_expr.get(slot) {
            return Some(*e);
        }
        let e = self.push(Expr::Input(input))?;
        *self.input_expr.get_mut(slot)? = Some(e);
        Some(e)
    }
}

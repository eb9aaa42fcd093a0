//! Facts about a plan's tensors that the plan evaluator and the runtime both
//! need: a tensor's layout, the tensor that owns its bytes, the graph tensor a
//! copy stands for, and which leafs index which tables.
//!
//! Invariant: every function here tolerates a plan that was never checked
//! (indices out of range, view or copy chains that loop): it stops and
//! answers from what it reached, never panics.

use super::{Placement, Plan, PlanTensor};
use crate::Op;
use crate::layout::Layout;
use std::collections::BTreeMap;

impl PlanTensor {
    /// Its dtype, extents and strides.
    pub fn layout(&self) -> Layout {
        Layout {
            dtype: self.dtype,
            ne: self.ne,
            nb: self.nb,
        }
    }
}

impl Plan {
    /// The tensor whose arena bytes `t` uses: `t` itself, or the tensor its
    /// view names.
    pub fn owner(&self, mut t: u32) -> u32 {
        for _ in 0..=self.tensors.len() {
            match self.tensors.get(t as usize).map(|x| x.placement) {
                Some(Placement::View { of, .. }) => t = of,
                _ => break,
            }
        }
        t
    }

    /// The graph tensor plan tensor `t` stands for (copies name their original).
    pub fn original(&self, mut t: u32) -> u32 {
        for _ in 0..=self.tensors.len() {
            match self.tensors.get(t as usize).and_then(|x| x.copy_of) {
                Some(src) => t = src,
                None => break,
            }
        }
        t
    }

    /// Every graph tensor used as row indices by `get_rows` or `set_rows`,
    /// or as expert ids by `mul_mat_id` (the experts' count) (directly,
    /// through a view or through a copy), with the fewest rows among the
    /// tables it indexes and that table. An index read only by parts of a
    /// cut table (`get_rows_part`, `mul_mat_id_part`) takes any row of the
    /// full table, which no one part holds: its bound is the full table's
    /// extent (a weight shard's stored tensor, a part of the experts' full
    /// set, else the furthest row a part reaches).
    pub fn index_tables(&self) -> BTreeMap<u32, (i64, u32)> {
        // Whole tables: the fewest rows. Parts: the furthest they reach.
        let mut whole: BTreeMap<u32, (i64, u32)> = BTreeMap::new();
        let mut parts: BTreeMap<u32, (i64, u32)> = BTreeMap::new();
        let ops = (self.splits.iter().flat_map(|s| &s.steps)).flat_map(|step| step.ops());
        for (op, _, srcs) in ops {
            let (index, table) = match op {
                Op::GetRows | Op::GetRowsPart { .. } => (srcs.get(1), srcs.first()),
                Op::SetRows => (srcs.get(2), srcs.first()),
                Op::MulMatId | Op::MulMatIdPart { .. } => (srcs.get(2), srcs.first()),
                _ => continue,
            };
            let (Some(&index), Some(t)) =
                (index, table.and_then(|&t| self.tensors.get(t as usize)))
            else {
                continue;
            };
            let table = *table.unwrap_or(&0);
            let (rows, of_part) = match (op, &t.shard) {
                (Op::GetRowsPart { .. }, Some(s)) => (s.full_ne[1], true),
                (Op::GetRowsPart { start }, None) => (start.saturating_add(t.ne[1]), true),
                (Op::MulMatIdPart { experts, .. }, _) => (*experts, true),
                // mul_mat_id's ids pick matrices along the table's dim 2.
                (Op::MulMatId, _) => (t.ne[2], false),
                _ => (t.ne[1], false),
            };
            let root = self.original(self.owner(index));
            if of_part {
                let entry = parts.entry(root).or_insert((rows, table));
                if rows > entry.0 {
                    *entry = (rows, table);
                }
            } else {
                let entry = whole.entry(root).or_insert((rows, table));
                if rows < entry.0 {
                    *entry = (rows, table);
                }
            }
        }
        for (root, bound) in parts {
            whole.entry(root).or_insert(bound);
        }
        whole
    }

    /// The earlier rope among a `RopeStore`'s `ops` ([`super::Step::ops`]) whose
    /// result `set_rows` op `j` stores: its rows are a packed view at offset
    /// 0 of that rope's packed result (which owns arena bytes), of its dtype
    /// and element count, so element `n` of the rows is element `n` of the
    /// rope's result. The step's kernel then rotates the rope's operands
    /// itself rather than reading the result.
    pub fn chained_rope(&self, ops: &[(&Op, u32, &[u32])], j: usize) -> Option<usize> {
        let rows = *ops.get(j)?.2.get(1)?;
        let r = self.tensors.get(rows as usize)?;
        let Placement::View { of, offset: 0 } = r.placement else {
            return None;
        };
        let i =
            (ops[..j].iter()).position(|&(op, dst, _)| matches!(op, Op::Rope(_)) && dst == of)?;
        let d = self.tensors.get(of as usize)?;
        let packed = |t: &PlanTensor| {
            Layout {
                dtype: t.dtype,
                ne: t.ne,
                nb: t.nb,
            }
            .is_contiguous()
        };
        let count = |ne: [i64; 4]| ne.iter().product::<i64>();
        let fits = matches!(d.placement, Placement::Arena { .. })
            && r.dtype == d.dtype
            && packed(r)
            && packed(d)
            && count(r.ne) == count(d.ne);
        fits.then_some(i)
    }
}

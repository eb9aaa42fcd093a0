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

    /// Every graph tensor used as row indices by `get_rows` (`get_rows_part`:
    /// the full table's rows) or `set_rows`, or as expert ids by `mul_mat_id`
    /// (the experts' count)
    /// (directly, through a view or through a copy), with the fewest rows
    /// among the tables it indexes and that table.
    pub fn index_tables(&self) -> BTreeMap<u32, (i64, u32)> {
        let mut out: BTreeMap<u32, (i64, u32)> = BTreeMap::new();
        let ops = (self.splits.iter().flat_map(|s| &s.steps)).flat_map(|step| step.ops());
        for (op, _, srcs) in ops {
            // `part`: a part of a row-cut table takes any row of the full
            // table (its shard's extent); the others give zeros there.
            // `experts`: mul_mat_id's ids pick matrices along the table's dim 2.
            let mut experts = false;
            let (index, table, part) = match op {
                Op::GetRows | Op::GetRowsPart { .. } => (
                    srcs.get(1),
                    srcs.first(),
                    matches!(op, Op::GetRowsPart { .. }),
                ),
                Op::SetRows => (srcs.get(2), srcs.first(), false),
                Op::MulMatId => {
                    experts = true;
                    (srcs.get(2), srcs.first(), false)
                }
                _ => continue,
            };
            let (Some(&index), Some(&table)) = (index, table) else {
                continue;
            };
            let Some(rows) = self.tensors.get(table as usize).map(|t| match &t.shard {
                Some(s) if part => s.full_ne[1],
                _ if experts => t.ne[2],
                _ => t.ne[1],
            }) else {
                continue;
            };
            let root = self.original(self.owner(index));
            let entry = out.entry(root).or_insert((rows, table));
            if rows < entry.0 {
                *entry = (rows, table);
            }
        }
        out
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

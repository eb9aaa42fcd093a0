//! The plan's global order: split by split, its copies, then its steps. This
//! is the order the runtime issues work in and the one every global step
//! index (lifetimes, events, traces, the memory timeline) counts in.
//!
//! Invariants: [`global_order`] yields every copy and step of the splits
//! exactly once, with `index` counting 0, 1, 2, ... in that order; `split`
//! and `position` locate the item in its split (`position` within the split's
//! copies for a copy, within its steps for a step). [`GlobalItem::reads`] and
//! [`GlobalItem::writes`] never panic: a fused step naming a kernel out of
//! range reads and writes nothing (the plan checker reports it).

use crate::plan::{Copy, FusedKernel, Plan, Split, Step};

/// What one item of the global order is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Work<'a> {
    /// A copy into the split's device.
    Copy(&'a Copy),
    /// A step of the split.
    Step(&'a Step),
}

/// One copy or step of a plan, where it sits in the global order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GlobalItem<'a> {
    /// Position in the global order (copies count as steps).
    pub index: usize,
    /// Index of its split.
    pub split: usize,
    /// Position among its split's copies (for a copy) or steps (for a step).
    pub position: usize,
    /// The copy or the step.
    pub work: Work<'a>,
}

impl<'a> GlobalItem<'a> {
    /// True for a copy.
    pub fn is_copy(&self) -> bool {
        matches!(self.work, Work::Copy(_))
    }

    /// The tensors it reads: a copy's source, an op's sources, a fused
    /// kernel's inputs (none for a kernel out of range of `kernels`), a
    /// product-add's weight, activations and addend, an attention's
    /// k, q, v and mask, a product-GLU's two weights and activations, a
    /// rope-and-store step's operands.
    pub fn reads(&self, kernels: &'a [FusedKernel]) -> &'a [u32] {
        match self.work {
            Work::Copy(c) => std::slice::from_ref(&c.src),
            Work::Step(Step::Op { srcs, .. }) => srcs,
            Work::Step(Step::MulMatAdd { srcs, .. } | Step::MulMatGlu { srcs, .. }) => srcs,
            Work::Step(Step::MulMatMany { srcs, .. } | Step::RopeStore { srcs, .. }) => srcs,
            Work::Step(Step::Attention { srcs, .. }) => srcs,
            Work::Step(Step::Fused { kernel }) => kernels
                .get(*kernel as usize)
                .map_or(&[], |k| k.inputs.as_slice()),
        }
    }

    /// The tensors it writes: a copy's destination, an op's result, a fused
    /// kernel's output (none for a kernel out of range of `kernels`), every
    /// result of a `mul_mat` x N or rope-and-store step.
    pub fn writes(&self, kernels: &'a [FusedKernel]) -> &'a [u32] {
        match self.work {
            Work::Copy(c) => std::slice::from_ref(&c.dst),
            Work::Step(
                Step::Op { dst, .. }
                | Step::MulMatAdd { dst, .. }
                | Step::MulMatGlu { dst, .. }
                | Step::Attention { dst, .. },
            ) => std::slice::from_ref(dst),
            Work::Step(Step::MulMatMany { dsts, .. } | Step::RopeStore { dsts, .. }) => dsts,
            Work::Step(Step::Fused { kernel }) => kernels
                .get(*kernel as usize)
                .map_or(&[], |k| std::slice::from_ref(&k.output)),
        }
    }
}

/// Every copy and step of `splits` in global order (see the module doc); for
/// splits not yet in a [`Plan`].
pub fn global_order(splits: &[Split]) -> impl Iterator<Item = GlobalItem<'_>> {
    let items = splits.iter().enumerate().flat_map(|(s, split)| {
        let copies = (split.copies.iter().enumerate()).map(move |(k, c)| (s, k, Work::Copy(c)));
        let steps = (split.steps.iter().enumerate()).map(move |(k, st)| (s, k, Work::Step(st)));
        copies.chain(steps)
    });
    items
        .enumerate()
        .map(|(index, (split, position, work))| GlobalItem {
            index,
            split,
            position,
            work,
        })
}

impl Plan {
    /// Every copy and step of the plan in global order (see
    /// [`global_order`]).
    pub fn global_order(&self) -> impl Iterator<Item = GlobalItem<'_>> {
        global_order(&self.splits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Op;
    use crate::plan::DeviceId;

    fn split(copies: &[(u32, u32)], steps: &[(u32, &[u32])]) -> Split {
        Split {
            device: DeviceId(0),
            stream: 0,
            copies: (copies.iter())
                .map(|&(src, dst)| Copy {
                    src,
                    dst,
                    bytes: 4,
                    stream: 1,
                    wait: Vec::new(),
                    record: None,
                })
                .collect(),
            waits: Vec::new(),
            records: Vec::new(),
            steps: (steps.iter())
                .map(|&(dst, srcs)| Step::Op {
                    op: Op::Relu,
                    dst,
                    srcs: srcs.to_vec(),
                })
                .collect(),
        }
    }

    #[test]
    fn copies_then_steps_split_by_split() {
        let splits = [
            split(&[], &[(1, &[0]), (2, &[1])]),
            split(&[(2, 3)], &[(4, &[3, 3]), (5, &[9])]),
        ];
        let kernels = [];
        let got: Vec<_> = global_order(&splits)
            .map(|i| {
                let rw = (i.reads(&kernels).to_vec(), i.writes(&kernels).to_vec());
                (i.index, i.split, i.position, i.is_copy(), rw)
            })
            .collect();
        assert_eq!(
            got,
            [
                (0, 0, 0, false, (vec![0], vec![1])),
                (1, 0, 1, false, (vec![1], vec![2])),
                (2, 1, 0, true, (vec![2], vec![3])),
                (3, 1, 0, false, (vec![3, 3], vec![4])),
                (4, 1, 1, false, (vec![9], vec![5])),
            ]
        );
        let fused = GlobalItem {
            index: 0,
            split: 0,
            position: 0,
            work: Work::Step(&Step::Fused { kernel: 7 }),
        };
        assert_eq!(
            (fused.reads(&kernels), fused.writes(&kernels)),
            (&[][..], &[][..])
        );
    }
}

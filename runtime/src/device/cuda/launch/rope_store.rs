//! The launch of a rope-and-store step (`kernels/rope_store.cu`): 2 to 4
//! `rope` and `set_rows` ops in one kernel, each checked as its own launch
//! would be, their blocks one after another in x.

use super::{GRID_X, Kernel, Launch, dim, op as op_launch, require};
use crate::RuntimeError;
use crate::device::cpu::RawTensor;
use crate::device::cuda::args::{KArgs, KTensor, MAX_TENSORS};
use ir::Op;

/// The most ops one launch runs (`i[1..=4]` hold their descriptors).
pub const MAX_OPS: usize = 4;

/// One op of the step, as the plan names it.
#[derive(Clone, Debug)]
pub struct RowOp {
    /// `rope` or `set_rows`.
    pub op: Op,
    /// Its result.
    pub dst: RawTensor,
    /// Its operands, in its op's order.
    pub srcs: Vec<RawTensor>,
    /// For a `set_rows` whose rows are a packed view of an earlier rope's
    /// result: that rope's index among the ops (`Plan::chained_rope`).
    pub chained: Option<usize>,
}

/// The ops of `step` (a `Step::RopeStore` of `plan`), each tensor as `raw`
/// gives it, chains found by `Plan::chained_rope`.
pub fn row_ops(
    plan: &ir::plan::Plan,
    step: &ir::plan::Step,
    raw: impl Fn(u32) -> RawTensor,
) -> Vec<RowOp> {
    let ops = step.ops();
    (0..ops.len())
        .map(|j| {
            let (op, dst, srcs) = ops[j];
            RowOp {
                op: *op,
                dst: raw(dst),
                srcs: srcs.iter().map(|&t| raw(t)).collect(),
                chained: (*op == Op::SetRows)
                    .then(|| plan.chained_rope(&ops, j))
                    .flatten(),
            }
        })
        .collect()
}

/// Argument slots, each tensor once.
struct Slots(Vec<KTensor>);

impl Slots {
    fn of(&mut self, t: &RawTensor) -> Result<i32, RuntimeError> {
        let k = KTensor::of(t);
        if let Some(i) = self.0.iter().position(|s| *s == k) {
            return Ok(i as i32);
        }
        require(NAME, self.0.len() < MAX_TENSORS, || {
            format!("more than the {MAX_TENSORS} distinct tensors a kernel takes")
        })?;
        self.0.push(k);
        Ok(self.0.len() as i32 - 1)
    }
}

const NAME: &str = "rope + set_rows";

/// Op `k`'s descriptor: its kind in bits 0..3, then 4-bit slots.
fn descriptor(kind: i32, slots: &[i32]) -> i32 {
    (slots.iter().enumerate()).fold(kind, |d, (k, &s)| d | (s << (4 + 4 * k)))
}

/// The launch of `ops` (see the module doc).
pub fn rope_store(ops: &[RowOp]) -> Result<Launch, RuntimeError> {
    require(NAME, (2..=MAX_OPS).contains(&ops.len()), || {
        format!("2 to {MAX_OPS} ops, not {}", ops.len())
    })?;
    let mut args = KArgs::default();
    let mut slots = Slots(Vec::new());
    let mut rope: Option<(Op, Launch)> = None;
    let mut blocks = 0i64;
    for (k, row) in ops.iter().enumerate() {
        let one = op_launch(&row.op, row.dst, &row.srcs)?;
        let (kind, ids) = match (row.op, row.chained) {
            (Op::Rope(_), _) => {
                match &rope {
                    Some((first, launch)) => require(
                        NAME,
                        *first == row.op
                            && launch.args.t[2..4] == one.args.t[2..4]
                            && launch.args.i[2] == one.args.i[2],
                        || "ropes with different parameters, positions or factors".to_string(),
                    )?,
                    None => rope = Some((row.op, one.clone())),
                }
                let [d, x, p] = [row.dst, row.srcs[0], row.srcs[1]];
                (0, vec![slots.of(&d)?, slots.of(&x)?, slots.of(&p)?])
            }
            (Op::SetRows, None) => {
                let [d, r, i] = [row.dst, row.srcs[1], row.srcs[2]];
                (1, vec![slots.of(&d)?, slots.of(&r)?, slots.of(&i)?])
            }
            (Op::SetRows, Some(j)) => {
                let source = ops.get(j).filter(|s| j < k && matches!(s.op, Op::Rope(_)));
                let Some(source) = source else {
                    return Err(super::unsupported(
                        NAME,
                        format!("op {k} stores op {j}'s rope, which is not an earlier rope"),
                    ));
                };
                let count = |t: &RawTensor| t.ne.iter().product::<i64>();
                require(NAME, count(&row.srcs[1]) == count(&source.dst), || {
                    "a chained store's rows and its rope's result differ in size".to_string()
                })?;
                let [d, r, i] = [row.dst, row.srcs[1], row.srcs[2]];
                let [x, p, dr] = [source.srcs[0], source.srcs[1], source.dst];
                let ids = [d, r, i, x, p, dr].map(|t| slots.of(&t));
                (2, ids.into_iter().collect::<Result<Vec<_>, _>>()?)
            }
            (other, _) => {
                return Err(super::unsupported(
                    NAME,
                    format!("{other} is neither rope nor set_rows"),
                ));
            }
        };
        args.i[1 + k] = descriptor(kind, &ids);
        blocks += i64::from(one.grid[0]);
        if k + 1 < ops.len() {
            args.l[k] = blocks;
        }
    }
    args.i[0] = ops.len() as i32;
    args.i[7] = -1;
    if let Some((_, launch)) = &rope {
        args.i[5] = launch.args.i[0];
        args.i[6] = launch.args.i[1];
        args.f[..6].copy_from_slice(&launch.args.f[..6]);
        if launch.args.i[2] != 0 {
            let factors = slots.0.len();
            require(NAME, factors < MAX_TENSORS, || {
                format!("more than the {MAX_TENSORS} distinct tensors a kernel takes")
            })?;
            slots.0.push(launch.args.t[3]);
            args.i[7] = factors as i32;
        }
    }
    for (slot, t) in args.t.iter_mut().zip(&slots.0) {
        *slot = *t;
    }
    Ok(Launch {
        kernel: Kernel::Library("rope_store"),
        grid: [dim(NAME, blocks, GRID_X)?, 1, 1],
        block: 64,
        args,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ir::{DType, RopeMode, RopeParams};

    fn raw(data: usize, dtype: DType, ne: [i64; 4]) -> RawTensor {
        let layout = ir::Layout::contiguous(dtype, ne).unwrap();
        RawTensor {
            data: data as *mut u8,
            dtype,
            ne,
            nb: layout.nb,
        }
    }

    /// A decode block's four ops: V stored, K rotated then stored (chained),
    /// Q rotated.
    fn block_ops() -> Vec<RowOp> {
        let rope = Op::Rope(RopeParams::plain(RopeMode::Normal, 64, 1e4));
        let pos = raw(0x100, DType::I32, [1, 1, 1, 1]);
        let idx = raw(0x200, DType::I32, [1, 1, 1, 1]);
        let v = raw(0x1000, DType::F32, [1, 1, 192, 1]);
        let v_cache = raw(0x2000, DType::F16, [1, 64, 192, 1]);
        let k = raw(0x3000, DType::F32, [64, 3, 1, 1]);
        let k_rope = raw(0x4000, DType::F32, [64, 3, 1, 1]);
        let k_rows = raw(0x4000, DType::F32, [192, 1, 1, 1]);
        let k_cache = raw(0x5000, DType::F16, [192, 64, 1, 1]);
        let q = raw(0x6000, DType::F32, [64, 9, 1, 1]);
        let q_rope = raw(0x7000, DType::F32, [64, 9, 1, 1]);
        vec![
            RowOp {
                op: Op::SetRows,
                dst: v_cache,
                srcs: vec![v_cache, v, idx],
                chained: None,
            },
            RowOp {
                op: rope,
                dst: k_rope,
                srcs: vec![k, pos],
                chained: None,
            },
            RowOp {
                op: Op::SetRows,
                dst: k_cache,
                srcs: vec![k_cache, k_rows, idx],
                chained: Some(1),
            },
            RowOp {
                op: rope,
                dst: q_rope,
                srcs: vec![q, pos],
                chained: None,
            },
        ]
    }

    #[test]
    fn a_decode_block_is_one_launch_with_each_op_s_rows() {
        let l = rope_store(&block_ops()).unwrap();
        // V: 192 one-element rows; K rope: 3 rows; K store: 1 row; Q: 9 rows.
        assert_eq!(l.grid, [192 + 3 + 1 + 9, 1, 1]);
        assert_eq!(l.args.l[..3], [192, 195, 196]);
        assert_eq!(l.args.i[0], 4);
        // Slots: v_cache, v, idx, k_rope, k, pos, k_cache, k_rows, q_rope, q.
        assert_eq!(l.args.i[1] & 15, 1);
        assert_eq!(l.args.i[2], descriptor(0, &[3, 4, 5]));
        assert_eq!(l.args.i[3], descriptor(2, &[6, 7, 2, 4, 5, 3]));
        assert_eq!(l.args.i[4], descriptor(0, &[8, 9, 5]));
        assert_eq!([l.args.i[5], l.args.i[6], l.args.i[7]], [0, 64, -1]);
        assert_eq!(l.args.f[0], 1e4);
    }

    #[test]
    fn ropes_with_other_angles_or_a_chain_to_a_later_op_are_refused() {
        let mut ops = block_ops();
        ops[3].op = Op::Rope(RopeParams::plain(RopeMode::Neox, 64, 1e4));
        assert!(rope_store(&ops).is_err());
        let mut ops = block_ops();
        ops[2].chained = Some(3);
        assert!(rope_store(&ops).is_err());
        assert!(rope_store(&block_ops()[..1]).is_err());
    }
}

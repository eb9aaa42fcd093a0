//! Resident arenas: weights, state and io (inputs and constants) live for the
//! whole run, so they are packed one after another, aligned, in tensor order.

use super::tensors::TensorTable;
use crate::target::DeviceId;
use ir::plan::Usage;

/// The arena size and each member's offset for (`device`, `usage`).
pub(super) fn pack(
    table: &TensorTable,
    device: DeviceId,
    usage: Usage,
    alignment: u64,
) -> (u64, Vec<(u32, u64)>) {
    let align = alignment.max(1);
    let mut size = 0u64;
    let mut offsets = Vec::new();
    for (t, pt) in table.tensors.iter().enumerate() {
        let is_leaf_root =
            pt.copy_of.is_none() && table.owner[t] as usize == t && pt.role.is_leaf_role();
        if !is_leaf_root || pt.device != device || Usage::of(pt.role) != usage {
            continue;
        }
        let layout = ir::Layout {
            dtype: pt.dtype,
            ne: pt.ne,
            nb: pt.nb,
        };
        offsets.push((t as u32, size));
        size += layout.span_bytes().div_ceil(align) * align;
    }
    (size, offsets)
}

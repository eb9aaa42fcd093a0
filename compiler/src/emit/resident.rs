//! Resident arenas: weights, state and io (inputs and constants) live for the
//! whole run, so they are packed one after another, aligned, in tensor order.
//! An arena never exceeds the device's largest buffer: packing starts a new
//! chunk when the next tensor would not fit.

use super::tensors::TensorTable;
use crate::Error;
use crate::target::DeviceId;
use ir::plan::Usage;

/// One resident arena: its size and its members' offsets.
pub(super) struct Chunk {
    /// Bytes.
    pub size: u64,
    /// (plan tensor, offset).
    pub offsets: Vec<(u32, u64)>,
}

/// The chunks for (`device`, `usage`), each at most `max_buffer` bytes.
pub(super) fn pack(
    table: &TensorTable,
    device: DeviceId,
    usage: Usage,
    alignment: u64,
    max_buffer: u64,
    device_name: &str,
) -> Result<Vec<Chunk>, Error> {
    let align = alignment.max(1);
    let mut chunks: Vec<Chunk> = Vec::new();
    for (t, pt) in table.tensors.iter().enumerate() {
        let is_leaf_root =
            pt.copy_of.is_none() && table.owner[t] as usize == t && pt.role.is_leaf_role();
        if !is_leaf_root || pt.device != device || Usage::of(pt.role) != usage {
            continue;
        }
        let bytes = ir::Layout {
            dtype: pt.dtype,
            ne: pt.ne,
            nb: pt.nb,
        }
        .span_bytes();
        if bytes > max_buffer {
            return Err(Error::Memory {
                device: device_name.to_string(),
                problem: format!(
                    "'{}' needs {bytes} bytes, more than the largest buffer ({max_buffer} bytes)",
                    pt.name
                ),
            });
        }
        let aligned = bytes.div_ceil(align) * align;
        match chunks.last_mut() {
            Some(c) if c.size + bytes <= max_buffer => {
                c.offsets.push((t as u32, c.size));
                c.size += aligned;
            }
            _ => chunks.push(Chunk {
                size: aligned,
                offsets: vec![(t as u32, 0)],
            }),
        }
    }
    for c in &mut chunks {
        c.size = c.size.min(max_buffer);
    }
    Ok(chunks)
}

//! Where every plan tensor's bytes are at run time.
//!
//! Invariants: an arena placement is its arena's base + offset, unless the
//! tensor is a weight used in place (its mapped-file bytes) or a state tensor
//! shared through a [`crate::StateStore`]; a view is its owner's address +
//! offset, following the owner's override; a fused intermediate has no
//! address. The plan checker has proved every placement in range before this
//! runs, so the arithmetic here cannot leave an arena.
//!
//! Addresses are global, not per device: every device a runtime loads is a
//! CPU device of one host, so the address of a tensor in its own device's
//! arena is also how any other device reads it. That is how a collective's
//! participant reads the parts held on the other devices (`steps.rs` checks
//! that nothing else reads across devices).

use ir::plan::{Placement, Plan};

/// The address of every plan tensor (null for fused intermediates).
pub(crate) fn resolve(
    plan: &Plan,
    arena_bases: &[*mut u8],
    overrides: &[Option<*mut u8>],
) -> Vec<*mut u8> {
    let n = plan.tensors.len();
    let mut addr: Vec<Option<*mut u8>> = vec![None; n];
    for t in 0..n {
        resolve_one(plan, arena_bases, overrides, &mut addr, t);
    }
    addr.into_iter()
        .map(|a| a.unwrap_or(std::ptr::null_mut()))
        .collect()
}

fn resolve_one(
    plan: &Plan,
    bases: &[*mut u8],
    overrides: &[Option<*mut u8>],
    addr: &mut [Option<*mut u8>],
    t: usize,
) -> Option<*mut u8> {
    if let Some(a) = addr[t] {
        return Some(a);
    }
    let a = match (overrides[t], plan.tensors[t].placement) {
        (Some(a), _) => Some(a),
        (None, Placement::Arena { arena, offset }) => {
            // SAFETY: the checker proved offset + span inside the arena.
            Some(unsafe { bases[arena as usize].add(offset as usize) })
        }
        (None, Placement::View { of, offset }) => {
            let base = resolve_one(plan, bases, overrides, addr, of as usize)?;
            // SAFETY: the checker proved the view inside its owner's span.
            Some(unsafe { base.add(offset as usize) })
        }
        (None, Placement::Fused) => None,
    };
    addr[t] = a;
    a
}

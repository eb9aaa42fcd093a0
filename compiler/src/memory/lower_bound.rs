//! The lower bound of any placement: the most bytes alive at one step.

use crate::liveness::Lifetime;

/// max over steps of the sum of the sizes of the buffers alive at that step
/// (lifetimes are inclusive: a buffer ending at step s and one starting at s
/// are alive together). Sizes are taken as given: align them first.
pub fn lower_bound(buffers: &[Lifetime]) -> u64 {
    // (step, 0 = start / 1 = end, size): at one step every start counts before
    // any end, so buffers meeting at a step are summed together.
    let mut events: Vec<(usize, u8, u64)> = Vec::with_capacity(2 * buffers.len());
    for b in buffers {
        events.push((b.first, 0, b.size));
        events.push((b.last, 1, b.size));
    }
    events.sort_unstable();
    let (mut live, mut peak) = (0u64, 0u64);
    for (_, kind, size) in events {
        if kind == 0 {
            live = live.saturating_add(size);
            peak = peak.max(live);
        } else {
            live = live.saturating_sub(size);
        }
    }
    peak
}

#[cfg(test)]
mod tests {
    use super::*;
    use ir::TensorId;

    fn lt(size: u64, first: usize, last: usize) -> Lifetime {
        Lifetime {
            tensor: TensorId(0),
            size,
            first,
            last,
        }
    }

    #[test]
    fn buffers_meeting_at_a_step_add_up() {
        assert_eq!(lower_bound(&[]), 0);
        assert_eq!(lower_bound(&[lt(8, 0, 1), lt(4, 1, 2)]), 12);
        assert_eq!(lower_bound(&[lt(8, 0, 0), lt(4, 1, 2), lt(2, 2, 3)]), 8);
        assert_eq!(lower_bound(&[lt(8, 0, 0), lt(4, 1, 2), lt(6, 2, 3)]), 10);
    }
}

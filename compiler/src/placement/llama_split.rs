//! llama.cpp's layer split (`-sm layer -ts P0,P1,...`), which `--policy ggml`
//! follows so that its placement is the one llama.cpp makes:
//! - the input layer stays on the CPU: llama.cpp never offloads it (on a
//!   target without a CPU it goes where position 0 does);
//! - the output head counts as one more layer: block `l` of `n` sits at
//!   `l / (n + 1)` of the model and the head at `n / (n + 1)`;
//! - a unit goes to the first device whose cumulative share of the
//!   proportions is *greater* than its position (llama.cpp's `upper_bound`
//!   over the normalised cumulative split points), so a device with no share
//!   gets nothing.
//!
//! With `-ts 1,1` and 30 blocks: blocks 0-15 on the first device, 16-29 and
//! the head on the second. ggplan's own rule (under `--policy cost`) weighs
//! units by their matmul work instead; see the parent module.

use super::units::Units;

/// Where llama.cpp's position of `unit` puts it: the device index, and the
/// position as a fraction for the reason (`None` for the input layer on the CPU).
pub(super) fn unit_device(
    units: &Units,
    unit: usize,
    shares: &[f64],
    cpu: Option<usize>,
) -> Option<(usize, Option<(usize, usize)>)> {
    let layers = units.n_layers as usize + 1;
    if unit == 0
        && let Some(cpu) = cpu
    {
        return Some((cpu, None));
    }
    // Unit 0 (no CPU) sits with block 0; block l is unit l + 1; the head is
    // unit n + 1, at position n.
    let position = unit.saturating_sub(1);
    let at = position as f64 / layers as f64;
    let total: f64 = shares.iter().sum();
    if total <= 0.0 {
        return None;
    }
    let mut cumulative = 0.0;
    for (k, s) in shares.iter().enumerate() {
        cumulative += s;
        if cumulative / total > at {
            return Some((k, Some((position, layers))));
        }
    }
    let last = shares.iter().rposition(|&s| s > 0.0)?;
    Some((last, Some((position, layers))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ir::{DType, Graph, GraphBuilder};

    /// `blocks` blocks of one product each, and a separate output head.
    fn graph(blocks: u32) -> Graph {
        let mut b = GraphBuilder::new("g");
        let tokens = b.input("tokens", DType::I32, [4, 1, 1, 1]).expect("in");
        let embd = b.weight("token_embd.weight", DType::F32, [8, 16, 1, 1]);
        let mut h = b.get_rows("x", embd.expect("w"), tokens).expect("rows");
        for l in 0..blocks {
            let w = b.weight(format!("blk.{l}.ffn.weight"), DType::F32, [8, 8, 1, 1]);
            h = b.mul_mat(format!("h{l}"), w.expect("w"), h).expect("mm");
        }
        let head = b.weight("output.weight", DType::F32, [8, 16, 1, 1]);
        let logits = b.mul_mat("logits", head.expect("w"), h).expect("mm");
        b.mark_output(logits).expect("out");
        b.finish().expect("valid")
    }

    fn devices(units: &Units, shares: &[f64], cpu: Option<usize>) -> Vec<usize> {
        (0..units.count())
            .map(|u| unit_device(units, u, shares, cpu).expect("placed").0)
            .collect()
    }

    #[test]
    fn thirty_blocks_split_one_to_one_as_llama_cpp_does() {
        let units = Units::of(&graph(30));
        let d = devices(&units, &[1.0, 1.0, 0.0], Some(2));
        assert_eq!(d[0], 2, "the input layer stays on the CPU");
        // 31 layers: l / 31 < 0.5 for l <= 15.
        assert!(d[1..=16].iter().all(|&k| k == 0), "{d:?}");
        assert!(d[17..].iter().all(|&k| k == 1), "{d:?}");
        assert_eq!(d.len(), 32);
    }

    #[test]
    fn devices_without_a_share_get_nothing_and_no_cpu_means_position_zero() {
        let units = Units::of(&graph(3));
        // 4 layers at 0, 1/4, 2/4, 3/4; device 1 has no share.
        assert_eq!(devices(&units, &[1.0, 0.0, 1.0], None), [0, 0, 0, 2, 2]);
        assert_eq!(devices(&units, &[0.0, 1.0], None), [1; 5]);
        assert!(unit_device(&units, 1, &[0.0, 0.0], None).is_none());
    }
}

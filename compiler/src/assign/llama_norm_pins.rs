//! The one placement llama.cpp makes itself before ggml's scheduler runs,
//! which `--policy ggml` applies so that its splits are llama.cpp's.
//!
//! llama.cpp's graph callback pins each block's norm (the `rms_norm` or
//! `norm` whose result the block's norm weight scales; llama.cpp names it
//! `norm-N`) to the device of block N, when the batch has fewer than 32
//! tokens or every block is offloaded. Without the pin, ggml's expansion
//! pass would run the next block's norm on the previous block's device and
//! copy its result across as well as the block's input.
//!
//! The batch is the number of rows the graph gathers from a weight (the
//! token embedding lookup); a graph without one (embeddings given as input)
//! gets pins only when every block is offloaded.

use super::WeightPlacement;
use crate::placement::layer_of;
use crate::target::{DeviceId, Target, cannot_run};
use ir::{Graph, Op, Role, TensorId};

/// llama.cpp's threshold: below this many tokens the norms are pinned
/// whatever the offload.
const PIN_BELOW_TOKENS: u64 = 32;

/// For every tensor, the device llama.cpp pins it to and why (`None` for
/// all but block norms under the conditions of the module doc).
pub(super) fn norm_pins(
    graph: &Graph,
    target: &Target,
    weights: &WeightPlacement,
) -> Vec<Option<(DeviceId, String)>> {
    let mut pins = vec![None; graph.len()];
    let block_weights: Vec<TensorId> = graph
        .with_role(Role::Weight)
        .filter(|&w| layer_of(&graph.tensor(w).name).is_some())
        .collect();
    let on_cpu =
        |w: TensorId| weights.device[w.index()].is_none_or(|d| target.devices[d.index()].is_cpu());
    let all_offloaded = !block_weights.is_empty() && !block_weights.iter().any(|&w| on_cpu(w));
    let tokens = batch_tokens(graph);
    let small_batch = tokens.is_some_and(|n| n < PIN_BELOW_TOKENS);
    if !all_offloaded && !small_batch {
        return pins;
    }
    let condition = if small_batch {
        format!(
            "the batch has {} tokens (< {PIN_BELOW_TOKENS})",
            tokens.unwrap_or(0)
        )
    } else {
        "every block is offloaded".to_string()
    };
    for scale in graph.nodes() {
        let t = graph.tensor(scale);
        if !matches!(t.op, Some(Op::Mul)) || t.srcs.len() != 2 {
            continue;
        }
        let (norm, weight) = (t.srcs[0], graph.storage_of(t.srcs[1]).root);
        let is_norm = matches!(
            graph.tensor(norm).op,
            Some(Op::RmsNorm { .. } | Op::Norm { .. })
        );
        let w = graph.tensor(weight);
        let Some(layer) = layer_of(&w.name) else {
            continue;
        };
        let Some(d) = weights.device[weight.index()] else {
            continue;
        };
        if !is_norm || w.role != Role::Weight || cannot_run(graph, target, d, norm) {
            continue;
        }
        let why = format!(
            "llama.cpp pins block {layer}'s norm to its block's device {} ({condition})",
            target.devices[d.index()].name
        );
        pins[norm.index()] = Some((d, why));
    }
    pins
}

/// Rows gathered from a weight by the first such `get_rows`: the batch's
/// tokens.
fn batch_tokens(graph: &Graph) -> Option<u64> {
    graph.nodes().find_map(|n| {
        let t = graph.tensor(n);
        let table = graph.storage_of(*t.srcs.first()?).root;
        let gathers = matches!(t.op, Some(Op::GetRows)) && graph.tensor(table).role == Role::Weight;
        gathers.then(|| graph.tensor(t.srcs[1]).layout.n_elements())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ir::{DType, GraphBuilder};

    /// tokens -> embedding -> (rms_norm, scaled by block `l`'s weight,
    /// product) for blocks 0 and 1; `tokens` rows in the batch.
    fn two_blocks(tokens: i64) -> Graph {
        let mut b = GraphBuilder::new("g");
        let ids = b.input("tokens", DType::I32, [tokens, 1, 1, 1]).unwrap();
        let table = b.weight("token_embd.weight", DType::F32, [8, 10, 1, 1]);
        let mut h = b.get_rows("embd", table.unwrap(), ids).unwrap();
        for l in 0..2 {
            let norm = b.rms_norm(format!("norm-{l}"), h, 1e-5).unwrap();
            let w = b.weight(
                format!("blk.{l}.attn_norm.weight"),
                DType::F32,
                [8, 1, 1, 1],
            );
            let scaled = b.mul(format!("attn_norm-{l}"), norm, w.unwrap()).unwrap();
            let m = b.weight(format!("blk.{l}.w.weight"), DType::F32, [8, 8, 1, 1]);
            h = b.mul_mat(format!("l_out-{l}"), m.unwrap(), scaled).unwrap();
        }
        b.mark_output(h).unwrap();
        b.finish().unwrap()
    }

    /// Block `l`'s weights on `blocks[l]`, the embedding on `embd`.
    fn placed(g: &Graph, embd: u32, blocks: [u32; 2]) -> WeightPlacement {
        let device = (g.ids())
            .map(|id| {
                let t = g.tensor(id);
                (t.role == Role::Weight).then(|| match layer_of(&t.name) {
                    Some(l) => DeviceId(blocks[l as usize]),
                    None => DeviceId(embd),
                })
            })
            .collect();
        WeightPlacement {
            device,
            reason: vec![String::new(); g.len()],
        }
    }

    fn pinned(g: &Graph, t: &Target, w: &WeightPlacement) -> Vec<(String, String)> {
        (norm_pins(g, t, w).into_iter().enumerate())
            .filter_map(|(i, p)| {
                let (d, _) = p?;
                let name = g.tensor(TensorId(i as u32)).name.clone();
                Some((name, t.devices[d.index()].name.clone()))
            })
            .collect()
    }

    #[test]
    fn block_norms_go_to_their_blocks_device_as_llama_cpp_pins_them() {
        let t = Target::preset("cpu+rpc0+rpc1").unwrap();
        let (rpc0, rpc1, cpu) = (0, 1, 2);
        let g = two_blocks(16);
        let w = placed(&g, cpu, [rpc0, rpc1]);
        let expected = [("norm-0", "rpc0"), ("norm-1", "rpc1")].map(|(a, b)| (a.into(), b.into()));
        assert_eq!(pinned(&g, &t, &w), expected);
        let (_, why) = norm_pins(&g, &t, &w)[g.find("norm-1").unwrap().index()]
            .clone()
            .unwrap();
        assert_eq!(
            why,
            "llama.cpp pins block 1's norm to its block's device rpc1 (the batch has 16 tokens (< 32))"
        );
        // A large batch pins only when every block is offloaded.
        let g = two_blocks(64);
        assert_eq!(pinned(&g, &t, &placed(&g, cpu, [rpc0, rpc1])).len(), 2);
        assert!(pinned(&g, &t, &placed(&g, cpu, [cpu, rpc1])).is_empty());
    }
}

//! The units a layer placement moves whole: the input layer, each block, the
//! output head.
//!
//! A weight's unit comes from its name ([`layer_of`], `is_output_head`),
//! with one structural exception: a weight in no block whose every reader is
//! a product making a graph output is part of the output head whatever its
//! name. That is llama.cpp's copy of a tied token embedding made for the output
//! layer's device (imported from a capture as `token_embd.weight#1`, a mirror
//! of `token_embd.weight`); the embedding itself, read by `get_rows`, stays
//! in the input layer.
//!
//! A second structural rule: a weight in no block that only blocks read (as
//! Llama 3's rope frequency factors `rope_freqs.weight`, read by every
//! block's rope) belongs to the first block that reads it, where llama.cpp
//! loads it (its later blocks on other devices read their own duplicate,
//! imported as a mirror, which lands in its own block the same way). A node's
//! block is that of the first block weight found walking up its first
//! sources.
//!
//! Invariant: [`Units::unit`] is in `0..Units::count()` for every name.

use super::{is_output_head, layer_of, n_layers};
use ir::{Graph, Op, Role};
use std::collections::{BTreeMap, BTreeSet};

/// The units of one graph.
#[derive(Clone, Debug)]
pub struct Units {
    /// Blocks in the graph ([`n_layers`]).
    pub n_layers: u32,
    /// Weights in no block that only feed output products.
    heads: BTreeSet<String>,
    /// Weights in no block that only blocks read: the first such block.
    first_readers: BTreeMap<String, u32>,
}

impl Units {
    /// Counts `graph`'s blocks and finds its head-only weights.
    pub fn of(graph: &Graph) -> Units {
        let mut readers: Vec<Vec<bool>> = vec![Vec::new(); graph.len()];
        let mut reader_blocks: Vec<Vec<Option<u32>>> = vec![Vec::new(); graph.len()];
        for id in graph.nodes() {
            let t = graph.tensor(id);
            if t.op.is_some_and(|op| op.is_view()) {
                continue;
            }
            let output_product = matches!(t.op, Some(Op::MulMat)) && t.role == Role::Output;
            let block = block_of_node(graph, id);
            for &s in &t.srcs {
                let root = graph.storage_of(s).root.index();
                readers[root].push(output_product);
                reader_blocks[root].push(block);
            }
        }
        let heads = graph
            .with_role(Role::Weight)
            .filter(|w| {
                let r = &readers[w.index()];
                !r.is_empty() && r.iter().all(|&out| out)
            })
            .map(|w| graph.tensor(w).name.clone())
            .filter(|name| layer_of(name).is_none())
            .collect();
        let first_readers = graph
            .with_role(Role::Weight)
            .filter(|&w| layer_of(&graph.tensor(w).name).is_none())
            .filter_map(|w| {
                let blocks = &reader_blocks[w.index()];
                let all: Option<Vec<u32>> = blocks.iter().copied().collect();
                let first = all?.into_iter().min()?;
                Some((graph.tensor(w).name.clone(), first))
            })
            .filter(|(name, _)| !is_output_head(name))
            .collect();
        Units {
            n_layers: n_layers(graph),
            heads,
            first_readers,
        }
    }

    /// How many units: the input layer, `n_layers` blocks, the output head.
    pub fn count(&self) -> usize {
        self.n_layers as usize + 2
    }

    /// True for a weight of the output head (see the module doc).
    pub fn is_head(&self, name: &str) -> bool {
        is_output_head(name) || self.heads.contains(name)
    }

    /// A weight's unit: 0 the input layer, `1..=n` block `l + 1`, `n + 1`
    /// the output head.
    pub fn unit(&self, name: &str) -> usize {
        match layer_of(name).or_else(|| self.first_readers.get(name).copied()) {
            Some(l) => l.min(self.n_layers.saturating_sub(1)) as usize + 1,
            None if self.is_head(name) => self.n_layers as usize + 1,
            None => 0,
        }
    }

    /// What the unit of `name` is, for reasons: "block 3 of 30", "the output
    /// head", "the input layer".
    pub fn describe(&self, name: &str) -> String {
        if let Some(l) = self.first_readers.get(name) {
            return format!("block {l} of {}, its first reader", self.n_layers.max(1));
        }
        match layer_of(name) {
            Some(l) => format!("block {l} of {}", self.n_layers.max(1)),
            None if self.is_head(name) => "the output head".to_string(),
            None => "the input layer".to_string(),
        }
    }
}

/// The block of node `id`: that of the first block weight among its sources'
/// roots, walking up first sources (a rope reads its block's q or k product).
/// `None` when the walk meets none within a few steps.
fn block_of_node(graph: &Graph, id: ir::TensorId) -> Option<u32> {
    const MAX_STEPS: usize = 8;
    let mut at = id;
    for _ in 0..MAX_STEPS {
        let t = graph.tensor(at);
        let block = (t.srcs.iter())
            .map(|&s| graph.tensor(graph.storage_of(s).root))
            .filter(|r| r.role == Role::Weight)
            .find_map(|r| layer_of(&r.name));
        if block.is_some() {
            return block;
        }
        at = *t.srcs.first()?;
        if graph.tensor(at).is_leaf() {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use ir::{DType, GraphBuilder};

    #[test]
    fn a_weight_only_the_output_product_reads_is_the_head_whatever_its_name() {
        let mut b = GraphBuilder::new("tied");
        let ids = b.input("tokens", DType::I32, [4, 1, 1, 1]).unwrap();
        let table = b.weight("token_embd.weight", DType::F32, [8, 10, 1, 1]);
        let h = b.get_rows("embd", table.unwrap(), ids).unwrap();
        let w = b
            .weight("blk.0.w.weight", DType::F32, [8, 8, 1, 1])
            .unwrap();
        let h = b.mul_mat("l_out-0", w, h).unwrap();
        // llama.cpp's copy of the tied table for the output layer's device.
        let mirror = b.weight("token_embd.weight#1", DType::F32, [8, 10, 1, 1]);
        let logits = b.mul_mat("result_output", mirror.unwrap(), h).unwrap();
        b.mark_output(logits).unwrap();
        let units = Units::of(&b.finish().unwrap());
        assert_eq!(units.count(), 3);
        assert_eq!(units.unit("token_embd.weight"), 0);
        assert_eq!(units.unit("blk.0.w.weight"), 1);
        assert_eq!(units.unit("token_embd.weight#1"), 2);
        assert_eq!(units.describe("token_embd.weight#1"), "the output head");
        assert_eq!(units.unit("output_norm.weight"), 2, "by name");
    }
}

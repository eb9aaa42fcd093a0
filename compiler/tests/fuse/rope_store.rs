//! Rope and cache stores as one step (`compiler::fuse::rope_store`): one
//! hand-made decode block per rule, grouped where it should be (the keys
//! rotated and stored, the values stored, the queries rotated) and not where
//! it must not be (a node reading a cache between two members, ropes of other
//! angles, another device, a remote device, a store whose rows are no packed
//! view of its rope).

use super::assignment;
use compiler::fuse::{Fusion, fuse_elementwise, fuse_elementwise_where};
use ir::{DType, Graph, GraphBuilder, RopeMode, RopeParams, TensorId};

/// How the block differs from the plain one.
#[derive(Clone, Copy, Default)]
struct Twist {
    /// A node reading the K cache right after its store.
    peek: bool,
    /// The queries rotated NeoX-style (the keys normal).
    other_angles: bool,
    /// The K rows a transposed (not packed) view of the rotated keys.
    strided_rows: bool,
}

/// One decode block: `k_rope`, `k_set` (chained), `v_set`, `q_rope`, each
/// result read after the block.
fn block(t: Twist) -> Graph {
    let mut b = GraphBuilder::new("block");
    let normal = RopeParams::plain(RopeMode::Normal, 16, 1e4);
    let neox = RopeParams::plain(RopeMode::Neox, 16, 1e4);
    let pos = b.input("pos", DType::I32, [1, 1, 1, 1]).unwrap();
    let idx = b.input("kv_idx", DType::I32, [1, 1, 1, 1]).unwrap();
    let k = b.input("k", DType::F32, [16, 2, 1, 1]).unwrap();
    let v = b.input("v", DType::F32, [32, 1, 1, 1]).unwrap();
    let q = b.input("q", DType::F32, [16, 4, 1, 1]).unwrap();
    let cache_k = b.state("cache_k", DType::F16, [32, 8, 1, 1]).unwrap();
    let cache_v = b.state("cache_v", DType::F16, [8, 32, 1, 1]).unwrap();
    let k_rope = b.rope("k_rope", k, pos, normal).unwrap();
    let k_rows = if t.strided_rows {
        let kt = b.transpose("k_t", k_rope).unwrap();
        let kc = b.cont("k_c", kt).unwrap();
        b.reshape("k_rows", kc, [32, 1, 1, 1]).unwrap()
    } else {
        b.reshape("k_rows", k_rope, [32, 1, 1, 1]).unwrap()
    };
    let k_set = b.set_rows("k_set", cache_k, k_rows, idx).unwrap();
    if t.peek {
        let peek = b.sum_rows("peek", k_set).unwrap();
        b.mark_output(peek).unwrap();
    }
    let v_cols = b.reshape("v_cols", v, [1, 32, 1, 1]).unwrap();
    let v_t = b.permute("v_t", v_cols, [0, 2, 1, 3]).unwrap();
    let v_cache_cols = b.reshape("v_cache_cols", cache_v, [1, 8, 32, 1]).unwrap();
    let v_set = b.set_rows("v_set", v_cache_cols, v_t, idx).unwrap();
    let q_params = if t.other_angles { neox } else { normal };
    let q_rope = b.rope("q_rope", q, pos, q_params).unwrap();
    let k_after = b.sum_rows("k_after", k_set).unwrap();
    let v_after = b.sum_rows("v_after", v_set).unwrap();
    for out in [q_rope, k_after, v_after] {
        b.mark_output(out).unwrap();
    }
    b.finish().unwrap()
}

fn fuse(g: &Graph) -> Fusion {
    let order: Vec<TensorId> = g.nodes().collect();
    fuse_elementwise(g, &assignment(g, &[]), &order)
}

fn groups(g: &Graph, f: &Fusion) -> Vec<Vec<String>> {
    (f.rope_stores.iter())
        .map(|r| {
            r.members
                .iter()
                .map(|&m| g.tensor(m).name.clone())
                .collect()
        })
        .collect()
}

#[test]
fn rope_store_groups_a_decode_block_s_ropes_and_stores() {
    let g = block(Twist::default());
    let f = fuse(&g);
    assert_eq!(groups(&g, &f), [["k_rope", "k_set", "v_set", "q_rope"]]);
    let id = |n| g.find(n).unwrap();
    assert_eq!(f.rope_store_of(id("v_set")), Some(&f.rope_stores[0]));
    assert_eq!(f.rope_store_of(id("k_rows")), None);
    assert_eq!(f.n_fused_nodes(), 4);
}

#[test]
fn rope_store_stops_at_a_node_reading_a_cache_it_writes() {
    let g = block(Twist {
        peek: true,
        ..Twist::default()
    });
    assert_eq!(
        groups(&g, &fuse(&g)),
        [vec!["k_rope", "k_set"], vec!["v_set", "q_rope"]]
    );
}

#[test]
fn rope_store_not_over_ropes_of_other_angles() {
    let g = block(Twist {
        other_angles: true,
        ..Twist::default()
    });
    assert_eq!(groups(&g, &fuse(&g)), [["k_rope", "k_set", "v_set"]]);
}

#[test]
fn rope_store_chains_a_store_only_through_a_packed_view_of_its_rope() {
    let g = block(Twist {
        strided_rows: true,
        ..Twist::default()
    });
    // The rows are a copy made from the rope: the rope cannot move past it.
    assert_eq!(groups(&g, &fuse(&g)), [["k_set", "v_set", "q_rope"]]);
}

#[test]
fn rope_store_not_across_devices_nor_on_a_remote_device() {
    let g = block(Twist::default());
    let order: Vec<TensorId> = g.nodes().collect();
    let q_rope = g.find("q_rope").unwrap();
    let f = fuse_elementwise(&g, &assignment(&g, &[(q_rope, 1)]), &order);
    assert_eq!(groups(&g, &f), [["k_rope", "k_set", "v_set"]]);
    let f = fuse_elementwise_where(&g, &assignment(&g, &[]), &order, &|_| false);
    assert!(f.rope_stores.is_empty());
}

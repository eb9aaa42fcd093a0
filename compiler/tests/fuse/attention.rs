//! Attention chains as one step (`compiler::fuse::attention`): one hand-made
//! graph per rule, fused where it should be (decode and prefill rows, with or
//! without a mask, grouped-query heads, F16 caches, the result a graph
//! output) and not where it must not (another reader, an intermediate that
//! is a graph output, another device, a remote device, a cache written in
//! between, a partial sum, other permute axes, a head too large).

use super::assignment;
use compiler::fuse::attention::MAX_HEAD_DIM;
use compiler::fuse::{Attention, Fusion, fuse_elementwise, fuse_elementwise_where};
use ir::plan::SplitPart;
use ir::{DType, Graph, GraphBuilder, TensorId};

/// The shapes of one attention graph.
#[derive(Clone, Copy)]
struct Shape {
    head: i64,
    n_kv: i64,
    n_q: i64,
    n_head: i64,
    n_kv_head: i64,
    cache: DType,
    mask: bool,
    axes: [u8; 4],
}

const DECODE: Shape = Shape {
    head: 64,
    n_kv: 7,
    n_q: 1,
    n_head: 9,
    n_kv_head: 3,
    cache: DType::F16,
    mask: true,
    axes: [0, 2, 1, 3],
};

/// The chain's ids, by name.
fn ids(g: &Graph) -> Attention {
    let id = |n| g.find(n).unwrap();
    Attention {
        scores: id("kq"),
        probs: id("probs"),
        product: id("kqv"),
        permuted: id("kqv_perm"),
        dst: id("merged"),
    }
}

/// The ids `graph` made, by name.
type Names = std::collections::BTreeMap<&'static str, TensorId>;

/// `merged = cont(permute(mul_mat(v, soft_max(mul_mat(k, q_perm), mask)),
/// axes))`, k [head, n_kv, n_kv_head] and v [n_kv, head, n_kv_head] states
/// (the caches), q [head, n_head, n_q] permuted to [head, n_q, n_head];
/// `extra` adds nodes after it; `merged` is the output.
fn graph(
    s: Shape,
    extra: impl FnOnce(&mut GraphBuilder, &Names) -> Result<(), ir::Error>,
) -> Graph {
    let mut b = GraphBuilder::new("attn");
    let mut n = Names::new();
    let k = b
        .state("k", s.cache, [s.head, s.n_kv, s.n_kv_head, 1])
        .unwrap();
    let v = b
        .state("v", s.cache, [s.n_kv, s.head, s.n_kv_head, 1])
        .unwrap();
    let q = b
        .input("q", DType::F32, [s.head, s.n_head, s.n_q, 1])
        .unwrap();
    let mask = s
        .mask
        .then(|| b.input("mask", DType::F32, [s.n_kv, s.n_q, 1, 1]).unwrap());
    let qp = b.permute("q_perm", q, [0, 2, 1, 3]).unwrap();
    let kq = b.mul_mat("kq", k, qp).unwrap();
    let probs = b.soft_max("probs", kq, mask, 0.125, 0.0).unwrap();
    let kqv = b.mul_mat("kqv", v, probs).unwrap();
    let perm = b.permute("kqv_perm", kqv, s.axes).unwrap();
    let ne = b.tensor(perm).layout.ne;
    let merged = b
        .cont_shaped("merged", perm, [ne[0] * ne[1], ne[2], 1, 1])
        .unwrap();
    b.mark_output(merged).unwrap();
    for (name, id) in [
        ("k", k),
        ("v", v),
        ("kq", kq),
        ("probs", probs),
        ("kqv", kqv),
        ("kqv_perm", perm),
    ] {
        n.insert(name, id);
    }
    extra(&mut b, &n).unwrap();
    b.finish().unwrap()
}

fn plain(s: Shape) -> Graph {
    graph(s, |_, _| Ok(()))
}

fn fuse(g: &Graph) -> Fusion {
    let order: Vec<TensorId> = g.nodes().collect();
    fuse_elementwise(g, &assignment(g, &[]), &order)
}

#[test]
fn attention_fuses_decode_and_prefill_with_or_without_a_mask() {
    let shapes = [
        DECODE,
        Shape { n_q: 5, ..DECODE },
        Shape {
            mask: false,
            ..DECODE
        },
        Shape {
            cache: DType::F32,
            head: 40,
            n_kv: 13,
            n_kv_head: 9,
            ..DECODE
        },
        Shape {
            head: MAX_HEAD_DIM,
            ..DECODE
        },
    ];
    for s in shapes {
        let g = plain(s);
        let f = fuse(&g);
        assert_eq!(f.attentions, [ids(&g)]);
        assert_eq!(f.n_fused_nodes(), 5);
        let id = |n| g.find(n).unwrap();
        let mut reads = vec![id("k"), id("q_perm"), id("v")];
        reads.extend(g.find("mask"));
        assert_eq!(f.attentions[0].reads(&g), reads);
        assert_eq!(f.attentions[0].softmax(&g), (0.125, 0.0));
        assert_eq!(f.attention_of(id("probs")), Some(&f.attentions[0]));
        assert_eq!(f.attention_of(id("q")), None);
    }
}

#[test]
fn attention_not_when_an_intermediate_has_another_reader_or_is_an_output() {
    for name in ["kq", "probs", "kqv", "kqv_perm"] {
        let g = graph(DECODE, |b, n| b.mark_output(n[name]));
        assert!(fuse(&g).attentions.is_empty(), "{name} an output");
        let g = graph(DECODE, |b, n| {
            let other = b.cont("other", n[name])?;
            b.mark_output(other)
        });
        assert!(fuse(&g).attentions.is_empty(), "{name} read twice");
    }
    // A second view of the product reads its bytes too.
    let g = graph(DECODE, |b, n| {
        let v = b.reshape("flat", n["kqv"], [64 * 9, 1, 1, 1])?;
        b.mark_output(v)
    });
    assert!(fuse(&g).attentions.is_empty());
}

#[test]
fn attention_not_across_devices_nor_on_a_remote_one() {
    let g = plain(DECODE);
    let order: Vec<TensorId> = g.nodes().collect();
    for moved in ["kq", "probs", "kqv", "kqv_perm", "merged"] {
        let a = assignment(&g, &[(g.find(moved).unwrap(), 1)]);
        assert!(
            fuse_elementwise(&g, &a, &order).attentions.is_empty(),
            "{moved}"
        );
    }
    // Operands on another device are copied in: still fused.
    let a = assignment(&g, &[(g.find("q").unwrap(), 1)]);
    assert_eq!(fuse_elementwise(&g, &a, &order).attentions.len(), 1);
    let a = assignment(&g, &[]);
    let remote = fuse_elementwise_where(&g, &a, &order, &|_| false);
    assert_eq!(remote, Fusion::default());
}

#[test]
fn attention_not_when_a_cache_is_written_in_between() {
    // A set_rows into the k (or v) cache between the scores and the result:
    // the step at the result's position would read the new rows.
    for cache in ["k", "v"] {
        let g = graph(DECODE, |b, n| {
            let c = n[cache];
            let ne = b.tensor(c).layout.ne;
            let rows = b.input("rows", DType::F32, [ne[0], 1, ne[2], 1])?;
            let idx = b.input("idx", DType::I32, [1, 1, 1, 1])?;
            let w = b.set_rows("write", c, rows, idx)?;
            b.mark_output(w)
        });
        let id = |n| g.find(n).unwrap();
        let a = assignment(&g, &[]);
        let chain = ["q_perm", "kq", "probs", "kqv", "kqv_perm", "merged"].map(id);
        let mut between = chain.to_vec();
        between.insert(2, id("write"));
        assert!(
            fuse_elementwise(&g, &a, &between).attentions.is_empty(),
            "{cache}"
        );
        let mut after = chain.to_vec();
        after.push(id("write"));
        assert_eq!(
            fuse_elementwise(&g, &a, &after).attentions,
            [ids(&g)],
            "{cache}"
        );
    }
}

#[test]
fn attention_not_when_a_partial_sum_is_involved() {
    let g = plain(DECODE);
    let order: Vec<TensorId> = g.nodes().collect();
    for name in ["k", "q_perm", "v", "mask", "kq", "kqv", "merged"] {
        let mut a = assignment(&g, &[]);
        a.parts = vec![None; g.len()];
        a.parts[g.find(name).unwrap().index()] = Some(SplitPart::Partial { of: "x".into() });
        assert!(
            fuse_elementwise(&g, &a, &order).attentions.is_empty(),
            "{name}"
        );
    }
}

#[test]
fn attention_not_with_other_axes_nor_a_head_too_large() {
    let g = plain(Shape {
        axes: [0, 1, 2, 3],
        ..DECODE
    });
    assert!(fuse(&g).attentions.is_empty());
    let g = plain(Shape {
        head: MAX_HEAD_DIM + 1,
        ..DECODE
    });
    assert!(fuse(&g).attentions.is_empty());
}

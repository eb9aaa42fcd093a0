//! Gate and up products fused with their GLU (`compiler::fuse::product_glu`):
//! one hand-made graph per rule, fused where it should be (a `glu` op of any
//! kind, `silu` then `mul` either way round) and not where it must not
//! (another reader, a graph output, a view of a product, another device, a
//! remote device, different activations, dtypes or shapes, a longer group, a
//! one-source glu, a partial sum, an input overwritten in between).

use super::assignment;
use compiler::fuse::{Fusion, ProductGlu, fuse_elementwise, fuse_elementwise_where};
use ir::plan::SplitPart;
use ir::{DType, GluKind, Graph, GraphBuilder, TensorId};

/// The graph's products and tensors `extra` builds from (gate, up).
type Extra = fn(&mut GraphBuilder, TensorId, TensorId) -> Result<TensorId, ir::Error>;

/// `gate = mul_mat(wg, x)`, `up = mul_mat(wu, x)` (Q8_0 [64, 7] weights
/// unless `up_dtype` says otherwise for wu, x [64, 3]), then `extra`; its
/// result is the output.
fn graph_with(up_dtype: DType, extra: Extra) -> Graph {
    let mut b = GraphBuilder::new("pg");
    let wg = b.weight("wg", DType::Q8_0, [64, 7, 1, 1]).unwrap();
    let wu = b.weight("wu", up_dtype, [64, 7, 1, 1]).unwrap();
    let x = b.input("x", DType::F32, [64, 3, 1, 1]).unwrap();
    let gate = b.mul_mat("gate", wg, x).unwrap();
    let up = b.mul_mat("up", wu, x).unwrap();
    let out = extra(&mut b, gate, up).unwrap();
    b.mark_output(out).unwrap();
    b.finish().unwrap()
}

fn graph(extra: Extra) -> Graph {
    graph_with(DType::Q8_0, extra)
}

fn fuse(g: &Graph) -> Fusion {
    let order: Vec<TensorId> = g.nodes().collect();
    fuse_elementwise(g, &assignment(g, &[]), &order)
}

fn units(g: &Graph, f: &Fusion) -> Vec<(GluKind, [String; 2], Vec<String>, String)> {
    let name = |id: TensorId| g.tensor(id).name.clone();
    (f.glus.iter())
        .map(|u| {
            let inner = u.inner.iter().map(|&n| name(n)).collect();
            (u.kind, [name(u.gate), name(u.up)], inner, name(u.dst))
        })
        .collect()
}

fn unit(kind: GluKind, inner: &[&str]) -> Vec<(GluKind, [String; 2], Vec<String>, String)> {
    let inner = inner.iter().map(|s| s.to_string()).collect();
    vec![(kind, ["gate".into(), "up".into()], inner, "h".into())]
}

#[test]
fn product_glu_fuses_a_glu_op_of_every_kind() {
    let g = graph(|b, gate, up| b.glu_split("h", GluKind::SwiGlu, gate, up));
    let f = fuse(&g);
    assert_eq!(units(&g, &f), unit(GluKind::SwiGlu, &[]));
    let id = |n| g.find(n).unwrap();
    assert_eq!(f.glus[0].reads(&g), [id("wg"), id("wu"), id("x")]);
    assert_eq!(f.n_fused_nodes(), 3);
    for n in ["gate", "up", "h"] {
        assert_eq!(f.product_glu_of(id(n)), Some(&f.glus[0]), "{n}");
    }
    assert_eq!(f.product_glu_of(id("x")), None);
    let g = graph(|b, gate, up| b.glu_split("h", GluKind::GeGlu, gate, up));
    assert_eq!(units(&g, &fuse(&g)), unit(GluKind::GeGlu, &[]));
    let g = graph(|b, gate, up| b.glu_split("h", GluKind::GeGluErf, gate, up));
    assert_eq!(units(&g, &fuse(&g)), unit(GluKind::GeGluErf, &[]));
}

#[test]
fn product_glu_takes_a_silu_then_mul_group_either_way_round() {
    let g = graph(|b, gate, up| {
        let s = b.silu("s", gate)?;
        b.mul("h", s, up)
    });
    let f = fuse(&g);
    assert_eq!(units(&g, &f), unit(GluKind::SwiGlu, &["s"]));
    assert!(f.groups.is_empty(), "the group became the unit");
    assert_eq!(f.n_fused_nodes(), 4);
    let g = graph(|b, gate, up| {
        let s = b.unary("s", ir::Op::Gelu, gate)?;
        b.mul("h", up, s)
    });
    assert_eq!(units(&g, &fuse(&g)), unit(GluKind::GeGlu, &["s"]));
    // A longer group is no unit: it stays a group, the products apart.
    let g = graph(|b, gate, up| {
        let s = b.silu("s", gate)?;
        let m = b.mul("m", s, up)?;
        b.scale("h", m, 2.0)
    });
    let f = fuse(&g);
    assert!(f.glus.is_empty());
    assert_eq!(f.groups.len(), 1);
    // mul(silu(gate), gate): one product, no unit.
    let g = graph(|b, gate, up| {
        let s = b.silu("s", gate)?;
        let h = b.mul("h", s, gate)?;
        b.add("o", h, up)
    });
    assert!(fuse(&g).glus.is_empty());
}

#[test]
fn product_glu_not_when_a_product_has_another_reader_or_is_an_output() {
    let g = graph(|b, gate, up| {
        let h = b.glu_split("h", GluKind::SwiGlu, gate, up)?;
        b.add("o", h, up) // up read twice
    });
    assert!(fuse(&g).glus.is_empty());
    let g = graph(|b, gate, up| {
        b.mark_output(gate)?;
        b.glu_split("h", GluKind::SwiGlu, gate, up)
    });
    assert!(fuse(&g).glus.is_empty());
    let g = graph(|b, gate, up| {
        let v = b.reshape("v", up, [21, 1, 1, 1])?;
        b.mark_output(v)?;
        b.glu_split("h", GluKind::SwiGlu, gate, up)
    });
    assert!(fuse(&g).glus.is_empty());
}

#[test]
fn product_glu_not_over_different_activations_dtypes_or_shapes() {
    // Different weight dtypes: one kernel decodes one.
    let g = graph_with(DType::Q4_0, |b, gate, up| {
        b.glu_split("h", GluKind::SwiGlu, gate, up)
    });
    assert!(fuse(&g).glus.is_empty());
    // Different activations.
    let mut b = GraphBuilder::new("pg");
    let wg = b.weight("wg", DType::F16, [64, 7, 1, 1]).unwrap();
    let wu = b.weight("wu", DType::F16, [64, 7, 1, 1]).unwrap();
    let x = b.input("x", DType::F32, [64, 3, 1, 1]).unwrap();
    let y = b.input("y", DType::F32, [64, 3, 1, 1]).unwrap();
    let gate = b.mul_mat("gate", wg, x).unwrap();
    let up = b.mul_mat("up", wu, y).unwrap();
    let h = b.glu_split("h", GluKind::SwiGlu, gate, up).unwrap();
    b.mark_output(h).unwrap();
    assert!(fuse(&b.finish().unwrap()).glus.is_empty());
    // Different K: x's rows fit one weight only, so two activations again;
    // different rows (a broadcast up): the kernels combine element for
    // element.
    let mut b = GraphBuilder::new("pg");
    let wg = b.weight("wg", DType::F16, [64, 7, 1, 1]).unwrap();
    let wu = b.weight("wu", DType::F16, [64, 1, 1, 1]).unwrap();
    let x = b.input("x", DType::F32, [64, 3, 1, 1]).unwrap();
    let gate = b.mul_mat("gate", wg, x).unwrap();
    let up = b.mul_mat("up", wu, x).unwrap();
    let s = b.silu("s", gate).unwrap();
    let h = b.mul("h", s, up).unwrap();
    b.mark_output(h).unwrap();
    assert!(fuse(&b.finish().unwrap()).glus.is_empty());
}

#[test]
fn product_glu_not_across_devices_nor_on_a_remote_one() {
    let g = graph(|b, gate, up| b.glu_split("h", GluKind::SwiGlu, gate, up));
    let order: Vec<TensorId> = g.nodes().collect();
    let id = |n| g.find(n).unwrap();
    for moved in ["gate", "up", "h"] {
        let a = assignment(&g, &[(id(moved), 1)]);
        assert!(fuse_elementwise(&g, &a, &order).glus.is_empty(), "{moved}");
    }
    let a = assignment(&g, &[]);
    let remote = fuse_elementwise_where(&g, &a, &order, &|_| false);
    assert_eq!(remote, Fusion::default());
}

#[test]
fn product_glu_not_when_a_partial_sum_is_involved() {
    let g = graph(|b, gate, up| b.glu_split("h", GluKind::SwiGlu, gate, up));
    let order: Vec<TensorId> = g.nodes().collect();
    for name in ["gate", "up", "h", "x"] {
        let mut a = assignment(&g, &[]);
        a.parts = vec![None; g.len()];
        a.parts[g.find(name).unwrap().index()] = Some(SplitPart::Partial { of: "v".into() });
        assert!(fuse_elementwise(&g, &a, &order).glus.is_empty(), "{name}");
    }
}

#[test]
fn product_glu_not_when_an_input_is_overwritten_in_between() {
    // x is a state; a cpy between a product and the unit rewrites it, so the
    // products must not move to the unit's position.
    let mut b = GraphBuilder::new("pg");
    let x = b.state("x", DType::F32, [32, 3, 1, 1]).unwrap();
    let wg = b.weight("wg", DType::F32, [32, 5, 1, 1]).unwrap();
    let wu = b.weight("wu", DType::F32, [32, 5, 1, 1]).unwrap();
    let fresh = b.input("fresh", DType::F32, [32, 3, 1, 1]).unwrap();
    let gate = b.mul_mat("gate", wg, x).unwrap();
    let up = b.mul_mat("up", wu, x).unwrap();
    let c = b.cpy("c", fresh, x).unwrap();
    let h = b.glu_split("h", GluKind::SwiGlu, gate, up).unwrap();
    b.mark_output(h).unwrap();
    b.mark_output(c).unwrap();
    let g = b.finish().unwrap();
    let a = assignment(&g, &[]);
    for between in [[gate, c, up, h], [gate, up, c, h]] {
        assert!(fuse_elementwise(&g, &a, &between).glus.is_empty());
    }
    let f = fuse_elementwise(&g, &a, &[gate, up, h, c]);
    assert_eq!(
        f.glus,
        [ProductGlu {
            kind: GluKind::SwiGlu,
            gate,
            up,
            inner: vec![],
            dst: h
        }]
    );
}

#[test]
fn product_glu_takes_the_roles_the_op_names_and_not_a_one_source_glu() {
    // `up` as the op's gate: a unit, with the roles as the op names them.
    let g = graph(|b, gate, up| b.glu_split("h", GluKind::SwiGlu, up, gate));
    let f = fuse(&g);
    assert_eq!(f.glus.len(), 1);
    assert_eq!(
        (f.glus[0].gate, f.glus[0].up),
        (g.find("up").unwrap(), g.find("gate").unwrap())
    );
    // A one-source glu over a concatenation is not two products.
    let g = graph(|b, gate, up| {
        let both = b.concat("both", gate, up, 0)?;
        b.glu("h", GluKind::SwiGlu, both, false)
    });
    assert!(fuse(&g).glus.is_empty());
}

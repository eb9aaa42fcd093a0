//! Sibling products (`compiler::fuse::product_many`): one hand-made graph per
//! rule, grouped where they should be (products of one activation tensor,
//! different rows, at most five a group, in order) and not where they must
//! not be (another device, a remote device, different weight dtypes or
//! activations, a write in between, a partial sum, a weight computed after
//! the first product, a product another fusion took).

use super::assignment;
use compiler::fuse::{Fusion, fuse_elementwise, fuse_elementwise_where};
use ir::plan::SplitPart;
use ir::{DType, GluKind, Graph, GraphBuilder, TensorId};

/// `y_i = mul_mat(w_i, x)` for weights of the given dtypes and rows (K 64),
/// every product an output.
fn graph(weights: &[(DType, i64)]) -> Graph {
    let mut b = GraphBuilder::new("pm");
    let x = b.input("x", DType::F32, [64, 3, 1, 1]).unwrap();
    for (i, &(dtype, rows)) in weights.iter().enumerate() {
        let w = b.weight(format!("w{i}"), dtype, [64, rows, 1, 1]).unwrap();
        let y = b.mul_mat(format!("y{i}"), w, x).unwrap();
        b.mark_output(y).unwrap();
    }
    b.finish().unwrap()
}

fn fuse(g: &Graph) -> Fusion {
    let order: Vec<TensorId> = g.nodes().collect();
    fuse_elementwise(g, &assignment(g, &[]), &order)
}

fn groups(g: &Graph, f: &Fusion) -> Vec<Vec<String>> {
    (f.many.iter())
        .map(|m| {
            m.products
                .iter()
                .map(|&p| g.tensor(p).name.clone())
                .collect()
        })
        .collect()
}

const QKV: [(DType, i64); 3] = [(DType::Q4_1, 576), (DType::Q4_1, 192), (DType::Q4_1, 192)];

#[test]
fn product_many_groups_products_of_one_input_of_any_rows() {
    let g = graph(&QKV);
    let f = fuse(&g);
    assert_eq!(groups(&g, &f), [["y0", "y1", "y2"]]);
    let id = |n| g.find(n).unwrap();
    assert_eq!(f.many[0].reads(&g), [id("w0"), id("w1"), id("w2"), id("x")]);
    assert_eq!(f.n_fused_nodes(), 3);
    assert_eq!(f.product_many_of(id("y1")), Some(&f.many[0]));
    assert_eq!(f.product_many_of(id("x")), None);
    // Seven products: five, then two.
    let g = graph(&[(DType::F16, 3); 7]);
    let f = fuse(&g);
    assert_eq!(
        groups(&g, &f),
        [vec!["y0", "y1", "y2", "y3", "y4"], vec!["y5", "y6"]]
    );
    // One product is no group.
    let g = graph(&[(DType::F16, 3)]);
    assert!(fuse(&g).many.is_empty());
}

#[test]
fn product_many_not_over_different_dtypes_or_activations() {
    let g = graph(&[(DType::Q4_1, 5), (DType::Q8_0, 5), (DType::Q4_1, 7)]);
    assert_eq!(groups(&g, &fuse(&g)), [["y0", "y2"]]);
    let mut b = GraphBuilder::new("pm");
    let x = b.input("x", DType::F32, [64, 3, 1, 1]).unwrap();
    let z = b.input("z", DType::F32, [64, 3, 1, 1]).unwrap();
    for (i, input) in [x, z].into_iter().enumerate() {
        let w = b
            .weight(format!("w{i}"), DType::F16, [64, 5, 1, 1])
            .unwrap();
        let y = b.mul_mat(format!("y{i}"), w, input).unwrap();
        b.mark_output(y).unwrap();
    }
    assert!(fuse(&b.finish().unwrap()).many.is_empty());
}

#[test]
fn product_many_not_across_devices_nor_on_a_remote_one() {
    let g = graph(&QKV);
    let order: Vec<TensorId> = g.nodes().collect();
    let a = assignment(&g, &[(g.find("y1").unwrap(), 1)]);
    assert_eq!(
        groups(&g, &fuse_elementwise(&g, &a, &order)),
        [["y0", "y2"]]
    );
    let a = assignment(&g, &[]);
    let remote = fuse_elementwise_where(&g, &a, &order, &|_| false);
    assert_eq!(remote, Fusion::default());
}

#[test]
fn product_many_not_when_a_partial_sum_is_involved() {
    let g = graph(&QKV);
    let order: Vec<TensorId> = g.nodes().collect();
    for name in ["y0", "w1", "x"] {
        let mut a = assignment(&g, &[]);
        a.parts = vec![None; g.len()];
        a.parts[g.find(name).unwrap().index()] = Some(SplitPart::Partial { of: "v".into() });
        let f = fuse_elementwise(&g, &a, &order);
        let want: &[&[&str]] = match name {
            "y0" => &[&["y1", "y2"]],
            "w1" => &[&["y0", "y2"]],
            _ => &[],
        };
        assert_eq!(groups(&g, &f), want, "{name}");
    }
}

#[test]
fn product_many_not_across_a_write_into_an_input() {
    // x is a state; a cpy rewrites it after the first product, so the
    // second must not move before it.
    let mut b = GraphBuilder::new("pm");
    let x = b.state("x", DType::F32, [32, 3, 1, 1]).unwrap();
    let fresh = b.input("fresh", DType::F32, [32, 3, 1, 1]).unwrap();
    let w0 = b.weight("w0", DType::F32, [32, 5, 1, 1]).unwrap();
    let w1 = b.weight("w1", DType::F32, [32, 7, 1, 1]).unwrap();
    let y0 = b.mul_mat("y0", w0, x).unwrap();
    let c = b.cpy("c", fresh, x).unwrap();
    let y1 = b.mul_mat("y1", w1, x).unwrap();
    for t in [y0, c, y1] {
        b.mark_output(t).unwrap();
    }
    let g = b.finish().unwrap();
    let a = assignment(&g, &[]);
    assert!(fuse_elementwise(&g, &a, &[y0, c, y1]).many.is_empty());
    let f = fuse_elementwise(&g, &a, &[y0, y1, c]);
    assert_eq!(groups(&g, &f), [["y0", "y1"]]);
}

#[test]
fn product_many_not_with_a_weight_made_after_the_first_product() {
    let mut b = GraphBuilder::new("pm");
    let x = b.input("x", DType::F32, [32, 3, 1, 1]).unwrap();
    let w0 = b.weight("w0", DType::F32, [32, 5, 1, 1]).unwrap();
    let raw = b.weight("raw", DType::F32, [32, 5, 1, 1]).unwrap();
    let y0 = b.mul_mat("y0", w0, x).unwrap();
    let w1 = b.scale("w1", raw, 2.0).unwrap();
    let y1 = b.mul_mat("y1", w1, x).unwrap();
    for t in [y0, y1] {
        b.mark_output(t).unwrap();
    }
    let g = b.finish().unwrap();
    let a = assignment(&g, &[]);
    assert!(fuse_elementwise(&g, &a, &[y0, w1, y1]).many.is_empty());
    let f = fuse_elementwise(&g, &a, &[w1, y0, y1]);
    assert_eq!(groups(&g, &f), [["y0", "y1"]]);
}

#[test]
fn product_many_leaves_products_other_fusions_took() {
    // gate and up go to their GLU; the third product of x stays alone.
    let mut b = GraphBuilder::new("pm");
    let x = b.input("x", DType::F32, [64, 3, 1, 1]).unwrap();
    let ws: Vec<TensorId> = (0..3)
        .map(|i| {
            b.weight(format!("w{i}"), DType::F16, [64, 5, 1, 1])
                .unwrap()
        })
        .collect();
    let gate = b.mul_mat("gate", ws[0], x).unwrap();
    let up = b.mul_mat("up", ws[1], x).unwrap();
    let other = b.mul_mat("other", ws[2], x).unwrap();
    let h = b.glu_split("h", GluKind::SwiGlu, gate, up).unwrap();
    b.mark_output(h).unwrap();
    b.mark_output(other).unwrap();
    let f = fuse(&b.finish().unwrap());
    assert_eq!(f.glus.len(), 1);
    assert!(f.many.is_empty());
}

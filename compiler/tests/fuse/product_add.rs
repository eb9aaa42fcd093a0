//! Products fused with their add (`compiler::fuse::product_add`): one
//! hand-made graph per rule, fused where it should be and not where it must
//! not (another reader, a graph output, another device, a broadcast addend, a
//! remote device, a partial sum, an input overwritten in between).

use super::assignment;
use compiler::fuse::{Fusion, ProductAdd, fuse_elementwise, fuse_elementwise_where};
use ir::plan::SplitPart;
use ir::{DType, Graph, GraphBuilder, TensorId};

/// `y = mul_mat(w, x32)` (w Q8_0 [32, 5], x32 [32, 3]), then `extra` builds
/// the rest from (y, r), r [5, 3]; its result is the output.
fn graph(extra: fn(&mut GraphBuilder, TensorId, TensorId) -> Result<TensorId, ir::Error>) -> Graph {
    let mut b = GraphBuilder::new("pa");
    let w = b.weight("w", DType::Q8_0, [32, 5, 1, 1]).unwrap();
    let xs = b.input("x32", DType::F32, [32, 3, 1, 1]).unwrap();
    let r = b.input("r", DType::F32, [5, 3, 1, 1]).unwrap();
    let y = b.mul_mat("y", w, xs).unwrap();
    let out = extra(&mut b, y, r).unwrap();
    b.mark_output(out).unwrap();
    b.finish().unwrap()
}

fn fuse(g: &Graph) -> Fusion {
    let order: Vec<TensorId> = g.nodes().collect();
    fuse_elementwise(g, &assignment(g, &[]), &order)
}

fn pairs(g: &Graph, f: &Fusion) -> Vec<[String; 3]> {
    let name = |id: TensorId| g.tensor(id).name.clone();
    (f.products.iter())
        .map(|p| [name(p.product), name(p.add), name(p.addend)])
        .collect()
}

#[test]
fn product_add_fuses_the_add_of_a_product_either_way_round() {
    let g = graph(|b, y, r| b.add("s", y, r));
    let f = fuse(&g);
    assert_eq!(pairs(&g, &f), [["y", "s", "r"]]);
    let id = |n| g.find(n).unwrap();
    assert_eq!(f.products[0].reads(&g), [id("w"), id("x32"), id("r")]);
    assert_eq!(f.n_fused_nodes(), 2);
    assert_eq!(f.product_add_of(id("y")), Some(&f.products[0]));
    assert_eq!(f.product_add_of(id("r")), None);
    let g = graph(|b, y, r| b.add("s", r, y));
    assert_eq!(pairs(&g, &fuse(&g)), [["y", "s", "r"]]);
}

#[test]
fn product_add_not_when_the_product_has_another_reader_or_is_an_output() {
    let g = graph(|b, y, r| {
        let s = b.add("s", y, r)?;
        b.mul("m", s, y) // y read twice
    });
    assert!(fuse(&g).products.is_empty());
    let g = graph(|b, y, r| {
        b.mark_output(y)?;
        b.add("s", y, r)
    });
    assert!(fuse(&g).products.is_empty());
    // A view of the product reads its bytes too.
    let g = graph(|b, y, r| {
        let v = b.reshape("v", y, [15, 1, 1, 1])?;
        b.mark_output(v)?;
        b.add("s", y, r)
    });
    assert!(fuse(&g).products.is_empty());
}

#[test]
fn product_add_not_across_devices_nor_on_a_remote_one() {
    let g = graph(|b, y, r| b.add("s", y, r));
    let order: Vec<TensorId> = g.nodes().collect();
    let id = |n| g.find(n).unwrap();
    for moved in ["y", "s"] {
        let a = assignment(&g, &[(id(moved), 1)]);
        assert!(fuse_elementwise(&g, &a, &order).products.is_empty());
    }
    let a = assignment(&g, &[]);
    let remote = fuse_elementwise_where(&g, &a, &order, &|_| false);
    assert_eq!(remote, Fusion::default());
}

#[test]
fn product_add_not_with_a_broadcast_addend_nor_a_non_add() {
    let g = graph(|b, y, _| {
        let col = b.input("col", DType::F32, [5, 1, 1, 1])?;
        b.add("s", y, col)
    });
    assert!(fuse(&g).products.is_empty());
    let g = graph(|b, y, r| b.sub("s", y, r));
    assert!(fuse(&g).products.is_empty());
    let g = graph(|b, y, _| b.add("s", y, y));
    assert!(fuse(&g).products.is_empty());
}

#[test]
fn product_add_not_when_a_partial_sum_is_involved() {
    let g = graph(|b, y, r| b.add("s", y, r));
    let order: Vec<TensorId> = g.nodes().collect();
    for name in ["y", "r", "s"] {
        let mut a = assignment(&g, &[]);
        a.parts = vec![None; g.len()];
        a.parts[g.find(name).unwrap().index()] = Some(SplitPart::Partial { of: "v".into() });
        assert!(
            fuse_elementwise(&g, &a, &order).products.is_empty(),
            "{name}"
        );
    }
}

#[test]
fn product_add_not_when_an_input_is_overwritten_between_the_two() {
    // x is a state; a cpy between the product and the add rewrites it, so
    // the product must not move to the add's position.
    let mut b = GraphBuilder::new("pa");
    let x = b.state("x", DType::F32, [32, 3, 1, 1]).unwrap();
    let w = b.weight("w", DType::F32, [32, 5, 1, 1]).unwrap();
    let r = b.input("r", DType::F32, [5, 3, 1, 1]).unwrap();
    let fresh = b.input("fresh", DType::F32, [32, 3, 1, 1]).unwrap();
    let y = b.mul_mat("y", w, x).unwrap();
    let c = b.cpy("c", fresh, x).unwrap();
    let s = b.add("s", y, r).unwrap();
    b.mark_output(s).unwrap();
    b.mark_output(c).unwrap();
    let g = b.finish().unwrap();
    let a = assignment(&g, &[]);
    let between = [y, c, s];
    assert!(fuse_elementwise(&g, &a, &between).products.is_empty());
    let after = [y, s, c];
    let f = fuse_elementwise(&g, &a, &after);
    assert_eq!(
        f.products,
        [ProductAdd {
            product: y,
            add: s,
            addend: r
        }]
    );
}

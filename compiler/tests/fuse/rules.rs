//! Pass `fuse` on hand-made graphs: one graph per rule that ends a group,
//! broadcast inputs, the body's shape, and determinism.

use super::{assignment, check_rules, fuse, names};
use compiler::fuse::fuse_elementwise;
use ir::plan::{BinaryFn, Expr};
use ir::{DType, GluKind, Graph, GraphBuilder, Op, TensorId};

type Build = fn(&mut GraphBuilder, TensorId, TensorId) -> Result<TensorId, ir::Error>;

/// The graph `build` makes from input x [8, 4] and weight w [8]; it returns
/// the output.
fn graph(build: Build) -> Graph {
    let mut b = GraphBuilder::new("t");
    let x = b.input("x", DType::F32, [8, 4, 1, 1]).unwrap();
    let w = b.weight("w", DType::F32, [8, 1, 1, 1]).unwrap();
    let out = build(&mut b, x, w).unwrap();
    b.mark_output(out).unwrap();
    b.finish().unwrap()
}

/// The groups of `g` in id order on one device, rules re-checked, as "a + b".
fn found(g: &Graph) -> Vec<String> {
    let f = fuse(g);
    check_rules(g, &assignment(g, &[]), &g.nodes().collect::<Vec<_>>(), &f);
    names(g, &f).iter().map(|n| n.join(" + ")).collect()
}

#[test]
fn fuse_norm_then_mul_and_broadcast_inputs() {
    let g = graph(|b, x, w| {
        let col = b.input("col", DType::F32, [1, 4, 1, 1])?;
        let n = b.rms_norm("n", x, 1e-5)?;
        let m = b.mul("m", n, w)?;
        b.div("d", m, col)
    });
    assert_eq!(found(&g), ["n + m + d"]);
    let f = fuse(&g);
    let id = |name| g.find(name).unwrap();
    assert_eq!(f.groups[0].inputs, [id("x"), id("w"), id("col")]);
    let norm = Expr::RmsNorm {
        input: 0,
        eps: 1e-5,
    };
    assert_eq!(
        f.groups[0].body[..3],
        [norm, Expr::Input(1), Expr::Binary(BinaryFn::Mul, 0, 1)]
    );
    assert_eq!((f.group_of(id("m")), f.group_of(id("x"))), (Some(0), None));
}

#[test]
fn fuse_a_member_with_two_readers_ends_the_group() {
    let g = graph(|b, x, w| {
        let a = b.silu("a", x)?;
        let m = b.mul("m", a, w)?;
        let t = b.unary("t", Op::Tanh, m)?;
        b.add("r", t, m) // m has two readers
    });
    assert_eq!(found(&g), ["a + m", "t + r"]);
}

#[test]
fn fuse_a_graph_output_in_the_middle_ends_the_group() {
    let g = graph(|b, x, w| {
        let a = b.silu("a", x)?;
        let m = b.mul("m", a, w)?;
        b.mark_output(m)?;
        let t = b.unary("t", Op::Tanh, m)?;
        b.scale("u", t, 2.0)
    });
    assert_eq!(found(&g), ["a + m", "t + u"]);
}

#[test]
fn fuse_different_devices_end_the_group() {
    let g = graph(|b, x, w| {
        let a = b.silu("a", x)?;
        let m = b.mul("m", a, w)?;
        b.unary("t", Op::Tanh, m)
    });
    let order: Vec<TensorId> = g.nodes().collect();
    let on = |name, d| assignment(&g, &[(g.find(name).unwrap(), d)]);
    let f = fuse_elementwise(&g, &on("t", 1), &order);
    assert_eq!(names(&g, &f), [["a", "m"]]);
    assert!(fuse_elementwise(&g, &on("m", 1), &order).groups.is_empty());
}

#[test]
fn fuse_a_norm_only_starts_a_group() {
    let g = graph(|b, x, w| {
        let a = b.silu("a", x)?;
        let n = b.norm("n", a, 1e-5)?;
        b.mul("m", n, w)
    });
    assert_eq!(found(&g), ["n + m"]);
}

#[test]
fn fuse_views_writes_shapes_and_dtypes_end_the_group() {
    let g = graph(|b, x, w| {
        let s0 = b.silu("s0", x)?;
        b.cpy("into", x, s0)?; // writes into s0
        let s1 = b.scale("s1", s0, 2.0)?;
        let a = b.silu("a", x)?;
        let v = b.reshape("v", a, [32, 1, 1, 1])?; // a is a view source
        let c = b.cont("c", v)?;
        let h = b.input("h", DType::F16, [8, 4, 1, 1])?;
        let e = b.add("e", h, x)?; // f16 result
        let e2 = b.unary("e2", Op::Relu, e)?;
        let r = b.unary("r", Op::Relu, w)?; // [8], broadcast into [8, 4] as src1
        let big = b.add("big", x, r)?;
        let gl = b.glu_split("gl", GluKind::GeGluErf, big, x)?;
        let out = b.add("out", gl, e2)?;
        let cc = b.reshape("cc", c, [8, 4, 1, 1])?;
        let out2 = b.add("out2", out, cc)?;
        b.add("out3", out2, s1)
    });
    // r has extents [8], big [8, 4]: no group across the shape change; out3
    // joined s1's group first (s1 comes first), so big's chain ends at out2.
    assert_eq!(found(&g), ["s1 + out3", "big + gl + out + out2"]);
}

/// a = x + (a view of the state "cache").
fn cached(b: &mut GraphBuilder, x: TensorId) -> Result<TensorId, ir::Error> {
    let cache = b.state("cache", DType::F32, [8, 4, 1, 1])?;
    let view = b.view("view", cache, [8, 4, 1, 1], [32, 128, 128], 0)?;
    b.add("a", x, view)
}

#[test]
fn fuse_inputs_overwritten_between_members_end_the_group() {
    let g = graph(|b, x, _| {
        let a = cached(b, x)?;
        let cache = b.tensor(a).srcs[1];
        b.cpy("store", x, b.tensor(cache).view.unwrap().root)?;
        b.mul("m", a, x)
    });
    assert!(found(&g).is_empty(), "{:?}", found(&g));
    // Without the write in between, the same chain fuses.
    let g = graph(|b, x, _| {
        let a = cached(b, x)?;
        b.mul("m", a, x)
    });
    assert_eq!(found(&g), ["a + m"]);
}

#[test]
fn fuse_is_deterministic_and_follows_the_given_order() {
    let g = graph(|b, x, w| {
        let a = b.silu("a", x)?;
        let p = b.mul("p", a, w)?;
        let c = b.unary("c", Op::Sqr, x)?;
        let q = b.sub("q", c, w)?;
        b.add("r", p, q)
    });
    let one = assignment(&g, &[]);
    let ids: Vec<TensorId> = g.nodes().collect();
    assert_eq!(
        fuse_elementwise(&g, &one, &ids),
        fuse_elementwise(&g, &one, &ids)
    );
    assert_eq!(found(&g), ["a + p + r", "c + q"]);
    // With c and q first, the chain through q's reader r forms first.
    let other: Vec<TensorId> = ["c", "q", "a", "p", "r"].map(|n| g.find(n).unwrap()).into();
    let f = fuse_elementwise(&g, &one, &other);
    assert_eq!(names(&g, &f), [vec!["c", "q", "r"], vec!["a", "p"]]);
    check_rules(&g, &one, &other, &f);
}

//! Builder shape inference and verifier invariants, one rule at a time.

use ir::{ConstInit, DType, Error, GraphBuilder, Op, Role, Tensor, TensorId};

fn f32s(b: &mut GraphBuilder, name: &str, ne: [i64; 4]) -> TensorId {
    b.input(name, DType::F32, ne).unwrap()
}

fn op_error(e: Error) -> String {
    assert!(matches!(e, Error::Op { .. }), "{e}");
    e.to_string()
}

#[test]
fn binary_ops_broadcast_src1_over_src0() {
    let mut b = GraphBuilder::new("g");
    let a = f32s(&mut b, "a", [8, 6, 4, 1]);
    let row = f32s(&mut b, "row", [8, 1, 1, 1]);
    let col = f32s(&mut b, "col", [1, 6, 2, 1]);
    let bad = f32s(&mut b, "bad", [3, 1, 1, 1]);
    let s = b.add("s", a, row).unwrap();
    assert_eq!(b.tensor(s).ne(), [8, 6, 4, 1]);
    b.mul("m", a, col).unwrap();
    let msg = op_error(b.add("x", a, bad).unwrap_err());
    assert!(
        msg.contains("add 'x'") && msg.contains("[3, 1, 1, 1]") && msg.contains("[8, 6, 4, 1]"),
        "{msg}"
    );
    // src0 does not broadcast over src1.
    op_error(b.add("y", row, a).unwrap_err());
}

#[test]
fn mul_mat_shapes_and_broadcast_over_heads() {
    let mut b = GraphBuilder::new("g");
    // GQA as SmolLM2: 3 KV heads shared by 9 query heads.
    let k = f32s(&mut b, "k", [64, 16, 3, 1]);
    let q = f32s(&mut b, "q", [64, 16, 9, 1]);
    let kq = b.mul_mat("kq", k, q).unwrap();
    assert_eq!(b.tensor(kq).ne(), [16, 16, 9, 1]);
    let q8 = f32s(&mut b, "q8", [64, 16, 8, 1]);
    let msg = op_error(b.mul_mat("bad", k, q8).unwrap_err());
    assert!(msg.contains("broadcast"), "{msg}");
    let w = b.weight("w", DType::Q4_1, [576, 1536, 1, 1]).unwrap();
    let x = f32s(&mut b, "x", [576, 7, 1, 1]);
    let y = b.mul_mat("y", w, x).unwrap();
    assert_eq!(
        (b.tensor(y).dtype(), b.tensor(y).ne()),
        (DType::F32, [1536, 7, 1, 1])
    );
    let msg = op_error(b.mul_mat("z", w, q).unwrap_err());
    assert!(
        msg.contains("inner dimensions differ: src0 ne0 576 vs src1 ne0 64"),
        "{msg}"
    );
}

#[test]
fn views_alias_their_root_and_stay_in_bounds() {
    let mut b = GraphBuilder::new("g");
    let x = f32s(&mut b, "x", [64, 8, 4, 1]);
    let y = b.scale("y", x, 2.0).unwrap();
    let r = b.reshape("r", y, [64, 32, 1, 1]).unwrap();
    let v = b
        .view("v", r, [64, 4, 1, 1], [256, 1024, 1024], 512)
        .unwrap();
    let p = b.permute("p", v, [1, 0, 2, 3]).unwrap();
    for (id, offset) in [(r, 0), (v, 512), (p, 512)] {
        let view = b.tensor(id).view.unwrap();
        assert_eq!(
            (view.root, view.offset),
            (y, offset),
            "{}",
            b.tensor(id).name
        );
    }
    let msg = op_error(
        b.view("far", y, [64, 4, 1, 1], [256, 1024, 1024], 8192 * 4 - 256)
            .unwrap_err(),
    );
    assert!(msg.contains("outside root 'y'"), "{msg}");
    let msg = op_error(b.reshape("nc", p, [256, 1, 1, 1]).unwrap_err());
    assert!(msg.contains("contiguous"), "{msg}");
    op_error(b.reshape("count", y, [64, 9, 1, 1]).unwrap_err());
}

#[test]
fn writes_go_only_into_state_or_intermediates() {
    let mut b = GraphBuilder::new("g");
    let cache = b.state("k_cache", DType::F32, [64, 32, 1, 1]).unwrap();
    let k = f32s(&mut b, "k", [64, 4, 1, 1]);
    let w = b.weight("w", DType::F32, [64, 4, 1, 1]).unwrap();
    let slot = b
        .view("slot", cache, [64, 4, 1, 1], [256, 1024, 1024], 256 * 8)
        .unwrap();
    let c = b.cpy("store", k, slot).unwrap();
    assert_eq!(b.tensor(c).view.unwrap().root, cache);
    let idx = b
        .constant(
            "rows",
            DType::I32,
            [4, 1, 1, 1],
            ConstInit::Arange {
                start: 10.0,
                step: 1.0,
            },
        )
        .unwrap();
    let s = b.set_rows("store2", cache, k, idx).unwrap();
    assert_eq!(b.tensor(s).view.unwrap().root, cache);
    b.cpy("into_weight", k, w).unwrap();
    b.mark_output(s).unwrap();
    let Err(Error::Invalid { violations, .. }) = b.finish() else {
        panic!("a write into a weight must fail")
    };
    assert_eq!(violations.len(), 1);
    assert!(
        violations[0].message.contains("writes into weight 'w'"),
        "{}",
        violations[0]
    );
}

#[test]
fn rope_softmax_getrows_rules() {
    let mut b = GraphBuilder::new("g");
    let x = f32s(&mut b, "x", [64, 8, 5, 1]);
    let pos = b
        .constant(
            "pos",
            DType::I32,
            [5, 1, 1, 1],
            ConstInit::Arange {
                start: 0.0,
                step: 1.0,
            },
        )
        .unwrap();
    let bad_pos = b.input("bad_pos", DType::I32, [4, 1, 1, 1]).unwrap();
    let p = ir::RopeParams::plain(ir::RopeMode::Neox, 64, 1e4);
    b.rope("r", x, pos, p).unwrap();
    op_error(b.rope("r2", x, bad_pos, p).unwrap_err());
    let odd = ir::RopeParams { n_dims: 63, ..p };
    op_error(b.rope("r3", x, pos, odd).unwrap_err());

    let s = f32s(&mut b, "s", [16, 5, 8, 1]);
    let mask = b
        .constant(
            "mask",
            DType::F32,
            [16, 8, 1, 1],
            ConstInit::CausalMask { n_past: 11 },
        )
        .unwrap();
    b.soft_max("sm", s, Some(mask), 0.125, 0.0).unwrap();
    let short = f32s(&mut b, "short", [16, 4, 1, 1]);
    op_error(b.soft_max("sm2", s, Some(short), 1.0, 0.0).unwrap_err());

    let table = b.weight("emb", DType::Q8_0, [64, 100, 1, 1]).unwrap();
    let tok = b.input("tok", DType::I32, [7, 1, 1, 1]).unwrap();
    let e = b.get_rows("e", table, tok).unwrap();
    assert_eq!(
        (b.tensor(e).dtype(), b.tensor(e).ne()),
        (DType::F32, [64, 7, 1, 1])
    );
    op_error(b.get_rows("e2", table, x).unwrap_err());
}

#[test]
fn glu_concat_reductions() {
    let mut b = GraphBuilder::new("g");
    let a = f32s(&mut b, "a", [10, 3, 1, 1]);
    let g = b.glu("g", ir::GluKind::SwiGlu, a, false).unwrap();
    assert_eq!(b.tensor(g).ne(), [5, 3, 1, 1]);
    let c = b.concat("c", a, a, 1).unwrap();
    assert_eq!(b.tensor(c).ne(), [10, 6, 1, 1]);
    let m = b.mean("m", c).unwrap();
    assert_eq!(b.tensor(m).ne(), [1, 6, 1, 1]);
    let am = b.argmax("am", c).unwrap();
    assert_eq!(
        (b.tensor(am).dtype(), b.tensor(am).ne()),
        (DType::I32, [6, 1, 1, 1])
    );
    let odd = f32s(&mut b, "odd", [9, 3, 1, 1]);
    op_error(b.glu("g2", ir::GluKind::GeGlu, odd, true).unwrap_err());
    op_error(b.node("arity", Op::Add, &[a], None).unwrap_err());
}

#[test]
fn builder_rejects_duplicates_and_bad_leafs() {
    let mut b = GraphBuilder::new("g");
    f32s(&mut b, "a", [4, 1, 1, 1]);
    assert!(matches!(
        b.input("a", DType::F32, [4, 1, 1, 1]),
        Err(Error::DuplicateName(_))
    ));
    assert!(matches!(
        b.weight("q", DType::Q4_0, [33, 1, 1, 1]),
        Err(Error::Leaf { .. })
    ));
    assert!(matches!(
        b.weight("z", DType::F32, [0, 1, 1, 1]),
        Err(Error::Leaf { .. })
    ));
    let e = b
        .constant("c", DType::F32, [3, 1, 1, 1], ConstInit::Values(vec![1.0]))
        .unwrap_err();
    assert!(
        e.to_string().contains("1 values given for 3 elements"),
        "{e}"
    );
    assert!(
        matches!(b.finish(), Err(Error::Invalid { .. })),
        "no outputs"
    );
}

#[test]
fn verify_reports_every_broken_invariant_of_hand_made_graphs() {
    let mut b = GraphBuilder::new("g");
    let x = f32s(&mut b, "x", [4, 2, 1, 1]);
    let y = b.silu("y", x).unwrap();
    b.mark_output(y).unwrap();
    let good = b.finish().unwrap();
    let mut tensors: Vec<Tensor> = good.tensors().to_vec();
    tensors[1].srcs = vec![TensorId(1)];
    tensors[0].role = Role::Output;
    tensors[1].layout.ne = [4, 3, 1, 1];
    let bad = ir::Graph::from_tensors("bad", tensors);
    let v = ir::verify::verify(&bad);
    let text: Vec<String> = v.iter().map(|v| v.to_string()).collect();
    assert!(
        text.iter()
            .any(|m| m.contains("leaf cannot have role output")),
        "{text:?}"
    );
    assert!(
        text.iter()
            .any(|m| m.contains("not defined before this tensor")),
        "{text:?}"
    );
}

#[test]
fn mixture_of_experts_ops() {
    let mut b = GraphBuilder::new("g");
    let experts = b.weight("exps", DType::Q8_0, [64, 24, 8, 1]).unwrap();
    let x = f32s(&mut b, "x", [64, 1, 5, 1]);
    let logits = f32s(&mut b, "logits", [8, 5, 1, 1]);
    let order = b.argsort("order", logits, true).unwrap();
    assert_eq!(b.tensor(order).dtype(), DType::I32);
    assert_eq!(b.tensor(order).ne(), [8, 5, 1, 1]);
    let ids = b.input("ids", DType::I32, [2, 5, 1, 1]).unwrap();
    let y = b.mul_mat_id("y", experts, x, ids).unwrap();
    assert_eq!(b.tensor(y).ne(), [24, 2, 5, 1]);
    let c = b.clamp("c", logits, 0.0, 1.0).unwrap();
    assert_eq!(b.tensor(c).ne(), [8, 5, 1, 1]);
    // ids for another token count, activations of 3 rows for 2 slots,
    // float ids, an argsort of integers.
    let ids4 = b.input("ids4", DType::I32, [2, 4, 1, 1]).unwrap();
    let msg = op_error(b.mul_mat_id("bad_t", experts, x, ids4).unwrap_err());
    assert!(
        msg.contains("[2, 4, 1, 1]") && msg.contains("mul_mat_id 'bad_t'"),
        "{msg}"
    );
    let x3 = f32s(&mut b, "x3", [64, 3, 5, 1]);
    op_error(b.mul_mat_id("bad_rows", experts, x3, ids).unwrap_err());
    let fids = f32s(&mut b, "fids", [2, 5, 1, 1]);
    let msg = op_error(b.mul_mat_id("bad_ids", experts, x, fids).unwrap_err());
    assert!(msg.contains("expert ids (src2)"), "{msg}");
    op_error(b.argsort("bad_sort", ids, false).unwrap_err());
}

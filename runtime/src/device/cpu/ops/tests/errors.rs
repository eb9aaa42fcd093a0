//! What prepare_op refuses: clear `Unsupported` errors naming the op and dtypes.

use super::harness::*;
use crate::RuntimeError;
use crate::device::cpu::ops::prepare_op;
use ir::{DType, Op};
use kernels::testing::Rng;

fn refused(op: Op, mut dst: T, mut srcs: Vec<T>) -> String {
    let raws: Vec<_> = srcs.iter_mut().map(T::raw).collect();
    match prepare_op(&op, dst.raw(), &raws) {
        Ok(k) => panic!("{op} was prepared ({}) but should be refused", k.describe()),
        Err(e @ RuntimeError::Unsupported { .. }) => e.to_string(),
        Err(e) => panic!("{op}: wrong error kind: {e}"),
    }
}

#[test]
fn unsupported_combinations_are_clear_errors() {
    let mut rng = Rng::new(40);
    let f32s = |rng: &mut Rng, ne| filled(rng, DType::F32, ne);
    // Not steps of this module.
    let msg = refused(
        Op::MulMat,
        poisoned(DType::F32, [3, 3, 1, 1]),
        vec![f32s(&mut rng, [4, 3, 1, 1]), f32s(&mut rng, [4, 3, 1, 1])],
    );
    assert!(msg.contains("mul_mat"), "{msg}");
    for op in [
        Op::Reshape,
        Op::Transpose,
        Op::View { offset: 0 },
        Op::Permute { axes: [1, 0, 2, 3] },
    ] {
        let msg = refused(
            op,
            poisoned(DType::F32, [4, 4, 1, 1]),
            vec![f32s(&mut rng, [4, 4, 1, 1])],
        );
        assert!(msg.contains(op.name()) && msg.contains("view"), "{msg}");
    }
    // get_rows with float indices names the op and the dtypes.
    let msg = refused(
        Op::GetRows,
        poisoned(DType::F32, [4, 2, 1, 1]),
        vec![f32s(&mut rng, [4, 5, 1, 1]), f32s(&mut rng, [2, 1, 1, 1])],
    );
    assert!(
        msg.contains("get_rows") && msg.contains("src1 f32"),
        "{msg}"
    );
    // cpy into i32.
    let msg = refused(
        Op::Cpy,
        poisoned(DType::I32, [4, 2, 1, 1]),
        vec![
            f32s(&mut rng, [4, 2, 1, 1]),
            filled(&mut rng, DType::I32, [4, 2, 1, 1]),
        ],
    );
    assert!(msg.contains("cpy") && msg.contains("i32"), "{msg}");
    // argmax of i32, soft_max with an i32 mask, rope with f32 positions.
    let msg = refused(
        Op::Argmax,
        poisoned(DType::I32, [2, 1, 1, 1]),
        vec![filled(&mut rng, DType::I32, [4, 2, 1, 1])],
    );
    assert!(msg.contains("argmax") && msg.contains("src0 i32"), "{msg}");
    let op = Op::SoftMax {
        scale: 1.0,
        max_bias: 0.0,
    };
    let msg = refused(
        op,
        poisoned(DType::F32, [4, 2, 1, 1]),
        vec![
            f32s(&mut rng, [4, 2, 1, 1]),
            filled(&mut rng, DType::I32, [4, 2, 1, 1]),
        ],
    );
    assert!(
        msg.contains("soft_max") && msg.contains("src1 i32"),
        "{msg}"
    );
    // A quantized strided source cannot be re-cut into other rows.
    let a = view_in(
        &mut rng,
        DType::Q8_0,
        [64, 3, 1, 1],
        [128, 6, 1, 1],
        [0, 1, 0, 0],
    );
    let msg = refused(Op::Cont, poisoned(DType::Q8_0, [32, 6, 1, 1]), vec![a]);
    assert!(msg.contains("cont") && msg.contains("q8_0"), "{msg}");
    // Shapes that do not fit, and a wrong source count.
    let msg = refused(
        Op::Add,
        poisoned(DType::F32, [4, 2, 1, 1]),
        vec![f32s(&mut rng, [4, 2, 1, 1]), f32s(&mut rng, [3, 1, 1, 1])],
    );
    assert!(msg.contains("add") && msg.contains("[3, 1, 1, 1]"), "{msg}");
    let msg = refused(Op::Sqr, poisoned(DType::F32, [4, 2, 1, 1]), vec![]);
    assert!(msg.contains("sqr") && msg.contains("sources"), "{msg}");
}

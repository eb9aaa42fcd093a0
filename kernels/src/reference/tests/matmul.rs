use super::{dense, run};
use crate::reference::Dense;
use crate::testing::Rng;
use ir::{DType, Op};

#[test]
fn mul_mat_2x3_by_hand() {
    // a: rows [1, 2, 3], [4, 5, 6]; b: rows [1, 0, -1], [2, 1, 0].
    let a = dense([3, 2, 1, 1], &[1., 2., 3., 4., 5., 6.]);
    let b = dense([3, 2, 1, 1], &[1., 0., -1., 2., 1., 0.]);
    let y = run(Op::MulMat, &[&a, &b], DType::F32, [2, 2, 1, 1]);
    // result[i, j] = dot(a row i, b row j), i fastest.
    assert_eq!(y.data, [-2., -2., 4., 13.]);
}

#[test]
fn mul_mat_matrix_vector() {
    let a = dense([2, 3, 1, 1], &[1., 2., 3., 4., 5., 6.]);
    let b = dense([2, 1, 1, 1], &[10., 1.]);
    let y = run(Op::MulMat, &[&a, &b], DType::F32, [3, 1, 1, 1]);
    assert_eq!(y.data, [12., 34., 56.]);
}

#[test]
fn mul_mat_broadcasts_src0_over_batch_dims() {
    // a [5, 7, 2, 1], b [5, 3, 6, 2]: b matrix (k2, k3) uses a matrix (k2 / 3, 0).
    // 7 rows of a: one group of four plus three single rows.
    let mut rng = Rng::new(41);
    let a = Dense::new([5, 7, 2, 1], rng.vec(70, -1.0, 1.0));
    let b = Dense::new([5, 3, 6, 2], rng.vec(5 * 3 * 12, -1.0, 1.0));
    let y = run(Op::MulMat, &[&a, &b], DType::F32, [7, 3, 6, 2]);
    let want = Dense::from_fn([7, 3, 6, 2], |[i, j, k2, k3]| {
        (0..5).fold(0.0, |acc, k| {
            acc + a.get([k, i, k2 / 3, 0]) * b.get([k, j, k2, k3])
        })
    });
    assert_eq!(y.data, want.data, "bit-identical to sums in order of k");
}

#[test]
fn mul_mat_id_by_hand() {
    // Three experts of [k 2, n 2]: expert x's rows [x, 1], [0, x].
    let a = dense(
        [2, 2, 3, 1],
        &[0., 1., 0., 0., 1., 1., 0., 1., 2., 1., 0., 2.],
    );
    // Two tokens, one activation row each (b1 = 1): [1, 10] and [2, 20].
    let b = dense([2, 1, 2, 1], &[1., 10., 2., 20.]);
    // Token 0 uses experts 2 then 0; token 1 experts 1 then 1.
    let ids = dense([2, 2, 1, 1], &[2., 0., 1., 1.]);
    let y = run(Op::MulMatId, &[&a, &b, &ids], DType::F32, [2, 2, 2, 1]);
    // Expert x on [p, q]: [x p + q, x q].
    assert_eq!(y.data, [12., 20., 10., 0., 22., 20., 22., 20.]);
    // b1 = n_used: slot e reads row e of its token.
    let b2 = dense([2, 2, 1, 1], &[1., 10., 2., 20.]);
    let ids1 = dense([2, 1, 1, 1], &[0., 2.]);
    let y = run(Op::MulMatId, &[&a, &b2, &ids1], DType::F32, [2, 2, 1, 1]);
    assert_eq!(y.data, [10., 0., 24., 40.]);
}

#[test]
#[should_panic(expected = "expert id 3 is outside 0..3")]
fn mul_mat_id_refuses_an_expert_out_of_range() {
    let a = dense([2, 2, 3, 1], &[0.; 12]);
    let b = dense([2, 1, 1, 1], &[1., 1.]);
    let ids = dense([1, 1, 1, 1], &[3.]);
    run(Op::MulMatId, &[&a, &b, &ids], DType::F32, [2, 1, 1, 1]);
}

/// Parts holding experts [0, 1) and [1, 3) of the three above: each slot is
/// computed by the part holding its expert, zeros in the other, so the
/// parts add up to the whole product.
#[test]
fn mul_mat_id_parts_add_up_to_the_whole() {
    let a = dense(
        [2, 2, 3, 1],
        &[0., 1., 0., 0., 1., 1., 0., 1., 2., 1., 0., 2.],
    );
    let b = dense([2, 1, 2, 1], &[1., 10., 2., 20.]);
    let ids = dense([2, 2, 1, 1], &[2., 0., 1., 1.]);
    let whole = run(Op::MulMatId, &[&a, &b, &ids], DType::F32, [2, 2, 2, 1]);
    let first = dense([2, 2, 1, 1], &a.data[..4]);
    let rest = dense([2, 2, 2, 1], &a.data[4..]);
    let part = |w: &Dense, first: i64| {
        let op = Op::MulMatIdPart { first, experts: 3 };
        run(op, &[w, &b, &ids], DType::F32, [2, 2, 2, 1])
    };
    let (p0, p1) = (part(&first, 0), part(&rest, 1));
    // Token 0's second slot (expert 0) is part 0's alone.
    assert_eq!(p0.data, [0., 0., 10., 0., 0., 0., 0., 0.]);
    let sum: Vec<f64> = p0.data.iter().zip(&p1.data).map(|(x, y)| x + y).collect();
    assert_eq!(sum, whole.data);
}

#[test]
#[should_panic(expected = "expert id 3 is outside 0..3")]
fn mul_mat_id_part_refuses_an_id_outside_the_full_set() {
    let a = dense([2, 2, 1, 1], &[0.; 4]);
    let b = dense([2, 1, 1, 1], &[1., 1.]);
    let ids = dense([1, 1, 1, 1], &[3.]);
    let op = Op::MulMatIdPart {
        first: 2,
        experts: 3,
    };
    run(op, &[&a, &b, &ids], DType::F32, [2, 1, 1, 1]);
}

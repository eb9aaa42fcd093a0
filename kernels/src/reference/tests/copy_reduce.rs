use super::{dense, run, run_same};
use crate::reference::Dense;
use ir::{DType, Op};

#[test]
fn cpy_keeps_flat_order_in_the_destination_shape() {
    let a = dense([3, 2, 1, 1], &[1., 2., 3., 4., 5., 6.]);
    let dst = Dense::zeros([2, 3, 1, 1]);
    let y = run(Op::Cpy, &[&a, &dst], DType::F16, [2, 3, 1, 1]);
    assert_eq!(y.ne, [2, 3, 1, 1]);
    assert_eq!(
        y.data, a.data,
        "values are not rounded to the destination dtype here"
    );
}

#[test]
fn cont_keeps_values() {
    let a = dense([2, 2, 1, 1], &[1., 2., 3., 4.]);
    assert_eq!(run_same(Op::Cont, &[&a]), a);
}

#[test]
fn get_rows_by_hand() {
    let table = dense([2, 3, 1, 1], &[1., 2., 3., 4., 5., 6.]);
    let idx = dense([3, 1, 1, 1], &[2., 0., 2.]);
    let y = run(Op::GetRows, &[&table, &idx], DType::F32, [2, 3, 1, 1]);
    assert_eq!(y.data, [5., 6., 1., 2., 5., 6.]);
}

#[test]
fn get_rows_per_batch() {
    // table [2, 2, 2]: matrix k picks with idx[:, k].
    let table = dense([2, 2, 2, 1], &[1., 2., 3., 4., 10., 20., 30., 40.]);
    let idx = dense([1, 2, 1, 1], &[1., 0.]);
    let y = run(Op::GetRows, &[&table, &idx], DType::F32, [2, 1, 2, 1]);
    assert_eq!(y.data, [3., 4., 10., 20.]);
}

#[test]
#[should_panic(expected = "get_rows: index 3 is outside 0..3")]
fn get_rows_out_of_range_panics() {
    let table = dense([2, 3, 1, 1], &[0.; 6]);
    run(
        Op::GetRows,
        &[&table, &dense([1, 1, 1, 1], &[3.])],
        DType::F32,
        [2, 1, 1, 1],
    );
}

#[test]
fn set_rows_writes_rows_into_the_whole_destination() {
    let dst = dense([2, 4, 1, 1], &[9.; 8]);
    let rows = dense([2, 2, 1, 1], &[1., 2., 3., 4.]);
    let idx = dense([2, 1, 1, 1], &[3., 1.]);
    let y = run(Op::SetRows, &[&dst, &rows, &idx], DType::F16, [2, 4, 1, 1]);
    assert_eq!(y.data, [9., 9., 3., 4., 9., 9., 1., 2.]);
}

#[test]
fn set_rows_broadcasts_indices_over_dims_2_and_3() {
    // dst [1, 3, 2, 2]; rows [1, 1, 2, 2]; idx [1, 1, 2]: i2 uses idx column 0,
    // i3 picks idx[:, 0, i3].
    let dst = Dense::zeros([1, 3, 2, 2]);
    let rows = dense([1, 1, 2, 2], &[1., 2., 3., 4.]);
    let idx = dense([1, 1, 2, 1], &[2., 0.]);
    let y = run(Op::SetRows, &[&dst, &rows, &idx], DType::F32, [1, 3, 2, 2]);
    assert_eq!(y.data, [0., 0., 1., 0., 0., 2., 3., 0., 0., 4., 0., 0.]);
}

#[test]
fn concat_along_each_dim() {
    let a = dense([2, 2, 1, 1], &[1., 2., 3., 4.]);
    let b = dense([2, 2, 1, 1], &[5., 6., 7., 8.]);
    let y = run(Op::Concat { dim: 0 }, &[&a, &b], DType::F32, [4, 2, 1, 1]);
    assert_eq!(y.data, [1., 2., 5., 6., 3., 4., 7., 8.]);
    let y = run(Op::Concat { dim: 1 }, &[&a, &b], DType::F32, [2, 4, 1, 1]);
    assert_eq!(y.data, [1., 2., 3., 4., 5., 6., 7., 8.]);
    let y = run(Op::Concat { dim: 3 }, &[&a, &b], DType::F32, [2, 2, 1, 2]);
    assert_eq!(y.data, [1., 2., 3., 4., 5., 6., 7., 8.]);
    let c = dense([1, 2, 1, 1], &[0., -1.]);
    let y = run(Op::Concat { dim: 0 }, &[&a, &c], DType::F32, [3, 2, 1, 1]);
    assert_eq!(y.data, [1., 2., 0., 3., 4., -1.]);
}

#[test]
fn sum_rows_and_mean_by_hand() {
    let a = dense(
        [3, 2, 2, 1],
        &[1., 2., 3., 4., 5., 6., -1., -1., 2., 0., 0., 0.5],
    );
    let y = run(Op::SumRows, &[&a], DType::F32, [1, 2, 2, 1]);
    assert_eq!(y.data, [6., 15., 0., 0.5]);
    let y = run(Op::Mean, &[&a], DType::F32, [1, 2, 2, 1]);
    assert_eq!(y.data, [2., 5., 0., 0.5 / 3.]);
}

#[test]
fn argmax_takes_the_last_maximum_as_ggml() {
    let inf = f64::INFINITY;
    let a = dense(
        [4, 5, 1, 1],
        &[
            1.,
            7.,
            7.,
            2., // tie: last wins (ggml)
            -3.,
            -1.,
            -2.,
            -1., // tie among negatives
            -inf,
            -inf,
            -inf,
            -inf, // nothing above -inf: the last index (ggml)
            f64::NAN,
            0.,
            5.,
            f64::NAN, // NaN never wins
            0.,
            0.,
            inf,
            1., // +inf wins
        ],
    );
    let y = run(Op::Argmax, &[&a], DType::I32, [5, 1, 1, 1]);
    assert_eq!(y.data, [2., 3., 3., 2., 2.]);
}

#[test]
#[should_panic(expected = "is a view op")]
fn compute_refuses_view_ops() {
    let a = dense([2, 2, 1, 1], &[0.; 4]);
    run(Op::Transpose, &[&a], DType::F32, [2, 2, 1, 1]);
}

#[test]
#[should_panic(expected = "but the node's layout says [3, 1, 1, 1]")]
fn compute_checks_the_result_extents() {
    let a = dense([2, 2, 1, 1], &[0.; 4]);
    run(Op::Sqr, &[&a], DType::F32, [3, 1, 1, 1]);
}

#[test]
fn argsort_both_orders_by_hand_ties_in_index_order() {
    let inf = f64::INFINITY;
    let a = dense(
        [5, 2, 1, 1],
        &[3., 1., 2., 1., -inf, 0.5, 0.5, 0.25, 9., 0.5],
    );
    let up = run(Op::Argsort { descending: false }, &[&a], DType::I32, a.ne);
    assert_eq!(up.data, [4., 1., 3., 2., 0., 2., 0., 1., 4., 3.]);
    let down = run(Op::Argsort { descending: true }, &[&a], DType::I32, a.ne);
    assert_eq!(down.data, [0., 2., 1., 3., 4., 3., 0., 1., 4., 2.]);
}

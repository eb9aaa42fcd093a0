//! Tensor parallelism in the oracle: weight shards bind to exactly their
//! slice of what the unsplit weight would be bound to (random values drawn
//! for the whole source, file tensors cut from the stored source), and the
//! plan evaluator runs collectives over parts held on other devices.

use super::tests::FakeFile;
use super::*;
use crate::testing::plans::collective_pair;
use ir::plan::DeviceKind;
use ir::{DType, GraphBuilder, Layout, WeightShard};

/// Packed tensors joined along `axis` (each the same outside it): for every
/// index of the axes above `axis`, each part's run of bytes in turn.
fn concat_bytes(parts: &[Vec<u8>], outer: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for o in 0..outer {
        for p in parts {
            let run = p.len() / outer;
            out.extend_from_slice(&p[o * run..(o + 1) * run]);
        }
    }
    out
}

/// A graph with source `of` (dtype, `full`) split along `axis` into shards of
/// `extents`, each a weight called `of.i`; returns it with the shard ids.
fn sharded(
    of: &str,
    dtype: DType,
    full: [i64; 4],
    axis: u8,
    extents: &[i64],
) -> (Graph, Vec<TensorId>) {
    let mut b = GraphBuilder::new("shards");
    let mut start = 0;
    let mut ids = Vec::new();
    for (i, &e) in extents.iter().enumerate() {
        let mut ne = full;
        ne[axis as usize] = e;
        let shard = WeightShard {
            of: of.to_string(),
            full_ne: full,
            axis,
            start,
        };
        ids.push(
            b.weight_shard(format!("{of}.{i}"), dtype, ne, shard)
                .unwrap(),
        );
        start += e;
    }
    // A graph needs an output; the shards are leafs bound before any node runs.
    let x = b.input("x", DType::F32, [3, 1, 1, 1]).unwrap();
    let y = b.unary("y", Op::Sqr, x).unwrap();
    b.mark_output(y).unwrap();
    (b.finish().unwrap(), ids)
}

fn with_weights(weights: Weights<'_>) -> Bindings<'_> {
    Bindings {
        weights,
        inputs: BTreeMap::new(),
        random_inputs: Some(1),
    }
}

/// (source dtype, its extents, axis, shard extents along it): an F32
/// matrix split by rows (axis 1, a 3-d source so runs repeat), and a Q8_0
/// one split by columns on block boundaries (axis 0).
const CASES: [(DType, [i64; 4], u8, &[i64]); 2] = [
    (DType::F32, [7, 10, 2, 1], 1, &[3, 4, 3]),
    (DType::Q8_0, [96, 5, 2, 1], 0, &[32, 64]),
];

#[test]
fn random_shards_side_by_side_are_the_unsplit_random_weight() {
    for (dtype, full, axis, extents) in CASES {
        let layout = Layout::contiguous(dtype, full).unwrap();
        let whole = random_leaf("w", &layout, 7, None);
        let (g, ids) = sharded("w", dtype, full, axis, extents);
        let memory = evaluate(&g, &with_weights(Weights::Random { seed: 7 })).unwrap();
        let parts: Vec<Vec<u8>> = ids.iter().map(|&id| memory.bytes(id).to_vec()).collect();
        let outer = full[axis as usize + 1..].iter().product::<i64>() as usize;
        assert_eq!(concat_bytes(&parts, outer), whole, "{dtype} along {axis}");
        // The public helper the runtime binds through gives the same bytes.
        for (&id, part) in ids.iter().zip(&parts) {
            let t = g.tensor(id);
            let bytes = random_weight(&t.name, &t.layout, t.shard.as_ref(), 7).unwrap();
            assert_eq!(&bytes, part, "{}", t.name);
        }
    }
}

#[test]
fn file_shards_are_cut_from_the_stored_source() {
    for (dtype, full, axis, extents) in CASES {
        let layout = Layout::contiguous(dtype, full).unwrap();
        // Any bytes do: the cut is by position (valid Q8_0 scales keep the
        // values finite, should anything read them).
        let stored = random_leaf("stored", &layout, 3, None);
        let file = FakeFile(vec![("w".into(), dtype, full, stored.clone())]);
        let (g, ids) = sharded("w", dtype, full, axis, extents);
        let memory = evaluate(&g, &with_weights(Weights::File(&file))).unwrap();
        let parts: Vec<Vec<u8>> = ids.iter().map(|&id| memory.bytes(id).to_vec()).collect();
        let outer = full[axis as usize + 1..].iter().product::<i64>() as usize;
        assert_eq!(concat_bytes(&parts, outer), stored, "{dtype} along {axis}");
    }
}

#[test]
fn a_missing_or_different_source_is_an_error_naming_shard_and_source() {
    let (g, _) = sharded("w", DType::F32, [7, 10, 1, 1], 1, &[4, 6]);
    let empty = FakeFile(vec![]);
    let err = evaluate(&g, &with_weights(Weights::File(&empty)))
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "weight shard 'w.0' is cut from 'w', which is not in fake.gguf"
    );
    let bytes = vec![0u8; 7 * 11 * 4];
    let other = FakeFile(vec![("w".into(), DType::F32, [7, 11, 1, 1], bytes)]);
    let err = evaluate(&g, &with_weights(Weights::File(&other)))
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "weight shard 'w.0' is cut from 'w', which is f32 [7, 11, 1, 1] \
         but the shard expects f32 [7, 10, 1, 1]"
    );
    // The shard's own name is not looked up: a tensor called 'w.0' does not
    // stand in for the slice.
    let bytes = vec![0u8; 7 * 4 * 4];
    let own_name = FakeFile(vec![("w.0".into(), DType::F32, [7, 4, 1, 1], bytes)]);
    let err = evaluate(&g, &with_weights(Weights::File(&own_name)))
        .err()
        .unwrap();
    assert!(
        matches!(&err, EvalError::MissingShardSource { of, .. } if of == "w"),
        "{err}"
    );
}

#[test]
fn random_weight_names_a_slice_outside_its_source() {
    let layout = Layout::contiguous(DType::F32, [7, 4, 1, 1]).unwrap();
    let shard = WeightShard {
        of: "w".into(),
        full_ne: [7, 10, 1, 1],
        axis: 1,
        start: 8,
    };
    let why = random_weight("w.2", &layout, Some(&shard), 1).unwrap_err();
    assert!(why.contains("outside 'w'"), "{why}");
}

/// The values of the random weight `name` with extents `ne` (F32).
fn random_values(name: &str, ne: [i64; 4], seed: u64) -> Dense {
    let layout = Layout::contiguous(DType::F32, ne).unwrap();
    gather(&random_leaf(name, &layout, seed, None), &layout)
}

#[test]
fn the_plan_evaluator_runs_collectives_over_parts_on_other_devices() {
    let plan = collective_pair(None);
    let violations = ir::plan::check::check_plan(&plan);
    assert!(
        violations.is_empty(),
        "the fixture is invalid: {violations:?}"
    );
    let memory = evaluate_plan(&plan, &with_weights(Weights::Random { seed: 3 })).unwrap();
    // r = sqr(u[0..3]) + sqr(u[3..6]), each element one f32 square (the
    // evaluator stores p.r as f32) and one sum.
    let u = random_values("u", [6, 3, 1, 1], 3);
    let sq = |x: f64| f64::from((x * x) as f32);
    let want: Vec<f64> = (0..3)
        .flat_map(|row| (0..3).map(move |col| (row, col)))
        .map(|(row, col)| sq(u.data[row * 6 + col]) + sq(u.data[row * 6 + 3 + col]))
        .map(|s| f64::from(s as f32))
        .collect();
    let v = random_values("v", [4, 7, 1, 1], 3);
    for name in ["r.0", "r.1"] {
        assert_eq!(memory.read_name(name).unwrap().data, want, "{name}");
    }
    for name in ["g.0", "g.1"] {
        assert_eq!(memory.read_name(name).unwrap(), v, "{name}");
    }
}

#[test]
fn the_plan_evaluator_refuses_reads_real_devices_cannot_make() {
    let bindings = with_weights(Weights::Random { seed: 3 });
    let cuda = collective_pair(Some(DeviceKind::Cuda { ordinal: 0 }));
    let err = evaluate_plan(&cuda, &bindings).err().unwrap().to_string();
    assert_eq!(
        err,
        "the plan is inconsistent: all_reduce_sum on 'cuda0' reads 'p.0' on 'cpu0': \
         collectives read parts in place only between CPU devices (one host's memory)"
    );
    // The same read by an op that is not a collective needs a copy.
    let mut plan = collective_pair(None);
    let ir::plan::Step::Op { op, .. } = &mut plan.splits[2].steps[0] else {
        unreachable!("the fixture's r.0 is an op step")
    };
    *op = Op::Add;
    let err = evaluate_plan(&plan, &bindings).err().unwrap().to_string();
    assert_eq!(
        err,
        "the plan is inconsistent: add on 'cpu0' reads 'p.1' on 'cpu1': \
         only collectives read tensors on other devices (others need a copy)"
    );
}

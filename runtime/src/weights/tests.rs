//! Weight shards through `bind_weight`: side by side along their axis they
//! are the unsplit weight, random or from a file; a missing or different
//! source is an error naming the shard, the source and the file.

use super::*;
use crate::tests::support::TempGguf;

/// (dtype, source extents, axis, shard extents along it): F32 split along
/// axis 1 of a 3-d source (its runs repeat), Q8_0 along axis 0 on blocks.
const CASES: [(DType, [i64; 4], u8, &[i64]); 2] = [
    (DType::F32, [7, 10, 2, 1], 1, &[3, 4, 3]),
    (DType::Q8_0, [96, 5, 2, 1], 0, &[32, 64]),
];

/// Each shard of `of` (name `of.i`, layout, slice) for one case.
fn shards(
    of: &str,
    dtype: DType,
    full: [i64; 4],
    axis: u8,
    extents: &[i64],
) -> Vec<(String, Layout, WeightShard)> {
    let mut start = 0;
    let mut out = Vec::new();
    for (i, &e) in extents.iter().enumerate() {
        let mut ne = full;
        ne[axis as usize] = e;
        let shard = WeightShard {
            of: of.to_string(),
            full_ne: full,
            axis,
            start,
        };
        out.push((
            format!("{of}.{i}"),
            Layout::contiguous(dtype, ne).unwrap(),
            shard,
        ));
        start += e;
    }
    out
}

/// The bytes `bind_weight` gives, however bound.
fn bytes(bound: BoundWeight<'_>) -> Vec<u8> {
    match bound {
        BoundWeight::InPlace(b) => b.to_vec(),
        BoundWeight::Copy(b) => b.into_owned(),
    }
}

/// Packed parts joined along an axis with `outer` indices above it.
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

/// Binds every shard of one case and checks they make `whole` side by side;
/// a shard is never used in place.
fn check_shards_make(weights: &Weights, case: (DType, [i64; 4], u8, &[i64]), whole: &[u8]) {
    let (dtype, full, axis, extents) = case;
    let parts: Vec<Vec<u8>> = shards("w", dtype, full, axis, extents)
        .iter()
        .map(|(name, layout, shard)| {
            let bound = bind_weight(weights, name, layout, Some(shard)).unwrap();
            assert!(
                matches!(bound, BoundWeight::Copy(_)),
                "{name} is cut, so copied"
            );
            bytes(bound)
        })
        .collect();
    let outer = full[axis as usize + 1..].iter().product::<i64>() as usize;
    assert_eq!(
        concat_bytes(&parts, outer),
        whole,
        "{dtype} along axis {axis}"
    );
}

#[test]
fn random_shards_side_by_side_are_the_unsplit_random_weight() {
    let weights = Weights::Random { seed: 11 };
    for case in CASES {
        let (dtype, full, ..) = case;
        let layout = Layout::contiguous(dtype, full).unwrap();
        let whole = bytes(bind_weight(&weights, "w", &layout, None).unwrap());
        check_shards_make(&weights, case, &whole);
    }
}

#[test]
fn file_shards_are_cut_from_the_stored_source() {
    for (i, case) in CASES.into_iter().enumerate() {
        let (dtype, full, ..) = case;
        let layout = Layout::contiguous(dtype, full).unwrap();
        // Not the random weights of any name the shards use.
        let stored = kernels::evaluate::random_leaf("stored", &layout, 5, None);
        let file = TempGguf::new(&format!("shards{i}"), &[("w", dtype, full, &stored)]);
        let weights = Weights::open(&file.0).unwrap();
        // The unsplit weight binds as before (in place where aligned).
        assert_eq!(
            bytes(bind_weight(&weights, "w", &layout, None).unwrap()),
            stored
        );
        check_shards_make(&weights, case, &stored);
    }
}

#[test]
fn a_missing_or_different_source_names_the_shard_the_source_and_the_file() {
    let layout = Layout::contiguous(DType::F32, [7, 4, 1, 1]).unwrap();
    let shard = WeightShard {
        of: "w".into(),
        full_ne: [7, 10, 1, 1],
        axis: 1,
        start: 4,
    };
    let other = vec![0u8; 7 * 11 * 4];
    let file = TempGguf::new("mismatch", &[("w", DType::F32, [7, 11, 1, 1], &other)]);
    let weights = Weights::open(&file.0).unwrap();
    let path = file.0.display();
    let err = bind_weight(&weights, "w.1", &layout, Some(&shard))
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "weight shard 'w.1' is cut from 'w' in {path}, which is f32 [7, 11, 1, 1], \
             but the plan expects f32 [7, 10, 1, 1]"
        )
    );
    let elsewhere = WeightShard {
        of: "v".into(),
        ..shard.clone()
    };
    let err = bind_weight(&weights, "v.1", &layout, Some(&elsewhere))
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!("weight shard 'v.1' is cut from 'v', which is not in {path}")
    );
    // A slice past the source's end is named, not cut short.
    let past = WeightShard { start: 8, ..shard };
    let err = bind_weight(&Weights::Random { seed: 1 }, "w.2", &layout, Some(&past))
        .err()
        .unwrap();
    assert!(
        matches!(&err, RuntimeError::InvalidShard { why, .. } if why.contains("outside 'w'")),
        "{err}"
    );
}

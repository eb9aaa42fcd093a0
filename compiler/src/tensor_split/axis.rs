//! Where a split axis goes through the ops that only re-arrange values:
//! `reshape` (and shaped `cont`), `permute`, and strided `view`s. Pure
//! functions over extents and strides, each returning `None` when the split
//! does not survive as one axis split (the rewrite then gathers instead).

/// The result axis and per-device extents of a value split along `axis`
/// with `extents` and reshaped from `src_ne` to `dst_ne` (same element
/// count, element order kept).
///
/// The split survives when some result axis ends exactly where the split
/// axis ends (the same number of elements below and including it) and the
/// elements below it group the slices whole: each extent is a multiple of
/// the factor by which the result's inner block is larger (`[576, T]` split
/// `[384, 192]` as `[64, 9, T]` is split `[6, 3]` along axis 1), or the
/// inner block is smaller and the extents grow by the factor (the inverse).
pub(super) fn reshape(
    src_ne: [i64; 4],
    axis: usize,
    extents: &[i64],
    dst_ne: [i64; 4],
) -> Option<(usize, Vec<i64>)> {
    let inner: i64 = src_ne[..axis].iter().product();
    let end = inner * src_ne[axis];
    let mut below = 1i64;
    for (a, &n) in dst_ne.iter().enumerate() {
        let inner_dst = below;
        below *= n;
        if below != end {
            continue;
        }
        let scaled: Option<Vec<i64>> = if inner_dst >= inner {
            let c = (inner_dst % inner == 0).then_some(inner_dst / inner)?;
            extents
                .iter()
                .map(|&e| (e % c == 0).then_some(e / c))
                .collect()
        } else {
            let c = (inner % inner_dst == 0).then_some(inner / inner_dst)?;
            Some(extents.iter().map(|&e| e * c).collect())
        };
        return scaled.map(|e| (a, e));
    }
    None
}

/// The result axis of split axis `axis` after `permute(axes)` (source axis
/// `i` becomes result axis `axes[i]`, as ggml_permute).
pub(super) fn permute(axes: [u8; 4], axis: usize) -> usize {
    usize::from(axes[axis])
}

/// One part's view: extents, byte strides and byte offset into the part.
pub(super) type PartView = ([i64; 4], [u64; 4], u64);

/// A view of a packed source split along `axis`, re-expressed on each part.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ViewSplit {
    /// The view's axis that carries the split.
    pub axis: usize,
    /// Per device: the part's view extents, strides and byte offset into
    /// the part (`None` for a device without a part).
    pub parts: Vec<Option<PartView>>,
    /// The view's extent along `axis` per device.
    pub extents: Vec<i64>,
}

/// Packed strides of `ne` with element size `es` (non-quantized dtypes).
fn packed(es: u64, ne: [i64; 4]) -> [u64; 4] {
    let mut nb = [es; 4];
    for i in 1..4 {
        nb[i] = nb[i - 1] * ne[i - 1] as u64;
    }
    nb
}

/// Re-expresses the view (`view_ne`, `view_nb`, byte `offset`) of a packed
/// source of extents `src_ne` (element size `es`) split along `axis` with
/// `extents` on each part (each part packed with its own extents).
///
/// Every view axis must step along one source axis by a whole multiple of
/// its stride; the view axes stepping along the split axis must cover it
/// whole, nested (strides 1, then the inner extent, ...), from index 0; the
/// outermost of them carries the split, each extent divided by its step.
/// This is how attention reads a KV cache split by heads: `[C, n_ctx]` seen
/// as `[head_dim, a, n_kv]` puts the split on the heads axis.
pub(super) fn view(
    src_ne: [i64; 4],
    es: u64,
    axis: usize,
    extents: &[i64],
    view_ne: [i64; 4],
    view_nb: [u64; 4],
    offset: u64,
) -> Option<ViewSplit> {
    let src_nb = packed(es, src_ne);
    // The offset as source coordinates (none along the split axis).
    let mut idx = [0i64; 4];
    let mut rest = offset;
    for j in (0..4).rev().filter(|&j| src_ne[j] > 1) {
        idx[j] = (rest / src_nb[j]) as i64;
        rest -= idx[j] as u64 * src_nb[j];
        if idx[j] >= src_ne[j] {
            return None;
        }
    }
    if rest != 0 || idx[axis] != 0 {
        return None;
    }
    // Each view axis: the source axis it steps along and by how many.
    let mut steps: Vec<(usize, usize, i64)> = Vec::new();
    for i in (0..4).filter(|&i| view_ne[i] > 1) {
        let j = (0..4)
            .rev()
            .find(|&j| src_ne[j] > 1 && src_nb[j] <= view_nb[i])?;
        if !view_nb[i].is_multiple_of(src_nb[j]) {
            return None;
        }
        steps.push((i, j, (view_nb[i] / src_nb[j]) as i64));
    }
    let mut on_axis: Vec<(usize, i64)> = steps
        .iter()
        .filter(|s| s.1 == axis)
        .map(|s| (s.0, s.2))
        .collect();
    on_axis.sort_by_key(|s| s.1);
    let mut covered = 1i64;
    for &(i, f) in &on_axis {
        if f != covered {
            return None;
        }
        covered *= view_ne[i];
    }
    let &(carrier, step) = on_axis.last()?;
    if covered != src_ne[axis] {
        return None;
    }
    let view_extents: Vec<i64> = extents
        .iter()
        .map(|&e| (e % step == 0).then_some(e / step))
        .collect::<Option<_>>()?;
    let parts = extents
        .iter()
        .zip(&view_extents)
        .map(|(&e, &ve)| {
            (e > 0).then(|| {
                let mut part_ne = src_ne;
                part_ne[axis] = e;
                let part_nb = packed(es, part_ne);
                let mut ne = view_ne;
                ne[carrier] = ve;
                let mut nb = view_nb;
                for &(i, j, f) in &steps {
                    nb[i] = f as u64 * part_nb[j];
                }
                let off = (0..4).map(|j| idx[j] as u64 * part_nb[j]).sum();
                (ne, nb, off)
            })
        })
        .collect();
    Some(ViewSplit {
        axis: carrier,
        parts,
        extents: view_extents,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshape_moves_the_split_to_the_axis_ending_where_it_ends() {
        // [576, T] split by 6 and 3 heads of 64, seen as [64, 9, T].
        assert_eq!(
            reshape([576, 7, 1, 1], 0, &[384, 192], [64, 9, 7, 1]),
            Some((1, vec![6, 3]))
        );
        // And back.
        assert_eq!(
            reshape([64, 9, 7, 1], 1, &[6, 3], [576, 7, 1, 1]),
            Some((0, vec![384, 192]))
        );
        // A slice that would cut a head refuses.
        assert_eq!(reshape([576, 7, 1, 1], 0, &[352, 224], [64, 9, 7, 1]), None);
        // Tokens split, heads merged: axis 2 -> axis 1.
        assert_eq!(
            reshape([64, 9, 7, 1], 2, &[4, 3], [576, 7, 1, 1]),
            Some((1, vec![4, 3]))
        );
    }

    #[test]
    fn a_cache_split_by_heads_is_viewed_split_by_heads() {
        // cache_k [C = 64 * 3, n_ctx = 10] split 2 + 1 heads, viewed as
        // [64, a = 4, 3] with nb [4, C * 4, 64 * 4].
        let es = 4u64;
        let c = 192u64;
        let v = view(
            [192, 10, 1, 1],
            es,
            0,
            &[128, 64],
            [64, 4, 3, 1],
            [es, c * es, 64 * es, 3 * 64 * es * 4],
            0,
        )
        .expect("splits");
        assert_eq!(v.axis, 2);
        assert_eq!(v.extents, vec![2, 1]);
        let (ne, nb, off) = v.parts[0].expect("part 0");
        assert_eq!((ne, off), ([64, 4, 2, 1], 0));
        assert_eq!(&nb[..3], &[es, 128 * es, 64 * es]);
        let (ne, nb, _) = v.parts[1].expect("part 1");
        assert_eq!(ne, [64, 4, 1, 1]);
        assert_eq!(&nb[..3], &[es, 64 * es, 64 * es]);
    }

    #[test]
    fn a_transposed_value_cache_prefix_view_splits_by_heads() {
        // cache_v seen as [1, n_ctx = 10, C = 192] split along axis 2, viewed as
        // [a = 4, 64, 3] with nb [4, 40, 40 * 64]: the first 4 slots of each row.
        let es = 4u64;
        let v = view(
            [1, 10, 192, 1],
            es,
            2,
            &[64, 128],
            [4, 64, 3, 1],
            [es, 10 * es, 640 * es, 3 * 640 * es],
            0,
        )
        .expect("splits");
        assert_eq!((v.axis, v.extents.clone()), (2, vec![1, 2]));
        let (ne, nb, _) = v.parts[1].expect("part 1");
        assert_eq!(ne, [4, 64, 2, 1]);
        assert_eq!(&nb[..3], &[es, 10 * es, 640 * es]);
    }

    #[test]
    fn views_that_cut_into_the_split_axis_refuse() {
        // Only the first 100 of 192 channels.
        assert!(
            view(
                [192, 10, 1, 1],
                4,
                0,
                &[96, 96],
                [100, 10, 1, 1],
                [4, 768, 7680, 7680],
                0
            )
            .is_none()
        );
        // Starting at channel 64.
        assert!(
            view(
                [192, 10, 1, 1],
                4,
                0,
                &[96, 96],
                [128, 10, 1, 1],
                [4, 768, 7680, 7680],
                256
            )
            .is_none()
        );
    }
}

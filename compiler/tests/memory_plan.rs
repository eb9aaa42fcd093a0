//! Memory planning: hand-made cases with known optimal sizes, a seeded
//! randomized property test of every algorithm, and the example graphs
//! (llama2l against ggml's own allocator figures).
//!
//! The overlap checker here shares no code with the planner.

use compiler::emit::compute_liveness;
use compiler::liveness::Lifetime;
use compiler::memory::{ALGORITHMS, MemoryPlan, lower_bound, plan_memory};
use ir::{Graph, TensorId};

fn lt(size: u64, first: usize, last: usize) -> Lifetime {
    Lifetime {
        tensor: TensorId(0),
        size,
        first,
        last,
    }
}

fn align(n: u64, a: u64) -> u64 {
    n.div_ceil(a.max(1)) * a.max(1)
}

/// Every violation of the placement invariants: overlaps in time and space,
/// misaligned offsets, a size below some buffer's end.
fn violations(buffers: &[Lifetime], offsets: &[u64], size: u64, alignment: u64) -> Vec<String> {
    let mut out = Vec::new();
    if offsets.len() != buffers.len() {
        return vec![format!(
            "{} offsets for {} buffers",
            offsets.len(),
            buffers.len()
        )];
    }
    let a = alignment.max(1);
    for (i, (b, &o)) in buffers.iter().zip(offsets).enumerate() {
        let end = o + align(b.size, a);
        if o % a != 0 {
            out.push(format!("buffer {i} at {o} is not {a}-aligned"));
        }
        if end > size {
            out.push(format!(
                "buffer {i} ends at {end} past the arena size {size}"
            ));
        }
        for (j, (c, &p)) in buffers.iter().zip(offsets).enumerate().skip(i + 1) {
            let in_time = b.first <= c.last && c.first <= b.last;
            let in_space = o < p + align(c.size, a) && p < end;
            if in_time && in_space && b.size > 0 && c.size > 0 {
                out.push(format!("buffers {i} and {j} overlap"));
            }
        }
    }
    out
}

/// The lower bound step by step, independently of `memory::lower_bound`.
fn brute_lower_bound(buffers: &[Lifetime], alignment: u64) -> u64 {
    let max_step = buffers.iter().map(|b| b.last).max().unwrap_or(0);
    (0..=max_step)
        .map(|s| {
            buffers
                .iter()
                .filter(|b| b.first <= s && s <= b.last)
                .map(|b| align(b.size, alignment))
                .sum()
        })
        .max()
        .unwrap_or(0)
}

fn plan(buffers: &[Lifetime], alignment: u64) -> MemoryPlan {
    let p = plan_memory(buffers, alignment).expect("valid buffers");
    let v = violations(buffers, &p.offsets, p.size, alignment);
    assert!(v.is_empty(), "{v:?}");
    p
}

#[test]
fn hand_made_cases_reach_their_optimum() {
    // (buffers, alignment, optimal arena size = lower bound here)
    let cases: Vec<(Vec<Lifetime>, u64, u64)> = vec![
        (vec![], 64, 0),
        (vec![lt(10, 0, 0)], 64, 64),
        (vec![lt(10, 0, 0), lt(20, 0, 0)], 64, 128),
        // Disjoint in time: everything at offset 0.
        (vec![lt(64, 0, 0), lt(128, 1, 1), lt(64, 2, 2)], 64, 128),
        // A producer-consumer chain: neighbours meet at one step.
        (vec![lt(64, 0, 1), lt(128, 1, 2), lt(64, 2, 3)], 64, 192),
        // Each step's live set fits the bound only if the 128 goes where the
        // first 64 was and the long-lived 64 sits above it.
        (vec![lt(64, 0, 1), lt(64, 0, 3), lt(128, 2, 3)], 64, 192),
    ];
    for (buffers, alignment, optimum) in cases {
        let p = plan(&buffers, alignment);
        assert_eq!(p.lower_bound, optimum, "{buffers:?}");
        assert_eq!(p.size, optimum, "{buffers:?}: {:?}", p.tried);
    }
}

#[test]
fn an_in_order_allocator_fragments_where_a_planner_does_not() {
    // At step 2 the 128-byte buffer needs room while the freed 64 bytes at 0
    // are too small: an in-order allocator grows to 256, ggml-style.
    let buffers = [lt(64, 0, 1), lt(64, 0, 3), lt(128, 2, 3)];
    let p = plan(&buffers, 64);
    let tried: std::collections::BTreeMap<_, _> = p.tried.iter().copied().collect();
    assert_eq!(tried["in_order_best_fit"], 256);
    assert_eq!(tried["greedy_by_size"], 192);
    assert_eq!((p.size, p.algorithm), (192, "greedy_by_size"));
}

#[test]
fn bad_lifetimes_and_overflow_are_errors() {
    let e = plan_memory(&[lt(8, 3, 2)], 8).unwrap_err();
    assert!(e.to_string().contains("ends at step 2"), "{e}");
    let e = plan_memory(&[lt(u64::MAX - 3, 0, 0), lt(8, 0, 0)], 8).unwrap_err();
    assert!(e.to_string().contains("overflow"), "{e}");
    // Alignment 0 acts as 1.
    assert_eq!(plan(&[lt(3, 0, 0), lt(5, 0, 0)], 0).size, 8);
}

/// SplitMix64: a tiny seeded PRNG, so the cases are the same on every run.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[test]
fn random_interval_sets_keep_every_invariant() {
    let mut rng = SplitMix64(0x5eed_0001);
    let mut gap_sum = 0.0;
    let mut per_algorithm = [(0.0f64, 0u32); ALGORITHMS.len()]; // (excess sum, wins)
    for case in 0..300 {
        let alignment = [1, 16, 64, 256][rng.below(4) as usize];
        let n_steps = 1 + rng.below(40) as usize;
        let buffers: Vec<Lifetime> = (0..rng.below(60))
            .map(|i| {
                let first = rng.below(n_steps as u64) as usize;
                let spread = 1 + rng.below(12);
                let last = first + rng.below(spread) as usize;
                let size = if rng.below(20) == 0 {
                    0
                } else {
                    1 + rng.below(5000)
                };
                Lifetime {
                    tensor: TensorId(i as u32),
                    size,
                    first,
                    last,
                }
            })
            .collect();
        let p = plan(&buffers, alignment);
        let lb = brute_lower_bound(&buffers, alignment);
        assert_eq!(p.lower_bound, lb, "case {case}");
        assert!(p.size >= lb, "case {case}");
        assert_eq!(
            p,
            plan(&buffers, alignment),
            "case {case}: not deterministic"
        );
        let aligned: Vec<Lifetime> = buffers
            .iter()
            .map(|b| Lifetime {
                size: align(b.size, alignment),
                ..*b
            })
            .collect();
        assert_eq!(lower_bound(&aligned), lb);
        for (k, (name, algorithm)) in ALGORITHMS.iter().enumerate() {
            let offsets = algorithm(&aligned);
            let size = offsets.iter().zip(&aligned).map(|(o, b)| o + b.size).max();
            let size = size.unwrap_or(0);
            let v = violations(&buffers, &offsets, size, alignment);
            assert!(v.is_empty(), "case {case}, {name}: {v:?}");
            assert!(size >= lb, "case {case}, {name}: {size} < lower bound {lb}");
            assert_eq!(p.tried[k], (*name, size), "case {case}");
            assert_eq!(offsets, algorithm(&aligned), "case {case}, {name}");
            if lb > 0 {
                per_algorithm[k].0 += (size - lb) as f64 / lb as f64;
            }
            per_algorithm[k].1 += u32::from(size == p.size);
        }
        let best = p.tried.iter().map(|&(_, s)| s).min();
        let first_best = p.tried.iter().find(|&&(_, s)| Some(s) == best);
        assert_eq!(Some(&(p.algorithm, p.size)), first_best, "case {case}");
        if lb > 0 {
            gap_sum += (p.size - lb) as f64 / lb as f64;
        }
    }
    eprintln!(
        "random sets: best arena {:.2}% over LB on average",
        gap_sum / 3.0
    );
    for ((name, _), (excess, wins)) in ALGORITHMS.iter().zip(per_algorithm) {
        eprintln!(
            "  {name:<20} {:>5.2}% over LB, smallest on {wins}/300",
            excess / 3.0
        );
    }
}

// ---- example graphs ----

fn example(name: &str) -> Graph {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/graphs");
    ir::text::read_graph(&dir.join(name)).expect("example graph parses")
}

/// (no-reuse bytes, lower bound, arena, best algorithm, in-place reuses)
fn plan_example(graph: &Graph) -> (u64, u64, u64, &'static str, usize) {
    let order: Vec<TensorId> = graph.nodes().collect();
    let live = compute_liveness(graph, &order, 64).expect("graph order is valid");
    let p = plan(&live.buffers, 64);
    // In-place merging can only lower the bound the separate tensors give.
    let lb_tensors = lower_bound(&live.tensors);
    assert!(p.lower_bound <= lb_tensors);
    eprintln!(
        "{:<8} no-reuse {:>10}  LB w/o in-place {:>9}  LB {:>9}  arena {:>9} \
         ({:+.2}% over LB, {})  in-place {:>2}  tried {:?}",
        graph.name,
        live.no_reuse_bytes(),
        lb_tensors,
        p.lower_bound,
        p.size,
        100.0 * (p.size as f64 - p.lower_bound as f64) / p.lower_bound.max(1) as f64,
        p.algorithm,
        live.in_place.len(),
        p.tried
    );
    (
        live.no_reuse_bytes(),
        p.lower_bound,
        p.size,
        p.algorithm,
        live.in_place.len(),
    )
}

#[test]
fn llama2l_compute_arena_matches_ggml_and_the_lower_bound() {
    let (no_reuse, lb, arena, _, in_place) = plan_example(&example("llama2l.ron"));
    // Our compute tensors are ggml's: every non-view node (views, reshapes and
    // permutes own no bytes; there is no cpy/set_rows), intermediates plus the
    // logits. ggml reports 21,659,648 bytes for them with no reuse.
    assert_eq!(no_reuse, 21_659_648);
    // The peak is the last step: logits 8000x128 f32 (4,096,000 B) while the
    // final norm (512x128 f32, 262,144 B) is read: exactly what ggml reserves.
    assert_eq!(lb, 4_096_000 + 262_144);
    assert!(
        arena as f64 <= 1.02 * lb as f64,
        "arena {arena} > 2% over {lb}"
    );
    assert_eq!(arena, 4_358_144, "the planner reaches the bound on llama2l");
    assert!(in_place > 0);
}

#[test]
fn bert2l_and_mlp_arenas_stay_within_two_percent_of_the_bound() {
    for name in ["bert2l.ron", "mlp.ron"] {
        let (no_reuse, lb, arena, _, _) = plan_example(&example(name));
        assert!(lb <= arena && arena <= no_reuse, "{name}");
        assert!(arena as f64 <= 1.02 * lb as f64, "{name}: {arena} vs {lb}");
    }
}

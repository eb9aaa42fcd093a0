use super::*;
use ir::DType;
use kernels::evaluate::{Bindings, Weights, evaluate};
use kernels::reference::Dense;
use std::path::PathBuf;

fn example(name: &str) -> Graph {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/graphs")
        .join(format!("{name}.ron"));
    ir::text::read_graph(&path).unwrap()
}

fn refusal(graph: &Graph, n: u32) -> String {
    match micro_batches(graph, n) {
        Ok(_) => panic!("'{}' cut into {n} micro-batches", graph.name),
        Err(e) => e.to_string(),
    }
}

/// Causal inputs of a cached llama graph over a fresh cache: token `j` at
/// position and cache row `j`, seeing rows `0..=j`.
fn causal_inputs(graph: &Graph) -> BTreeMap<String, Dense> {
    let t = graph.tensor(graph.find("tokens").unwrap()).ne()[0];
    let attend = graph.tensor(graph.find("kq_mask").unwrap()).ne()[0];
    let rows: Vec<f64> = (0..t).map(|j| j as f64).collect();
    let mask: Vec<f64> = (0..t)
        .flat_map(|j| (0..attend).map(move |i| if i <= j { 0.0 } else { f64::NEG_INFINITY }))
        .collect();
    let tokens: Vec<f64> = (0..t).map(|j| ((j * 37 + 11) % 8000) as f64).collect();
    BTreeMap::from([
        ("tokens".to_string(), Dense::new([t, 1, 1, 1], tokens)),
        ("pos".to_string(), Dense::new([t, 1, 1, 1], rows.clone())),
        ("kv_idx".to_string(), Dense::new([t, 1, 1, 1], rows)),
        ("kq_mask".to_string(), Dense::new([attend, t, 1, 1], mask)),
    ])
}

fn nmse(a: &[f64], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f64 = a.iter().map(|x| x * x).sum();
    num / den.max(f64::MIN_POSITIVE)
}

/// The outputs of `graph` and of its `n` micro-batches, by name.
fn outputs_of_both(graph: &Graph, n: u32, inputs: BTreeMap<String, Dense>) -> Vec<(f64, String)> {
    let cut = micro_batches(graph, n).unwrap();
    let bindings = Bindings {
        weights: Weights::Random { seed: 5 },
        inputs,
        random_inputs: Some(6),
    };
    let whole = evaluate(graph, &bindings).unwrap();
    let parts = evaluate(&cut, &bindings).unwrap();
    graph
        .with_role(Role::Output)
        .map(|id| {
            let name = &graph.tensor(id).name;
            let a = whole.read(id);
            let b = parts.read(cut.find(name).expect("output kept by name"));
            assert_eq!(a.ne, b.ne, "{name}");
            (nmse(&a.data, &b.data), name.clone())
        })
        .collect()
}

#[test]
fn ranges_cover_the_batch_longest_first() {
    assert_eq!(
        micro_batch_ranges(128, 4),
        vec![(0, 32), (32, 32), (64, 32), (96, 32)]
    );
    assert_eq!(micro_batch_ranges(10, 3), vec![(0, 4), (4, 3), (7, 3)]);
    assert_eq!(micro_batch_ranges(2, 2), vec![(0, 1), (1, 1)]);
}

#[test]
fn one_micro_batch_is_the_graph_itself() {
    let g = example("llama2l_kv");
    assert_eq!(micro_batches(&g, 1).unwrap(), g);
}

#[test]
fn cached_llama_micro_batches_compute_the_whole_batch() {
    let g = example("llama2l_kv");
    for n in [2, 3, 4] {
        for (err, name) in outputs_of_both(&g, n, causal_inputs(&g)) {
            assert!(err <= 1e-20, "{n} micro-batches: {name} nmse {err:e}");
        }
    }
}

#[test]
fn cached_llama_micro_batches_write_the_cache_in_order() {
    let g = example("llama2l_kv");
    let cut = micro_batches(&g, 4).unwrap();
    // Micro-batch m > 0 writes into micro-batch m - 1's result.
    for m in 1..4 {
        let set = cut.tensor(cut.find(&format!("l1.k_cache_set.mb{m}")).unwrap());
        let prev = cut.find(&format!("l1.k_cache_set.mb{}", m - 1)).unwrap();
        assert_eq!(set.srcs[0], prev);
        assert_eq!(set.ne(), [512, 128, 1, 1], "the whole cache");
        let rows = cut.tensor(set.srcs[1]);
        assert_eq!(rows.ne(), [512, 32, 1, 1], "one micro-batch of rows");
    }
    // Weights are shared, inputs cut by views, the output joined under its name.
    assert_eq!(
        cut.with_role(Role::Weight).count(),
        g.with_role(Role::Weight).count()
    );
    let mask = cut.tensor(cut.find("kq_mask.mb2").unwrap());
    assert_eq!(
        (mask.ne(), mask.view.unwrap().offset),
        ([128, 32, 1, 1], 64 * 128 * 4)
    );
    let out = cut.tensor(cut.find("result_output").unwrap());
    assert_eq!((out.role, out.ne()), (Role::Output, [8000, 128, 1, 1]));
    assert!(matches!(out.op, Some(Op::Concat { dim: 1 })));
}

#[test]
fn uneven_micro_batches_of_an_mlp_compute_the_whole_batch() {
    let g = example("mlp");
    for (err, name) in outputs_of_both(&g, 3, BTreeMap::new()) {
        assert!(err <= 1e-20, "{name} nmse {err:e}");
    }
    let cut = micro_batches(&g, 3).unwrap();
    let x0 = cut.tensor(cut.find("x.mb0").unwrap());
    assert_eq!(x0.ne(), [64, 6, 1, 1], "16 rows: 6 + 5 + 5");
}

#[test]
fn attention_over_the_batch_itself_is_refused_with_the_way_out() {
    let e = refusal(&example("llama2l"), 2);
    assert!(e.contains("--pipeline 2"), "{e}");
    assert!(e.contains("l0.k_rope"), "{e}");
    assert!(e.contains("KV cache"), "{e}");
}

#[test]
fn inputs_that_disagree_on_the_batch_are_refused() {
    let mut b = GraphBuilder::new("two_batches");
    let x = b.input("x", DType::F32, [4, 8, 1, 1]).unwrap();
    let y = b.input("y", DType::F32, [4, 6, 1, 1]).unwrap();
    let sx = b.sum_rows("sx", x).unwrap();
    let sy = b.sum_rows("sy", y).unwrap();
    b.mark_output(sx).unwrap();
    b.mark_output(sy).unwrap();
    let e = refusal(&b.finish().unwrap(), 2);
    assert!(e.contains("'x' has 8, 'y' has 6"), "{e}");
}

#[test]
fn rows_along_the_cut_and_sums_over_it_are_refused() {
    let mut b = GraphBuilder::new("rows");
    let x = b.input("x", DType::F32, [16, 1, 1, 1]).unwrap();
    let s = b.soft_max("s", x, None, 1.0, 0.0).unwrap();
    b.mark_output(s).unwrap();
    let e = refusal(&b.finish().unwrap(), 2);
    assert!(
        e.contains("tensor 's'") && e.contains("mix micro-batches"),
        "{e}"
    );

    let mut b = GraphBuilder::new("sum");
    let x = b.input("x", DType::F32, [8, 4, 1, 1]).unwrap();
    let w = b.weight("w", DType::F32, [4, 3, 1, 1]).unwrap();
    let xt = b.transpose("xt", x).unwrap();
    let xc = b.cont("xc", xt).unwrap(); // [4 tokens, 8]: tokens along the product's sum
    let y = b.mul_mat("y", w, xc).unwrap();
    b.mark_output(y).unwrap();
    let e = refusal(&b.finish().unwrap(), 2);
    assert!(
        e.contains("tensor 'y'") && e.contains("sums over the cut axis"),
        "{e}"
    );
}

#[test]
fn two_writers_into_one_state_are_refused() {
    let mut b = GraphBuilder::new("writers");
    let x = b.input("x", DType::F32, [4, 2, 1, 1]).unwrap();
    let idx = b.input("idx", DType::I32, [2, 1, 1, 1]).unwrap();
    let cache = b.state("cache", DType::F32, [4, 8, 1, 1]).unwrap();
    let first = b.set_rows("first", cache, x, idx).unwrap();
    let second = b.set_rows("second", first, x, idx).unwrap();
    let out = b.sum_rows("out", second).unwrap();
    b.mark_output(out).unwrap();
    let e = refusal(&b.finish().unwrap(), 2);
    assert!(e.contains("written by 'first' and 'second'"), "{e}");
}

//! The evaluator's memory model and its bad-input errors.

use super::*;
use crate::reference::gather;
use ir::files::StoredTensor;
use ir::{ConstInit, DType, GraphBuilder, Layout};
use std::path::Path;

fn dense(ne: [i64; 4], data: &[f64]) -> Dense {
    Dense {
        ne,
        data: data.to_vec(),
    }
}

fn no_inputs(seed: u64) -> Bindings<'static> {
    Bindings {
        weights: Weights::Random { seed },
        inputs: BTreeMap::new(),
        random_inputs: None,
    }
}

/// A KV-cache-like update: cpy into a view of a state tensor and set_rows into
/// it; the root's bytes change and a later reader of the state sees them.
#[test]
fn writes_through_views_update_the_state() {
    let mut b = GraphBuilder::new("kv");
    let cache = b.state("cache", DType::F32, [2, 4, 1, 1]).unwrap();
    let k = b.input("k", DType::F32, [2, 1, 1, 1]).unwrap();
    let slot = b
        .view("slot", cache, [2, 1, 1, 1], [8, 8, 8], 8 * 2)
        .unwrap();
    let stored = b.cpy("store", k, slot).unwrap();
    let rows = b.input("rows", DType::F32, [2, 1, 1, 1]).unwrap();
    let at = b
        .constant("at", DType::I32, [1, 1, 1, 1], ConstInit::Fill(3.0))
        .unwrap();
    // Runs after `store` (id order), so the sum sees both writes.
    let set = b.set_rows("set", cache, rows, at).unwrap();
    assert_eq!(b.tensor(stored).view.unwrap().root, cache);
    let total = b.sum_rows("total", set).unwrap();
    b.mark_output(total).unwrap();
    let g = b.finish().unwrap();
    let mut inputs = BTreeMap::new();
    inputs.insert("k".to_string(), dense([2, 1, 1, 1], &[1.5, -2.0]));
    inputs.insert("rows".to_string(), dense([2, 1, 1, 1], &[7.0, 8.0]));
    inputs.insert("cache".to_string(), dense([2, 4, 1, 1], &[1.0; 8]));
    let bindings = Bindings {
        inputs,
        ..no_inputs(0)
    };
    let m = evaluate(&g, &bindings).unwrap();
    assert_eq!(
        m.read(cache).data,
        [1.0, 1.0, 1.0, 1.0, 1.5, -2.0, 7.0, 8.0]
    );
    assert_eq!(m.read(total).data, [2.0, 2.0, -0.5, 15.0]);
}

#[test]
fn observer_sees_every_node_and_can_stop() {
    let mut b = GraphBuilder::new("chain");
    let x = b
        .constant(
            "x",
            DType::F32,
            [3, 1, 1, 1],
            ConstInit::Arange {
                start: 1.0,
                step: 1.0,
            },
        )
        .unwrap();
    let y = b.unary("y", Op::Sqr, x).unwrap();
    let z = b.scale("z", y, 2.0).unwrap();
    b.mark_output(z).unwrap();
    let g = b.finish().unwrap();
    let mut seen = Vec::new();
    let m = evaluate_observed(&g, &no_inputs(0), |id, v| {
        seen.push((id, v.data.clone()));
        ControlFlow::Break(())
    })
    .unwrap();
    assert_eq!(seen, [(y, vec![1.0, 4.0, 9.0])]);
    assert_eq!(m.read(z).data, [0.0; 3], "the run stopped before z");
}

fn lookup_graph() -> Graph {
    let mut b = GraphBuilder::new("lookup");
    let table = b.weight("table", DType::F32, [4, 5, 1, 1]).unwrap();
    let ids = b.input("ids", DType::I32, [3, 1, 1, 1]).unwrap();
    let rows = b.get_rows("rows", table, ids).unwrap();
    b.mark_output(rows).unwrap();
    b.finish().unwrap()
}

/// The error message of evaluating `g` with one input value given.
fn error_with_input(g: &Graph, name: &str, values: Dense) -> String {
    let inputs = BTreeMap::from([(name.to_string(), values)]);
    let bindings = Bindings {
        inputs,
        ..no_inputs(1)
    };
    evaluate(g, &bindings)
        .err()
        .expect("evaluation must fail")
        .to_string()
}

#[test]
fn bad_inputs_are_errors_that_name_the_tensor() {
    let g = lookup_graph();
    let err = evaluate(&g, &no_inputs(1)).err().unwrap();
    assert!(
        matches!(&err, EvalError::MissingInput { name, .. } if name == "ids"),
        "{err}"
    );

    let err = error_with_input(&g, "ids", dense([3, 1, 1, 1], &[0.0, 5.0, 1.0]));
    assert_eq!(
        err,
        "input 'ids': value 5 at element 1 is outside 0..5 (rows of 'table')"
    );

    let err = error_with_input(&g, "ids", dense([4, 1, 1, 1], &[0.0; 4]));
    assert!(
        err.contains("'ids' is [4, 1, 1, 1] but the graph expects i32 [3, 1, 1, 1]"),
        "{err}"
    );

    let err = error_with_input(&g, "table", dense([4, 5, 1, 1], &[0.0; 20]));
    assert!(
        err.contains("'table' is not an input or state tensor of the graph (its inputs: ids)"),
        "{err}"
    );

    // Random inputs stay inside the table.
    let m = evaluate(
        &g,
        &Bindings {
            random_inputs: Some(9),
            ..no_inputs(1)
        },
    )
    .unwrap();
    assert!(
        m.read(g.find("ids").unwrap())
            .data
            .iter()
            .all(|&v| (0.0..5.0).contains(&v))
    );
}

#[test]
fn out_of_range_constant_indices_are_refused_before_running() {
    let mut b = GraphBuilder::new("g");
    let table = b.weight("table", DType::F32, [4, 5, 1, 1]).unwrap();
    let ids = b
        .constant(
            "ids",
            DType::I32,
            [2, 1, 1, 1],
            ConstInit::Values(vec![1.0, 9.0]),
        )
        .unwrap();
    let rows = b.get_rows("rows", table, ids).unwrap();
    b.mark_output(rows).unwrap();
    let g = b.finish().unwrap();
    let err = evaluate(&g, &no_inputs(0)).err().unwrap();
    assert!(
        matches!(err, EvalError::IndexOutOfRange { value: 9.0, .. }),
        "{err}"
    );
}

/// An in-memory tensor file.
pub(super) struct FakeFile(pub(super) Vec<(String, DType, [i64; 4], Vec<u8>)>);

impl TensorSource for FakeFile {
    fn tensor(&self, name: &str) -> Option<StoredTensor<'_>> {
        self.0.iter().find(|t| t.0 == name).map(|t| StoredTensor {
            name: &t.0,
            dtype: t.1,
            ne: t.2,
            data: &t.3,
        })
    }
    fn tensor_names(&self) -> Vec<&str> {
        self.0.iter().map(|t| t.0.as_str()).collect()
    }
    fn path(&self) -> &Path {
        Path::new("fake.gguf")
    }
}

#[test]
fn file_weights_bind_by_name_and_must_match() {
    let g = lookup_graph();
    let bytes: Vec<u8> = (0..20).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let mut inputs = BTreeMap::new();
    inputs.insert("ids".to_string(), dense([3, 1, 1, 1], &[4.0, 0.0, 2.0]));
    let good = FakeFile(vec![(
        "table".into(),
        DType::F32,
        [4, 5, 1, 1],
        bytes.clone(),
    )]);
    let bindings = Bindings {
        weights: Weights::File(&good),
        inputs: inputs.clone(),
        random_inputs: None,
    };
    let m = evaluate(&g, &bindings).unwrap();
    let want: Vec<f64> = [
        16.0, 17.0, 18.0, 19.0, 0.0, 1.0, 2.0, 3.0, 8.0, 9.0, 10.0, 11.0,
    ]
    .to_vec();
    assert_eq!(m.read(g.find("rows").unwrap()).data, want);

    let wrong = FakeFile(vec![("table".into(), DType::F32, [5, 4, 1, 1], bytes)]);
    let bindings = Bindings {
        weights: Weights::File(&wrong),
        inputs: inputs.clone(),
        random_inputs: None,
    };
    let err = evaluate(&g, &bindings).err().unwrap();
    assert_eq!(
        err.to_string(),
        "weight 'table' is f32 [5, 4, 1, 1] but the graph expects f32 [4, 5, 1, 1]"
    );

    let empty = FakeFile(vec![]);
    let bindings = Bindings {
        weights: Weights::File(&empty),
        inputs,
        random_inputs: None,
    };
    let err = evaluate(&g, &bindings).err().unwrap();
    assert_eq!(err.to_string(), "weight 'table' is not in fake.gguf");
}

#[test]
fn random_weights_depend_only_on_seed_and_name() {
    let layout = Layout::contiguous(DType::Q4_1, [64, 3, 1, 1]).unwrap();
    let a = random_leaf("blk.0.w", &layout, 5, None);
    assert_eq!(a, random_leaf("blk.0.w", &layout, 5, None));
    assert_ne!(a, random_leaf("blk.1.w", &layout, 5, None));
    assert_ne!(a, random_leaf("blk.0.w", &layout, 6, None));
    let v = Layout::contiguous(DType::F32, [16, 1, 1, 1]).unwrap();
    let norm = gather(&random_leaf("norm", &v, 5, None), &v);
    assert!(
        norm.data.iter().all(|x| (0.9..=1.1).contains(x)),
        "vectors stay near 1"
    );
}

#[test]
fn unverified_graphs_are_refused_not_run() {
    let g = lookup_graph();
    let mut tensors = g.tensors().to_vec();
    tensors[2].srcs.reverse();
    let broken = Graph::from_tensors("broken", tensors);
    let err = evaluate(&broken, &no_inputs(0)).err().unwrap();
    assert!(matches!(err, EvalError::InvalidGraph { .. }), "{err}");
}

#[test]
fn graphs_larger_than_memory_are_refused_not_allocated() {
    let mut b = GraphBuilder::new("huge");
    let x = b.input("x", DType::F32, [1 << 20, 1 << 20, 64, 1]).unwrap();
    let y = b.silu("y", x).unwrap();
    b.mark_output(y).unwrap();
    let g = b.finish().unwrap();
    if available_memory().is_none() {
        eprintln!("skipped: this OS does not report available memory");
        return;
    }
    let err = evaluate(&g, &no_inputs(0)).err().unwrap();
    assert!(matches!(err, EvalError::TooLarge { .. }), "{err}");
}

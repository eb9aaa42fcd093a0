//! The example graphs of `examples/graphs/`: the files equal what their
//! builders make, parse back byte for byte, and `llama2l` is node for node the
//! graph ggml 0.15.3 builds (`shared/references/ggml/llama2l-graph.json`).

use ir::text::{parse, to_ron};
use ir::{ConstInit, Op, Role, RopeMode, TensorId};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn fix_hint(name: &str) -> String {
    format!("run `cargo run -p ggplan-examples --bin {name}` to regenerate it")
}

#[test]
fn graph_files_equal_their_builders() {
    let mut problems = Vec::new();
    for (name, build) in examples::GRAPHS {
        let path = examples::graph_path(name);
        let want = to_ron(&build().unwrap_or_else(|e| panic!("building {name}: {e}")));
        match std::fs::read_to_string(&path) {
            Ok(have) if have == want => {}
            Ok(_) => problems.push(format!(
                "{} differs from examples::{name}(); {}",
                path.display(),
                fix_hint(name)
            )),
            Err(e) => problems.push(format!("{}: {e}; {}", path.display(), fix_hint(name))),
        }
    }
    let known: BTreeSet<&str> = examples::GRAPHS.iter().map(|(n, _)| *n).collect();
    let dir = examples::graph_path("x")
        .parent()
        .expect("graphs folder")
        .to_path_buf();
    for entry in std::fs::read_dir(&dir).expect("examples/graphs exists") {
        let path = entry.expect("readable folder").path();
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if path.extension().is_some_and(|e| e == "ron") && !known.contains(stem) {
            problems.push(format!(
                "{} has no builder in examples::GRAPHS",
                path.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn graph_files_parse_back_byte_identically() {
    for (name, build) in examples::GRAPHS {
        let path = examples::graph_path(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; {}", path.display(), fix_hint(name)));
        let graph = parse(&text, &path.display().to_string()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            to_ron(&graph),
            text,
            "{name}: printing the parsed file changes it"
        );
        assert_eq!(
            graph,
            build().expect("builds"),
            "{name}: the parsed graph differs from the built one"
        );
    }
}

// ---- llama2l against ggml ----

fn ggml_reference() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/references/ggml/llama2l-graph.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("unsigned"))
        .collect()
}

fn i64s(v: &Value) -> Vec<i64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_i64().expect("integer"))
        .collect()
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("'{key}' is not a string in {v}"))
}

/// ggml's op_params words for our op, floats as their bits.
fn ggml_op_params(op: &Op) -> Option<Vec<i64>> {
    let f = |x: f32| i64::from(x.to_bits() as i32);
    Some(match op {
        Op::GetRows | Op::Add | Op::Mul | Op::MulMat | Op::Reshape | Op::Cont => vec![],
        Op::RmsNorm { eps } => vec![f(*eps)],
        Op::SoftMax { scale, max_bias } => vec![f(*scale), f(*max_bias)],
        Op::Permute { axes } => axes.iter().map(|&a| i64::from(a)).collect(),
        Op::Silu => vec![10], // GGML_UNARY_OP_SILU
        Op::Rope(p) => {
            let mode = match p.mode {
                RopeMode::Normal => 0,
                RopeMode::Neox => 2,
            };
            let ints = [0, i64::from(p.n_dims), mode, 0, i64::from(p.n_ctx_orig)];
            let floats = [
                p.freq_base,
                p.freq_scale,
                p.ext_factor,
                p.attn_factor,
                p.beta_fast,
                p.beta_slow,
            ];
            ints.into_iter().chain(floats.map(f)).collect()
        }
        _ => return None,
    })
}

fn padded(mut v: Vec<i64>, n: usize) -> Vec<i64> {
    v.resize(v.len().max(n), 0);
    v
}

/// Our name for a ggml leaf: ggml's, except where ggml gave a weight the
/// name of a node (`ir` names are unique): then `{name}.weight`, as
/// `models::llama::LlamaNames::Example` documents.
fn our_leaf_name(ggml_name: &str, ggml_node_names: &BTreeSet<&str>) -> String {
    if ggml_node_names.contains(ggml_name) {
        format!("{ggml_name}.weight")
    } else {
        ggml_name.to_string()
    }
}

#[test]
fn llama2l_matches_ggml_node_for_node() {
    let reference = ggml_reference();
    let g = examples::llama2l().expect("llama2l builds");
    let leafs = reference["leafs"].as_array().expect("leafs");
    let nodes = reference["nodes"].as_array().expect("nodes");
    let node_names: BTreeSet<&str> = nodes.iter().map(|n| str_of(n, "name")).collect();
    // ggml ids (L3, N7) to our names.
    let mut ours_for: BTreeMap<&str, String> = BTreeMap::new();
    for l in leafs {
        ours_for.insert(
            str_of(l, "id"),
            our_leaf_name(str_of(l, "name"), &node_names),
        );
    }
    for n in nodes {
        ours_for.insert(str_of(n, "id"), str_of(n, "name").to_string());
    }
    let mut problems = Vec::new();

    // Leafs: the same set, with the same dtypes, shapes and strides.
    let our_leafs: BTreeSet<&str> = g.leafs().map(|id| g.tensor(id).name.as_str()).collect();
    let mut seen = BTreeSet::new();
    for l in leafs {
        let name = &ours_for[str_of(l, "id")];
        seen.insert(name.as_str());
        let Some(t) = g.find(name).map(|id| g.tensor(id)).filter(|t| t.is_leaf()) else {
            problems.push(format!(
                "ggml leaf '{}' has no leaf '{name}' here",
                str_of(l, "name")
            ));
            continue;
        };
        let want_role = match (str_of(l, "name"), l["flags"].as_u64().unwrap_or(0) & 1) {
            ("tokens", 1) => Role::Input,
            ("pos" | "kq_mask", 1) => Role::Constant,
            (_, 0) => Role::Weight,
            (other, _) => panic!("unexpected ggml input leaf '{other}'"),
        };
        let have = (
            t.role,
            t.dtype().name(),
            t.ne().to_vec(),
            t.layout.nb.to_vec(),
        );
        let want = (want_role, str_of(l, "type"), i64s(&l["ne"]), u64s(&l["nb"]));
        if have != want {
            problems.push(format!("leaf '{name}': ours {have:?}, ggml {want:?}"));
        }
    }
    for extra in our_leafs.difference(&seen) {
        problems.push(format!("leaf '{extra}' is not in ggml's graph"));
    }
    let init = |name: &str| g.find(name).and_then(|id| g.tensor(id).init.clone());
    assert_eq!(
        init("pos"),
        Some(ConstInit::Arange {
            start: 0.0,
            step: 1.0
        })
    );
    assert_eq!(init("kq_mask"), Some(ConstInit::CausalMask { n_past: 0 }));

    // Nodes: the same list, in the same order.
    let ours: Vec<TensorId> = g.nodes().collect();
    let name_of = |id: TensorId| g.tensor(id).name.clone();
    if ours.len() != nodes.len() {
        problems.push(format!(
            "{} nodes here, {} in ggml",
            ours.len(),
            nodes.len()
        ));
    }
    for (&id, n) in ours.iter().zip(nodes) {
        let (t, shape) = (g.tensor(id), &g.tensor(id).layout);
        let op = t.op.expect("a node");
        let ggml_op = match str_of(n, "op") {
            "UNARY" => str_of(n, "op_desc"),
            other => other,
        };
        let srcs: Vec<String> = t.srcs.iter().map(|&s| name_of(s)).collect();
        let ggml_srcs: Vec<String> = n["srcs"]
            .as_array()
            .expect("srcs")
            .iter()
            .map(|s| ours_for[s.as_str().expect("id")].clone())
            .collect();
        let view = t.view.map(|v| (name_of(v.root), v.offset));
        let ggml_view = n["view_src"].as_str().map(|s| {
            (
                ours_for[s].clone(),
                n["view_offs"].as_u64().expect("offset"),
            )
        });
        let is_output = n["flags"].as_u64().unwrap_or(0) & 2 != 0;
        let ggml_params = i64s(&n["op_params_i32"]);
        let params =
            ggml_op_params(&op).unwrap_or_else(|| panic!("no ggml op params known for {op}"));
        let n_words = params.len().max(ggml_params.len());
        let have = (
            name_of(id),
            op.name().to_string(),
            t.dtype().name(),
            shape.ne.to_vec(),
            shape.nb.to_vec(),
        );
        let want = (
            str_of(n, "name").to_string(),
            ggml_op.to_lowercase(),
            str_of(n, "type"),
            i64s(&n["ne"]),
            u64s(&n["nb"]),
        );
        let mut differ = |what: &str, have: String, want: String| {
            if have != want {
                problems.push(format!(
                    "{} '{}': {what} ours {have}, ggml {want}",
                    str_of(n, "id"),
                    str_of(n, "name")
                ));
            }
        };
        differ(
            "name/op/type/ne/nb",
            format!("{have:?}"),
            format!("{want:?}"),
        );
        differ("sources", format!("{srcs:?}"), format!("{ggml_srcs:?}"));
        differ("view of", format!("{view:?}"), format!("{ggml_view:?}"));
        differ(
            "output",
            format!("{}", t.role == Role::Output),
            format!("{is_output}"),
        );
        differ(
            "op params",
            format!("{:?}", padded(params, n_words)),
            format!("{:?}", padded(ggml_params, n_words)),
        );
    }
    assert!(
        problems.is_empty(),
        "llama2l differs from ggml's graph:\n{}",
        problems.join("\n")
    );
}

//! `ggplan import`: llama.cpp's captured decode (`scripts/llama-capture.sh`)
//! imported, compiled, run and compared.
//!
//! - SmolLM2, captured with llama.cpp's soft_max attention (`-fa off`; its
//!   F16 KV cache, I64 cache indices): the import writes the graph and the
//!   inputs llama.cpp used; compiled for `cpu` and run in exact precision on
//!   the GGUF's weights it gives the fp64 reference's logits within 0.05 (the
//!   F16 cache's share), with llama.cpp's top-1 at every position;
//! - the same decode on two loopback RPC servers: ggplan's `--policy ggml`
//!   for the same servers makes llama.cpp's splits and copies (`show
//!   --against`), and its plan run on the servers gives llama.cpp's top-1;
//! - the builder's graph at the same shape computes the same nodes on the
//!   same shapes (order and three spellings aside);
//! - with llama.cpp's flash attention (`-fa on`) the import lowers
//!   `flash_attn_ext` to ggplan's ops and gives the same logits;
//! - refused, exit 1, nothing written: an op or op variant ggplan lacks
//!   (listed with its count; ggml_cast's CPY into itself among them), a truncated file (line and
//!   column), an unknown key (named), a source that points forward (the
//!   tensor and field named).

mod common;

use common::llama_cpp::{self, s};
use common::{ggplan_error, ggplan_ok, scratch_dir};
use ggplan_tests::models::smollm2_gguf;
use ggplan_tests::references::{read_npy_f64, references};
use ggplan_tests::rpc_server::RpcServer;
use std::path::{Path, PathBuf};

/// Captures SmolLM2's decode of the reference prompt into `dir/NAME.json`
/// (`flags` after the capture's own `-fa off` may turn flash attention on).
fn capture(gguf: &Path, dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let out = dir.join(format!("{name}.json"));
    llama_cpp::capture(gguf, &out, flags);
    out
}

/// Captures SmolLM2 with `flags`, imports it with its inputs, compiles it for
/// `cpu` and runs it in exact precision on the GGUF: ggplan's logits and
/// llama.cpp's, 16 rows of 49152.
fn import_and_run(gguf: &Path, dir: &Path, name: &str, flags: &[&str]) -> (Vec<f64>, Vec<f64>) {
    let cap = capture(gguf, dir, name, flags);
    let graph = dir.join(format!("{name}.graph.ron"));
    let inputs = dir.join(format!("{name}.inputs"));
    let printed = ggplan_ok(&[
        "import",
        &s(&cap),
        "-o",
        &s(&graph),
        "--inputs",
        &s(&inputs),
    ]);
    assert!(
        printed.contains("I64 row indices imported as I32"),
        "{printed}"
    );
    let plan = dir.join(format!("{name}.plan.ron"));
    ggplan_ok(&["compile", &s(&graph), "--target", "cpu", "-o", &s(&plan)]);
    let mut args = vec!["run".to_string(), s(&plan), "--weights".into(), s(gguf)];
    args.extend(input_args(&inputs));
    let out = dir.join(format!("{name}.out"));
    args.extend(["--precision", "exact", "--save", &s(&out)].map(String::from));
    ggplan_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let (shape, ours) = read_npy_f64(&out.join("result_output.npy"));
    assert_eq!(shape, [16, 49152]);
    let (_, llama) = read_npy_f64(&dir.join(format!("{name}.json.logits.npy")));
    (ours, llama)
}

/// Within 0.05 of the fp64 reference (the F16 cache's share), and llama.cpp's
/// top-1 at every position.
fn assert_logits_agree(ours: &[f64], llama: &[f64]) {
    let (_, fp64) = read_npy_f64(&references().join("smollm2/logits_torch_fp64.npy"));
    let max_abs = ours
        .iter()
        .zip(&fp64)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(max_abs <= 0.05, "max |ours - fp64| = {max_abs}");
    assert_top1_agree(ours, llama);
}

/// llama.cpp's top-1 at every position (rows of 49152 logits).
fn assert_top1_agree(ours: &[f64], llama: &[f64]) {
    let argmax = |row: &[f64]| (0..row.len()).max_by(|&a, &b| row[a].total_cmp(&row[b]));
    for (p, (a, b)) in ours.chunks(49152).zip(llama.chunks(49152)).enumerate() {
        assert_eq!(
            argmax(a),
            argmax(b),
            "top-1 at position {p} differs from llama.cpp's"
        );
    }
}

/// `--input NAME=DIR/NAME.npy` for every input a SmolLM2 capture has, from
/// the folder `import --inputs` wrote.
fn input_args(inputs: &Path) -> Vec<String> {
    let names = [
        "inp_tokens",
        "inp_pos",
        "attn_inp_k_idxs",
        "attn_inp_v_idxs",
        "attn_inp_kq_mask",
        "out_ids",
    ];
    (names.iter())
        .flat_map(|n| {
            [
                "--input".to_string(),
                format!("{n}={}", s(&inputs.join(format!("{n}.npy")))),
            ]
        })
        .collect()
}

#[test]
fn an_imported_smollm2_capture_runs_and_gives_the_fp64_logits() {
    let Some(gguf) = smollm2_gguf() else {
        return;
    };
    let dir = scratch_dir("import");
    let (ours, llama) = import_and_run(&gguf, &dir, "smollm2", &["-fa", "off"]);
    assert_logits_agree(&ours, &llama);
    let _ = std::fs::remove_dir_all(&dir);
}

/// SmolLM2's capture (`-fa off`, F16 cache, the last token's logits) and
/// ggplan's builder at the same shape compute the same nodes on the same
/// shapes, up to the spellings [`llama_cpp::computed`] makes one; the comparison found
/// the builder's last block running its FFN on every row where llama.cpp
/// cuts to the output row after attention.
#[test]
fn the_builders_graph_computes_what_llama_cpps_does() {
    let Some(gguf) = smollm2_gguf() else {
        return;
    };
    let dir = scratch_dir("import-vs-builder");
    let ours = llama_cpp::builder_computes_as_llama_cpp(&gguf, &dir, &[], &["--kv-f16"]);
    assert_eq!(ours, 696, "nodes computed");
    let _ = std::fs::remove_dir_all(&dir);
}

/// llama.cpp's default attention (`-fa auto` takes `flash_attn_ext` on the
/// CPU too) imports as the attention it computes, with its F16 mask given as
/// an input, and gives the same logits as the soft_max path.
#[test]
fn llama_cpps_flash_attention_imports_as_attention() {
    let Some(gguf) = smollm2_gguf() else {
        return;
    };
    let dir = scratch_dir("import-fa");
    let (ours, llama) = import_and_run(&gguf, &dir, "fa", &["-fa", "on"]);
    assert_logits_agree(&ours, &llama);
    let graph = std::fs::read_to_string(dir.join("fa.graph.ron")).unwrap();
    // One lowered attention per layer, in place of each FLASH_ATTN_EXT.
    assert_eq!(graph.matches("op: SoftMax").count(), 30);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The decisions side by side: llama.cpp on two loopback RPC servers
/// (`-ngl 99 -ts 1,1`, then `-ts 1,3`) and with the last 10 blocks and the
/// head on one (`-ngl 11`), against ggplan's `--policy ggml` for the same
/// placement on the imported graph: the same splits with the same ops in
/// each (the embedding lookup on the CPU, then a run of blocks per server)
/// and the same copies on every link (`show --against`). The first plan then runs on the servers with the GGUF's
/// weights (the output head's mirror of the token embedding bound from the
/// same tensor) and gives llama.cpp's top-1 at every position.
#[test]
fn ggml_policy_decides_the_imported_graph_as_llama_cpp_did() {
    let Some(gguf) = smollm2_gguf() else {
        return;
    };
    let dir = scratch_dir("import-rpc");
    let servers: Vec<RpcServer> = (0..2).map(|_| RpcServer::start(1).unwrap()).collect();
    let endpoints = format!("{},{}", servers[0].endpoint(), servers[1].endpoint());
    let first = servers[0].endpoint();
    // llama.cpp's flags and ggplan's for the same placement. llama.cpp's -ngl
    // counts the output layer; --offload-layers counts blocks (the head
    // comes with them).
    let cases: [(&str, [&str; 4], &str, [&str; 2]); 3] = [
        (
            &endpoints,
            ["-ngl", "99", "-ts", "1,1"],
            "cpu+rpc0+rpc1",
            ["--tensor-split", "1,1,0"],
        ),
        (
            &endpoints,
            ["-ngl", "99", "-ts", "1,3"],
            "cpu+rpc0+rpc1",
            ["--tensor-split", "1,3,0"],
        ),
        (
            first,
            ["-ngl", "11", "-ts", "1"],
            "cpu+rpc0",
            ["--offload-layers", "10"],
        ),
    ];
    for (i, (rpc, placement, target, ours_placement)) in cases.into_iter().enumerate() {
        let mut flags = vec!["-fa", "off", "--rpc", rpc];
        flags.extend(placement);
        let llama_flags = placement.join(" ");
        let cap = capture(&gguf, &dir, &format!("rpc{i}"), &flags);
        let graph = dir.join(format!("graph{i}.ron"));
        let inputs = dir.join("inputs");
        let printed = ggplan_ok(&[
            "import",
            &s(&cap),
            "-o",
            &s(&graph),
            "--inputs",
            &s(&inputs),
        ]);
        if placement[1] == "99" {
            assert!(
                printed.contains("imported as mirrors of the first: token_embd.weight#1"),
                "{printed}"
            );
        }
        let plan = dir.join(format!("plan{i}.ron"));
        let (graph_arg, plan_arg) = (s(&graph), s(&plan));
        let mut compile = vec!["compile", &graph_arg, "--target", target];
        if ours_placement[0] == "--tensor-split" {
            compile.extend(["--split-mode", "layer"]);
        }
        compile.extend(ours_placement);
        compile.extend(["--policy", "ggml", "-o", &plan_arg]);
        ggplan_ok(&compile);
        let shown: serde_json::Value = serde_json::from_str(&ggplan_ok(&[
            "show",
            "--json",
            &s(&plan),
            "--against",
            &s(&cap),
        ]))
        .unwrap();
        let (llama, ours) = (&shown["against"]["llama_cpp"], &shown["against"]["ggplan"]);
        // Every case crosses devices: the CPU and at least one server.
        assert!(llama["n_splits"].as_u64().unwrap() >= 2, "{llama}");
        assert_eq!(llama["splits"][0][0], "cpu", "{llama}");
        assert_eq!(ours["splits"], llama["splits"], "{llama_flags}: {shown}");
        let links = |side: &serde_json::Value| -> Vec<(String, String, u64)> {
            (side["links"].as_array().unwrap().iter())
                .map(|l| {
                    let text = |k: &str| l[k].as_str().unwrap().to_string();
                    (text("from"), text("to"), l["copies"].as_u64().unwrap())
                })
                .collect()
        };
        assert_eq!(links(ours), links(llama), "{llama_flags}: {shown}");
        let text = ggplan_ok(&["show", &s(&plan), "--against", &s(&cap)]);
        assert!(!text.contains("(differs)"), "{text}");
        if i > 0 {
            continue;
        }
        let mut args = vec!["run".to_string(), s(&plan), "--weights".into(), s(&gguf)];
        args.extend(["--rpc".into(), endpoints.clone(), "--save".into()]);
        args.push(s(&dir.join("out")));
        args.extend(input_args(&inputs));
        ggplan_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let (_, ours) = read_npy_f64(&dir.join("out/result_output.npy"));
        let (_, llama) = read_npy_f64(&dir.join("rpc0.json.logits.npy"));
        assert_top1_agree(&ours, &llama);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn captures_ggplan_cannot_import_are_refused_naming_why() {
    let dir = scratch_dir("import-bad");
    let graph = dir.join("graph.ron");
    let refuse = |cap: &Path, reason: &str| {
        let printed = ggplan_error(&["import", &s(cap), "-o", &s(&graph)]);
        assert!(printed.contains(reason), "{printed}");
        assert!(!graph.exists(), "{} written", graph.display());
    };

    let valid = r#"{"format":"ggplan-llama-capture","version":1,"model":"m.gguf","architecture":"llama",
      "args":[],"n_vocab":4,"n_ctx":8,"tokens":[1],"positions":[0],"logits":{"file":"x","shape":[1,4]},
      "tensors":[
        {"id":0,"name":"w","op":"NONE","desc":"NONE","type":"f32","ne":[4,4,1,1],"nb":[4,16,64,64],
         "op_params":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"flags":0,"src":[],"buffer":"CPU","node":false},
        {"id":1,"name":"x","op":"NONE","desc":"NONE","type":"f32","ne":[4,1,1,1],"nb":[4,16,16,16],
         "op_params":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"flags":1,"src":[],"buffer":"CPU","node":false},
        {"id":2,"name":"y","op":"MUL_MAT","desc":"MUL_MAT","type":"f32","ne":[4,1,1,1],"nb":[4,16,16,16],
         "op_params":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"flags":2,"src":[0,1],"buffer":"CPU","node":true}],
      "nodes":[2],"splits":[{"buffer":"CPU","first":0,"end":1,"inputs":[]}],"copies":[],"reserve":[]}"#;
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    // The valid capture imports (so each broken one below fails for its own reason).
    ggplan_ok(&["import", &s(&file("valid.json", valid)), "-o", &s(&graph)]);
    std::fs::remove_file(&graph).unwrap();
    refuse(
        &file("truncated.json", &valid[..valid.len() / 2]),
        "EOF while parsing",
    );
    refuse(
        &file(
            "unknown.json",
            &valid.replace("\"reserve\"", "\"fit\":1,\"reserve\""),
        ),
        "unknown keys [\"fit\"]",
    );
    refuse(
        &file(
            "forward.json",
            &valid.replace("\"src\":[0,1]", "\"src\":[0,2]"),
        ),
        "tensors[2] 'y' .src[1]: is the tensor itself (2)",
    );
    // ggml_cast names its CPY as its own destination: read, then refused.
    refuse(
        &file(
            "cast.json",
            &(valid.replace("\"op\":\"MUL_MAT\"", "\"op\":\"CPY\""))
                .replace("\"src\":[0,1]", "\"src\":[1,2]"),
        ),
        "CPY into itself (ggml_cast) (1 tensor)",
    );
    // A scheduler copy standing for a tensor computed from it (found by
    // fuzzing: the import followed it and panicked).
    refuse(
        &file(
            "copy.json",
            &valid.replace("\"name\":\"x\"", "\"name\":\"x\",\"copy_of\":2"),
        ),
        "tensors[2] 'y' .src[1]: source 1 is a scheduler copy of a tensor not yet computed here",
    );
    refuse(
        &file(
            "fa.json",
            &valid.replace("\"op\":\"MUL_MAT\"", "\"op\":\"FLASH_ATTN_EXT\""),
        ),
        "FLASH_ATTN_EXT without q, k and v (1 tensor)",
    );
    refuse(
        &file(
            "op.json",
            &valid.replace("\"op\":\"MUL_MAT\"", "\"op\":\"IM2COL\""),
        ),
        "IM2COL (1 tensor)",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

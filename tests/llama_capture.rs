//! `scripts/llama-capture.sh`: llama.cpp's own decode of a model, captured
//! (graph, placement, logits) for ggplan to import and compare with.
//!
//! - SmolLM2 on the CPU: the reference prompt's token ids (also as the
//!   values of the `inp_tokens` input, beside `inp_pos`), llama.cpp's Q4_1
//!   logits with the fp64 reference's top-1 at every position; a graph whose
//!   every reference points back to a tensor written before it, whose nodes
//!   number what llama.cpp's reservation log says, and whose weights carry
//!   their GGUF names;
//! - the same decode with two loopback `ggml-rpc-server`s as llama.cpp's
//!   devices (`--rpc`, `-ngl 99`, `-ts 1,1`): three splits (CPU, then one per
//!   server) as the reservation log counts them, every input copy named with
//!   its original and bytes, and the same logits as on the CPU;
//! - bad input: a missing model and an unknown flag exit 1 with the reason
//!   and write nothing.
//!
//! The tool is `.rpc/bin/llama-capture` (`scripts/llama-capture.sh build`,
//! run by `scripts/test.sh`).

use ggplan_tests::models::smollm2_gguf;
use ggplan_tests::references::{read_json, read_npy_f64, references};
use ggplan_tests::rpc_server::RpcServer;
use ggplan_tests::workspace_root;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PROMPT: &str = "Once upon a time, in a small village by the sea, there lived a";

/// The capture tool, which must have been built.
fn capture_tool() -> PathBuf {
    let tool = workspace_root().join(".rpc/bin/llama-capture");
    assert!(
        tool.is_file(),
        "{} is missing: run `scripts/llama-capture.sh build`",
        tool.display()
    );
    tool
}

fn capture(args: &[&str]) -> Output {
    Command::new(capture_tool())
        .args(args)
        .output()
        .expect("llama-capture runs")
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ggplan-capture-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Captures SmolLM2's decode of the reference prompt with `flags`; returns
/// the JSON and the logits [16 x vocab].
fn capture_smollm2(gguf: &Path, dir: &Path, name: &str, flags: &[&str]) -> (Value, Vec<f64>) {
    let out = dir.join(format!("{name}.json"));
    let gguf = gguf.display().to_string();
    let out_s = out.display().to_string();
    let mut args = vec![gguf.as_str(), out_s.as_str(), "--prompt", PROMPT, "-t", "1"];
    args.extend_from_slice(flags);
    let run = capture(&args);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{args:?}: {stderr}");
    let json = read_json(&out);
    let (shape, logits) = read_npy_f64(&dir.join(format!("{name}.json.logits.npy")));
    assert_eq!(shape, [16, json["n_vocab"].as_u64().unwrap()]);
    (json, logits)
}

/// `key = N` in llama.cpp's reservation graph line.
fn reserved(json: &Value, key: &str) -> u64 {
    let line = (json["reserve"].as_array().unwrap().iter())
        .filter_map(Value::as_str)
        .find(|l| l.contains(": graph"))
        .unwrap_or_else(|| panic!("no graph line in {}", json["reserve"]));
    let after = line.split(&format!("{key} = ")).nth(1).expect(key);
    after.split([',', ' ']).next().unwrap().parse().expect(key)
}

/// The graph's structure: every source and view source an earlier tensor,
/// nodes unique and marked, weights named as in the GGUF.
fn check_graph(json: &Value) {
    let tensors = json["tensors"].as_array().unwrap();
    for (id, t) in tensors.iter().enumerate() {
        assert_eq!(t["id"], id);
        let refs = t["src"].as_array().unwrap().iter().chain(t.get("view_src"));
        for r in refs {
            assert!(
                r.as_u64().unwrap() < id as u64,
                "tensor {id} refers forward: {t}"
            );
        }
    }
    let nodes = json["nodes"].as_array().unwrap();
    let mut seen = std::collections::HashSet::new();
    for n in nodes {
        let t = &tensors[n.as_u64().unwrap() as usize];
        assert!(t["node"].as_bool().unwrap() && seen.insert(n), "{t}");
    }
    assert_eq!(nodes.len() as u64, reserved(json, "nodes"));
    let names: Vec<&str> = tensors.iter().filter_map(|t| t["name"].as_str()).collect();
    for weight in [
        "token_embd.weight",
        "blk.0.attn_q.weight",
        "blk.29.ffn_down.weight",
    ] {
        assert!(names.contains(&weight), "{weight} missing");
    }
    let ops: Vec<&str> = nodes
        .iter()
        .map(|n| {
            tensors[n.as_u64().unwrap() as usize]["op"]
                .as_str()
                .unwrap()
        })
        .collect();
    for op in ["GET_ROWS", "RMS_NORM", "MUL_MAT", "ROPE", "SET_ROWS", "GLU"] {
        assert!(ops.contains(&op), "no {op} node");
    }
}

/// The values of the I32 graph input named `name`.
fn input_i32(json: &Value, name: &str) -> Vec<i32> {
    let t = (json["tensors"].as_array().unwrap().iter())
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tensor {name}"));
    assert_eq!(t["type"], "i32", "{t}");
    let hex = t["data_hex"]
        .as_str()
        .unwrap_or_else(|| panic!("{name} has no values"));
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    (bytes.chunks(4))
        .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn json_i32s(v: &Value) -> Vec<i32> {
    (v.as_array().unwrap().iter())
        .map(|x| x.as_i64().unwrap() as i32)
        .collect()
}

#[test]
fn llama_cpp_decode_is_captured_on_the_cpu_and_on_two_rpc_servers() {
    let Some(gguf) = smollm2_gguf() else {
        return;
    };
    let dir = scratch("smollm2");
    let refs = references().join("smollm2");
    let want = read_json(&refs.join("greedy32_llamacpp_f32.json"));
    let (_, fp64) = read_npy_f64(&refs.join("logits_torch_fp64.npy"));

    let (cpu, logits) = capture_smollm2(&gguf, &dir, "cpu", &[]);
    assert_eq!(cpu["format"], "ggplan-llama-capture");
    assert_eq!(cpu["architecture"], "llama");
    assert_eq!(cpu["tokens"], want["prompt_ids"]);
    check_graph(&cpu);
    // The inputs' values as llama.cpp set them: the tokens, positions 0..16.
    let positions: Vec<i32> = (0..16).collect();
    assert_eq!(
        input_i32(&cpu, "inp_tokens"),
        json_i32s(&want["prompt_ids"])
    );
    assert_eq!(input_i32(&cpu, "inp_pos"), positions);
    assert_eq!(cpu["splits"].as_array().unwrap().len(), 1);
    assert_eq!(reserved(&cpu, "splits"), 1);
    // llama.cpp multiplies Q4_1 with 8-bit activations: top-1 as fp64's at
    // every position (the references' README), values within a few units.
    let vocab = cpu["n_vocab"].as_u64().unwrap() as usize;
    let argmax = |row: &[f64]| (0..row.len()).max_by(|&a, &b| row[a].total_cmp(&row[b]));
    for (p, (got, want)) in logits.chunks(vocab).zip(fp64.chunks(vocab)).enumerate() {
        assert_eq!(argmax(got), argmax(want), "top-1 at position {p}");
    }

    let servers: Vec<RpcServer> = (0..2).map(|_| RpcServer::start(1).unwrap()).collect();
    let endpoints = format!("{},{}", servers[0].endpoint(), servers[1].endpoint());
    let flags = ["--rpc", &endpoints, "-ngl", "99", "-ts", "1,1"];
    let (rpc, rpc_logits) = capture_smollm2(&gguf, &dir, "rpc", &flags);
    check_graph(&rpc);
    let splits = rpc["splits"].as_array().unwrap();
    let buffers: Vec<&str> = splits
        .iter()
        .map(|s| s["buffer"].as_str().unwrap())
        .collect();
    assert_eq!(
        buffers.len() as u64,
        reserved(&rpc, "splits"),
        "{buffers:?}"
    );
    assert_eq!(buffers[0], "CPU", "{buffers:?}");
    for (buffer, server) in buffers[1..].iter().zip(&servers) {
        assert!(buffer.contains(server.endpoint()), "{buffers:?}");
    }
    let copies = rpc["copies"].as_array().unwrap();
    let tensors = rpc["tensors"].as_array().unwrap();
    assert!(!copies.is_empty());
    for copy in copies {
        let t = &tensors[copy["tensor"].as_u64().unwrap() as usize];
        let original = &tensors[t["copy_of"].as_u64().expect("original found") as usize];
        assert_eq!(original["name"], copy["original"]);
        assert_eq!(original["ne"], t["ne"]);
        assert!(copy["bytes"].as_u64().unwrap() > 0);
    }
    // The embeddings go from the CPU to the first server; the positions,
    // set on the CPU and read only through copies, keep their values.
    assert!(copies.iter().any(|c| c["original"] == "embd"));
    assert_eq!(input_i32(&rpc, "inp_pos"), positions);
    let nmse: f64 = rpc_logits
        .iter()
        .zip(&logits)
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        / logits.iter().map(|b| b * b).sum::<f64>();
    assert!(
        nmse <= 1e-7,
        "NMSE {nmse:e} between the CPU's and the servers' logits"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_exits_1_with_the_reason_and_writes_nothing() {
    let dir = scratch("bad");
    let out = dir.join("out.json");
    let out_s = out.display().to_string();
    let missing = dir.join("missing.gguf").display().to_string();
    let cases: [(&[&str], &str); 3] = [
        (&[&missing, &out_s, "--tokens", "4"], "could not load"),
        (
            &[&missing, &out_s, "--tokens", "4", "--frobnicate"],
            "unknown flag --frobnicate",
        ),
        (&[&missing, &out_s], "give --tokens N"),
    ];
    for (args, reason) in cases {
        let run = capture(args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

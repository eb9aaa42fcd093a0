//! llama.cpp as the referee of an end-to-end test: random GGUFs written by
//! gguf-py, llama.cpp's decode captured, the capture imported, compiled and
//! run by `ggplan`, logits compared.

use super::ggplan_ok;
use ggplan_tests::references::read_npy_f64;
use ggplan_tests::workspace_root;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The prompt every capture decodes (the references' SmolLM2 prompt).
pub const PROMPT: &str = "Once upon a time, in a small village by the sea, there lived a";

/// A path as an argument.
pub fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Writes the random `arch` GGUF (`tests/support/random_gguf.py`: `llama3`,
/// `qwen3` or `gemma3`, seed 1) into `dir`, with `tokenizer`'s vocabulary.
pub fn random_gguf(arch: &str, dir: &Path, tokenizer: &Path) -> PathBuf {
    let out = dir.join(format!("{arch}.gguf"));
    let run = Command::new(workspace_root().join(".models/venv/bin/python"))
        .arg(workspace_root().join("tests/support/random_gguf.py"))
        .args([
            arch,
            &s(&out),
            "--tokenizer-from",
            &s(tokenizer),
            "--seed",
            "1",
        ])
        .output()
        .expect("python runs (scripts/setup.sh installs .models/venv)");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    out
}

/// llama.cpp's decode of [`PROMPT`] with `flags` (2 threads, `-fa off`
/// before them), into `out` and `out.logits.npy`.
pub fn capture(gguf: &Path, out: &Path, flags: &[&str]) {
    let run = Command::new(workspace_root().join(".rpc/bin/llama-capture"))
        .arg(gguf)
        .arg(out)
        .args(["--prompt", PROMPT, "-t", "2", "-fa", "off"])
        .args(flags)
        .output()
        .expect("llama-capture runs (scripts/llama-capture.sh build)");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// llama.cpp's flags beside the placement: an F32 cache, 32 greedy tokens.
pub const F32_GREEDY: [&str; 6] = ["-ctk", "f32", "-ctv", "f32", "--greedy", "32"];

/// `ggplan generate` from the GGUF (the builder's graphs, exact precision,
/// F32 cache) against a capture made with [`F32_GREEDY`]: llama.cpp's prompt
/// tokens, its 32 greedy tokens, and its prompt logits `llama` within
/// `max_nmse`.
pub fn generate_agrees(arch: &str, gguf: &Path, cap: &Path, llama: &[f64], max_nmse: f64) {
    let exact = ["--ctx", "64", "--precision", "exact", "--kv", "f32"];
    generate_matches(arch, gguf, cap, llama, max_nmse, (PROMPT, 32), &exact);
}

/// `ggplan generate --gguf GGUF` of `prompt` for `max_tokens` tokens, with
/// `flags`, against the capture `cap` (made with `--greedy max_tokens` on
/// the same prompt): llama.cpp's prompt tokens, its greedy tokens, and its
/// prompt logits `llama` within `max_nmse`. Both go on past
/// end-of-generation tokens (the capture's greedy loop does not stop;
/// `generate --ignore-eos`).
pub fn generate_matches(
    label: &str,
    gguf: &Path,
    cap: &Path,
    llama: &[f64],
    max_nmse: f64,
    (prompt, max_tokens): (&str, usize),
    flags: &[&str],
) {
    let dir = cap.parent().unwrap();
    let dump = dir.join("prompt_logits.npy");
    let (gguf, dump_arg, max) = (s(gguf), s(&dump), max_tokens.to_string());
    let mut args = vec!["generate", "--gguf", &gguf, "--prompt", prompt];
    args.extend(["--max-tokens", &max, "--json", "--dump-logits", &dump_arg]);
    args.push("--ignore-eos");
    args.extend(flags);
    let printed = ggplan_ok(&args);
    let json_line = printed.lines().find(|l| l.starts_with('{')).unwrap();
    let got: serde_json::Value = serde_json::from_str(json_line).unwrap();
    let want: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cap).unwrap()).unwrap();
    assert_eq!(got["prompt_ids"], want["tokens"], "{label}: prompt tokens");
    assert_eq!(
        got["generated_ids"], want["greedy"],
        "{label}: greedy tokens"
    );
    assert_eq!(got["stop"], "max_tokens", "{label}: stop reason");
    let (_, ours) = read_npy_f64(&dump);
    let e = nmse(&ours, llama);
    assert!(e <= max_nmse, "{label} generate: prompt logits NMSE {e:e}");
}

/// sum((a - b)^2) / sum(b^2), of two equally long lists.
pub fn nmse(ours: &[f64], reference: &[f64]) -> f64 {
    assert_eq!(ours.len(), reference.len(), "logits of another shape");
    let err: f64 = ours
        .iter()
        .zip(reference)
        .map(|(a, b)| (a - b) * (a - b))
        .sum();
    err / reference.iter().map(|b| b * b).sum::<f64>()
}

/// `--input NAME=PATH` for every `.npy` file `import --inputs` wrote in `dir`.
pub fn input_args(dir: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = (std::fs::read_dir(dir).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|path| {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            ["--input".to_string(), format!("{stem}={}", s(path))]
        })
        .collect()
}

/// Imports `cap` (beside it: `NAME.graph.ron` and the inputs in
/// `NAME.inputs/`), compiles it with `compile_args` and runs it on `gguf`
/// with `run_args` (in exact precision unless they name one): the logits
/// (`result_output`).
pub fn import_compile_run(
    cap: &Path,
    gguf: &Path,
    name: &str,
    compile_args: &[&str],
    run_args: &[String],
) -> Vec<f64> {
    let dir = cap.parent().unwrap();
    let graph = dir.join(format!("{name}.graph.ron"));
    let inputs = dir.join(format!("{name}.inputs"));
    let plan = dir.join(format!("{name}.plan.ron"));
    let out = dir.join(format!("{name}.out"));
    ggplan_ok(&["import", &s(cap), "-o", &s(&graph), "--inputs", &s(&inputs)]);
    let mut compile = vec!["compile".to_string(), s(&graph)];
    compile.extend(compile_args.iter().map(|a| a.to_string()));
    compile.extend(["-o".into(), s(&plan)]);
    ggplan_ok(&compile.iter().map(String::as_str).collect::<Vec<_>>());
    let mut run = vec!["run".into(), s(&plan), "--weights".into(), s(gguf)];
    run.extend(input_args(&inputs));
    run.extend(run_args.iter().cloned());
    if !run_args.iter().any(|a| a == "--precision") {
        run.extend(["--precision".into(), "exact".into()]);
    }
    run.extend(["--save".into(), s(&out)]);
    ggplan_ok(&run.iter().map(String::as_str).collect::<Vec<_>>());
    read_npy_f64(&out.join("result_output.npy")).1
}

/// The compile flags of `--policy ggml` for llama.cpp's `-ngl 99 -ts
/// SHARES` over two RPC servers (`shares` with a last 0 for the CPU).
pub fn ggml_on_two_servers(shares: &'static str) -> [&'static str; 8] {
    [
        "--target",
        "cpu+rpc0+rpc1",
        "--split-mode",
        "layer",
        "--tensor-split",
        shares,
        "--policy",
        "ggml",
    ]
}

/// `show PLAN --against CAPTURE`: `splits` splits on both sides and no row
/// marked as differing; what it printed.
pub fn assert_same_decisions(plan: &Path, cap: &Path, splits: usize) -> String {
    let shown = ggplan_ok(&["show", &s(plan), "--against", &s(cap)]);
    let counts: Vec<String> = (shown.lines())
        .map(str::split_whitespace)
        .find_map(|mut w| (w.next() == Some("splits")).then(|| w.map(String::from).collect()))
        .unwrap_or_default();
    assert_eq!(counts, [splits.to_string(), splits.to_string()], "{shown}");
    assert!(!shown.contains("(differs)"), "{shown}");
    shown
}

/// Captures the first `prefill_tokens` tokens of [`PROMPT`] and a one-token
/// decode of `gguf` (F32 cache), imports both into `dir` and returns
/// `generate`'s flags for them: exact precision, `--prefill-graph`,
/// `--decode-graph`.
pub fn imported_graph_flags(gguf: &Path, dir: &Path, prefill_tokens: usize) -> Vec<String> {
    let mut flags: Vec<String> = ["--precision", "exact"].map(String::from).to_vec();
    for (flag, tokens) in [("--prefill-graph", prefill_tokens), ("--decode-graph", 1)] {
        let json = dir.join(format!("tokens{tokens}.json"));
        capture(
            gguf,
            &json,
            &[
                "-ctk",
                "f32",
                "-ctv",
                "f32",
                "--tokens",
                &tokens.to_string(),
            ],
        );
        let graph = s(&dir.join(format!("tokens{tokens}.ron")));
        super::ggplan_ok(&["import", &s(&json), "-o", &graph]);
        flags.extend([flag.to_string(), graph]);
    }
    flags
}

/// What a graph computes, order aside: one entry per node that is not a
/// view (`view`, `reshape`, `permute`, `transpose` move no bytes), as (op,
/// dtype, extents), with the spellings llama.cpp and ggplan's builder differ
/// in made one: rope's `n_ctx_orig` (used by YaRN only; llama.cpp passes
/// the training context) cleared, a SwiGLU `glu` as the builder's `silu`
/// and `mul`, and a `set_rows` by its destination's element count (llama.cpp
/// writes its transposed V cache one element per index, the builder one
/// column of elements per token index).
pub fn computed(graph: &ir::Graph) -> std::collections::BTreeMap<String, usize> {
    use ir::{GluKind, Op};
    let mut counts = std::collections::BTreeMap::new();
    for t in graph.tensors() {
        let Some(op) = t.op else { continue };
        if op.is_view() {
            continue;
        }
        let (dtype, ne) = (t.layout.dtype, t.layout.ne);
        let names = match op {
            Op::Rope(mut p) => {
                p.n_ctx_orig = 0;
                vec![format!("{:?}", Op::Rope(p))]
            }
            Op::Glu {
                kind: GluKind::SwiGlu,
                swapped: false,
            } => vec!["Silu".to_string(), "Mul".to_string()],
            Op::SetRows => {
                let elements: i64 = ne.iter().product();
                counts
                    .entry(format!("SetRows {dtype:?} of {elements} elements"))
                    .and_modify(|n| *n += 1)
                    .or_insert(1);
                continue;
            }
            op => vec![format!("{op:?}")],
        };
        for name in names {
            *counts
                .entry(format!("{name} {dtype:?} {ne:?}"))
                .or_insert(0) += 1;
        }
    }
    counts
}

/// The graphs in files `theirs` (imported) and `ours` (the builder's)
/// compute alike ([`computed`]); the nodes computed.
pub fn assert_computes_alike(theirs: &Path, ours: &Path) -> usize {
    let read = |p: &Path| ir::text::read_graph(p).unwrap_or_else(|e| panic!("{e}"));
    let (theirs, ours) = (computed(&read(theirs)), computed(&read(ours)));
    let only = |a: &std::collections::BTreeMap<String, usize>,
                b: &std::collections::BTreeMap<String, usize>| {
        a.iter()
            .filter(|(k, n)| b.get(*k) != Some(n))
            .map(|(k, n)| format!("{n} x {k} (other: {})", b.get(k).unwrap_or(&0)))
            .collect::<Vec<_>>()
    };
    assert!(
        theirs == ours,
        "llama.cpp's graph:\n  {}\nthe builder's:\n  {}",
        only(&theirs, &ours).join("\n  "),
        only(&ours, &theirs).join("\n  ")
    );
    ours.values().sum()
}

/// llama.cpp's graph of [`PROMPT`] with the last token's logits (capture
/// `flags`, `--last-logits`), imported, beside the builder's at that shape
/// (`graph --tokens 16 --ctx 256 --last-logits` and `graph_flags`): they
/// compute alike ([`computed`]); the nodes computed.
pub fn builder_computes_as_llama_cpp(
    gguf: &Path,
    dir: &Path,
    flags: &[&str],
    graph_flags: &[&str],
) -> usize {
    let cap = dir.join("last-logits.json");
    capture(gguf, &cap, &[flags, &["--last-logits"]].concat());
    let (imported, built) = (dir.join("last-logits.ron"), dir.join("built.ron"));
    super::ggplan_ok(&["import", &s(&cap), "-o", &s(&imported)]);
    let (gguf, built_s) = (s(gguf), s(&built));
    let mut args = vec!["graph", "--gguf", &gguf, "--tokens", "16", "--ctx", "256"];
    args.extend(["--last-logits", "-o", &built_s]);
    args.extend(graph_flags);
    super::ggplan_ok(&args);
    assert_computes_alike(&imported, &built)
}

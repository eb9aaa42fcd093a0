//! End-to-end tests of the `ggplan` binary: exit codes, messages and files.

mod common;

use common::{example, ggplan, ggplan_ok, scratch_dir, text};
use std::path::Path;

#[test]
fn fmt_check_accepts_the_canonical_examples() {
    for name in ["mlp.ron", "llama2l.ron", "bert2l.ron"] {
        let out = ggplan(&["fmt", "--check", &example(name)]);
        assert!(out.status.success(), "{name}: {}", text(&out));
    }
}

#[test]
fn fmt_rewrites_a_non_canonical_file_and_check_flags_it() {
    let dir = scratch_dir("fmt");
    let path = dir.join("g.ron");
    let canonical = std::fs::read_to_string(example("mlp.ron")).unwrap();
    let messy = canonical.replace(", ", " ,  ").replace("ne: [", "ne:[");
    std::fs::write(&path, &messy).unwrap();
    let p = path.to_str().unwrap();
    let out = ggplan(&["fmt", "--check", p]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("not in canonical form"));
    assert!(ggplan(&["fmt", p]).status.success());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), canonical);
}

#[test]
fn eval_prints_every_output_and_saves_npy() {
    let dir = scratch_dir("eval");
    let out = ggplan(&[
        "eval",
        &example("mlp.ron"),
        "--random-weights",
        "3",
        "--save",
        dir.to_str().unwrap(),
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("abs max") && t.contains("saved"), "{t}");
    let saved: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(!saved.is_empty());
    // Same seed, same numbers.
    let again = ggplan(&["eval", &example("mlp.ron"), "--random-weights", "3"]);
    let summary = |s: &str| {
        s.lines()
            .filter(|l| l.contains("abs max"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(summary(&t), summary(&text(&again)));
}

#[test]
fn eval_errors_name_what_is_wrong() {
    let dir = scratch_dir("errors");
    // A syntax error: file, line and column.
    let bad = dir.join("bad.ron");
    let src = std::fs::read_to_string(example("mlp.ron")).unwrap();
    std::fs::write(&bad, src.replacen("op: ", "op: Nope", 1)).unwrap();
    let out = ggplan(&["eval", bad.to_str().unwrap(), "--random-weights", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let t = text(&out);
    assert!(t.contains("bad.ron:") && t.contains("Nope"), "{t}");
    assert!(!t.contains("panicked"), "{t}");

    // Weights are required when the graph has any.
    let out = ggplan(&["eval", &example("mlp.ron")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("--random-weights"), "{}", text(&out));

    // A missing weights file, and an unknown input name.
    let out = ggplan(&[
        "eval",
        &example("mlp.ron"),
        "--weights",
        "/nonexistent/w.gguf",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("/nonexistent/w.gguf"), "{}", text(&out));
    let out = ggplan(&[
        "eval",
        &example("mlp.ron"),
        "--random-weights",
        "1",
        "--input",
        "nope=x.npy",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("'nope'"), "{}", text(&out));

    // A missing graph file.
    let out = ggplan(&["eval", "/nonexistent/g.ron", "--random-weights", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("/nonexistent/g.ron"));
}

#[test]
fn every_subcommand_has_help_with_an_example() {
    for sub in [
        "demo",
        "eval",
        "fmt",
        "compile",
        "show",
        "explain",
        "verify",
        "diff",
        "dot",
        "bench-compile",
        "bench",
        "run",
        "memory",
        "devices",
        "embed",
        "graph",
        "generate",
    ] {
        let out = ggplan(&[sub, "--help"]);
        assert!(out.status.success());
        assert!(text(&out).contains("Example"), "{sub}: {}", text(&out));
    }
}

#[test]
fn compile_show_explain_verify_diff_dot_work_together() {
    let dir = scratch_dir("plan");
    let p = |name: &str| dir.join(name).display().to_string();
    let graph = example("llama2l.ron");
    for (policy, file) in [("ggml", "ggml.ron"), ("cost", "cost.ron")] {
        let out = ggplan(&[
            "compile",
            &graph,
            "--target",
            "cpu+cuda0",
            "--offload-layers",
            "1",
            "--policy",
            policy,
            "-o",
            &p(file),
        ]);
        assert!(out.status.success(), "{}", text(&out));
        assert!(
            text(&out).contains("splits") && text(&out).contains("compiled in"),
            "{}",
            text(&out)
        );
    }
    // Byte-identical output for the same inputs.
    let again = ggplan(&[
        "compile",
        &graph,
        "--target",
        "cpu+cuda0",
        "--offload-layers",
        "1",
        "--policy",
        "cost",
        "-o",
        &p("again.ron"),
    ]);
    assert!(again.status.success());
    assert_eq!(
        std::fs::read(p("cost.ron")).unwrap(),
        std::fs::read(p("again.ron")).unwrap()
    );

    let out = ggplan(&["show", &p("cost.ron"), "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("show --json prints JSON");
    for key in ["n_splits", "n_copies", "copy_bytes"] {
        assert!(json[key].is_u64(), "{key} in {json}");
    }
    assert!(
        json["devices"]["cuda0"]["arena_bytes"].is_u64()
            && json["devices"]["cpu"]["lower_bound_bytes"].is_u64(),
        "{json}"
    );

    let out = ggplan(&["explain", &p("cost.ron"), "l1.q"]);
    assert!(
        out.status.success() && text(&out).contains("written by mul_mat"),
        "{}",
        text(&out)
    );
    // The attention's scores are computed inside its step, which writes the
    // merged heads.
    let out = ggplan(&["explain", &p("cost.ron"), "l1.kqv_merged"]);
    assert!(
        out.status.success() && text(&out).contains("written by attention"),
        "{}",
        text(&out)
    );
    let out = ggplan(&["explain", &p("cost.ron"), "no_such"]);
    assert_eq!(out.status.code(), Some(1));

    let out = ggplan(&["verify", &p("cost.ron")]);
    assert!(
        out.status.success() && text(&out).contains("valid"),
        "{}",
        text(&out)
    );

    let out = ggplan(&["diff", &p("ggml.ron"), &p("cost.ron")]);
    assert!(out.status.success(), "{}", text(&out));
    let out = ggplan(&["diff", &p("cost.ron"), &p("again.ron")]);
    assert!(text(&out).contains("no differences"), "{}", text(&out));

    let out = ggplan(&["dot", &p("cost.ron"), "-o", &p("plan.dot")]);
    assert!(out.status.success(), "{}", text(&out));
    let dot = std::fs::read_to_string(p("plan.dot")).unwrap();
    assert!(
        dot.starts_with("digraph plan")
            && dot.contains("n1 [label=\"split 1 · ")
            && dot.contains(" per run\""),
        "{dot}"
    );
    let out = ggplan(&["dot", &p("cost.ron"), "--detail", "-o", &p("steps.dot")]);
    assert!(out.status.success(), "{}", text(&out));
    let dot = std::fs::read_to_string(p("steps.dot")).unwrap();
    assert!(
        dot.starts_with("digraph plan") && dot.contains("cluster_0") && dot.contains("copy "),
        "{dot}"
    );
}

/// What a person reads: plan values in words, never Rust's debug forms
/// (`Some(0)`, `Arena { .. }`, `Weights`), and help that says what runs where.
#[test]
fn terminal_output_is_words_not_debug_forms() {
    let dir = scratch_dir("words");
    let plan = dir.join("p.ron").display().to_string();
    let graph = example("llama2l.ron");
    let args = [
        "compile",
        &graph,
        "--target",
        "cpu+cuda0",
        "--offload-layers",
        "1",
    ];
    let ggml = dir.join("ggml.ron").display().to_string();
    for (policy, file) in [("cost", &plan), ("ggml", &ggml)] {
        ggplan_ok(&[&args[..], &["--policy", policy, "-o", file]].concat());
    }
    let printed: String = [
        &["show", &plan][..],
        &["explain", &plan],
        &["explain", &plan, "l1.kq"],
        &["explain", &plan, "tok_embd"],
        &["diff", &ggml, &plan],
    ]
    .iter()
    .map(|cmd| ggplan_ok(cmd))
    .collect();
    assert!(
        printed.contains("waits for event") && printed.contains("records event"),
        "{printed}"
    );
    assert!(printed.contains("weights arena of"), "{printed}");
    for debug in [
        "Some(",
        "None",
        "Arena {",
        "View {",
        "Weights",
        "Compute arena",
        "[]",
    ] {
        assert!(!printed.contains(debug), "'{debug}' in:\n{printed}");
    }
    let help = text(&ggplan(&["--help"]));
    let run = help
        .lines()
        .find(|l| l.trim_start().starts_with("run "))
        .unwrap();
    assert!(
        run.contains("CUDA") && !run.contains("this machine's CPU"),
        "{run}"
    );
}

#[test]
fn verify_lists_every_violation_of_a_corrupted_plan() {
    let dir = scratch_dir("verify");
    let plan = dir.join("p.ron").display().to_string();
    let out = ggplan(&[
        "compile",
        &example("mlp.ron"),
        "--target",
        "cpu",
        "-o",
        &plan,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    // Put every compute tensor at offset 0 and claim a wrong split count.
    let text_in = std::fs::read_to_string(&plan).unwrap();
    let mut corrupted = String::new();
    for line in text_in.lines() {
        let line = if line.contains("role: Intermediate") || line.contains("role: Output") {
            let start = line.find("offset: ").map(|i| i + 8);
            match start {
                Some(s) => {
                    let end = s + line[s..].find(')').unwrap();
                    format!("{}0{}", &line[..s], &line[end..])
                }
                None => line.to_string(),
            }
        } else {
            line.replace("n_splits: 1,", "n_splits: 7,")
        };
        corrupted.push_str(&line);
        corrupted.push('\n');
    }
    std::fs::write(&plan, corrupted).unwrap();
    let out = ggplan(&["verify", &plan]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("overlap bytes") && t.contains("both are alive"),
        "{t}"
    );
    assert!(t.contains("n_splits is 7, the plan has 1 splits"), "{t}");

    // An unknown plan version is refused before anything else.
    std::fs::write(
        &plan,
        text_in.replacen("format_version: 5", "format_version: 9", 1),
    )
    .unwrap();
    let out = ggplan(&["verify", &plan]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("format_version 9"), "{}", text(&out));

    // A version-1 plan (implied order between devices), a version-2 one
    // (before mul_mat + add steps), a version-3 one (before attention and
    // mul_mat + GLU steps) and a version-4 one (before rope + set_rows steps)
    // are refused with the command that remakes them.
    for old in [1, 2, 3, 4] {
        std::fs::write(
            &plan,
            text_in.replacen("format_version: 5", &format!("format_version: {old}"), 1),
        )
        .unwrap();
        let out = ggplan(&["verify", &plan]);
        assert_eq!(out.status.code(), Some(1));
        let t = text(&out);
        assert!(
            t.contains(&format!("format_version {old}")) && t.contains("ggplan compile"),
            "{t}"
        );
    }
}

/// Compiles llama2l for `cpu+cuda0` with its last block offloaded (two
/// splits, copies between them) to `path`, returned as a string.
fn compile_offloaded(path: &Path) -> String {
    let plan = path.display().to_string();
    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--target",
        "cpu+cuda0",
        "--offload-layers",
        "1",
        "-o",
        &plan,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    plan
}

#[test]
fn verify_gates_fail_with_the_figures_and_pass_within_them() {
    let dir = scratch_dir("verify_gates");
    let plan = compile_offloaded(&dir.join("offload.ron"));
    let out = ggplan(&[
        "verify",
        &plan,
        "--max-splits",
        "1",
        "--max-copy-bytes",
        "10",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("2 gates failed"), "{said}");
    assert!(said.contains("2 splits, more than max_splits 1"), "{said}");
    assert!(said.contains("more than max_copy_bytes 10"), "{said}");
    let out = ggplan(&[
        "verify",
        &plan,
        "--max-splits",
        "2",
        "--max-arena-over-bound",
        "1.5",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("every gate kept"), "{}", text(&out));
}

#[test]
fn reading_commands_never_panic_on_a_damaged_plan() {
    let dir = scratch_dir("damaged");
    let p = |f: &str| dir.join(f).display().to_string();
    compile_offloaded(&dir.join("ok.ron"));
    // A split on a device that does not exist, a copy from a tensor that
    // does not exist, a step running a kernel that does not exist.
    let original = std::fs::read_to_string(p("ok.ron")).unwrap();
    for pattern in ["      device: 1,", "(src: 1, dst:", "Fused(kernel: 0)"] {
        assert!(original.contains(pattern), "{pattern}: {original}");
    }
    let damaged = original
        .replacen("      device: 1,", "      device: 9,", 1)
        .replacen("(src: 1, dst:", "(src: 99999, dst:", 1)
        .replacen("Fused(kernel: 0)", "Fused(kernel: 77)", 1);
    std::fs::write(p("bad.ron"), damaged).unwrap();
    for args in [
        vec!["show", &p("bad.ron")],
        vec!["show", &p("bad.ron"), "--json"],
        vec!["explain", &p("bad.ron")],
        vec!["explain", &p("bad.ron"), "l1.kq"],
        vec!["diff", &p("ok.ron"), &p("bad.ron")],
        vec!["dot", &p("bad.ron"), "-o", &p("bad.dot")],
        vec!["dot", &p("bad.ron"), "--detail", "-o", &p("bad2.dot")],
        vec!["memory", &p("bad.ron"), "-o", &p("bad.svg")],
        vec!["verify", &p("bad.ron")],
    ] {
        let out = ggplan(&args);
        let said = text(&out);
        assert!(
            matches!(out.status.code(), Some(0 | 1)) && !said.contains("panicked"),
            "{args:?}: {said}"
        );
    }
    assert_eq!(ggplan(&["verify", &p("bad.ron")]).status.code(), Some(1));
}

#[test]
fn compile_errors_name_what_is_wrong() {
    let dir = scratch_dir("compile-errors");
    let out_path = dir.join("p.ron");
    let o = out_path.display().to_string();
    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--target",
        "cpu",
        "--offload-layers",
        "1",
        "-o",
        &o,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("no accelerator"), "{}", text(&out));
    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--target",
        "tpu9",
        "-o",
        &o,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("tpu9"), "{}", text(&out));
    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--target",
        "cpu+cuda0",
        "--pin",
        "blk=gpu7",
        "-o",
        &o,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("gpu7"), "{}", text(&out));
    // A device too small for the plan.
    let small = dir.join("small.ron");
    let cpu = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/targets/cpu.ron"),
    )
    .unwrap();
    let cpu = cpu
        .replace("memory_bytes: 25769803776", "memory_bytes: 8000000")
        .replace("max_buffer_bytes: 25769803776", "max_buffer_bytes: 8000000");
    std::fs::write(&small, cpu).unwrap();
    let out = ggplan(&[
        "compile",
        &example("bert2l.ron"),
        "--target",
        small.to_str().unwrap(),
        "-o",
        &o,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("the weights need 7870464 bytes but cpu has"),
        "{}",
        text(&out)
    );
    // --pipeline on a graph whose attention covers the batch's own tokens.
    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--target",
        "cpu0+cpu1",
        "--split-mode",
        "layer",
        "--pipeline",
        "2",
        "-o",
        &o,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains("'l0.k_rope'") && t.contains("KV cache"), "{t}");
    assert!(!out_path.exists(), "no plan file is written on error");
    // The same model over a KV cache pipelines: one event per micro-batch.
    let out = ggplan(&[
        "compile",
        &example("llama2l_kv.ron"),
        "--target",
        "cpu0+cpu1",
        "--split-mode",
        "layer",
        "--pipeline",
        "4",
        "-o",
        &o,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // One hand-off per micro-batch: four copies, each after its own event.
    let t = text(&out);
    assert!(t.contains("copies cpu0 -> cpu1: 4"), "{t}");
    for event in 0..4 {
        assert!(t.contains(&format!(": records event {event}\n")), "{t}");
    }
    assert!(t.contains("--pipeline 4"), "{t}");
}

#[test]
fn memory_draws_the_compute_arena_and_reports_the_peak() {
    let dir = scratch_dir("memory");
    let p = |name: &str| dir.join(name).display().to_string();
    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--target",
        "cpu",
        "-o",
        &p("plan.ron"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let out = ggplan(&["memory", &p("plan.ron"), "-o", &p("mem.svg")]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for want in [
        "peak at step",
        "lower bound",
        "Largest live at the peak",
        "wrote",
    ] {
        assert!(t.contains(want), "{want}: {t}");
    }
    let svg = std::fs::read_to_string(p("mem.svg")).unwrap();
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains(r#"class="tensor""#) && svg.contains(r#"class="peak""#));
    // Deterministic, and written atomically (no temporary file left behind).
    assert!(
        ggplan(&["memory", &p("plan.ron"), "-o", &p("again.svg")])
            .status
            .success()
    );
    assert_eq!(svg, std::fs::read_to_string(p("again.svg")).unwrap());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["again.svg", "mem.svg", "plan.ron"]);
    // Quiet by default; -v logs to stderr only.
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let loud = ggplan(&["-v", "memory", &p("plan.ron"), "-o", &p("mem.svg")]);
    assert!(String::from_utf8_lossy(&loud.stderr).contains("plan read"));
    assert_eq!(text(&loud).matches("peak at step").count(), 1);
    assert_eq!(
        String::from_utf8_lossy(&loud.stdout),
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn memory_errors_name_the_file() {
    let dir = scratch_dir("memory-err");
    let out_svg = dir.join("m.svg").display().to_string();
    let out = ggplan(&["memory", "/nonexistent/p.ron", "-o", &out_svg]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("cannot read the plan: /nonexistent/p.ron"),
        "{}",
        text(&out)
    );
    let bad = dir.join("bad.ron");
    std::fs::write(&bad, "Plan(format_version: 1, nonsense").unwrap();
    let out = ggplan(&["memory", bad.to_str().unwrap(), "-o", &out_svg]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("bad.ron"), "{}", text(&out));
    assert!(!Path::new(&out_svg).exists());
}

#[test]
fn devices_lists_the_cpu_and_says_why_there_is_no_gpu() {
    let out = ggplan(&["devices"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("cpu:") && t.contains("cores:") && t.contains("memory:"),
        "{t}"
    );
    let cuda = t
        .lines()
        .find(|l| l.starts_with("cuda:"))
        .expect("a cuda line");
    let out = ggplan(&["devices", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(json["cpu"]["simd"].is_array(), "{json}");
    assert!(
        json["cpu"]["logical_cores"].as_u64().unwrap_or(0) >= 1,
        "{json}"
    );
    match json["cuda"]["available"].as_bool() {
        Some(true) => assert!(json["cuda"]["devices"].is_array() && cuda.contains("device")),
        Some(false) => {
            let reason = json["cuda"]["reason"].as_str().unwrap();
            assert!(cuda.contains(reason), "{cuda} vs {reason}");
        }
        None => panic!("no cuda.available in {json}"),
    }
}

/// `ggplan` with the calibration cache in `dir`.
fn ggplan_cached(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ggplan"))
        .args(args)
        .env_remove("RUST_LOG")
        .env("GGPLAN_CACHE_DIR", dir)
        .output()
        .expect("ggplan runs")
}

#[test]
fn target_host_calibrates_once_caches_it_and_gives_the_same_plan() {
    let dir = scratch_dir("host_target");
    let plan = |name: &str| dir.join(name).display().to_string();
    let (first, second) = (plan("first.plan.ron"), plan("second.plan.ron"));
    let compile = |out: &str| {
        let args = [
            "compile",
            &example("llama2l.ron"),
            "--target",
            "host",
            "-o",
            out,
        ];
        ggplan_cached(&dir, &args)
    };
    let out = compile(&first);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("calibrating this host"),
        "{}",
        text(&out)
    );
    assert!(dir.join("calibration.ron").exists());
    let out = compile(&second);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("calibrating"), "{}", text(&out));
    let read = |p: &str| std::fs::read_to_string(p).expect("plan written");
    assert_eq!(
        read(&first),
        read(&second),
        "same machine, same cache: same plan"
    );
    assert!(read(&first).contains("target_name: \"host\""));
    // The host target as a file compiles the same plan anywhere.
    let file = plan("host.target.ron");
    let out = ggplan_cached(&dir, &["devices", "--write-target", &file]);
    assert!(out.status.success(), "{}", text(&out));
    let third = plan("third.plan.ron");
    let args = [
        "compile",
        &example("llama2l.ron"),
        "--target",
        &file,
        "-o",
        &third,
    ];
    assert!(ggplan(&args).status.success());
    let verify = ggplan_cached(&dir, &["verify", &first]);
    assert!(verify.status.success(), "{}", text(&verify));
    // A damaged cache is measured again, with a warning, never an error.
    std::fs::write(dir.join("calibration.ron"), "(key: 3").expect("damaged");
    let out = compile(&second);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("not a calibration cache"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_closed_stdout_ends_the_process_quietly_not_with_a_panic() {
    let dir = scratch_dir("closed_pipe");
    let plan = dir.join("p.ron").display().to_string();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ggplan"))
        .args(["compile", &example("llama2l.ron"), "-o", &plan])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ggplan starts");
    // The reader goes away before ggplan prints anything (`ggplan ... | head -0`).
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("ggplan ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
}

#[test]
fn compile_splits_tensors_over_core_groups_and_refuses_bad_splits_naming_them() {
    let dir = scratch_dir("tensor_split");
    let o = dir.join("p.ron").display().to_string();
    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--target",
        "cpu0+cpu1",
        "--split-mode",
        "row",
        "--tensor-split",
        "3,1",
        "-o",
        &o,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("'l0.wq' axis 1: cpu0 [0, 384), cpu1 [384, 512)"),
        "{t}"
    );
    assert!(
        t.contains("all_reduce_sum 'l0.attn_out.sum#0' on cpu0, cpu1"),
        "{t}"
    );
    assert!(t.contains("--split-mode row --tensor-split 3,1"), "{t}");
    // `tensor` is llama.cpp's newer name for the same mode.
    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--target",
        "cpu0+cpu1",
        "--split-mode",
        "tensor",
        "-o",
        &o,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Partial sums cut by tokens: reduce-scatters, then all-gathers.
    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--target",
        "cpu0+cpu1",
        "--split-mode",
        "row",
        "--collectives",
        "reduce-scatter",
        "-o",
        &o,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("reduce_scatter_sum 'l0.attn_out.scatter#0' on cpu0, cpu1"),
        "{t}"
    );
    assert!(
        t.contains("--split-mode row --collectives reduce-scatter"),
        "{t}"
    );

    // A Q8_0 matrix of one block per row cannot be cut along its rows' blocks
    // over two devices.
    let graph = dir.join("q8.ron");
    std::fs::write(
        &graph,
        "(format_version: 1, name: \"q8\", tensors: [\n\
         (name: \"w\", role: Weight, dtype: Q8_0, ne: [32, 64, 1, 1]),\n\
         (name: \"x\", role: Input, dtype: F32, ne: [32, 4, 1, 1]),\n\
         (name: \"y\", role: Output, op: MulMat, src: [\"w\", \"x\"], dtype: F32, ne: [64, 4, 1, 1]),\n\
         ])\n",
    )
    .unwrap();
    let bad = dir.join("bad.ron");
    let b = bad.display().to_string();
    let g = graph.display().to_string();
    for (args, want) in [
        (
            vec!["--split", "no_such=1"],
            vec!["--split no_such=1", "matches no weight"],
        ),
        (
            vec!["--split", "w=0"],
            vec![
                "--split w=0",
                "tensor 'w'",
                "1 units of 32 along axis 0, fewer than the 2 devices",
            ],
        ),
        (
            vec!["--split", "w=5"],
            vec!["the axis must be 0, 1, 2 or 3"],
        ),
        (
            vec!["--split", "w=1", "--tensor-split", "1,1,1"],
            vec!["--tensor-split", "3 shares for 2 devices"],
        ),
        (
            vec!["--tensor-split", "1,1"],
            vec!["--tensor-split needs --split-mode"],
        ),
        (
            vec!["--split", "w=1", "--collectives", "ring"],
            vec!["--collectives 'ring' is not a collective choice"],
        ),
        (
            vec!["--collectives", "all-reduce"],
            vec!["--collectives needs --split-mode row"],
        ),
        (
            vec!["--split", "w=1", "--experts", "whole"],
            vec!["--experts needs --split-mode row"],
        ),
        (
            vec!["--split-mode", "row", "--experts", "some"],
            vec!["--experts 'some' is not an expert split (auto, rows, whole)"],
        ),
        (
            vec!["--split-mode", "row", "--experts", "whole"],
            vec!["--experts whole", "has no stacked experts"],
        ),
    ] {
        let mut all = vec![
            "compile",
            g.as_str(),
            "--target",
            "cpu0+cpu1",
            "-o",
            b.as_str(),
        ];
        all.extend(args.iter());
        let out = ggplan(&all);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {t}");
        for w in want {
            assert!(t.contains(w), "{args:?}: want '{w}' in {t}");
        }
        assert!(!bad.exists(), "{args:?}: no plan file is written on error");
    }
    // Only CPU devices share the memory collectives read in place.
    let t = common::ggplan_error(&[
        "compile",
        &g,
        "--target",
        "cpu+cuda0",
        "--split",
        "w=1",
        "-o",
        &b,
    ]);
    assert!(t.contains("not a CPU device"), "{t}");
}

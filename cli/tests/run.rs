//! End-to-end tests of `ggplan run` and `ggplan bench` on the CPU runtime.

mod common;

use common::{example, ggplan, ggplan_ok, scratch_dir, text};
use std::path::Path;

/// Compiles examples/graphs/`name` for `target` into `dir`.
fn plan(dir: &Path, name: &str, target: &str) -> String {
    let graph = example(name);
    let out_path = dir.join(format!("{name}.{target}.plan.ron"));
    let out = ggplan(&[
        "compile",
        &graph,
        "--target",
        target,
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    out_path.display().to_string()
}

#[test]
fn run_check_all_passes_on_every_example_and_saves_outputs() {
    let dir = scratch_dir("check");
    for name in ["mlp.ron", "llama2l.ron", "bert2l.ron"] {
        let p = plan(&dir, name, "cpu");
        let save = dir.join(format!("{name}.out"));
        let out = ggplan(&[
            "run",
            &p,
            "--random-weights",
            "5",
            "--check=all",
            "--save",
            save.to_str().unwrap(),
        ]);
        let t = text(&out);
        assert!(out.status.success(), "{name}: {t}");
        assert!(
            t.contains("0 over threshold") && !t.contains("FAIL"),
            "{name}: {t}"
        );
        assert!(
            std::fs::read_dir(&save).unwrap().count() >= 1,
            "{name}: nothing saved"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_prints_the_ceiling_and_per_op_figures() {
    let dir = scratch_dir("bench");
    let p = plan(&dir, "mlp.ron", "cpu");
    let out = ggplan(&[
        "bench",
        &p,
        "--random-weights",
        "1",
        "--runs",
        "3",
        "--threads",
        "2",
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for needle in [
        "machine ceiling",
        "median",
        "per op kind",
        "mul_mat",
        "GFLOP/s",
        "per split",
    ] {
        assert!(t.contains(needle), "missing '{needle}': {t}");
    }
    assert!(!t.contains("slowest steps"), "only with --steps: {t}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_steps_lists_the_slowest_steps_with_their_kernels() {
    let dir = scratch_dir("bench_steps");
    let p = plan(&dir, "llama2l.ron", "cpu");
    let args = ["bench", &p, "--random-weights", "1", "--runs", "3"];
    let out = ggplan(&[&args[..], &["--threads", "1", "--steps", "4"]].concat());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let listed: Vec<&str> = t
        .lines()
        .skip_while(|l| !l.starts_with("slowest steps"))
        .skip(1)
        .take_while(|l| l.starts_with("  step"))
        .collect();
    assert_eq!(listed.len(), 4, "{t}");
    // Which steps are slowest is a timing; what each line names is not.
    let mut indices: Vec<&str> = listed
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    indices.sort();
    indices.dedup();
    assert_eq!(indices.len(), 4, "each step once: {t}");
    for line in &listed {
        assert!(line.contains("GFLOP/s") && line.contains(" ms"), "{t}");
    }
    assert!(
        listed.iter().any(|l| l.contains("mul_mat f32 x f32")),
        "a product's kernel is named: {t}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_refuses_bad_plans_and_missing_inputs_with_a_clear_error() {
    let dir = scratch_dir("bad");
    // A plan for a GPU this machine does not have.
    let gpu = plan(&dir, "mlp.ron", "cuda0");
    let out = ggplan(&["run", &gpu, "--random-weights", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("cuda0"), "{}", text(&out));

    // An unknown format version.
    let p = plan(&dir, "mlp.ron", "cpu");
    let newer = dir.join("newer.ron");
    std::fs::write(
        &newer,
        std::fs::read_to_string(&p)
            .unwrap()
            .replace("format_version: 5,", "format_version: 7,"),
    )
    .unwrap();
    let out = ggplan(&["run", newer.to_str().unwrap(), "--random-weights", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("format_version"), "{}", text(&out));

    // Weights are required; an input file of the wrong shape is named.
    let out = ggplan(&["run", &p]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("--random-weights"), "{}", text(&out));
    let out = ggplan(&[
        "run",
        &p,
        "--weights",
        dir.join("nope.gguf").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("nope.gguf"), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run --trace`: a Chrome trace with one named track per stream, one event
/// per step and per copy of the plan, and the waits between streams.
#[test]
fn run_trace_writes_one_track_per_stream_and_an_event_per_step_copy_and_wait() {
    let dir = scratch_dir("trace");
    let p = dir.join("pipelined.plan.ron").display().to_string();
    let graph = example("llama2l_kv.ron");
    let args = [
        "compile",
        &graph,
        "--target",
        "cpu0+cpu1",
        "--split-mode",
        "layer",
    ];
    ggplan_ok(&[&args[..], &["--pipeline", "2", "-o", &p]].concat());
    let trace = dir.join("trace.json");
    let t = trace.to_str().unwrap();
    let printed = ggplan_ok(&["run", &p, "--random-weights", "1", "--trace", t]);
    assert!(
        printed.contains("cpu1 compute") && printed.contains("busy"),
        "{printed}"
    );

    let plan = ir::plan::read_plan(Path::new(&p)).unwrap();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trace).unwrap()).expect("the trace is JSON");
    let events = json["traceEvents"].as_array().expect("traceEvents");
    let of = |ph: &str, cat: Option<&str>| -> Vec<&serde_json::Value> {
        (events.iter())
            .filter(|e| e["ph"] == ph && cat.is_none_or(|c| e["cat"] == c))
            .collect()
    };
    // One named track per stream that ran anything: both compute streams and
    // the copy stream the hand-offs use.
    let tracks: std::collections::BTreeMap<u64, String> = (of("M", None).iter())
        .map(|e| {
            (
                e["tid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap().into(),
            )
        })
        .collect();
    let names: Vec<&str> = tracks.values().map(String::as_str).collect();
    for want in ["cpu0 compute", "cpu1 compute"] {
        assert!(names.contains(&want), "{names:?}");
    }
    assert!(names.iter().any(|n| n.ends_with(" copy")), "{names:?}");
    for e in of("X", None) {
        assert!(tracks.contains_key(&e["tid"].as_u64().unwrap()), "{e}");
        assert!(e["dur"].as_f64().unwrap() >= 0.0, "{e}");
    }
    let steps: usize = plan.splits.iter().map(|s| s.steps.len()).sum();
    let copies: usize = plan.splits.iter().map(|s| s.copies.len()).sum();
    assert!(copies > 0 && plan.n_events > 0);
    assert_eq!(of("X", Some("step")).len(), steps);
    assert_eq!(of("X", Some("copy")).len(), copies);
    let waits = of("X", Some("wait"));
    assert!(!waits.is_empty(), "no wait in the trace");
    for w in waits {
        assert!(
            w["name"].as_str().unwrap().starts_with("waits for event"),
            "{w}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

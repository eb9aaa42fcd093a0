//! End-to-end tests of the `ggplan` binary: exit codes, messages and files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ggplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ggplan"))
        .args(args)
        .output()
        .expect("ggplan runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/graphs")
        .join(name)
        .display()
        .to_string()
}

fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ggplan-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

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
    for sub in ["demo", "eval", "fmt"] {
        let out = ggplan(&[sub, "--help"]);
        assert!(out.status.success());
        assert!(text(&out).contains("Example"), "{sub}: {}", text(&out));
    }
}

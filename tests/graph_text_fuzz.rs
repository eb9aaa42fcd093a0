//! Truncated and mutated example graph files: the parser and verifier must
//! return errors (never panic), and anything they accept must verify and print
//! back canonically.

use ggplan_tests::{TestRng, example_graph_files};
use ir::Error;

fn accept_or_reject(text: &str) {
    match ir::text::parse(text, "mutated.ron") {
        Ok(graph) => {
            assert!(ir::verify::verify(&graph).is_empty());
            let again = ir::text::to_ron(&graph);
            let reparsed = ir::text::parse(&again, "again.ron").expect("canonical text parses");
            assert_eq!(ir::text::to_ron(&reparsed), again);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

#[test]
fn truncated_files_are_rejected_without_panic() {
    for path in example_graph_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        // Every cut point for the first 2 KiB (header and first tensors), then a stride.
        let cuts = (0..text.len().min(2048)).chain((2048..text.len()).step_by(97));
        for cut in cuts.filter(|&c| text.is_char_boundary(c)) {
            let truncated = &text[..cut];
            let result = ir::text::parse(truncated, "truncated.ron");
            if truncated.trim_end() != text.trim_end() {
                assert!(
                    result.is_err(),
                    "{} cut at {cut} was accepted",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn random_byte_mutations_never_panic() {
    let alphabet = b"0123456789[](),:\" abcxyzFQ_-.eE";
    let mut rng = TestRng::new(0x5eed);
    for path in example_graph_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        for _ in 0..300 {
            let mut bytes = text.clone().into_bytes();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(bytes.len());
                match rng.below(3) {
                    0 => bytes[at] = alphabet[rng.below(alphabet.len())],
                    1 => {
                        bytes.remove(at);
                    }
                    _ => bytes.insert(at, alphabet[rng.below(alphabet.len())]),
                }
            }
            if let Ok(mutated) = String::from_utf8(bytes) {
                accept_or_reject(&mutated);
            }
        }
    }
}

/// Replaces the first occurrence of `from` on the line of tensor `name`.
fn edit_tensor_line(text: &str, name: &str, from: &str, to: &str) -> String {
    let needle = format!("(name: \"{name}\"");
    let line = text
        .lines()
        .find(|l| l.contains(&needle))
        .unwrap_or_else(|| panic!("no tensor {name}"));
    assert!(line.contains(from), "{line} has no {from}");
    text.replacen(line, &line.replacen(from, to, 1), 1)
}

fn first_node_with(text: &str, pattern: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.contains("op: ") && l.contains(pattern))
        .expect("a node line");
    let start = line.find("name: \"").unwrap() + 7;
    line[start..].split('"').next().unwrap().to_string()
}

#[test]
fn targeted_corruptions_are_reported_with_their_place() {
    for path in example_graph_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let mm = first_node_with(&text, "MulMat");
        // A wrong extent on a node: named, located, and both shapes shown.
        let bad = edit_tensor_line(&text, &mm, "ne: [", "ne: [7");
        let err = ir::text::parse(&bad, "bad.ron").unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Invalid { .. }), "{msg}");
        assert!(
            msg.contains(&format!("'{mm}'")) && msg.contains("line "),
            "{msg}"
        );

        // An unknown source name.
        let bad = edit_tensor_line(&text, &mm, "src: [\"", "src: [\"no_such_");
        let msg = ir::text::parse(&bad, "bad.ron").unwrap_err().to_string();
        assert!(
            msg.contains("no_such_") && msg.contains("not defined before"),
            "{msg}"
        );

        // An unknown op and an unknown dtype: syntax errors with line and column.
        let bad = text.replacen("op: MulMat", "op: MulMatt", 1);
        let err = ir::text::parse(&bad, "bad.ron").unwrap_err();
        assert!(
            matches!(err, Error::Syntax { line, .. } if line > 1),
            "{err}"
        );
        let bad = text.replacen("dtype: F32", "dtype: F33", 1);
        assert!(matches!(
            ir::text::parse(&bad, "bad.ron").unwrap_err(),
            Error::Syntax { .. }
        ));

        // A future format version is refused before anything else is read.
        let bad = text.replacen("format_version: 1", "format_version: 99", 1);
        let err = ir::text::parse(&bad, "bad.ron").unwrap_err();
        assert!(
            matches!(err, Error::FormatVersion { found: 99, .. }),
            "{err}"
        );

        // A duplicated tensor name: the first tensor's line written twice.
        let first = text.lines().find(|l| l.contains("(name: \"")).unwrap();
        let name = first.split('"').nth(1).unwrap();
        let bad = text.replacen(first, &format!("{first}\n{first}"), 1);
        let msg = ir::text::parse(&bad, "bad.ron").unwrap_err().to_string();
        assert!(
            msg.contains(&format!("'{name}'")) && msg.contains("used by an earlier tensor"),
            "{msg}"
        );
    }
}

#[test]
fn several_problems_are_reported_together() {
    let path = example_graph_files()
        .into_iter()
        .find(|p| p.ends_with("llama2l.ron"))
        .unwrap();
    let text = std::fs::read_to_string(path).unwrap();
    let bad = edit_tensor_line(&text, "l0.q", "ne: [512", "ne: [511");
    let bad = edit_tensor_line(&bad, "l1.k", "ne: [512", "ne: [513");
    let Err(Error::Invalid { violations, .. }) = ir::text::parse(&bad, "bad.ron") else {
        panic!("expected an invalid graph");
    };
    let names: Vec<&str> = violations.iter().map(|v| v.name.as_str()).collect();
    assert!(
        names.contains(&"l0.q") && names.contains(&"l1.k"),
        "{names:?}"
    );
}

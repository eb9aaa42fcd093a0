//! Writes `examples/graphs/bert2l.ron` from [`examples::bert2l`].

fn main() -> std::process::ExitCode {
    examples::run_example("bert2l", examples::bert2l)
}

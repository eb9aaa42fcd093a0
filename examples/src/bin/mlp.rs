//! Writes `examples/graphs/mlp.ron` from [`examples::mlp`].

fn main() -> std::process::ExitCode {
    examples::run_example("mlp", examples::mlp)
}

//! Writes `examples/graphs/llama2l.ron` from [`examples::llama2l`].

fn main() -> std::process::ExitCode {
    examples::run_example("llama2l", examples::llama2l)
}

//! Writes `examples/graphs/llama2l_kv.ron` from [`examples::llama2l_kv`].

fn main() -> std::process::ExitCode {
    examples::run_example("llama2l_kv", examples::llama2l_kv)
}

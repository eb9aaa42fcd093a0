//! Writes `examples/graphs/llama2l.ron` from [`examples::llama2l`].

use std::process::ExitCode;

fn main() -> ExitCode {
    match examples::write_example("llama2l", examples::llama2l) {
        Ok(path) => {
            println!("wrote {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

//! Writes `examples/graphs/mlp.ron` from [`examples::mlp`].

use std::process::ExitCode;

fn main() -> ExitCode {
    match examples::write_example("mlp", examples::mlp) {
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

//! Writes `examples/graphs/bert2l.ron` from [`examples::bert2l`].

use std::process::ExitCode;

fn main() -> ExitCode {
    match examples::write_example("bert2l", examples::bert2l) {
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

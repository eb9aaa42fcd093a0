//! Runs the embedded llama2l plan once and prints what loading did.

use ggplan_example_embedded_plan::{greedy, load, tokens};
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), ggplan::Error> {
    let loaded = load(std::thread::available_parallelism().map_or(1, |n| n.get()))?;
    let mut runtime = loaded.runtime;
    let report = runtime.load_report().clone();
    println!(
        "loaded the embedded plan '{}' ({} steps): {} plans compiled at start-up, kernels prepared in {:.1} ms",
        runtime.plan().graph_name,
        runtime.steps().len(),
        loaded.plans_compiled,
        report.prepare_time.as_secs_f64() * 1e3
    );
    runtime.set_input_i32("tokens", &tokens())?;
    runtime.run()?;
    let logits = runtime.output_f32("result_output")?;
    let next = greedy(&logits, 8000);
    println!("greedy ids at the first 8 positions: {:?}", &next[..8]);
    Ok(())
}

//! `ggplan import`: llama.cpp's captured decode (`scripts/llama-capture.sh`)
//! as a ggplan graph, and the inputs llama.cpp used as `.npy` files.

use anyhow::{Context, Result};
use clap::Args;
use ir::DType;
use models::capture::{Capture, read_capture};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `ggplan import`.
#[derive(Args)]
#[command(after_help = "Example:\n  \
    scripts/llama-capture.sh run model.gguf cap.json --prompt 'Hello' -- -fa off\n  \
    ggplan import cap.json -o graph.ron --inputs cap-inputs/\n  \
    ggplan compile graph.ron --target cpu -o plan.ron\n  \
    ggplan run plan.ron --weights model.gguf --input inp_tokens=cap-inputs/inp_tokens.npy ...")]
pub struct ImportArgs {
    /// The capture (JSON written by scripts/llama-capture.sh).
    capture: PathBuf,
    /// Where to write the graph (.ron).
    #[arg(short, long, value_name = "GRAPH.ron")]
    output: PathBuf,
    /// Also write each graph input's captured values as DIR/<name>.npy.
    #[arg(long, value_name = "DIR")]
    inputs: Option<PathBuf>,
}

/// Runs `ggplan import`.
pub fn run(args: ImportArgs) -> Result<ExitCode> {
    let capture = read_capture(&args.capture)?;
    let name =
        (args.capture.file_stem()).map_or("imported".into(), |s| s.to_string_lossy().to_string());
    let imported = models::capture::import(&capture, &name)?;
    let graph = &imported.graph;
    if let Some(dir) = &args.inputs {
        write_inputs(&capture, &imported, dir)?;
    }
    ir::text::write_graph(&args.output, graph)?;
    println!(
        "wrote {} ('{}': {} tensors, {} nodes; llama.cpp's {} nodes and {} copies, {} splits)",
        args.output.display(),
        graph.name,
        graph.len(),
        graph.nodes().count(),
        capture.nodes.len(),
        capture.copies.len(),
        capture.splits.len()
    );
    for note in &imported.notes {
        println!("  note: {note}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes every graph input whose values the capture holds as `.npy`, in the
/// graph's dtype (I32 or F32; another dtype is skipped with a note).
fn write_inputs(capture: &Capture, imported: &models::capture::Imported, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let graph = &imported.graph;
    for id in graph.with_role(ir::Role::Input) {
        let t = graph.tensor(id);
        // The values of the capture tensor it was made from (repeated names,
        // as Gemma 3's two masks, are told apart by id), or of a scheduler
        // copy of it.
        let source = imported.captured[id.index()];
        let with_values = |c: &&models::capture::CapturedTensor| c.data.is_some();
        let Some(bytes) = (source.map(|c| &capture.tensors[c]).filter(with_values))
            .or_else(|| {
                (capture.tensors.iter())
                    .filter(|c| c.copy_of.is_some() && c.copy_of == source)
                    .find(with_values)
            })
            .and_then(|c| c.data.as_ref().map(|d| (d, c.dtype.as_str())))
        else {
            println!("  note: no captured values for input '{}'", t.name);
            continue;
        };
        let shape: Vec<u64> = t.ne().iter().rev().map(|&n| n as u64).collect();
        let path = dir.join(format!("{}.npy", t.name));
        match (t.dtype(), bytes.1) {
            (DType::I32, "i32") => {
                let v: Vec<i32> = (bytes.0.chunks_exact(4))
                    .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
                    .collect();
                ir::files::npy::write_npy_i32(&path, &shape, &v)?;
            }
            (DType::I32, "i64") => {
                // Narrowed on import; the importer checked the values fit.
                let v: Vec<i32> = (bytes.0.chunks_exact(8))
                    .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")) as i32)
                    .collect();
                ir::files::npy::write_npy_i32(&path, &shape, &v)?;
            }
            (DType::F32, "f32") => {
                let v: Vec<f32> = (bytes.0.chunks_exact(4))
                    .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                    .collect();
                ir::files::npy::write_npy_f32(&path, &shape, &v)?;
            }
            (DType::F16, "f16") => {
                // Written as float32 (every f16 is exact in f32); `run --input`
                // stores it back as f16.
                let v: Vec<f32> = (bytes.0.chunks_exact(2))
                    .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect();
                ir::files::npy::write_npy_f32(&path, &shape, &v)?;
            }
            (dtype, _) => {
                println!("  note: input '{}' is {dtype}: not written", t.name);
                continue;
            }
        }
    }
    Ok(())
}

//! `ggplan quantize`: a GGUF file requantized to another format.

use anyhow::{Result, bail};
use clap::Args;
use models::quantize::{QuantType, QuantizeSummary, quantize_gguf};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `ggplan quantize`.
#[derive(Args)]
#[command(
    after_help = "Example:\n  ggplan quantize SmolLM2-135M-Instruct.Q4_1.gguf smollm2.q4_k_m.gguf --type q4_k_m\n\n\
K-quant rows must be a multiple of 256 values; other rows take llama.cpp's fallback\n\
(q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0), and the summary says how many."
)]
pub struct QuantizeArgs {
    /// The GGUF file to read.
    input: PathBuf,
    /// The GGUF file to write (never the input; written atomically; an
    /// existing file only with --force).
    output: PathBuf,
    /// Target format: q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k or q4_k_m (llama.cpp's mix).
    #[arg(long = "type", value_name = "TYPE")]
    target: String,
    /// Replace OUTPUT if it exists.
    #[arg(long)]
    force: bool,
}

/// Requantizes the file and prints a summary.
pub fn run(args: QuantizeArgs) -> Result<ExitCode> {
    // Parsed here rather than by clap so a bad name is exit code 1, like other bad input.
    let Some(target) = QuantType::parse(&args.target) else {
        let known: Vec<&str> = QuantType::ALL.iter().map(|t| t.name()).collect();
        bail!(
            "unknown --type {:?} (known: {})",
            args.target,
            known.join(", ")
        );
    };
    // Before any work: a file the user has is never replaced unasked.
    if !args.force && args.output.exists() {
        bail!(
            "{} exists; pass --force to replace it",
            args.output.display()
        );
    }
    let summary = quantize_gguf(&args.input, &args.output, target)?;
    print!("{}", summary_text(&summary, target, &args.output));
    Ok(ExitCode::SUCCESS)
}

/// The printed summary: tensors per type, fallbacks, bytes in and out.
fn summary_text(summary: &QuantizeSummary, target: QuantType, output: &std::path::Path) -> String {
    let mut text = format!(
        "{}: {} tensors as {} (general.file_type = {})\n",
        output.display(),
        summary.tensors.len(),
        target.name(),
        target.file_type()
    );
    for (dtype, n) in summary.count_by_type() {
        let requantized = summary
            .tensors
            .iter()
            .filter(|t| t.to == dtype && t.requantized())
            .count();
        text.push_str(&format!(
            "  {:<5} {n:>4} tensors ({requantized} requantized)\n",
            dtype.name()
        ));
    }
    for (wanted, used, n) in summary.fallbacks() {
        text.push_str(&format!(
            "  fallback: {n} tensors wanted {} but use {} (ne0 not a multiple of {}, \
             as llama.cpp does)\n",
            wanted.name(),
            used.name(),
            wanted.block_elems()
        ));
    }
    text.push_str(&format!(
        "  tensor data {} -> {} bytes ({:.1}%), file {} -> {} bytes\n",
        summary.tensor_bytes_in,
        summary.tensor_bytes_out,
        percent(summary.tensor_bytes_out, summary.tensor_bytes_in),
        summary.file_bytes_in,
        summary.file_bytes_out
    ));
    text
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ir::DType;
    use models::quantize::TensorPlan;

    #[test]
    fn summary_names_each_fallback_with_its_count() {
        let plan = |name: &str, from, to, wanted| TensorPlan {
            name: name.to_owned(),
            from,
            to,
            wanted,
        };
        let summary = QuantizeSummary {
            tensors: vec![
                plan("a.weight", DType::F32, DType::Q5_0, Some(DType::Q4_K)),
                plan("b.weight", DType::F32, DType::Q5_0, Some(DType::Q4_K)),
                plan("c.weight", DType::F32, DType::Q8_0, Some(DType::Q6_K)),
                plan("d.weight", DType::F32, DType::Q4_K, None),
                plan("norm.weight", DType::F32, DType::F32, None),
            ],
            tensor_bytes_in: 1000,
            tensor_bytes_out: 250,
            file_bytes_in: 1100,
            file_bytes_out: 350,
        };
        let text = summary_text(&summary, QuantType::Q4KM, std::path::Path::new("out.gguf"));
        assert!(
            text.contains("fallback: 2 tensors wanted q4_K but use q5_0"),
            "{text}"
        );
        assert!(
            text.contains("fallback: 1 tensors wanted q6_K but use q8_0"),
            "{text}"
        );
        assert!(
            text.contains("q8_0     1 tensors (1 requantized)"),
            "{text}"
        );
        assert!(
            text.contains("f32      1 tensors (0 requantized)"),
            "{text}"
        );
        assert!(
            text.contains("1000 -> 250 bytes (25.0%), file 1100 -> 350 bytes"),
            "{text}"
        );
    }
}

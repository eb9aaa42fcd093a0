//! Short human-readable summaries of tensor values.

use kernels::reference::Dense;

/// `first values ... | mean | abs max` of a tensor's values, plus a NaN count when any.
pub fn summarize(values: &Dense) -> String {
    let first: Vec<String> = values
        .data
        .iter()
        .take(6)
        .map(|v| format!("{v:.6}"))
        .collect();
    let more = if values.data.len() > 6 { ", ..." } else { "" };
    let finite: Vec<f64> = values
        .data
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .collect();
    let mean = finite.iter().sum::<f64>() / finite.len().max(1) as f64;
    let abs_max = finite.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let nan = values.data.iter().filter(|v| v.is_nan()).count();
    let nan_note = if nan > 0 {
        format!("  NaN: {nan}")
    } else {
        String::new()
    };
    format!(
        "[{}{more}]  mean {mean:.6}  abs max {abs_max:.6}{nan_note}",
        first.join(", ")
    )
}

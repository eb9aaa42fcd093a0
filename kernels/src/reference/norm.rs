//! Row normalisations (over ne0 of every row).
//!
//! - rms_norm: `x / sqrt(mean(x^2) + eps)`;
//! - norm: `(x - mean) / sqrt(var + eps)` with the population variance
//!   (divided by ne0), as ggml.

use super::dense::Dense;

/// rms_norm of every row.
pub(crate) fn rms_norm(a: &Dense, eps: f32) -> Dense {
    let mut out = a.clone();
    let n = a.ne[0] as f64;
    for row in out.rows_mut() {
        let mean_square = row.iter().map(|x| x * x).sum::<f64>() / n;
        let denom = (mean_square + f64::from(eps)).sqrt();
        row.iter_mut().for_each(|x| *x /= denom);
    }
    out
}

/// norm (mean 0, variance 1 up to eps) of every row.
pub(crate) fn norm(a: &Dense, eps: f32) -> Dense {
    let mut out = a.clone();
    let n = a.ne[0] as f64;
    for row in out.rows_mut() {
        let mean = row.iter().sum::<f64>() / n;
        let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        let denom = (var + f64::from(eps)).sqrt();
        row.iter_mut().for_each(|x| *x = (*x - mean) / denom);
    }
    out
}

//! A tiny seeded PRNG for tests (splitmix64): deterministic on every platform
//! and independent of any crate's stream, so recorded test cases stay valid;
//! the NMSE thresholds of comparisons with the oracle; and small hand-made
//! plans ([`plans`]).

pub mod plans;

/// splitmix64 generator.
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform index in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// `n` values uniform in [lo, hi).
    pub fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
}

/// The error metric of ggml's test-backend-ops: sum((a-b)^2) / sum(a^2), with
/// `a` the reference. Any NaN (or a length mismatch) gives infinity, so it fails
/// every threshold. An infinity both sides agree on (diag_mask_inf's -inf) is
/// exact and left out of both sums; one on a single side gives infinity.
pub fn nmse(reference: &[f64], actual: &[f64]) -> f64 {
    if reference.len() != actual.len() {
        return f64::INFINITY;
    }
    let mut err = 0.0;
    let mut norm = 0.0;
    for (&a, &b) in reference.iter().zip(actual) {
        if a.is_nan() || b.is_nan() {
            return f64::INFINITY;
        }
        if a.is_infinite() || b.is_infinite() {
            if a == b {
                continue;
            }
            return f64::INFINITY;
        }
        err += (a - b) * (a - b);
        norm += a * a;
    }
    if norm == 0.0 {
        if err == 0.0 { 0.0 } else { f64::INFINITY }
    } else {
        err / norm
    }
}

/// DESIGN.md's NMSE thresholds: 5e-4 for mul_mat (and a mixture of
/// experts' mul_mat_id) and attention, 1e-6 for soft_max, 1e-7 otherwise.
pub fn nmse_threshold(op_name: &str) -> f64 {
    match op_name {
        "mul_mat" | "mul_mat_id" | "mul_mat_add" | "attention" | "mul_mat_glu" | "mul_mat_many" => {
            5e-4
        }
        "soft_max" => 1e-6,
        _ => 1e-7,
    }
}

#[cfg(test)]
mod tests {
    use super::nmse;

    #[test]
    fn agreed_infinities_are_exact_and_disagreements_fail() {
        let inf = f64::NEG_INFINITY;
        assert_eq!(nmse(&[1.0, inf, 2.0], &[1.0, inf, 2.0]), 0.0);
        assert!((nmse(&[1.0, inf], &[1.1, inf]) - 0.01).abs() < 1e-12);
        assert_eq!(nmse(&[1.0, inf], &[1.0, 0.0]), f64::INFINITY);
        assert_eq!(nmse(&[1.0, 0.0], &[1.0, inf]), f64::INFINITY);
        assert_eq!(nmse(&[f64::NAN], &[f64::NAN]), f64::INFINITY);
    }
}

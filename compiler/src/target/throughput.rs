//! What a device can do per second: the inputs of the cost model.
//!
//! The model these numbers serve (the `cost` policy, not built yet) is a
//! roofline per step: `mul_mat` takes `2·M·N·K / matmul rate` for its weight's
//! dtype class, every other kernel takes `bytes read + bytes written / memory
//! rate`, and each kernel launch adds `launch_overhead_us`.
//!
//! Invariant (checked by `Target::validate`): every rate is finite and > 0,
//! the launch overhead finite and >= 0. Rates are whole-device figures (all
//! cores of a CPU), realistic sustained rates rather than datasheet peaks.

use ir::DType;
use serde::{Deserialize, Serialize};

/// The three dtype classes matmul throughput is quoted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DTypeClass {
    /// F32 (and I32, which never feeds a matmul weight but needs a class).
    F32,
    /// F16 and BF16.
    Half,
    /// Every block-quantized dtype.
    Quantized,
}

impl DTypeClass {
    /// The class of `dtype`.
    pub fn of(dtype: DType) -> DTypeClass {
        match dtype {
            DType::F32 | DType::I32 => DTypeClass::F32,
            DType::F16 | DType::BF16 => DTypeClass::Half,
            DType::Q8_0
            | DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::Q4_K
            | DType::Q5_K
            | DType::Q6_K => DTypeClass::Quantized,
        }
    }
}

/// Sustained matmul rates in GFLOP/s (one multiply-add = 2 flop), by the
/// dtype class of the weight (src0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatmulGflops {
    /// F32 weights.
    pub f32: f64,
    /// F16 and BF16 weights.
    pub f16: f64,
    /// Block-quantized weights, in flops of the equivalent dense product.
    pub quantized: f64,
}

/// A device's throughput estimates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Throughput {
    /// `mul_mat` rates by weight dtype class.
    pub matmul_gflops: MatmulGflops,
    /// Memory-bound kernels: bytes read plus bytes written per second, in GB/s
    /// (10^9 bytes), as a memcpy of N bytes moving 2N counts it.
    pub memory_gbps: f64,
    /// Fixed cost of starting one kernel (or one parallel step on a CPU), in µs.
    pub launch_overhead_us: f64,
}

impl Throughput {
    /// The matmul rate in GFLOP/s for a weight (src0) of `dtype`.
    pub fn matmul_gflops(&self, dtype: DType) -> f64 {
        match DTypeClass::of(dtype) {
            DTypeClass::F32 => self.matmul_gflops.f32,
            DTypeClass::Half => self.matmul_gflops.f16,
            DTypeClass::Quantized => self.matmul_gflops.quantized,
        }
    }

    /// Every problem with these numbers (non-finite, zero or negative rates),
    /// each prefixed with `who`.
    pub(crate) fn problems(&self, who: &str) -> Vec<String> {
        let mut problems = Vec::new();
        let rates = [
            ("matmul_gflops.f32", self.matmul_gflops.f32),
            ("matmul_gflops.f16", self.matmul_gflops.f16),
            ("matmul_gflops.quantized", self.matmul_gflops.quantized),
            ("memory_gbps", self.memory_gbps),
        ];
        for (field, v) in rates {
            if !(v.is_finite() && v > 0.0) {
                problems.push(format!(
                    "{who}: throughput {field} is {v}; it must be finite and > 0"
                ));
            }
        }
        let v = self.launch_overhead_us;
        if !(v.is_finite() && v >= 0.0) {
            problems.push(format!(
                "{who}: throughput launch_overhead_us is {v}; it must be finite and >= 0"
            ));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_follow_the_weight_dtype_class() {
        let t = Throughput {
            matmul_gflops: MatmulGflops {
                f32: 1.0,
                f16: 2.0,
                quantized: 3.0,
            },
            memory_gbps: 10.0,
            launch_overhead_us: 0.0,
        };
        assert_eq!(t.matmul_gflops(DType::F32), 1.0);
        assert_eq!(t.matmul_gflops(DType::BF16), 2.0);
        assert_eq!(t.matmul_gflops(DType::Q6_K), 3.0);
        assert!(t.problems("d").is_empty());
        let bad = Throughput {
            memory_gbps: f64::NAN,
            launch_overhead_us: -1.0,
            ..t
        };
        assert_eq!(bad.problems("d").len(), 2);
    }
}

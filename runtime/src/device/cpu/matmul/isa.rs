//! The instruction sets of the integer dot kernels, detected once per
//! host: what the kernels (`qdot`) and the activations' quantizer (`q8`)
//! both dispatch on, below both.

/// An instruction set for the dot kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust.
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX2 + FMA + F16C + AVX-VNNI (VEX `vpdpbusd`): the AVX2 kernels, with
    /// the lane kernel summing by `vpdpbusd`.
    AvxVnni,
    /// AVX-512 F + BW (and AVX2, FMA, F16C); `vnni`: use VPDPBUSD.
    Avx512 {
        /// AVX512-VNNI is present.
        vnni: bool,
    },
}

impl Isa {
    /// The set the kernels use on this host. Never the AVX-512 tiles on
    /// natural rows: measured on an AVX-512 VNNI Xeon (16 cores,
    /// 2026-11-22, `benches/matmul.rs`, one thread), the AVX2 lane kernel on
    /// repacked weights reads 4096x4096 Q8_0 / Q4_0 / Q4_1 at 20.5 / 15.8 /
    /// 17.6 GB/s against 14.0 / 7.5 / 5.6 for the AVX-512 VNNI tiles, and
    /// SmolLM2's decode mul_mats run at 143 tokens/s against 64 (the module
    /// doc says why). Those tiles stay, tested on hosts that have them.
    ///
    /// Where the host has AVX512-VNNI (with VL), its set: repacked weights
    /// then run the lane kernel with `vpdpbusd`, measured faster than the
    /// AVX2 lane kernel on this project's Zen 4 host (2026-11-25, one
    /// thread, CPU time: Q4_1 prefill K=576 M=1536 N=128 118.9 vs 105.1
    /// GFLOP/s, K=1536 M=576 175.4 vs 150.2; matrix-vector products equal,
    /// at memory speed). Rows that are not repacked then take the AVX2
    /// tiles ([`crate::device::cpu::matmul::quantized::QuantMatMul::new`]).
    ///
    /// Without AVX-512, AVX-VNNI where the host has it: the same lane kernel
    /// with the VEX `vpdpbusd` (figures in docs/performance.md's AVX-VNNI section,
    /// measured with this set forced on a host that has both).
    ///
    /// `GGPLAN_QDOT_ISA` (`scalar`, `avx2`, `avxvnni`, `avx512`, `avx512vnni`) names
    /// another set the host has, to compare them on one machine; a name the
    /// host lacks is ignored.
    pub fn detect() -> Isa {
        let available = Isa::available();
        let wanted = Isa::requested();
        let default = if available.contains(&Isa::Avx512 { vnni: true }) {
            Isa::Avx512 { vnni: true }
        } else if available.contains(&Isa::AvxVnni) {
            Isa::AvxVnni
        } else if available.contains(&Isa::Avx2) {
            Isa::Avx2
        } else {
            Isa::Scalar
        };
        wanted.unwrap_or(default)
    }

    /// Whether weights are repacked for the lane kernel under this set
    /// (AVX2, AVX-VNNI, AVX-512 with VNNI; not plain AVX-512 or scalar).
    pub const fn repacks(self) -> bool {
        matches!(self, Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 { vnni: true })
    }

    /// The set `GGPLAN_QDOT_ISA` names, when the host has it.
    pub fn requested() -> Option<Isa> {
        let name = std::env::var("GGPLAN_QDOT_ISA").ok()?;
        Isa::available().into_iter().find(|isa| isa.name() == name)
    }

    /// Its name in `GGPLAN_QDOT_ISA` and in kernel descriptions.
    pub const fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512 { vnni: false } => "avx512",
            Isa::Avx512 { vnni: true } => "avx512vnni",
        }
    }

    /// Every set the host supports, weakest first (tests run them all).
    pub fn available() -> Vec<Isa> {
        let mut v = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("fma") && has!("f16c") {
                v.push(Isa::Avx2);
                if has!("avxvnni") {
                    v.push(Isa::AvxVnni);
                }
                if has!("avx512f") && has!("avx512bw") {
                    v.push(Isa::Avx512 { vnni: false });
                    if has!("avx512vnni") && has!("avx512vl") {
                        v.push(Isa::Avx512 { vnni: true });
                    }
                }
            }
        }
        v
    }
}

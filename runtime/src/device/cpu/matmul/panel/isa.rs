//! The instruction sets of the panel kernels and the tile shape of each.

/// A SIMD set the panel kernels have micro-kernels for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PanelIsa {
    /// AVX2, FMA and F16C: tiles of 16 weight rows (two 8-lane vectors) x 6 columns.
    Avx2,
    /// AVX-512F: tiles of 32 weight rows (two 16-lane vectors) x 12 columns.
    Avx512,
}

impl PanelIsa {
    /// Weight rows per panel (and per tile).
    pub const fn mr(self) -> usize {
        match self {
            PanelIsa::Avx2 => 16,
            PanelIsa::Avx512 => 32,
        }
    }

    /// Most activation columns per tile (the packed column blocks' width).
    pub const fn nr(self) -> usize {
        match self {
            PanelIsa::Avx2 => 6,
            PanelIsa::Avx512 => 14,
        }
    }

    /// Its name in `describe()` and in benchmark output.
    pub const fn name(self) -> &'static str {
        match self {
            PanelIsa::Avx2 => "avx2",
            PanelIsa::Avx512 => "avx512",
        }
    }

    /// Every set this host runs, weakest first (tests run them all).
    pub fn available() -> Vec<PanelIsa> {
        let mut v = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("fma") && has!("f16c") {
                v.push(PanelIsa::Avx2);
                if has!("avx512f") {
                    v.push(PanelIsa::Avx512);
                }
            }
        }
        v
    }

    /// The set the runtime uses: the widest the host has, or `None` (then
    /// float weights go through `gemm`). `GGPLAN_PANEL_ISA=avx2|avx512` picks
    /// another one the host has, and `off` none, to compare them on one
    /// machine (a name the host lacks is ignored).
    pub fn detect() -> Option<PanelIsa> {
        let available = PanelIsa::available();
        let name = std::env::var("GGPLAN_PANEL_ISA").unwrap_or_default();
        if name == "off" {
            return None;
        }
        let wanted = available.iter().copied().find(|i| i.name() == name);
        wanted.or_else(|| available.last().copied())
    }
}

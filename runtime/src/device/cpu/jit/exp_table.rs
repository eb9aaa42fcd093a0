//! The sigmoid's denominator 1 + e^(-x) on the normal-float range, with a
//! table-driven exponential that is short in both uops and latency.
//!
//! Why: silu(a)·b streams 12 bytes per element, and one AVX2 core keeps up
//! with memory only if the arithmetic per 8 lanes is short: the out-of-order
//! window holds few iterations of a long chain, and the FMA ports are the
//! bottleneck. Against `math::exp` (degree-6 polynomial, two 2^n factors)
//! the silu·b loop went from 29 to 24 instructions per 8 lanes and its
//! compute alone (in L2) from 7.3 to 4.5 ms-equivalent for 16M elements on
//! Zen 3.
//!
//! Method: n = round(-x · 8 / ln2) by the 1.5·2^23 rounding trick, so the
//! low mantissa bits of `t` hold n; with n = 8k + j (j in 0..8),
//! e^(-x) = 2^k · 2^(j/8) · e^r, r = -x - n ln2/8, |r| <= ln2/16.
//! - S = 2^k 2^(j/8) is built on the bits: the table holds bits(2^(j/8))
//!   minus j << 20, and bits(t) << 20 = (k << 23) + (j << 20) (mod 2^32) is
//!   added to the entry. The entry is one `vpermps` on AVX2 (the low three
//!   bits of `t` are the index as they stand), the same table twice over for
//!   AVX-512's 16-entry permute, and a variable-index extract per lane on
//!   other widths (the scalar tail), so every width computes identical bits;
//! - e^r = 1 + r + c2 r^2 + c3 r^3, the degree-3 fit with c0 = c1 = 1
//!   (Chebyshev fit of (e^r - 1 - r) / r^2; relative error 3.8e-8 once the
//!   coefficients are f32), applied as (S + 1) + (S r)(1 + r (c2 + c3 r));
//! - clamping is two integer minimums on the float bits (`clamp_bits`).
//!
//! Invariant: the argument is clamped to [`LO`], [`HI`], so k is in
//! [-125, 127] and S e^r is a normal float: the exponent addition never
//! under- or overflows. Measured maximum relative error of silu: see
//! `tests/math.rs` (bounds 3e-7 for |x| <= 30, 4.5e-7 on [-86, 88]).

use super::codegen::{Gen, R};
use inkwell::values::VectorValue;

/// Lowest -x: n >= -998, so k >= -125 and S e^r stays normal.
const LO: f32 = -86.5;
/// Highest -x: n <= 1016, so k <= 127 and the result stays finite.
const HI: f32 = 88.0;
/// 1.5 * 2^23 (see `math::ROUND_MAGIC`).
const ROUND_MAGIC: f32 = 12_582_912.0;
/// ln2 / 8 rounded to f32, applied in one FMA (so n * LN2_EIGHTH is exact
/// inside it). It is 2.4e-10 above ln2 / 8, which shifts r by at most
/// 1016 * 2.4e-10 = 2.4e-7 at the ends of the range and 2.7e-8 for |x| < 10:
/// a second Cody-Waite constant would remove that for one more FMA per
/// vector, which measured 15% of the loop's compute.
const LN2_EIGHTH: f32 = (std::f64::consts::LN_2 / 8.0) as f32;
/// c2 and c3 of e^r ~ 1 + r + c2 r^2 + c3 r^3 on |r| <= ln2/16.
const C2: f32 = 0.500_039_1;
/// See [`C2`].
const C3: f32 = 0.166_674_48;

/// 2^(j/8) for j in 0..8, rounded to f32.
fn eighths() -> [f32; 8] {
    std::array::from_fn(|j| (j as f64 / 8.0).exp2() as f32)
}

/// The table as stored: 2^(j/8) with j << 20 taken off its bits, so that
/// adding bits(t) << 20 = (k << 23) + (j << 20) leaves exactly 2^k 2^(j/8).
/// (Entries are bit patterns, not meaningful floats.)
fn table() -> [f32; 8] {
    let t = eighths();
    std::array::from_fn(|j| f32::from_bits(t[j].to_bits().wrapping_sub((j as u32) << 20)))
}

impl<'ctx> Gen<'_, 'ctx> {
    /// 1 + e^(-x), with -x clamped to [`LO`], [`HI`]: the sigmoid's
    /// denominator. The 1 joins the scale before the last FMA, which keeps
    /// the add off the dependency chain.
    pub(super) fn one_plus_exp_neg(&self, x: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        let w = x.get_type().get_size();
        // -x in [LO, HI]: x in [-HI, -LO].
        let x = self.clamp_bits(x, -HI, -LO)?;
        let magic = self.cf(ROUND_MAGIC, w);
        // t holds n = round(-x * 8 / ln2) in its low mantissa bits.
        let t = self.fma(x, self.cf(-8.0 * std::f32::consts::LOG2_E, w), magic)?;
        let n = self.sub(t, magic)?;
        // u = x + n ln2/8 (one rounding: FMA), so r = -x - n ln2/8 = -u.
        let u = self.fma(n, self.cf(LN2_EIGHTH, w), x)?;
        // S = 2^k T_j, built on the bits: the table holds bits(T_j) - (j << 20)
        // and bits(t) << 20 is n << 20 = (k << 23) + (j << 20) (mod 2^32).
        let iv = self.i32t.vec_type(w);
        let bits = self.bitcast(t, iv)?;
        let shifted = self.b.build_left_shift(bits, self.ci32(20, w), "")?;
        let table = self.bitcast(self.lookup_eighths(bits)?, iv)?;
        let scale = self.b.build_int_add(table, shifted, "")?;
        let scale = self.bitcast(scale, self.vt(w))?;
        // 1 + r (c2 + c3 r) = 1 + u (c3 u - c2).
        let q = self.fma(u, self.cf(C3, w), self.cf(-C2, w))?;
        let inner = self.fma(u, q, self.cf(1.0, w))?;
        // 1 + S e^r = (S + 1) + (S r) inner, with S r = -(S u).
        let neg_su = self.b.build_float_neg(self.mul(scale, u)?, "")?;
        self.fma(neg_su, inner, self.add(scale, self.cf(1.0, w))?)
    }

    /// `x` clamped to [lo, hi] for lo < 0 < hi, on the float bits as integers:
    /// unsigned, every negative float below `lo` compares above bits(lo)
    /// while every other float compares below; signed, every positive float
    /// above `hi` compares above bits(hi) while negatives compare below. Two
    /// integer minimums then clamp both sides, and on Zen 3 they run on the
    /// ports the FMAs do not use (vminps/vmaxps compete with them). NaN
    /// becomes an end of the range: callers keep x itself in the result, so
    /// NaN still propagates.
    fn clamp_bits(&self, x: VectorValue<'ctx>, lo: f32, hi: f32) -> R<VectorValue<'ctx>> {
        debug_assert!(lo < 0.0 && hi > 0.0);
        let w = x.get_type().get_size();
        let iv = self.i32t.vec_type(w);
        let bits = self.bitcast(x, iv)?;
        let lo_bits = self.ci32(lo.to_bits() as i32, w);
        let hi_bits = self.ci32(hi.to_bits() as i32, w);
        let bits = self.vcall("llvm.umin", &[bits, lo_bits])?;
        let bits = self.vcall("llvm.smin", &[bits, hi_bits])?;
        self.bitcast(bits, self.vt(w))
    }

    /// Entry j of [`table`] for j = the low three bits of each lane of `bits`.
    fn lookup_eighths(&self, bits: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        let w = bits.get_type().get_size();
        let entries = table();
        let permute = match (w, self.width) {
            (8, 8 | 16) => Some("llvm.x86.avx2.permps"),
            (16, 16) => Some("llvm.x86.avx512.permvar.sf.512"),
            _ => None,
        };
        // The table repeated over `lanes` lanes, as a constant vector.
        let repeated = |lanes: usize| {
            let consts: Vec<_> = (0..lanes)
                .map(|i| self.f32t.const_float(f64::from(entries[i % 8])))
                .collect();
            inkwell::types::VectorType::const_vector(&consts)
        };
        if let Some(name) = permute {
            // The permutes read the low 3 (or 4) index bits; twice over for 16.
            let table = repeated(w as usize);
            return Ok(self
                .intrinsic(name, &[], &[table.into(), bits.into()])?
                .into_vector_value());
        }
        // Any other width (the scalar tail): one variable-index extract per
        // lane from the 8-entry constant, which LLVM lowers to a load from
        // the constant pool.
        let table = repeated(8);
        let mut out = self.vt(w).get_poison();
        for lane in 0..w {
            let idx = self.i32t.const_int(u64::from(lane), false);
            let j = self
                .b
                .build_extract_element(bits, idx, "")?
                .into_int_value();
            let j = self.b.build_and(j, self.i32t.const_int(7, false), "")?;
            let v = self.b.build_extract_element(table, j, "")?;
            out = self.b.build_insert_element(out, v, idx, "")?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    /// The constants' derivations hold: LN2_EIGHTH is within 2.4e-10 of
    /// ln2 / 8 (the error budget in its doc), and the table is 2^(j/8).
    #[test]
    fn constants_are_what_the_doc_says() {
        let err = f64::from(super::LN2_EIGHTH) - std::f64::consts::LN_2 / 8.0;
        assert!(err.abs() < 2.5e-10, "{err:e}");
        assert_eq!(super::eighths()[4], std::f32::consts::SQRT_2);
        // Stored entry + (n << 20) is 2^k 2^(j/8) for n = 8k + j.
        for n in [-998i32, -9, -1, 0, 1, 7, 8, 1016] {
            let (k, j) = (n.div_euclid(8), n.rem_euclid(8) as usize);
            let bits = super::table()[j].to_bits().wrapping_add((n as u32) << 20);
            let want = super::eighths()[j] * (k as f32).exp2();
            assert_eq!(f32::from_bits(bits), want, "n = {n}");
        }
    }
}

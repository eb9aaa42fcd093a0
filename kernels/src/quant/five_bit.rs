//! The 20 bytes of 5-bit quants that Q5_0 and Q5_1 share: a little-endian
//! u32 `qh` whose bit j is the fifth bit of quant j, then 16 bytes whose byte
//! j holds the low 4 bits of quant j (low nibble) and of quant j + 16 (high).

/// The 32 quants of one block, each in 0..=31.
pub type Quants = [u8; 32];

/// The quants of the 20 bytes `qh_qs` (qh, then qs).
pub fn unpack(qh_qs: &[u8]) -> Quants {
    let qh = u32::from_le_bytes([qh_qs[0], qh_qs[1], qh_qs[2], qh_qs[3]]);
    let mut q = [0u8; 32];
    for (j, &byte) in qh_qs[4..20].iter().enumerate() {
        let fifth = |i: usize| (((qh >> i) & 1) as u8) << 4;
        q[j] = (byte & 0x0F) | fifth(j);
        q[j + 16] = (byte >> 4) | fifth(j + 16);
    }
    q
}

/// Writes `q` (each in 0..=31) as the 20 bytes `qh_qs`.
pub fn pack(q: &Quants, qh_qs: &mut [u8]) {
    let qh = q
        .iter()
        .enumerate()
        .fold(0u32, |qh, (j, &v)| qh | (u32::from(v >> 4) << j));
    qh_qs[..4].copy_from_slice(&qh.to_le_bytes());
    for j in 0..16 {
        qh_qs[4 + j] = (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4);
    }
}

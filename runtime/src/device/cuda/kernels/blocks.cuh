// Block-quantized rows (ggml's formats) decoded for the op library's
// mul_mat and get_rows. Formats and their arithmetic are the Rust
// dequantizers' (kernels/src/quant/): the same products in the same order.
//
// Plain C++ apart from `__device__ __forceinline__` and `h2f`, so the host
// tests (runtime/src/device/cuda/blocks_host.rs) compile this file with a
// C++ compiler and compare every format with the Rust dequantizers on
// machines without a GPU.
//
// A row is a run of whole blocks (32 values, K-quants 256). A *chunk* is 32
// consecutive values of a row: a whole block, or sub-block `ch % 8` of a
// K-quant super-block `ch / 8`. Multi-byte fields are read byte by byte
// where a block's size leaves them unaligned (Q5_0's qh at byte 2 of 22).

#define DT_Q5_0 7
#define DT_Q5_1 8
#define DT_Q4_K 9
#define DT_Q5_K 10
#define DT_Q6_K 11

// Bytes of one block of `dt` (a block type).
__device__ __forceinline__ long long gg_block_bytes(long long dt) {
  switch (dt) {
    case DT_Q8_0: return 34;
    case DT_Q4_0: return 18;
    case DT_Q4_1: return 20;
    case DT_Q5_0: return 22;
    case DT_Q5_1: return 24;
    case DT_Q4_K: return 144;
    case DT_Q5_K: return 176;
    default: return 210;  // DT_Q6_K
  }
}

__device__ __forceinline__ unsigned gg_u32(const unsigned char *p) {
  return (unsigned)p[0] | ((unsigned)p[1] << 8) | ((unsigned)p[2] << 16) | ((unsigned)p[3] << 24);
}

__device__ __forceinline__ float gg_f16_at(const unsigned char *p) {
  return h2f((unsigned short)(p[0] | (p[1] << 8)));
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..8) from the
// block's 12 scale bytes.
__device__ __forceinline__ void gg_scale_min_k4(const unsigned char *s, int j, int *sc, int *m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Values part .. part + 7 of chunk `ch` of a row of block type DT that
// starts at `row` (part a multiple of 8 below 32), each chunk's scales read
// once.
template <int DT>
__device__ __forceinline__ void block_chunk8(const char *row, long long ch, int part, float *v) {
  const unsigned char *b = (const unsigned char *)row;
  if (DT == DT_Q8_0) {
    const unsigned char *q = b + ch * 34;
    const float d = gg_f16_at(q);
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = d * (float)(signed char)q[2 + part + e];
  } else if (DT == DT_Q4_0 || DT == DT_Q4_1) {
    const unsigned char *q = b + ch * (DT == DT_Q4_1 ? 20 : 18);
    const float d = gg_f16_at(q);
    const unsigned char *qs = q + (DT == DT_Q4_1 ? 4 : 2);
#pragma unroll
    for (int e = 0; e < 8; e++) {
      const int k = part + e;
      const unsigned char x = qs[k & 15];
      const int u = k < 16 ? (x & 15) : (x >> 4);
      v[e] = DT == DT_Q4_1 ? d * (float)u + gg_f16_at(q + 2) : d * (float)(u - 8);
    }
  } else if (DT == DT_Q5_0 || DT == DT_Q5_1) {
    const unsigned char *q = b + ch * (DT == DT_Q5_1 ? 24 : 22);
    const float d = gg_f16_at(q);
    const int fields = DT == DT_Q5_1 ? 4 : 2;
    const unsigned qh = gg_u32(q + fields);
    const unsigned char *qs = q + fields + 4;
#pragma unroll
    for (int e = 0; e < 8; e++) {
      const int k = part + e;
      const unsigned char x = qs[k & 15];
      const int u = (k < 16 ? (x & 15) : (x >> 4)) | (int)(((qh >> k) & 1u) << 4);
      v[e] = DT == DT_Q5_1 ? (float)u * d + gg_f16_at(q + 2) : (float)(u - 16) * d;
    }
  } else if (DT == DT_Q4_K || DT == DT_Q5_K) {
    // Sub-block j: low nibbles (j even) or high nibbles (j odd) of the
    // 32 quant bytes 32 (j / 2) ..; Q5_K's fifth bit is bit j of qh[l].
    const int j = (int)(ch & 7);
    const unsigned char *q = b + (ch >> 3) * (DT == DT_Q5_K ? 176 : 144);
    int sc, m;
    gg_scale_min_k4(q + 4, j, &sc, &m);
    const float d1 = gg_f16_at(q) * (float)sc, min1 = gg_f16_at(q + 2) * (float)m;
    const unsigned char *qh = q + 16;
    const unsigned char *qs = q + (DT == DT_Q5_K ? 48 : 16) + 32 * (j >> 1);
#pragma unroll
    for (int e = 0; e < 8; e++) {
      const int l = part + e;
      int u = (j & 1) ? (qs[l] >> 4) : (qs[l] & 15);
      if (DT == DT_Q5_K) u |= ((qh[l] >> j) & 1) << 4;
      v[e] = d1 * (float)u - min1;
    }
  } else {
    // Q6_K: 128-value half h = j / 4, quarter t = j % 4 of it: low 4 bits
    // from ql (bytes l or l + 32 of the half, low or high nibble), top 2
    // from qh[l] at bit 2 t; scale 16-value group l / 16 + 2 t of the half.
    const int j = (int)(ch & 7), h = j >> 2, t = j & 3;
    const unsigned char *q = b + (ch >> 3) * 210;
    const unsigned char *ql = q + 64 * h + 32 * (t & 1);
    const unsigned char *qh = q + 128 + 32 * h;
    const signed char *sc = (const signed char *)(q + 192 + 8 * h);
    const float d = gg_f16_at(q + 208);
#pragma unroll
    for (int e = 0; e < 8; e++) {
      const int l = part + e;
      const int lo = (t & 2) ? (ql[l] >> 4) : (ql[l] & 15);
      const int u = lo | (((qh[l] >> (2 * t)) & 3) << 4);
      v[e] = d * (float)sc[l / 16 + 2 * t] * (float)(u - 32);
    }
  }
}

// Value k of a row of block type `dt` (get_rows): its chunk decoded.
__device__ __forceinline__ float block_value(const char *row, long long dt, long long k) {
  float v[8];
  const long long ch = k >> 5;
  const int part = (int)(k & 24);
  switch (dt) {
    case DT_Q8_0: block_chunk8<DT_Q8_0>(row, ch, part, v); break;
    case DT_Q4_0: block_chunk8<DT_Q4_0>(row, ch, part, v); break;
    case DT_Q4_1: block_chunk8<DT_Q4_1>(row, ch, part, v); break;
    case DT_Q5_0: block_chunk8<DT_Q5_0>(row, ch, part, v); break;
    case DT_Q5_1: block_chunk8<DT_Q5_1>(row, ch, part, v); break;
    case DT_Q4_K: block_chunk8<DT_Q4_K>(row, ch, part, v); break;
    case DT_Q5_K: block_chunk8<DT_Q5_K>(row, ch, part, v); break;
    default: block_chunk8<DT_Q6_K>(row, ch, part, v); break;
  }
  return v[k & 7];
}

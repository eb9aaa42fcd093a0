// The op library: one kernel per op that is not elementwise (elementwise ops,
// norms and fused bodies are generated, see codegen.rs). Semantics are
// kernels::reference's; values are computed in f32 (rope's angles in f64).
// Launch geometry for each kernel is chosen in launch.rs, beside its args.

// Element k of a row that starts at `row`: float types step by nb0, block
// types decode k's chunk (blocks.cuh).
__device__ __forceinline__ float ldrow(const char *row, long long dt, long long nb0, long long k) {
  if (dt <= DT_I32) return ldf(row + k * nb0, dt);
  return block_value(row, dt, k);
}

// mul_mat: t0 = dst F32 [M, N, ne12, ne13], t1 = src0 [K, M, ne02, ne03]
// (weights: floats with any strides, or rows of whole blocks of any format
// blocks.cuh decodes), t2 = src1 [K, N, ne12, ne13] (floats); src0's matrix
// (k2 / r2, k3 / r3) for dst's (k2, k3). Each kernel is a template over
// src0's dtype, so a chunk is decoded with its scales read once.
// Epilogue: when i[0] != 0, t3 is an addend with dst's extents, added to each
// sum before it is stored (a product fused with its residual add); the
// element is read and written by the same thread, after the sum is done.
__device__ __forceinline__ float mm_out(const Args &a, float s, long long i, long long j, long long k2, long long k3) {
  return a.i[0] ? s + ldf(at(a.t[3], i, j, k2, k3), a.t[3].dt) : s;
}

// Elements part .. part + 7 of chunk `ch` (values 32 ch ..) of the row at
// `row` into v (floats: zero past K).
template <int DT>
__device__ __forceinline__ void chunk8(const char *row, long long ch, long long nb0, int part, long long K, float *v) {
  if (DT > DT_I32) {
    block_chunk8<DT>(row, ch, part, v);
  } else {
    const long long kbase = ch * 32;
    const char *q = row + kbase * nb0;
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = kbase + part + e < K ? ldf(q + (part + e) * nb0, DT) : 0.0f;
  }
}

// Few columns (decode, N <= MM_COLS): one warp per dst row i and up to
// MM_COLS columns; four lanes per 32-element chunk, eight elements each, so a
// warp reads eight consecutive chunks of the row (and of each column) per
// step, coalesced. grid (ceil(M / 4), ceil(N / MM_COLS), ne12 * ne13),
// block 128.
#define MM_COLS 8
// This lane's partial sums of row i of A times columns j0 .. j0 + nc - 1 of
// B, matrix (k2, k3) of B, into acc (the caller sums them over the warp).
template <int DT>
__device__ __forceinline__ void mm_vec_acc(const T &A, const T &B, long long i, long long j0, long long k2,
                                           long long k3, int nc, float *acc) {
  const long long K = A.ne[0];
  const int lane = threadIdx.x & 31, part = (lane & 3) * 8;
  const long long r2 = B.ne[2] / A.ne[2], r3 = B.ne[3] / A.ne[3];
  const char *arow = A.d + i * A.nb[1] + (k2 / r2) * A.nb[2] + (k3 / r3) * A.nb[3];
  const char *bcol = B.d + j0 * B.nb[1] + k2 * B.nb[2] + k3 * B.nb[3];
  const long long chunks = (K + 31) / 32;
#pragma unroll
  for (int c = 0; c < MM_COLS; c++) acc[c] = 0.0f;
  for (long long ch = lane >> 2; ch < chunks; ch += 8) {
    float w[8];
    chunk8<DT>(arow, ch, A.nb[0], part, K, w);
    const long long k = ch * 32 + part;
#pragma unroll
    for (int c = 0; c < MM_COLS; c++) {
      if (c >= nc) break;
      const char *b = bcol + c * B.nb[1] + k * B.nb[0];
      float s = 0.0f;
      if (B.dt == DT_F32 && B.nb[0] == 4 && k + 8 <= K && ((unsigned long long)b & 15) == 0) {
        const float4 x0 = *(const float4 *)b, x1 = *((const float4 *)b + 1);
        s = w[0] * x0.x + w[1] * x0.y + w[2] * x0.z + w[3] * x0.w + w[4] * x1.x + w[5] * x1.y +
            w[6] * x1.z + w[7] * x1.w;
      } else {
#pragma unroll
        for (int e = 0; e < 8; e++)
          if (k + e < K) s += w[e] * ldf(b + e * B.nb[0], B.dt);
      }
      acc[c] += s;
    }
  }
}

template <int DT>
__device__ void mm_vec(const Args &a) {
  const T &D = a.t[0], &A = a.t[1], &B = a.t[2];
  const long long M = A.ne[1], N = B.ne[1];
  const int lane = threadIdx.x & 31;
  const long long i = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const long long j0 = (long long)blockIdx.y * MM_COLS;
  const long long k2 = blockIdx.z % B.ne[2], k3 = blockIdx.z / B.ne[2];
  if (i >= M) return;
  const int nc = (int)(N - j0 < MM_COLS ? N - j0 : MM_COLS);
  float acc[MM_COLS];
  mm_vec_acc<DT>(A, B, i, j0, k2, k3, nc, acc);
#pragma unroll
  for (int c = 0; c < MM_COLS; c++) {
    const float s = warp_sum(acc[c]);
    if (lane == 0 && c < nc) stf(at_mut(D, i, j0 + c, k2, k3), D.dt, mm_out(a, s, i, j0 + c, k2, k3));
  }
}

// Many columns (prefill): 64 x 64 tiles of dst, K in steps of one 32-element
// chunk through shared memory (src0 decoded once per tile), 4 x 4 outputs
// per thread. grid (ceil(M / 64), ceil(N / 64), ne12 * ne13), block 256.
#define TM 64
#define TN 64
// This thread's 4 x 4 sums of the tile at (i0, j0) of A times B, matrix
// (k2, k3) of B, into acc; every thread of the block calls it (barriers).
template <int DT>
__device__ __forceinline__ void mm_tile_acc(const T &A, const T &B, long long i0, long long j0, long long k2,
                                            long long k3, float (*Ws)[TM + 4], float (*Xs)[TN + 4],
                                            float (*acc)[4]) {
  const long long K = A.ne[0], M = A.ne[1], N = B.ne[1];
  const long long r2 = B.ne[2] / A.ne[2], r3 = B.ne[3] / A.ne[3];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  // Loading: thread tid fills 8 elements of row / column tid / 4.
  const int lr = tid / 4, part = (tid % 4) * 8;
  const long long wi = i0 + lr, xj = j0 + lr;
  const char *arow = A.d + wi * A.nb[1] + (k2 / r2) * A.nb[2] + (k3 / r3) * A.nb[3];
  const char *bcol = B.d + xj * B.nb[1] + k2 * B.nb[2] + k3 * B.nb[3];
#pragma unroll
  for (int r = 0; r < 4; r++)
#pragma unroll
    for (int c = 0; c < 4; c++) acc[r][c] = 0.0f;
  const long long chunks = (K + 31) / 32;
  for (long long ch = 0; ch < chunks; ch++) {
    float w[8];
    if (wi < M) {
      chunk8<DT>(arow, ch, A.nb[0], part, K, w);
    } else {
#pragma unroll
      for (int e = 0; e < 8; e++) w[e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < 8; e++) {
      const long long k = ch * 32 + part + e;
      Ws[part + e][lr] = w[e];
      Xs[part + e][lr] = xj < N && k < K ? ldf(bcol + k * B.nb[0], B.dt) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < 32; kk++) {
      float w[4], x[4];
#pragma unroll
      for (int r = 0; r < 4; r++) w[r] = Ws[kk][ty * 4 + r];
#pragma unroll
      for (int c = 0; c < 4; c++) x[c] = Xs[kk][tx * 4 + c];
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[r][c] += w[r] * x[c];
    }
    __syncthreads();
  }
}

template <int DT>
__device__ void mm_tiled(const Args &a, float (*Ws)[TM + 4], float (*Xs)[TN + 4]) {
  const T &D = a.t[0], &A = a.t[1], &B = a.t[2];
  const long long M = A.ne[1], N = B.ne[1];
  const long long i0 = (long long)blockIdx.x * TM, j0 = (long long)blockIdx.y * TN;
  const long long k2 = blockIdx.z % B.ne[2], k3 = blockIdx.z / B.ne[2];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  float acc[4][4];
  mm_tile_acc<DT>(A, B, i0, j0, k2, k3, Ws, Xs, acc);
#pragma unroll
  for (int r = 0; r < 4; r++) {
    const long long i = i0 + ty * 4 + r;
    if (i >= M) continue;
#pragma unroll
    for (int c = 0; c < 4; c++) {
      const long long j = j0 + tx * 4 + c;
      if (j < N) stf(at_mut(D, i, j, k2, k3), D.dt, mm_out(a, acc[r][c], i, j, k2, k3));
    }
  }
}

// One instantiation per src0 dtype; `...` are the extra arguments (the
// shared tiles, declared once in the entry point).
#define MM_DISPATCH(KERNEL, ...)                            \
  switch (a.t[1].dt) {                                      \
    case DT_F32: KERNEL<DT_F32>(a, ##__VA_ARGS__); break;   \
    case DT_F16: KERNEL<DT_F16>(a, ##__VA_ARGS__); break;   \
    case DT_BF16: KERNEL<DT_BF16>(a, ##__VA_ARGS__); break; \
    case DT_Q8_0: KERNEL<DT_Q8_0>(a, ##__VA_ARGS__); break; \
    case DT_Q4_0: KERNEL<DT_Q4_0>(a, ##__VA_ARGS__); break; \
    case DT_Q4_1: KERNEL<DT_Q4_1>(a, ##__VA_ARGS__); break; \
    case DT_Q5_0: KERNEL<DT_Q5_0>(a, ##__VA_ARGS__); break; \
    case DT_Q5_1: KERNEL<DT_Q5_1>(a, ##__VA_ARGS__); break; \
    case DT_Q4_K: KERNEL<DT_Q4_K>(a, ##__VA_ARGS__); break; \
    case DT_Q5_K: KERNEL<DT_Q5_K>(a, ##__VA_ARGS__); break; \
    case DT_Q6_K: KERNEL<DT_Q6_K>(a, ##__VA_ARGS__); break; \
    default: break;                                         \
  }

extern "C" __global__ void mul_mat_vec(const Args a) { MM_DISPATCH(mm_vec) }

extern "C" __global__ void mul_mat_tiled(const Args a) {
  __shared__ float Ws[32][TM + 4];
  __shared__ float Xs[32][TN + 4];
  MM_DISPATCH(mm_tiled, Ws, Xs)
}

// get_rows: t0 = dst [ne00, n, ne11, ne12], t1 = src0, t2 = I32 indices
// [n, ne11, ne12]. Row (j, k1, k2) of dst is row idx[j, k1, k2] of src0's
// matrix (k1, k2). An index outside src0 writes NaN (never read out of it).
// grid = dst rows, block 256.
extern "C" __global__ void get_rows(const Args a) {
  const T &D = a.t[0], &A = a.t[1], &I = a.t[2];
  long long j, k1, k2;
  unrow(blockIdx.x, D.ne, j, k1, k2);
  const long long r = *(const int *)at(I, j, k1, k2, 0);
  const bool ok = r >= 0 && r < A.ne[1];
  const char *src = A.d + (ok ? r : 0) * A.nb[1] + k1 * A.nb[2] + k2 * A.nb[3];
  for (long long i0 = threadIdx.x; i0 < D.ne[0]; i0 += blockDim.x) {
    const float v = ok ? ldrow(src, A.dt, A.nb[0], i0) : __int_as_float(0x7fc00000);
    stf(at_mut(D, i0, j, k1, k2), D.dt, v);
  }
}

// soft_max: t0 = dst F32, t1 = logits, t2 = mask (when i[0] != 0);
// f[0] = scale, f[1] = max_bias (ALiBi over ne2 heads). dst may be the
// logits' own bytes: each element is read before it is written, by the same
// thread. grid = rows, block 256.
extern "C" __global__ void soft_max(const Args a) {
  __shared__ float sh[32];
  const T &D = a.t[0], &X = a.t[1], &Mk = a.t[2];
  const bool has_mask = a.i[0] != 0;
  const float scale = a.f[0], max_bias = a.f[1];
  long long i1, i2, i3;
  unrow(blockIdx.x, X.ne, i1, i2, i3);
  float slope = 1.0f;
  if (max_bias > 0.0f) {
    const int nh = (int)(X.ne[2] > 1 ? X.ne[2] : 1);
    const int nl2 = 1 << (31 - __clz(nh));
    const float m0 = exp2f(-max_bias / nl2), m1 = exp2f(-(max_bias / 2.0f) / nl2);
    const int h = (int)i2;
    slope = h < nl2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - nl2) + 1));
  }
  float mx = -GG_INF;
  for (long long i0 = threadIdx.x; i0 < X.ne[0]; i0 += blockDim.x) {
    float v = ldf(at(X, i0, i1, i2, i3), X.dt) * scale;
    if (has_mask) v += slope * ldf(at(Mk, i0, i1, i2 % Mk.ne[2], i3 % Mk.ne[3]), Mk.dt);
    *(float *)at_mut(D, i0, i1, i2, i3) = v;
    mx = fmaxf(mx, v);
  }
  mx = block_max(mx, sh);
  float sum = 0.0f;
  for (long long i0 = threadIdx.x; i0 < X.ne[0]; i0 += blockDim.x) {
    float *p = (float *)at_mut(D, i0, i1, i2, i3);
    const float e = mx == -GG_INF ? 0.0f : expf(*p - mx);
    *p = e;
    sum += e;
  }
  sum = block_sum(sum, sh);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (long long i0 = threadIdx.x; i0 < X.ne[0]; i0 += blockDim.x) {
    float *p = (float *)at_mut(D, i0, i1, i2, i3);
    *p = *p * inv;
  }
}

// rope's parameters: mode (0 normal: pairs (2i, 2i+1); 1 neox: (i, i +
// n_dims/2)), n_dims, the F32 frequency factors (one per pair, dividing its
// angle) or none, freq_base, freq_scale, ext_factor, attn_factor, YaRN corr
// low and high.
struct RopeP {
  int mode, n_dims;
  const T *factors;
  double base, scale, ext, attn, low, high;
};

__device__ __forceinline__ RopeP rope_p(int mode, int n_dims, const T *factors, const float *f) {
  RopeP p = {mode, n_dims, factors, f[0], f[1], f[2], f[3], f[4], f[5]};
  return p;
}

// cos and sin (times the magnitude scale) of pair i's angle at `pos`, in f64
// as the reference computes them.
__device__ __forceinline__ void rope_cs(const RopeP &p, int i, double pos, float &c, float &s) {
  const double factor = p.factors ? (double)*(const float *)at(*p.factors, i, 0, 0, 0) : 1.0;
  const double theta_extrap = pos * pow(p.base, -2.0 * i / (double)p.n_dims) / factor;
  const double theta_interp = p.scale * theta_extrap;
  double mscale = p.attn, theta = theta_interp;
  if (p.ext != 0.0) {
    double y = (i - p.low) / fmax(p.high - p.low, 0.001);
    y = fmin(fmax(y, 0.0), 1.0);
    const double mix = (1.0 - y) * p.ext;
    mscale *= 1.0 + 0.1 * log(1.0 / p.scale);
    theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
  }
  c = (float)(cos(theta) * mscale);
  s = (float)(sin(theta) * mscale);
}

// The rotated pair's first (x0 c - x1 s) or second (x0 s + x1 c) value,
// rounded at each operation (no contraction), so every kernel rotating a
// pair gets the same bits.
__device__ __forceinline__ float rope_turn(float x0, float x1, float c, float s, bool second) {
  return second ? __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c))
                : __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
}

// Row (i1, i2, i3) of X rotated into D by this block's threads; positions P
// (I32) by i2. Each pair is read before it is written by the same thread, so
// D may be X.
__device__ void rope_row(const RopeP &p, const T &D, const T &X, const T &P, long long i1, long long i2,
                         long long i3) {
  const double pos = (double)(*(const int *)at(P, i2, 0, 0, 0));
  const int half = p.n_dims / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float c, s;
    rope_cs(p, i, pos, c, s);
    const long long j0 = p.mode == 0 ? 2 * i : i, j1 = p.mode == 0 ? 2 * i + 1 : i + half;
    const float x0 = ldf(at(X, j0, i1, i2, i3), X.dt), x1 = ldf(at(X, j1, i1, i2, i3), X.dt);
    stf(at_mut(D, j0, i1, i2, i3), D.dt, rope_turn(x0, x1, c, s, false));
    stf(at_mut(D, j1, i1, i2, i3), D.dt, rope_turn(x0, x1, c, s, true));
  }
  for (long long i0 = p.n_dims + threadIdx.x; i0 < X.ne[0]; i0 += blockDim.x)
    stf(at_mut(D, i0, i1, i2, i3), D.dt, ldf(at(X, i0, i1, i2, i3), X.dt));
}

// Element (j0, j1, j2, j3) of X rotated: what rope_row stores there.
__device__ __forceinline__ float rope_value(const RopeP &p, const T &X, const T &P, long long j0, long long j1,
                                            long long j2, long long j3) {
  if (j0 >= p.n_dims) return ldf(at(X, j0, j1, j2, j3), X.dt);
  const double pos = (double)(*(const int *)at(P, j2, 0, 0, 0));
  const int half = p.n_dims / 2;
  const int i = p.mode == 0 ? (int)(j0 / 2) : (int)(j0 % half);
  const bool second = p.mode == 0 ? (j0 & 1) : j0 >= half;
  const long long a0 = p.mode == 0 ? 2 * i : i, a1 = p.mode == 0 ? 2 * i + 1 : i + half;
  float c, s;
  rope_cs(p, i, pos, c, s);
  const float x0 = ldf(at(X, a0, j1, j2, j3), X.dt), x1 = ldf(at(X, a1, j1, j2, j3), X.dt);
  return rope_turn(x0, x1, c, s, second);
}

// rope: t0 = dst, t1 = src [head_dim, n_head, n_tokens, 1], t2 = I32
// positions [n_tokens]; i[0] = mode, i[1] = n_dims; i[2] = 1 when t3 holds
// the F32 frequency factors; f[0..6] = freq_base, freq_scale, ext_factor,
// attn_factor, YaRN corr low, corr high (RopeP). grid = rows, block 64.
extern "C" __global__ void rope(const Args a) {
  const RopeP p = rope_p(a.i[0], a.i[1], a.i[2] ? &a.t[3] : 0, a.f);
  long long i1, i2, i3;
  unrow(blockIdx.x, a.t[1].ne, i1, i2, i3);
  rope_row(p, a.t[0], a.t[1], a.t[2], i1, i2, i3);
}

// cpy / cont: t0 = dst, t1 = src with the same element count; element n
// (ggml element order) of src goes to element n of dst, converted. I32 to
// I32 copies the integer. Grid-stride over l[0] elements, block 256.
extern "C" __global__ void copy_elements(const Args a) {
  const T &D = a.t[0], &S = a.t[1];
  const long long n_all = a.l[0];
  for (long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x; n < n_all;
       n += (long long)gridDim.x * blockDim.x) {
    long long s[4], d[4];
    unravel(n, S.ne, s);
    unravel(n, D.ne, d);
    const char *src = at(S, s[0], s[1], s[2], s[3]);
    char *dst = at_mut(D, d[0], d[1], d[2], d[3]);
    if (S.dt == DT_I32 && D.dt == DT_I32) *(int *)dst = *(const int *)src;
    else stf(dst, D.dt, ldf(src, S.dt));
  }
}

// Row `row` of rows R stored into D at the row its index in I names
// (broadcast over dims 1, 2): row (i, i2, i3) goes to row idx[i, i2 % ne1',
// i3 % ne2'] of D's matrix (i2, i3). A row skips itself when a later row of
// its plane names the same destination (the later row wins, as in the
// reference, even with repeated indices), so every destination is written
// once. O(n^2) index reads per plane for n source rows, never O(destination
// rows): a transposed V cache has n_ctx x width one-element destination
// rows. A row no index names keeps its bytes; an index outside D names no
// row. `value(i0, i, i2, i3)` is the element stored. The whole block calls
// it (it synchronises).
template <class Value>
__device__ void set_rows_row(const T &D, const T &R, const T &I, long long row, const Value &value) {
  __shared__ int later;
  long long i, i2, i3;
  unrow(row, R.ne, i, i2, i3);
  const long long j2 = i2 % I.ne[1], j3 = i3 % I.ne[2];
  const long long r = *(const int *)at(I, i, j2, j3, 0);
  if (r < 0 || r >= D.ne[1]) return;
  if (threadIdx.x == 0) later = 0;
  __syncthreads();
  for (long long j = i + 1 + threadIdx.x; j < R.ne[1]; j += blockDim.x)
    if (*(const int *)at(I, j, j2, j3, 0) == r) atomicExch(&later, 1);
  __syncthreads();
  if (later) return;
  for (long long i0 = threadIdx.x; i0 < R.ne[0]; i0 += blockDim.x)
    stf(at_mut(D, i0, r, i2, i3), D.dt, value(i0, i, i2, i3));
}

// The stored value of a plain set_rows: the rows' element.
struct RowsValue {
  const T &R;
  __device__ float operator()(long long i0, long long i, long long i2, long long i3) const {
    return ldf(at(R, i0, i, i2, i3), R.dt);
  }
};

// set_rows: t0 = dst (src0's bytes), t1 = rows [ne0, n, ne2, ne3], t2 = I32
// indices [n, ne2', ne3'] (set_rows_row). grid = rows of t1, block 32 or 256.
extern "C" __global__ void set_rows(const Args a) {
  const RowsValue value = {a.t[1]};
  set_rows_row(a.t[0], a.t[1], a.t[2], blockIdx.x, value);
}

// concat: t0 = dst, t1 = a, t2 = b joined along i[0]. Grid-stride over l[0]
// dst elements.
extern "C" __global__ void concat(const Args a) {
  const T &D = a.t[0], &A = a.t[1], &B = a.t[2];
  const int dim = a.i[0];
  for (long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x; n < a.l[0];
       n += (long long)gridDim.x * blockDim.x) {
    long long d[4];
    unravel(n, D.ne, d);
    long long s[4] = {d[0], d[1], d[2], d[3]};
    float v;
    if (d[dim] < A.ne[dim]) {
      v = ldf(at(A, s[0], s[1], s[2], s[3]), A.dt);
    } else {
      s[dim] -= A.ne[dim];
      v = ldf(at(B, s[0], s[1], s[2], s[3]), B.dt);
    }
    stf(at_mut(D, d[0], d[1], d[2], d[3]), D.dt, v);
  }
}

// sum_rows (i[0] = 0) and mean (i[0] = 1): t0 = dst [1, ne1, ne2, ne3], t1 =
// src. grid = rows, block 256.
extern "C" __global__ void row_sum(const Args a) {
  __shared__ float sh[32];
  const T &D = a.t[0], &X = a.t[1];
  long long i1, i2, i3;
  unrow(blockIdx.x, X.ne, i1, i2, i3);
  float s = 0.0f;
  for (long long i0 = threadIdx.x; i0 < X.ne[0]; i0 += blockDim.x) s += ldf(at(X, i0, i1, i2, i3), X.dt);
  s = block_sum(s, sh);
  if (threadIdx.x == 0) stf(at_mut(D, 0, i1, i2, i3), D.dt, a.i[0] ? s / (float)X.ne[0] : s);
}

// argmax: t0 = dst I32 [ne1], t1 = src [ne0, ne1]; the last of equal maxima
// wins, as the reference. grid = ne1, block 256.
extern "C" __global__ void argmax(const Args a) {
  __shared__ float shv[32];
  __shared__ long long shi[32];
  const T &D = a.t[0], &X = a.t[1];
  const long long i1 = blockIdx.x;
  float best = -GG_INF;
  long long bi = 0;
  for (long long i0 = threadIdx.x; i0 < X.ne[0]; i0 += blockDim.x) {
    const float v = ldf(at(X, i0, i1, 0, 0), X.dt);
    if (v >= best) { best = v; bi = i0; }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const long long oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > best || (ov == best && oi > bi)) { best = ov; bi = oi; }
  }
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) { shv[w] = best; shi[w] = bi; }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < nw; k++)
      if (shv[k] > best || (shv[k] == best && shi[k] > bi)) { best = shv[k]; bi = shi[k]; }
    *(int *)at_mut(D, i1, 0, 0, 0) = (int)bi;
  }
}

// diag_mask_inf: t0 = dst, t1 = src; element (i0, i1) becomes -inf where
// i0 > l[1] (n_past) + i1. Grid-stride over l[0] elements.
extern "C" __global__ void diag_mask_inf(const Args a) {
  const T &D = a.t[0], &X = a.t[1];
  for (long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x; n < a.l[0];
       n += (long long)gridDim.x * blockDim.x) {
    long long i[4];
    unravel(n, X.ne, i);
    const float v = i[0] > a.l[1] + i[1] ? -GG_INF : ldf(at(X, i[0], i[1], i[2], i[3]), X.dt);
    stf(at_mut(D, i[0], i[1], i[2], i[3]), D.dt, v);
  }
}

// glu with one source: t0 = dst [n, ...], t1 = src [2n, ...]; the gate is the
// first half of each row (the second when i[1] != 0); i[0] = 0 swiglu,
// 1 geglu (tanh), 2 geglu (erf). Grid-stride over l[0] dst elements.
extern "C" __global__ void glu_halves(const Args a) {
  const T &D = a.t[0], &X = a.t[1];
  const long long n = D.ne[0];
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < a.l[0];
       e += (long long)gridDim.x * blockDim.x) {
    long long i[4];
    unravel(e, D.ne, i);
    const long long gi = a.i[1] ? i[0] + n : i[0], ui = a.i[1] ? i[0] : i[0] + n;
    const float g = ldf(at(X, gi, i[1], i[2], i[3]), X.dt);
    const float u = ldf(at(X, ui, i[1], i[2], i[3]), X.dt);
    const float act = a.i[0] == 0 ? gg_silu(g) : a.i[0] == 1 ? gg_gelu(g) : gg_gelu_erf(g);
    stf(at_mut(D, i[0], i[1], i[2], i[3]), D.dt, act * u);
  }
}

// mul_mat_id: t0 = dst F32 [M, n_ids, n_tok], t1 = the experts' weights
// [K, M, n_expert] (floats or whole blocks, as mul_mat's src0), t2 = src1
// [K, ne11, n_tok] (floats), t3 = I32 ids [n_ids, n_tok]. Column (e, t) of
// dst is expert ids[e, t]'s matrix times column (e % ne11, t) of src1. An id
// outside 0..n_expert writes NaN to its column and reads no weight (the CPU
// refuses it; a GPU cannot return an error mid-kernel). One warp per dst
// element row i of one (e, t) pair, laid out as mm_vec's one-column case:
// grid (ceil(M / 4), n_ids, n_tok), block 128. Each (e, t) reads its expert's
// rows once; tokens routed to the same expert are not grouped yet.
template <int DT>
__device__ void mm_id_vec(const Args &a) {
  const T &D = a.t[0], &A = a.t[1], &B = a.t[2], &I = a.t[3];
  const long long K = A.ne[0], M = A.ne[1];
  const int lane = threadIdx.x & 31, part = (lane & 3) * 8;
  const long long i = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const long long e = blockIdx.y, t = blockIdx.z;
  if (i >= M) return;
  const long long x = *(const int *)at(I, e, t, 0, 0);
  if (x < 0 || x >= A.ne[2]) {
    if (lane == 0) stf(at_mut(D, i, e, t, 0), D.dt, __int_as_float(0x7fc00000));
    return;
  }
  const char *arow = A.d + i * A.nb[1] + x * A.nb[2];
  const char *bcol = B.d + (e % B.ne[1]) * B.nb[1] + t * B.nb[2];
  const long long chunks = (K + 31) / 32;
  float acc = 0.0f;
  for (long long ch = lane >> 2; ch < chunks; ch += 8) {
    float w[8];
    chunk8<DT>(arow, ch, A.nb[0], part, K, w);
    const long long k = ch * 32 + part;
#pragma unroll
    for (int c = 0; c < 8; c++)
      if (k + c < K) acc += w[c] * ldf(bcol + (k + c) * B.nb[0], B.dt);
  }
  const float s = warp_sum(acc);
  if (lane == 0) stf(at_mut(D, i, e, t, 0), D.dt, s);
}

extern "C" __global__ void mul_mat_id_vec(const Args a) { MM_DISPATCH(mm_id_vec) }

// Rust's f32::total_cmp order as a signed integer key (the reference sorts
// by it): negative values' magnitude bits flipped, so -0 < +0 and NaNs sort
// by their sign at the ends.
__device__ __forceinline__ int total_order_key(float v) {
  const int b = __float_as_int(v);
  return b ^ (int)(((unsigned)(b >> 31)) >> 1);
}

// argsort: t0 = dst I32 [n, rows...], t1 = src F32 of the same extents;
// i[0] = 1 for descending. Row r of dst lists src row r's indices in value
// order, ties in index order (a stable sort, as the reference's). Each
// thread ranks its elements by counting the ones that come before them
// (n^2 comparisons per row: rows are a router's expert scores, at most a
// few hundred), then writes its index at its rank. grid = rows, block 128.
extern "C" __global__ void argsort(const Args a) {
  const T &D = a.t[0], &X = a.t[1];
  const bool descending = a.i[0] != 0;
  long long i1, i2, i3;
  unrow(blockIdx.x, X.ne, i1, i2, i3);
  const long long n = X.ne[0];
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const int ki = total_order_key(ldf(at(X, i, i1, i2, i3), X.dt));
    long long rank = 0;
    for (long long j = 0; j < n; j++) {
      const int kj = total_order_key(ldf(at(X, j, i1, i2, i3), X.dt));
      const bool before = descending ? kj > ki : kj < ki;
      rank += before || (kj == ki && j < i);
    }
    *(int *)at_mut(D, rank, i1, i2, i3) = (int)i;
  }
}

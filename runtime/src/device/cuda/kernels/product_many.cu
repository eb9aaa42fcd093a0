// mul_mat x N: products of one activation tensor t2 = x [K, N, ne12, ne13]
// (floats), product 0 writing t0 from weight t1, product p >= 1 writing
// t[1 + 2p] from weight t[2 + 2p] (weights of one dtype, any rows M_p, the
// same K); i[1] = the number of products (2 ..= 5). Blocks in x run the
// products one after the other: product p takes ceil(M_p / R) of them (R
// rows per block: 4 for vec, TM for tiled) and computes them as
// mul_mat_vec / mul_mat_tiled would (ops.cu). Grid (sum of those, as
// mul_mat's y and z for x).

// Product p's result and weight (constant indices: the argument block
// stays in parameter memory).
__device__ __forceinline__ const T &many_dst(const Args &a, int p) {
  switch (p) {
    case 0: return a.t[0];
    case 1: return a.t[3];
    case 2: return a.t[5];
    case 3: return a.t[7];
    default: return a.t[9];
  }
}
__device__ __forceinline__ const T &many_weight(const Args &a, int p) {
  switch (p) {
    case 0: return a.t[1];
    case 1: return a.t[4];
    case 2: return a.t[6];
    case 3: return a.t[8];
    default: return a.t[10];
  }
}

// The product of block x `bx` with R rows per block, and its block index
// within that product.
__device__ __forceinline__ int many_product(const Args &a, long long R, long long &bx) {
  bx = blockIdx.x;
  int p = 0;
  for (; p + 1 < a.i[1]; p++) {
    const long long blocks = (many_weight(a, p).ne[1] + R - 1) / R;
    if (bx < blocks) break;
    bx -= blocks;
  }
  return p;
}

template <int DT>
__device__ void mm_vec_many(const Args &a) {
  long long bx;
  const int p = many_product(a, blockDim.x >> 5, bx);
  const T &D = many_dst(a, p), &A = many_weight(a, p), &B = a.t[2];
  const long long M = A.ne[1], N = B.ne[1];
  const int lane = threadIdx.x & 31;
  const long long i = bx * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const long long j0 = (long long)blockIdx.y * MM_COLS;
  const long long k2 = blockIdx.z % B.ne[2], k3 = blockIdx.z / B.ne[2];
  if (i >= M) return;
  const int nc = (int)(N - j0 < MM_COLS ? N - j0 : MM_COLS);
  float acc[MM_COLS];
  mm_vec_acc<DT>(A, B, i, j0, k2, k3, nc, acc);
#pragma unroll
  for (int c = 0; c < MM_COLS; c++) {
    const float s = warp_sum(acc[c]);
    if (lane == 0 && c < nc) stf(at_mut(D, i, j0 + c, k2, k3), D.dt, s);
  }
}

template <int DT>
__device__ void mm_tiled_many(const Args &a, float (*Ws)[TM + 4], float (*Xs)[TN + 4]) {
  long long bx;
  const int p = many_product(a, TM, bx);
  const T &D = many_dst(a, p), &A = many_weight(a, p), &B = a.t[2];
  const long long M = A.ne[1], N = B.ne[1];
  const long long i0 = bx * TM, j0 = (long long)blockIdx.y * TN;
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
      if (j < N) stf(at_mut(D, i, j, k2, k3), D.dt, acc[r][c]);
    }
  }
}

extern "C" __global__ void mul_mat_many_vec(const Args a) { MM_DISPATCH(mm_vec_many) }

extern "C" __global__ void mul_mat_many_tiled(const Args a) {
  __shared__ float Ws[32][TM + 4];
  __shared__ float Xs[32][TN + 4];
  MM_DISPATCH(mm_tiled_many, Ws, Xs)
}

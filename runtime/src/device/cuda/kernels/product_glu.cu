// mul_mat + glu: t0 = dst F32 [M, N, ne12, ne13], t1 = the gate weight, t3
// the up weight (one dtype, one shape [K, M, ne02, ne03]), t2 = the
// activations [K, N, ne12, ne13] (floats); i[1] = the activation (0 silu,
// 1 gelu, 2 gelu_erf). dst = act(t1 · t2) * (t3 · t2): each output's two
// sums are made by the thread (vec: the warp) that stores it, with
// mul_mat_vec's and mul_mat_tiled's loops (ops.cu), so neither product is
// ever stored. Grids as those kernels' for the gate product.

__device__ __forceinline__ float glu_out(const Args &a, float gate, float up) {
  const float g = a.i[1] == 0 ? gg_silu(gate) : a.i[1] == 1 ? gg_gelu(gate) : gg_gelu_erf(gate);
  return g * up;
}

template <int DT>
__device__ void mm_vec_glu(const Args &a) {
  const T &D = a.t[0], &G = a.t[1], &B = a.t[2], &U = a.t[3];
  const long long M = G.ne[1], N = B.ne[1];
  const int lane = threadIdx.x & 31;
  const long long i = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const long long j0 = (long long)blockIdx.y * MM_COLS;
  const long long k2 = blockIdx.z % B.ne[2], k3 = blockIdx.z / B.ne[2];
  if (i >= M) return;
  const int nc = (int)(N - j0 < MM_COLS ? N - j0 : MM_COLS);
  float gate[MM_COLS], up[MM_COLS];
  mm_vec_acc<DT>(G, B, i, j0, k2, k3, nc, gate);
  mm_vec_acc<DT>(U, B, i, j0, k2, k3, nc, up);
#pragma unroll
  for (int c = 0; c < MM_COLS; c++) {
    const float g = warp_sum(gate[c]), u = warp_sum(up[c]);
    if (lane == 0 && c < nc) stf(at_mut(D, i, j0 + c, k2, k3), D.dt, glu_out(a, g, u));
  }
}

template <int DT>
__device__ void mm_tiled_glu(const Args &a, float (*Ws)[TM + 4], float (*Xs)[TN + 4]) {
  const T &D = a.t[0], &G = a.t[1], &B = a.t[2], &U = a.t[3];
  const long long M = G.ne[1], N = B.ne[1];
  const long long i0 = (long long)blockIdx.x * TM, j0 = (long long)blockIdx.y * TN;
  const long long k2 = blockIdx.z % B.ne[2], k3 = blockIdx.z / B.ne[2];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  float gate[4][4], up[4][4];
  mm_tile_acc<DT>(G, B, i0, j0, k2, k3, Ws, Xs, gate);
  mm_tile_acc<DT>(U, B, i0, j0, k2, k3, Ws, Xs, up);
#pragma unroll
  for (int r = 0; r < 4; r++) {
    const long long i = i0 + ty * 4 + r;
    if (i >= M) continue;
#pragma unroll
    for (int c = 0; c < 4; c++) {
      const long long j = j0 + tx * 4 + c;
      if (j < N) stf(at_mut(D, i, j, k2, k3), D.dt, glu_out(a, gate[r][c], up[r][c]));
    }
  }
}

extern "C" __global__ void mul_mat_glu_vec(const Args a) { MM_DISPATCH(mm_vec_glu) }

extern "C" __global__ void mul_mat_glu_tiled(const Args a) {
  __shared__ float Ws[32][TM + 4];
  __shared__ float Xs[32][TN + 4];
  MM_DISPATCH(mm_tiled_glu, Ws, Xs)
}

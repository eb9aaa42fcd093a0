// attention (one step: ir::plan::Step::Attention): t0 = dst, F32 and packed,
// holding cont(permute(product, 0, 2, 1, 3)); t1 = K [D, n_kv, hk, hk3],
// t2 = Q [D, n_q, n_head, n3], t3 = V [n_kv, Dv, hv, hv3] (mul_mat's src0:
// row j of a value is column j), t4 = mask [n_kv, >= n_q, m2, m3] when
// i[0] != 0; f[0] = scale, f[1] = max_bias (ALiBi over n_head heads, as
// soft_max). K and V heads broadcast over Q's as mul_mat broadcasts. D and
// Dv are at most ATT_MAXD (the compiler fuses nothing larger; the launch
// refuses it).
//
// grid = n_q * n_head * n3 blocks, one per (query row, head); block
// ATT_WARPS warps. Each warp takes kv rows w, w + ATT_WARPS, ... and keeps
// an online softmax over them: its running maximum m, sum l of exp(s - m),
// and acc[d] = sum of exp(s - m) V[j][d], lane L holding d = L + 32 c. A
// score is a warp-wide dot product of the query (in registers) with row j
// of K. The warps then merge their (m, l, acc) through shared memory and
// each thread writes out[d] = acc[d] / l for its d's. A row whose scores are
// all -inf writes zeros, as soft_max's all-zero probabilities give.
#define ATT_WARPS 4
#define ATT_MAXD 256
#define ATT_PER_LANE (ATT_MAXD / 32)

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attention(const Args a) {
  __shared__ float sh_m[ATT_WARPS], sh_l[ATT_WARPS];
  __shared__ float sh_acc[ATT_WARPS][ATT_MAXD];
  const T &D = a.t[0], &K = a.t[1], &Q = a.t[2], &V = a.t[3], &Mk = a.t[4];
  const bool has_mask = a.i[0] != 0;
  const float scale = a.f[0], max_bias = a.f[1];
  const long long hd = K.ne[0], dv = V.ne[1], n_kv = K.ne[1];
  const long long n_q = Q.ne[1], n_head = Q.ne[2];
  const long long b = blockIdx.x;
  const long long iq = b % n_q, h = (b / n_q) % n_head, i3 = b / (n_q * n_head);
  const long long hk = h / (n_head / K.ne[2]), hk3 = i3 / (Q.ne[3] / K.ne[3]);
  const long long hv = h / (n_head / V.ne[2]), hv3 = i3 / (Q.ne[3] / V.ne[3]);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;

  float slope = 1.0f;
  if (max_bias > 0.0f) {
    const int nh = (int)(n_head > 1 ? n_head : 1);
    const int nl2 = 1 << (31 - __clz(nh));
    const float m0 = exp2f(-max_bias / nl2), m1 = exp2f(-(max_bias / 2.0f) / nl2);
    slope = h < nl2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - nl2) + 1));
  }

  float q[ATT_PER_LANE], acc[ATT_PER_LANE];
#pragma unroll
  for (int c = 0; c < ATT_PER_LANE; c++) {
    const long long d = lane + 32 * c;
    q[c] = d < hd ? ldf(at(Q, d, iq, h, i3), Q.dt) : 0.0f;
    acc[c] = 0.0f;
  }
  float m = -GG_INF, l = 0.0f;
  for (long long j = w; j < n_kv; j += ATT_WARPS) {
    float part = 0.0f;
#pragma unroll
    for (int c = 0; c < ATT_PER_LANE; c++) {
      const long long d = lane + 32 * c;
      if (d < hd) part += q[c] * ldf(at(K, d, j, hk, hk3), K.dt);
    }
    float s = warp_sum(part) * scale;
    if (has_mask) s += slope * ldf(at(Mk, j, iq, h % Mk.ne[2], i3 % Mk.ne[3]), Mk.dt);
    const float m_new = fmaxf(m, s);
    if (m_new == -GG_INF) continue;  // every score so far is -inf
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int c = 0; c < ATT_PER_LANE; c++) {
      const long long d = lane + 32 * c;
      const float vj = d < dv ? ldf(at(V, j, d, hv, hv3), V.dt) : 0.0f;
      acc[c] = acc[c] * corr + p * vj;
    }
    m = m_new;
  }
  if (lane == 0) {
    sh_m[w] = m;
    sh_l[w] = l;
  }
#pragma unroll
  for (int c = 0; c < ATT_PER_LANE; c++) sh_acc[w][lane + 32 * c] = acc[c];
  __syncthreads();

  float mx = -GG_INF;
  for (int k = 0; k < ATT_WARPS; k++) mx = fmaxf(mx, sh_m[k]);
  float sum = 0.0f, f[ATT_WARPS];
  for (int k = 0; k < ATT_WARPS; k++) {
    f[k] = sh_m[k] == -GG_INF ? 0.0f : expf(sh_m[k] - mx);
    sum += sh_l[k] * f[k];
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  float *out = (float *)D.d + ((i3 * n_q + iq) * n_head + h) * dv;
  for (long long d = threadIdx.x; d < dv; d += blockDim.x) {
    float o = 0.0f;
    for (int k = 0; k < ATT_WARPS; k++) o += sh_acc[k][d] * f[k];
    out[d] = o * inv;
  }
}

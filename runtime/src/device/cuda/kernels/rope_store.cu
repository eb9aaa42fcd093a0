// rope + set_rows x N: a block's rotary embeddings and KV-cache stores in
// one launch (the plan's RopeStore step). Its ops are independent (the
// checker proves it), so blocks run them at once: op k takes the blocks
// from l[k - 1] (0 for the first) to l[k] (gridDim.x for the last), one row
// each, as its own launch would (rope_row, set_rows_row in ops.cu).
//
// i[0] = number of ops (2..4); i[1 + k] = op k's descriptor: bits 0..3 its
// kind, then 4-bit argument slots:
//   0 rope:            D, X, P
//   1 set_rows:        D, R, I
//   2 chained set_rows: D, R, I, X, P, Dr - the rows R are a packed view of
//     rope result Dr, so element n of R is element n of Dr, rotated here from
//     the rope's source X (rounded through Dr's dtype) rather than read.
// i[5] = rope mode, i[6] = n_dims, i[7] = the frequency factors' slot or -1;
// f[0..6] the ropes' shared parameters (RopeP). block 64.
__device__ __forceinline__ int rs_slot(int d, int k) { return (d >> (4 + 4 * k)) & 15; }

// Element (i0, i, i2, i3) of a chained store's rows: Dr's element of the same
// ggml order, rotated from X.
struct ChainedValue {
  const RopeP &p;
  const T &R, &X, &P, &Dr;
  __device__ float operator()(long long i0, long long i, long long i2, long long i3) const {
    const long long n = i0 + R.ne[0] * (i + R.ne[1] * (i2 + R.ne[2] * i3));
    long long j[4];
    unravel(n, Dr.ne, j);
    const float v = rope_value(p, X, P, j[0], j[1], j[2], j[3]);
    if (Dr.dt == DT_F32) return v;
    char rounded[4];
    stf(rounded, Dr.dt, v);
    return ldf(rounded, Dr.dt);
  }
};

extern "C" __global__ void rope_store(const Args a) {
  const int n_ops = a.i[0];
  int k = 0;
  long long first = 0;
  while (k + 1 < n_ops && (long long)blockIdx.x >= a.l[k]) {
    first = a.l[k];
    k++;
  }
  const long long row = (long long)blockIdx.x - first;
  const int d = a.i[1 + k], kind = d & 15;
  const RopeP p = rope_p(a.i[5], a.i[6], a.i[7] >= 0 ? &a.t[a.i[7]] : 0, a.f);
  const T &t0 = a.t[rs_slot(d, 0)], &t1 = a.t[rs_slot(d, 1)], &t2 = a.t[rs_slot(d, 2)];
  if (kind == 0) {
    long long i1, i2, i3;
    unrow(row, t1.ne, i1, i2, i3);
    rope_row(p, t0, t1, t2, i1, i2, i3);
  } else if (kind == 1) {
    const RowsValue value = {t1};
    set_rows_row(t0, t1, t2, row, value);
  } else {
    const ChainedValue value = {p, t1, a.t[rs_slot(d, 3)], a.t[rs_slot(d, 4)], a.t[rs_slot(d, 5)]};
    set_rows_row(t0, t1, t2, row, value);
  }
}

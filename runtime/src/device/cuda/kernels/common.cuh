// ggplan's CUDA kernels: what every module (the op library and a plan's
// generated kernels) starts with. Compiled by NVRTC with no headers: half and
// bfloat16 conversions are PTX `cvt` and bit operations.
//
// The argument block (`Args`) matches `runtime/src/device/cuda/args.rs`
// field for field: tensors first (t[0] is the output), then float, int and
// 64-bit scalars. Every address a kernel forms is `d + sum(i_k * nb[k])` with
// 0 <= i_k < ne[k] of that tensor: the runtime checked at load that this
// stays inside the tensor's arena slot.

#define GG_MAXT 12

struct T {
  char *d;
  long long ne[4];
  long long nb[4];
  long long dt;
};

struct Args {
  T t[GG_MAXT];
  float f[8];
  int i[8];
  long long l[4];
};

// dtype codes (args.rs `dtype_code`)
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2
#define DT_I32 3
#define DT_Q8_0 4
#define DT_Q4_0 5
#define DT_Q4_1 6
// (the other block types: blocks.cuh)

#define GG_INF __int_as_float(0x7f800000)

__device__ __forceinline__ float h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

__device__ __forceinline__ unsigned short f2h(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

__device__ __forceinline__ float bf2f(unsigned short h) {
  return __uint_as_float(((unsigned)h) << 16);
}

__device__ __forceinline__ unsigned short f2bf(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

__device__ __forceinline__ unsigned short ld_u16(const char *p) {
  return *(const unsigned short *)p;
}

// One element of a float or I32 tensor at byte address p.
__device__ __forceinline__ float ldf(const char *p, long long dt) {
  switch (dt) {
    case DT_F32: return *(const float *)p;
    case DT_F16: return h2f(ld_u16(p));
    case DT_BF16: return bf2f(ld_u16(p));
    case DT_I32: return (float)(*(const int *)p);
    default: return 0.0f;
  }
}

__device__ __forceinline__ void stf(char *p, long long dt, float v) {
  switch (dt) {
    case DT_F32: *(float *)p = v; break;
    case DT_F16: *(unsigned short *)p = f2h(v); break;
    case DT_BF16: *(unsigned short *)p = f2bf(v); break;
    case DT_I32: *(int *)p = (int)v; break;
    default: break;
  }
}

__device__ __forceinline__ const char *at(const T &t, long long i0, long long i1, long long i2, long long i3) {
  return t.d + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

__device__ __forceinline__ char *at_mut(const T &t, long long i0, long long i1, long long i2, long long i3) {
  return t.d + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `sh` holds 32 floats; the block must reach this
// call together.
__device__ float block_sum(float v, float *sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0f;
  return warp_sum(v);
}

__device__ float block_max(float v, float *sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -GG_INF;
  return warp_max(v);
}

// The row (i1, i2, i3) of output row number `row` of a tensor with extents ne.
__device__ __forceinline__ void unrow(long long row, const long long *ne, long long &i1, long long &i2, long long &i3) {
  i1 = row % ne[1];
  i2 = (row / ne[1]) % ne[2];
  i3 = row / (ne[1] * ne[2]);
}

// Element n (ggml element order) of a tensor with extents ne.
__device__ __forceinline__ void unravel(long long n, const long long *ne, long long *i) {
  i[0] = n % ne[0];
  n /= ne[0];
  i[1] = n % ne[1];
  n /= ne[1];
  i[2] = n % ne[2];
  i[3] = n / ne[2];
}

__device__ __forceinline__ float gg_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float gg_gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gg_gelu_erf(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}

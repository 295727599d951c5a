// Device helpers shared by the CUDA kernels: dtype conversion, 16-byte vector loads widened to fp32, warp sums.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace paged::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

__device__ __forceinline__ void store_float(float* dst, float v) { *dst = v; }
__device__ __forceinline__ void store_float(__nv_bfloat16* dst, float v) { *dst = __float2bfloat16(v); }
__device__ __forceinline__ void store_float(__half* dst, float v) { *dst = __float2half(v); }

// Elements of T in one 16-byte load.
template <typename T>
constexpr int kVec = 16 / sizeof(T);

// Loads kVec<T> elements (16 bytes, which must be 16-byte aligned) and widens them to fp32.
template <typename T>
__device__ __forceinline__ void load_vec(const T* __restrict__ src, float (&dst)[kVec<T>]) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(src));
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec<T>; ++i) dst[i] = to_float(e[i]);
}

// Sum over aligned groups of `width` lanes (a power of two <= 32); every lane of the warp must call it.
template <int width>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = width / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The sequence owning flat query row `token`: the largest s with query_start_loc[s] <= token. Empty sequences
// (equal consecutive offsets) are skipped naturally.
__device__ __forceinline__ int find_sequence(const int32_t* __restrict__ query_start_loc, int num_seqs, int token) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start_loc[mid] <= token) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace paged::cuda

// Cache writes and block copies on the GPU: byte movement in 16-byte words where alignment allows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace paged::cuda {

// One block per token: copies its kv_heads rows of row_bytes from key/value (strided views allowed) into the slot.
// Slot -1 (padding, or a token whose K/V is not cached) is skipped.
__global__ void reshape_and_cache_kernel(const char* __restrict__ key, const char* __restrict__ value,
                                         int64_t key_token_stride, int64_t key_head_stride,
                                         int64_t value_token_stride, int64_t value_head_stride,
                                         char* __restrict__ key_cache, char* __restrict__ value_cache,
                                         const int64_t* __restrict__ slot_mapping, int num_kv_heads,
                                         int64_t row_bytes, bool aligned16) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  if (slot < 0) return;
  const int64_t token_bytes = num_kv_heads * row_bytes;
  char* kdst = key_cache + slot * token_bytes;
  char* vdst = value_cache + slot * token_bytes;
  if (aligned16) {
    const int64_t words = row_bytes / 16;
    for (int64_t i = threadIdx.x; i < num_kv_heads * words; i += blockDim.x) {
      const int64_t h = i / words, w = i % words;
      reinterpret_cast<uint4*>(kdst + h * row_bytes)[w] =
          reinterpret_cast<const uint4*>(key + t * key_token_stride + h * key_head_stride)[w];
      reinterpret_cast<uint4*>(vdst + h * row_bytes)[w] =
          reinterpret_cast<const uint4*>(value + t * value_token_stride + h * value_head_stride)[w];
    }
  } else {
    for (int64_t i = threadIdx.x; i < token_bytes; i += blockDim.x) {
      const int64_t h = i / row_bytes, b = i % row_bytes;
      kdst[i] = key[t * key_token_stride + h * key_head_stride + b];
      vdst[i] = value[t * value_token_stride + h * value_head_stride + b];
    }
  }
}

// Grid (cache, pair): copies block src to dst of one cache. `caches` holds each cache's base pointer followed by
// each cache's block size in bytes, so every layer's key and value caches go in one launch.
__global__ void copy_blocks_kernel(const int64_t* __restrict__ caches, const int64_t* __restrict__ mapping,
                                   int num_caches) {
  const int cache_index = blockIdx.x;
  const int64_t pair = blockIdx.y;
  char* cache = reinterpret_cast<char*>(caches[cache_index]);
  const int64_t block_bytes = caches[num_caches + cache_index];
  const char* src = cache + mapping[2 * pair] * block_bytes;
  char* dst = cache + mapping[2 * pair + 1] * block_bytes;
  if (block_bytes % 16 == 0) {
    for (int64_t i = threadIdx.x; i < block_bytes / 16; i += blockDim.x) {
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    }
  } else {
    for (int64_t i = threadIdx.x; i < block_bytes; i += blockDim.x) dst[i] = src[i];
  }
}

}  // namespace paged::cuda

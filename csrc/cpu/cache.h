// Cache writes and block copies: pure byte movement, so one implementation serves every dtype.
#pragma once

#include <cstdint>
#include <cstring>

namespace paged::cpu {

// Copies token `t` of a [T, kv_heads, head_bytes] source (token/head strides in bytes, rows contiguous) into
// slot `slot` of a contiguous [num_blocks * block_size, kv_heads, head_bytes] cache.
inline void write_token(const char* src, int64_t token_stride, int64_t head_stride, int64_t t, char* cache,
                        int64_t slot, int num_kv_heads, int64_t head_bytes) {
  const char* s = src + t * token_stride;
  char* d = cache + slot * num_kv_heads * head_bytes;
  if (head_stride == head_bytes) {
    std::memcpy(d, s, num_kv_heads * head_bytes);
    return;
  }
  for (int h = 0; h < num_kv_heads; ++h) std::memcpy(d + h * head_bytes, s + h * head_stride, head_bytes);
}

inline void copy_block(char* cache, int64_t block_bytes, int64_t src, int64_t dst) {
  std::memcpy(cache + dst * block_bytes, cache + src * block_bytes, block_bytes);
}

}  // namespace paged::cpu

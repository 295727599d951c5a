// Rotary position embedding in place, the neox/``rotate_half`` convention of Hugging Face checkpoints:
// for i < h = d/2, x[i] <- x[i] cos[i] - x[i+h] sin[i] and x[i+h] <- x[i+h] cos[i+h] + x[i] sin[i+h]. torch runs
// it as six passes (two slices, a negation, a concatenation, two multiplies and an add) per tensor; this is one.
//
// Every product and the sum are rounded separately, never fused into an FMA, and in bf16 each is rounded to bf16
// as torch's separate ops round: the result is bit-equal to transformers' apply_rotary_pos_emb in fp32 and bf16.
#pragma once

#include <cstdint>

#include "vec.h"

namespace paged::cpu {

// One head of d values; cos and sin are that token's [d] rows. T is float or bf16_t.
template <typename T>
__attribute__((optimize("fp-contract=off"))) inline void rotary_head(T* x, const T* cos, const T* sin, int64_t d) {
  const int64_t h = d / 2;
  int64_t i = 0;
#if PAGED_AVX2
  for (; i + 8 <= h; i += 8) {
    const __m256 lo = load8(x + i), hi = load8(x + h + i);
    const __m256 lo_cos = round8<T>(_mm256_mul_ps(lo, load8(cos + i)));
    const __m256 hi_sin = round8<T>(_mm256_mul_ps(hi, load8(sin + i)));
    const __m256 hi_cos = round8<T>(_mm256_mul_ps(hi, load8(cos + h + i)));
    const __m256 lo_sin = round8<T>(_mm256_mul_ps(lo, load8(sin + h + i)));
    store8(_mm256_sub_ps(lo_cos, hi_sin), x + i);
    store8(_mm256_add_ps(hi_cos, lo_sin), x + h + i);
  }
#endif
  for (; i < h; ++i) {
    const float lo = to_float(x[i]), hi = to_float(x[h + i]);
    const float lo_cos = round_to<T>(lo * to_float(cos[i])), hi_sin = round_to<T>(hi * to_float(sin[i]));
    const float hi_cos = round_to<T>(hi * to_float(cos[h + i])), lo_sin = round_to<T>(lo * to_float(sin[h + i]));
    store_float(lo_cos - hi_sin, x + i);
    store_float(hi_cos + lo_sin, x + h + i);
  }
}

}  // namespace paged::cpu

// RMSNorm in one pass per row: out = x * rsqrt(mean(x^2) + eps) * (offset + w), accumulated in fp32 for fp32 or
// bf16 rows. torch runs it as six element-wise ops (square, mean, add, rsqrt, two multiplies), each a pass over the
// activations with its own dispatch, plus two casts in bf16; Gemma 3 normalises four times per layer plus q and k
// per head. offset = 1 gives Gemma's (1 + w).
//
// Rounding follows transformers in bf16: Gemma scales by (1 + w) in fp32 and rounds once; Llama/Qwen round the
// normalised row to the model's dtype first, then multiply by the weight (rounded again on store).
#pragma once

#include <cmath>
#include <cstdint>

#include "vec.h"

namespace paged::cpu {

// One row of d values (contiguous) into `dst`; T is float or bf16_t for x, w and dst alike.
template <typename T>
inline void rms_norm_row(const T* x, const T* w, T* dst, int64_t d, float eps, float offset) {
  int64_t i = 0;
  float sum = 0.0f;
#if PAGED_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  for (; i + 16 <= d; i += 16) {
    const __m256 a = load8(x + i), b = load8(x + i + 8);
    acc0 = _mm256_fmadd_ps(a, a, acc0);
    acc1 = _mm256_fmadd_ps(b, b, acc1);
  }
  for (; i + 8 <= d; i += 8) {
    const __m256 a = load8(x + i);
    acc0 = _mm256_fmadd_ps(a, a, acc0);
  }
  sum = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < d; ++i) sum += to_float(x[i]) * to_float(x[i]);
  const float inv = 1.0f / std::sqrt(sum / static_cast<float>(d) + eps);
  i = 0;
  if (offset != 0.0f) {
#if PAGED_AVX2
    const __m256 inv8 = _mm256_set1_ps(inv), offset8 = _mm256_set1_ps(offset);
    for (; i + 8 <= d; i += 8) {
      const __m256 scale = _mm256_add_ps(offset8, load8(w + i));
      store8(_mm256_mul_ps(_mm256_mul_ps(load8(x + i), inv8), scale), dst + i);
    }
#endif
    for (; i < d; ++i) store_float(to_float(x[i]) * inv * (offset + to_float(w[i])), dst + i);
    return;
  }
#if PAGED_AVX2
  const __m256 inv8 = _mm256_set1_ps(inv);
  for (; i + 8 <= d; i += 8) {
    store8(_mm256_mul_ps(round8<T>(_mm256_mul_ps(load8(x + i), inv8)), load8(w + i)), dst + i);
  }
#endif
  for (; i < d; ++i) store_float(round_to<T>(to_float(x[i]) * inv) * to_float(w[i]), dst + i);
}

}  // namespace paged::cpu

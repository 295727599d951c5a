// RMSNorm in one pass per row: out = x * rsqrt(mean(x^2) + eps) * (offset + w), fp32. torch runs it as six
// element-wise ops (square, mean, add, rsqrt, two multiplies), each a pass over the activations with its own
// dispatch; Gemma 3 normalises four times per layer plus q and k per head. offset = 1 gives Gemma's (1 + w).
#pragma once

#include <cmath>
#include <cstdint>

#include "vec.h"

namespace paged::cpu {

// One row of d floats (contiguous) into `dst`.
inline void rms_norm_row(const float* x, const float* w, float* dst, int64_t d, float eps, float offset) {
  int64_t i = 0;
  float sum = 0.0f;
#if PAGED_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  for (; i + 16 <= d; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    acc0 = _mm256_fmadd_ps(a, a, acc0);
    acc1 = _mm256_fmadd_ps(b, b, acc1);
  }
  for (; i + 8 <= d; i += 8) {
    const __m256 a = _mm256_loadu_ps(x + i);
    acc0 = _mm256_fmadd_ps(a, a, acc0);
  }
  sum = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < d; ++i) sum += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum / static_cast<float>(d) + eps);
  i = 0;
#if PAGED_AVX2
  const __m256 inv8 = _mm256_set1_ps(inv), offset8 = _mm256_set1_ps(offset);
  for (; i + 8 <= d; i += 8) {
    const __m256 scale = _mm256_add_ps(offset8, _mm256_loadu_ps(w + i));
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv8), scale));
  }
#endif
  for (; i < d; ++i) dst[i] = x[i] * inv * (offset + w[i]);
}

}  // namespace paged::cpu

// Gated-MLP activations fused with the gate * up product: out[t, :] = act(x[t, :d]) * x[t, d:2d], fp32.
// torch runs these as three passes (activation on a strided half, multiply, and the split's views), and its
// tanh is the slow part of Gemma's GELU. Both activations here are x * sigmoid(z), using the identity
// 0.5 * (1 + tanh(y)) = sigmoid(2y) for the tanh-approximated GELU, so one vector exp (relative error ~1e-7)
// does the work: z = x for SiLU, z = 2 * sqrt(2/pi) * (x + 0.044715 x^3) for GELU.
#pragma once

#include <cmath>
#include <cstdint>

#include "vec.h"

namespace paged::cpu {

enum class GatedActivation { kSilu, kGeluTanh };

constexpr float kGeluTwoSqrtTwoOverPi = 1.5957691216057308f;  // 2 * sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

template <GatedActivation A>
inline float sigmoid_argument(float x) {
  if constexpr (A == GatedActivation::kSilu) return x;
  return kGeluTwoSqrtTwoOverPi * (x + kGeluCubic * x * x * x);
}

#if PAGED_AVX2
template <GatedActivation A>
inline __m256 sigmoid_argument8(__m256 x) {
  if constexpr (A == GatedActivation::kSilu) return x;
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  return _mm256_mul_ps(_mm256_set1_ps(kGeluTwoSqrtTwoOverPi), _mm256_fmadd_ps(_mm256_set1_ps(kGeluCubic), x3, x));
}
#endif

// Rows [begin, end) of `in` ([rows, 2d], rows in_stride apart) into `out` ([rows, d], rows out_stride apart).
template <GatedActivation A>
inline void gated_activation_rows(const float* in, int64_t in_stride, float* out, int64_t out_stride, int64_t d,
                                  int64_t begin, int64_t end) {
  for (int64_t t = begin; t < end; ++t) {
    const float* gate = in + t * in_stride;
    const float* up = gate + d;
    float* dst = out + t * out_stride;
    int64_t i = 0;
#if PAGED_AVX2
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= d; i += 8) {
      const __m256 x = _mm256_loadu_ps(gate + i);
      // exp8 clamps its input, so a very negative z gives x / (1 + 2^127) ~ 0 rather than inf/inf.
      const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), sigmoid_argument8<A>(x)));
      const __m256 act = _mm256_div_ps(x, _mm256_add_ps(one, e));
      _mm256_storeu_ps(dst + i, _mm256_mul_ps(act, _mm256_loadu_ps(up + i)));
    }
#endif
    for (; i < d; ++i) {
      const float x = gate[i];
      dst[i] = x / (1.0f + std::exp(-sigmoid_argument<A>(x))) * up[i];
    }
  }
}

}  // namespace paged::cpu

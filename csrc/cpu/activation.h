// Gated-MLP activations fused with the gate * up product: out[t, :] = act(x[t, :d]) * x[t, d:2d], for fp32 or
// bf16 rows computed in fp32 (in bf16 the activation is rounded before the product, as torch's two ops round).
// torch runs these as three passes (activation on a strided half, multiply, and the split's views), and its
// tanh is the slow part of Gemma's GELU. Both activations here come from one vector exp (relative error ~1e-7):
// SiLU is x * sigmoid(x); the tanh-approximated GELU uses tanh(y) = 2 * sigmoid(2y) - 1 with
// y = sqrt(2/pi) * (x + 0.044715 x^3), and keeps torch's 0.5 * x * (1 + tanh(y)): rounding tanh to fp32 before
// adding 1 is where torch loses bits for negative x, and doing the same keeps bf16 results equal to its (the plain
// sigmoid form rounds 7 % of bf16 outputs differently).
#pragma once

#include <cmath>
#include <cstdint>

#include "vec.h"

namespace paged::cpu {

enum class GatedActivation { kSilu, kGeluTanh };

constexpr float kGeluTwoSqrtTwoOverPi = 1.5957691216057308f;  // 2 * sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

template <GatedActivation A>
inline float activation_from_exp(float x, float e) {  // e = exp(-z)
  if constexpr (A == GatedActivation::kSilu) return x / (1.0f + e);
  const float tanh_y = 2.0f / (1.0f + e) - 1.0f;
  return 0.5f * x * (1.0f + tanh_y);
}

template <GatedActivation A>
inline float sigmoid_argument(float x) {
  if constexpr (A == GatedActivation::kSilu) return x;
  return kGeluTwoSqrtTwoOverPi * (x + kGeluCubic * x * x * x);
}

#if PAGED_AVX2
template <GatedActivation A>
inline __m256 activation_from_exp8(__m256 x, __m256 e) {
  const __m256 one = _mm256_set1_ps(1.0f);
  if constexpr (A == GatedActivation::kSilu) return _mm256_div_ps(x, _mm256_add_ps(one, e));
  const __m256 tanh_y = _mm256_sub_ps(_mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(one, e)), one);
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(one, tanh_y));
}

template <GatedActivation A>
inline __m256 sigmoid_argument8(__m256 x) {
  if constexpr (A == GatedActivation::kSilu) return x;
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  return _mm256_mul_ps(_mm256_set1_ps(kGeluTwoSqrtTwoOverPi), _mm256_fmadd_ps(_mm256_set1_ps(kGeluCubic), x3, x));
}
#endif

// Rows [begin, end) of `in` ([rows, 2d], rows in_stride apart) into `out` ([rows, d], rows out_stride apart);
// T is float or bf16_t.
template <GatedActivation A, typename T>
inline void gated_activation_rows(const T* in, int64_t in_stride, T* out, int64_t out_stride, int64_t d,
                                  int64_t begin, int64_t end) {
  for (int64_t t = begin; t < end; ++t) {
    const T* gate = in + t * in_stride;
    const T* up = gate + d;
    T* dst = out + t * out_stride;
    int64_t i = 0;
#if PAGED_AVX2
    for (; i + 8 <= d; i += 8) {
      const __m256 x = load8(gate + i);
      // exp8 clamps its input, so a very negative z gives x / (1 + 2^127) ~ 0 rather than inf/inf.
      const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), sigmoid_argument8<A>(x)));
      store8(_mm256_mul_ps(round8<T>(activation_from_exp8<A>(x, e)), load8(up + i)), dst + i);
    }
#endif
    for (; i < d; ++i) {
      const float x = to_float(gate[i]);
      const float act = activation_from_exp<A>(x, std::exp(-sigmoid_argument<A>(x)));
      store_float(round_to<T>(act) * to_float(up[i]), dst + i);
    }
  }
}

}  // namespace paged::cpu

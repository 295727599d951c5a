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

#include "isa.h"
#include "simd.h"
#include "vec.h"

namespace paged::cpu {

enum class GatedActivation { kSilu, kGeluTanh };

constexpr float kGeluTwoSqrtTwoOverPi = 1.5957691216057308f;  // 2 * sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

namespace baseline_activation {
using Simd = BaselineSimd;
using reg = Simd::reg;
#include "activation_kernels.inc"
}  // namespace baseline_activation

#if PAGED_X86
PAGED_BEGIN_AVX512_REGION
namespace avx512_activation {
using Simd = Avx512Simd;
using reg = Simd::reg;
#include "activation_kernels.inc"
}  // namespace avx512_activation
PAGED_END_AVX512_REGION
#endif

// Rows [begin, end) of `in` ([rows, 2d], rows in_stride apart) into `out` ([rows, d], rows out_stride apart);
// T is float or bf16_t. AVX-512 where `isa` allows it.
template <GatedActivation A, typename T>
inline void gated_activation_rows(const T* in, int64_t in_stride, T* out, int64_t out_stride, int64_t d,
                                  int64_t begin, int64_t end, Isa isa) {
  for (int64_t t = begin; t < end; ++t) {
    const T* gate = in + t * in_stride;
#if PAGED_X86
    if (isa >= Isa::kAvx512) {
      avx512_activation::gated_activation_row<A>(gate, gate + d, out + t * out_stride, d);
      continue;
    }
#endif
    (void)isa;
    baseline_activation::gated_activation_row<A>(gate, gate + d, out + t * out_stride, d);
  }
}

}  // namespace paged::cpu

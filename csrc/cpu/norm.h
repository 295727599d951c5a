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

#include "isa.h"
#include "simd.h"
#include "vec.h"

namespace paged::cpu {

namespace baseline_norm {
using Simd = BaselineSimd;
using reg = Simd::reg;
#include "norm_kernels.inc"
}  // namespace baseline_norm

#if PAGED_X86
PAGED_BEGIN_AVX512_REGION
namespace avx512_norm {
using Simd = Avx512Simd;
using reg = Simd::reg;
#include "norm_kernels.inc"
}  // namespace avx512_norm
PAGED_END_AVX512_REGION
#endif

// One row, in AVX-512 where `isa` allows it.
template <typename T>
inline void rms_norm_row(const T* x, const T* w, T* dst, int64_t d, float eps, float offset, Isa isa) {
#if PAGED_X86
  if (isa >= Isa::kAvx512) return avx512_norm::rms_norm_row(x, w, dst, d, eps, offset);
#endif
  (void)isa;
  baseline_norm::rms_norm_row(x, w, dst, d, eps, offset);
}

}  // namespace paged::cpu

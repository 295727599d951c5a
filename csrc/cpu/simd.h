// One SIMD vocabulary per instruction set, so a kernel written once against `Simd` compiles to each variant:
// Scalar (1 lane: builds without AVX2), Avx2 (8 lanes, vec.h's helpers) and Avx512 (16 lanes). The Avx512
// members carry the AVX-512 target themselves; a kernel that uses them must be compiled inside an AVX-512 target
// region too (see PAGED_BEGIN_AVX512_REGION), which is how one build holds every variant.
#pragma once

#include <cmath>
#include <type_traits>

#include "isa.h"
#include "vec.h"

#if PAGED_X86
#include <immintrin.h>
#endif

namespace paged::cpu {

struct ScalarSimd {
  using reg = float;
  static constexpr int kWidth = 1;
  static reg zero() { return 0.0f; }
  static reg set1(float v) { return v; }
  static reg load(const float* p) { return *p; }
  static reg load(const bf16_t* p) { return to_float(*p); }
  static void store(float* p, reg v) { *p = v; }
  static void store(bf16_t* p, reg v) { store_float(v, p); }
  static reg add(reg a, reg b) { return a + b; }
  static reg mul(reg a, reg b) { return a * b; }
  static reg div(reg a, reg b) { return a / b; }
  template <typename T>
  static reg round(reg v) {
    return round_to<T>(v);
  }
  static reg sub(reg a, reg b) { return a - b; }
  static reg fma(reg a, reg b, reg c) { return a * b + c; }
  static float hsum(reg v) { return v; }
  static reg exp(reg v) { return std::exp(v); }
};

#if PAGED_AVX2
struct Avx2Simd {
  using reg = __m256;
  static constexpr int kWidth = 8;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg set1(float v) { return _mm256_set1_ps(v); }
  static reg load(const float* p) { return load8(p); }
  static reg load(const bf16_t* p) { return load8(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static void store(bf16_t* p, reg v) { store8(v, p); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  template <typename T>
  static reg round(reg v) {
    return round8<T>(v);
  }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static float hsum(reg v) { return cpu::hsum(v); }
  static reg exp(reg v) { return exp8(v); }
};
using BaselineSimd = Avx2Simd;
#else
using BaselineSimd = ScalarSimd;
#endif

#if PAGED_X86
struct Avx512Simd {
  using reg = __m512;
  static constexpr int kWidth = 16;
  PAGED_TARGET_AVX512 static reg zero() { return _mm512_setzero_ps(); }
  PAGED_TARGET_AVX512 static reg set1(float v) { return _mm512_set1_ps(v); }
  PAGED_TARGET_AVX512 static reg load(const float* p) { return _mm512_loadu_ps(p); }
  PAGED_TARGET_AVX512 static reg load(const bf16_t* p) {
    const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
  }
  PAGED_TARGET_AVX512 static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  // The bf16 bit patterns of 16 lanes (in the low halves), rounded to nearest even with NaN kept quiet, as
  // store_float (vec.h) rounds one value.
  PAGED_TARGET_AVX512 static __m512i bf16_bits(reg v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i bits = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    return _mm512_mask_mov_epi32(bits, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7fc0));
  }
  PAGED_TARGET_AVX512 static void store(bf16_t* p, reg v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(bf16_bits(v)));
  }
  // v rounded to T's precision and widened back, as round8 (vec.h).
  template <typename T>
  PAGED_TARGET_AVX512 static reg round(reg v) {
    if constexpr (std::is_same_v<T, float>) return v;
    return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits(v), 16));
  }
  PAGED_TARGET_AVX512 static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  PAGED_TARGET_AVX512 static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  PAGED_TARGET_AVX512 static reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  PAGED_TARGET_AVX512 static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  PAGED_TARGET_AVX512 static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  PAGED_TARGET_AVX512 static float hsum(reg v) { return _mm512_reduce_add_ps(v); }

  // exp8's method and constants (vec.h) on 16 lanes, so both variants agree to its ~1e-7.
  PAGED_TARGET_AVX512 static reg exp(reg x) {
    const __m512 lo = _mm512_set1_ps(exp_poly::kLo);
    const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(exp_poly::kHi));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(exp_poly::kLog2e)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_fnmadd_ps(n, _mm512_set1_ps(exp_poly::kLn2Hi), x);
    f = _mm512_fnmadd_ps(n, _mm512_set1_ps(exp_poly::kLn2Lo), f);
    __m512 p = _mm512_set1_ps(exp_poly::kCoeffs[0]);
    for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(exp_poly::kCoeffs[i]));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(f, f), _mm512_add_ps(f, _mm512_set1_ps(1.0f)));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow), _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
  }
};

// Everything defined between these compiles for AVX-512 (templates included), so a kernel written against
// `Simd` can be instantiated with Avx512Simd there.
#if defined(__clang__)
#define PAGED_BEGIN_AVX512_REGION                                                                                \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512vl,avx512dq,avx2,fma\"))), \
          apply_to = function)")
#define PAGED_END_AVX512_REGION _Pragma("clang attribute pop")
#else
#define PAGED_BEGIN_AVX512_REGION \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,avx2,fma\")")
#define PAGED_END_AVX512_REGION _Pragma("GCC pop_options")
#endif
#endif  // PAGED_X86

}  // namespace paged::cpu

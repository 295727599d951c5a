// Small SIMD vocabulary for the CPU kernels: fp32/bf16 loads widened to fp32, a vector exp, horizontal sums.
// With AVX2+FMA (chosen at build time from torch's detected CPU capability) the helpers use intrinsics;
// otherwise they fall back to scalar code that the compiler may still auto-vectorise.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define PAGED_AVX2 1
#else
#define PAGED_AVX2 0
#endif

namespace paged::cpu {

// Storage-only bfloat16: same layout as at::BFloat16, kept torch-free so the kernels compile without ATen.
struct bf16_t {
  uint16_t bits;
};

inline float to_float(float x) { return x; }

inline float to_float(bf16_t x) {
  const uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline void store_float(float v, float* dst) { *dst = v; }

// Round to nearest even, as torch does, so kernel and reference agree bit for bit on the final cast.
inline void store_float(float v, bf16_t* dst) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  if (std::isnan(v)) {
    dst->bits = 0x7fc0;
    return;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  dst->bits = static_cast<uint16_t>(u >> 16);
}

template <typename T>
inline float round_to(float v) {
  T t;
  store_float(v, &t);
  return to_float(t);
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The vector exp (exp8 below, Avx512Simd::exp in simd.h): exp(x) = 2^n * e^f with x = n*ln2 + f, |f| <= ln2/2
// (ln2 split in two parts for accuracy), e^f by a degree-6 polynomial (relative error ~1e-7). Inputs below kLo
// (including -inf from masking) give exactly 0, so masked keys never contribute, even when their value rows hold
// garbage. Every vector width uses these constants, so the variants agree.
namespace exp_poly {
constexpr float kLo = -87.3365447505f;
constexpr float kHi = 88.3762626647f;
constexpr float kLog2e = 1.44269504089f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
// e^f = 1 + f + f^2 * p(f), p's coefficients from f^5 down to f^0 (Horner order).
constexpr float kCoeffs[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                              4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace exp_poly

#if PAGED_AVX2

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

inline __m256 load8(const bf16_t* p) {
  const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

// The bf16 bit patterns of 8 fp32 lanes (in the low halves), rounded to nearest even with NaN kept quiet: the
// vector form of store_float above.
inline __m256i bf16_bits8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(nan));
}

inline void store8(__m256 v, float* p) { _mm256_storeu_ps(p, v); }

inline void store8(__m256 v, bf16_t* p) {
  const __m256i bits = bf16_bits8(v);
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

// v rounded to T's precision and widened back to fp32, what torch's ``x.to(T).float()`` gives: the kernels use it
// where transformers casts an intermediate result to the model's dtype, so bf16 outputs round where theirs do.
template <typename T>
inline __m256 round8(__m256 v) {
  if constexpr (std::is_same_v<T, float>) return v;
  return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_bits8(v), 16));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(exp_poly::kLo);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(exp_poly::kHi));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(exp_poly::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 f = _mm256_fnmadd_ps(n, _mm256_set1_ps(exp_poly::kLn2Hi), x);
  f = _mm256_fnmadd_ps(n, _mm256_set1_ps(exp_poly::kLn2Lo), f);
  __m256 p = _mm256_set1_ps(exp_poly::kCoeffs[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(exp_poly::kCoeffs[i]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(f, f), _mm256_add_ps(f, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 r = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(underflow, r);
}

#endif  // PAGED_AVX2

// Asks for `bytes` starting at `p` to be brought into cache ahead of use. Blocks of the paged cache are scattered,
// so the hardware prefetcher, which follows sequential streams within a page, cannot guess the next one.
inline void prefetch_bytes(const void* p, int64_t bytes) {
#if PAGED_AVX2
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace paged::cpu

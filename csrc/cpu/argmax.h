// Greedy sampling's argmax over each row of the logits, in one pass: torch's argmax ran at a quarter of the
// speed of its own max reduction on [64, 262144] (9.6 against 2.3 ms on two threads), and it runs every step.
// Same answer as torch: the first index of the largest value, and the first NaN if the row has one.
#pragma once

#include <cmath>
#include <cstdint>

#include "vec.h"

namespace paged::cpu {

inline int64_t first_nan(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(x[i])) return i;
  return -1;
}

inline int64_t argmax_row(const float* x, int64_t n) {
  if (n == 0) return 0;
  int64_t i = 0;
  float best = x[0];
  int64_t best_index = 0;
#if PAGED_AVX2
  if (n >= 8 && n < (int64_t{1} << 31)) {
    // Per lane: its largest value so far and the first index holding it (a strict > keeps the earliest).
    __m256 lane_best = _mm256_loadu_ps(x);
    __m256i lane_index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i index = lane_index;
    __m256 unordered = _mm256_cmp_ps(lane_best, lane_best, _CMP_UNORD_Q);
    const __m256i step = _mm256_set1_epi32(8);
    for (i = 8; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      index = _mm256_add_epi32(index, step);
      const __m256 greater = _mm256_cmp_ps(v, lane_best, _CMP_GT_OQ);
      lane_best = _mm256_blendv_ps(lane_best, v, greater);
      lane_index = _mm256_castps_si256(
          _mm256_blendv_ps(_mm256_castsi256_ps(lane_index), _mm256_castsi256_ps(index), greater));
      unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(unordered) != 0) return first_nan(x, n);
    alignas(32) float values[8];
    alignas(32) int32_t indices[8];
    _mm256_store_ps(values, lane_best);
    _mm256_store_si256(reinterpret_cast<__m256i*>(indices), lane_index);
    best = values[0];
    best_index = indices[0];
    for (int lane = 1; lane < 8; ++lane) {
      if (values[lane] > best || (values[lane] == best && indices[lane] < best_index)) {
        best = values[lane];
        best_index = indices[lane];
      }
    }
  }
#endif
  for (; i < n; ++i) {
    if (std::isnan(x[i])) return first_nan(x, n);
    if (x[i] > best) {
      best = x[i];
      best_index = i;
    }
  }
  return best_index;
}

}  // namespace paged::cpu

// Which panels (gemm.h) of an LM head hold a candidate of the rescored greedy head (models/greedy_head.py): panel p (columns
// [16p, 16p + 16)) is kept when some row r has an approximate logit at or above that row's threshold t[r]. One
// pass over the approximate logits, in place of torch's compare, nonzero, bincount and unique over [rows, vocab]
// (~7 ms on [16, 262144] on two threads, a quarter of the whole greedy head).
// NaN compares false, so a NaN logit never makes a panel; the caller takes the full head for rows whose
// threshold is not finite.
#pragma once

#include <cstdint>

#include "gemm.h"
#include "vec.h"

namespace paged::cpu {

static_assert(kPanelCols == 16, "reaches() compares a panel as two 8-float vectors");

// Whether any of the `n` (<= kPanelCols) values reaches `threshold`.
inline bool reaches(const float* x, int64_t n, float threshold) {
#if PAGED_AVX2
  if (n == kPanelCols) {
    const __m256 t = _mm256_set1_ps(threshold);
    const __m256 lo = _mm256_cmp_ps(_mm256_loadu_ps(x), t, _CMP_GE_OQ);
    const __m256 hi = _mm256_cmp_ps(_mm256_loadu_ps(x + 8), t, _CMP_GE_OQ);
    return _mm256_movemask_ps(_mm256_or_ps(lo, hi)) != 0;
  }
#endif
  for (int64_t i = 0; i < n; ++i)
    if (x[i] >= threshold) return true;
  return false;
}

// Marks hit[p - begin] for the panels p in [begin, end) that some row reaches; rows are walked one at a time so
// each reads a contiguous stretch of its logits.
inline void mark_candidate_panels(const float* scores, int64_t stride, int64_t rows, int64_t cols,
                                  const float* threshold, int64_t begin, int64_t end, uint8_t* hit) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = scores + r * stride;
    for (int64_t p = begin; p < end; ++p) {
      if (hit[p - begin]) continue;
      const int64_t col = p * kPanelCols;
      const int64_t n = cols - col < kPanelCols ? cols - col : kPanelCols;
      hit[p - begin] = reaches(row + col, n, threshold[r]);
    }
  }
}

}  // namespace paged::cpu

// The panel GEMM's AVX-512 variant (see gemm.h for the layout): the same packed panels of 16 output columns,
// which are one 512-bit register wide, against strips of 12 rows of x, so a 12 x 16 register tile holds 12
// accumulators (the AVX2 kernel's 6 x 16 tile needs 12 as well, in half-width registers). Each k step does one
// panel load, 12 broadcasts and 12 FMAs: twice the multiply-adds per instruction of the AVX2 kernel. On CPUs
// with two 512-bit FMA pipes (most Xeons) that doubles the peak; on Zen 4, whose 512-bit FMAs issue as two
// halves, it saves instructions, not cycles.
#pragma once

#include <algorithm>
#include <cstdint>

#include "gemm.h"
#include "isa.h"

#if PAGED_X86
#include <immintrin.h>

namespace paged::cpu::avx512 {

constexpr int kStripRows = 12;

PAGED_TARGET_AVX512 inline void strip_times_panel(const float* strip, const float* panel, int64_t k, float* tile,
                                                  const float* next) {
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
  __m512 c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* a = strip + kk * kStripRows;
    const __m512 b = _mm512_loadu_ps(panel + kk * kPanelCols);
    if (next != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next + kk * kPanelCols), _MM_HINT_T1);
    c0 = _mm512_fmadd_ps(_mm512_set1_ps(a[0]), b, c0);
    c1 = _mm512_fmadd_ps(_mm512_set1_ps(a[1]), b, c1);
    c2 = _mm512_fmadd_ps(_mm512_set1_ps(a[2]), b, c2);
    c3 = _mm512_fmadd_ps(_mm512_set1_ps(a[3]), b, c3);
    c4 = _mm512_fmadd_ps(_mm512_set1_ps(a[4]), b, c4);
    c5 = _mm512_fmadd_ps(_mm512_set1_ps(a[5]), b, c5);
    c6 = _mm512_fmadd_ps(_mm512_set1_ps(a[6]), b, c6);
    c7 = _mm512_fmadd_ps(_mm512_set1_ps(a[7]), b, c7);
    c8 = _mm512_fmadd_ps(_mm512_set1_ps(a[8]), b, c8);
    c9 = _mm512_fmadd_ps(_mm512_set1_ps(a[9]), b, c9);
    c10 = _mm512_fmadd_ps(_mm512_set1_ps(a[10]), b, c10);
    c11 = _mm512_fmadd_ps(_mm512_set1_ps(a[11]), b, c11);
  }
  const __m512 rows[kStripRows] = {c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11};
  for (int i = 0; i < kStripRows; ++i) _mm512_storeu_ps(tile + i * kPanelCols, rows[i]);
}

// One row against a panel, two chains (even and odd k) so the FMA latency is hidden while the weight streams.
PAGED_TARGET_AVX512 inline void row_times_panel(const float* strip, int row, const float* panel, int64_t k,
                                                float* tile) {
  __m512 c = _mm512_setzero_ps(), d = c;
  int64_t kk = 0;
  for (; kk + 2 <= k; kk += 2) {
    c = _mm512_fmadd_ps(_mm512_set1_ps(strip[kk * kStripRows + row]), _mm512_loadu_ps(panel + kk * kPanelCols), c);
    d = _mm512_fmadd_ps(_mm512_set1_ps(strip[(kk + 1) * kStripRows + row]),
                        _mm512_loadu_ps(panel + (kk + 1) * kPanelCols), d);
  }
  if (kk < k) c = _mm512_fmadd_ps(_mm512_set1_ps(strip[kk * kStripRows + row]), _mm512_loadu_ps(panel + kk * kPanelCols), c);
  _mm512_storeu_ps(tile, _mm512_add_ps(c, d));
}

// As cpu::gemm_panels, with strips of 12 rows (pack them with pack_strips(..., kStripRows)).
inline void gemm_panels(const float* strips, int64_t m, int64_t k, const float* panels, int64_t n, float* out,
                        int64_t out_stride, int64_t panel_begin, int64_t panel_end, float* tile) {
  gemm_panels_with<kStripRows>(strip_times_panel, row_times_panel, strips, m, k, panels, n, out, out_stride,
                               panel_begin, panel_end, tile);
}

}  // namespace paged::cpu::avx512
#endif  // PAGED_X86

// The panel GEMM's AVX-512 variant (see gemm.h for the layout): the same packed panels of 16 output columns,
// which are one 512-bit register wide, taken two at a time against strips of 12 rows of x, so a 12 x 32
// register tile holds 24 accumulators. Each k step does two panel loads, 12 broadcasts and 24 FMAs: the
// broadcasts are shared by both panels, so loads stay well below the two FMA pipes of a Xeon (one panel at a
// time needs 13 loads per 12 FMAs). The k dimension is walked in blocks of kDepthBlock: a pair of panels' block
// (32 KiB) then stays in L1 while every strip's block goes by, and the strips stream from L2. Without the
// blocking, a whole panel (k x 64 B, 40 KiB at k = 640) and a strip did not fit in L1 together, and the kernel
// ran at ~65 % of its in-L1 speed on prefill-sized row counts (docs/benchmarks.md#gemm).
#pragma once

#include <algorithm>
#include <cstdint>

#include "gemm.h"
#include "isa.h"

#if PAGED_X86
#include <immintrin.h>

namespace paged::cpu::avx512 {

constexpr int kStripRows = 12;
constexpr int64_t kDepthBlock = 256;

// tile_p[0:12][0:16] (+)= strip . panel_p over `depth` k steps for Panels (1 or 2) panels `panel_stride` floats
// apart; `accumulate` adds to the tile's running sums (every depth block after the first). The accumulator
// arrays stay in registers because every loop over them is fully unrolled.
template <int Panels>
PAGED_TARGET_AVX512 inline void strip_times_panels(const float* strip, const float* panel, int64_t panel_stride,
                                                   int64_t depth, float* tile, int64_t tile_stride, bool accumulate) {
  __m512 c[Panels][kStripRows];
#pragma GCC unroll 12
  for (int i = 0; i < kStripRows; ++i)
#pragma GCC unroll 2
    for (int p = 0; p < Panels; ++p)
      c[p][i] = accumulate ? _mm512_loadu_ps(tile + p * tile_stride + i * kPanelCols) : _mm512_setzero_ps();
  for (int64_t kk = 0; kk < depth; ++kk) {
    const float* a = strip + kk * kStripRows;
    __m512 b[Panels];
#pragma GCC unroll 2
    for (int p = 0; p < Panels; ++p) b[p] = _mm512_loadu_ps(panel + p * panel_stride + kk * kPanelCols);
#pragma GCC unroll 12
    for (int i = 0; i < kStripRows; ++i) {
      const __m512 x = _mm512_set1_ps(a[i]);
#pragma GCC unroll 2
      for (int p = 0; p < Panels; ++p) c[p][i] = _mm512_fmadd_ps(x, b[p], c[p][i]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < kStripRows; ++i)
#pragma GCC unroll 2
    for (int p = 0; p < Panels; ++p) _mm512_storeu_ps(tile + p * tile_stride + i * kPanelCols, c[p][i]);
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

// Floats of the per-thread tile gemm_panels needs for m rows: two panels' worth of 12-row strips.
inline int64_t tile_floats(int64_t m) { return 2 * (m + kStripRows - 1) / kStripRows * kStripRows * kPanelCols; }

// Panels `panel` and, for Panels == 2, the next one: every strip against them, depth block by depth block, into
// `tile` (one [m rounded up to strips][16] tile per panel), then out.
template <int Panels>
PAGED_TARGET_AVX512 inline void strips_times_panels(const float* strips, int64_t m, int64_t k, const float* panel,
                                                    float* tile) {
  const int64_t num_strips = (m + kStripRows - 1) / kStripRows;
  const int64_t tile_stride = num_strips * kStripRows * kPanelCols;
  const int64_t panel_stride = k * kPanelCols;
  for (int64_t k0 = 0; k0 < k; k0 += kDepthBlock) {
    const int64_t depth = std::min(kDepthBlock, k - k0);
    for (int64_t s = 0; s < num_strips; ++s)
      strip_times_panels<Panels>(strips + (s * k + k0) * kStripRows, panel + k0 * kPanelCols, panel_stride, depth,
                                 tile + s * kStripRows * kPanelCols, tile_stride, k0 > 0);
  }
}

// As cpu::gemm_panels, with strips of 12 rows (pack them with pack_strips(..., kStripRows)) and a tile of
// tile_floats(m) floats.
PAGED_TARGET_AVX512 inline void gemm_panels(const float* strips, int64_t m, int64_t k, const float* panels, int64_t n,
                                            float* out, int64_t out_stride, int64_t panel_begin, int64_t panel_end,
                                            float* tile) {
  const int64_t tile_stride = (m + kStripRows - 1) / kStripRows * kStripRows * kPanelCols;
  for (int64_t p = panel_begin; p < panel_end;) {
    const float* panel = panels + p * k * kPanelCols;
    int taken = 1;
    if (m <= kNarrowRows) {
      for (int r = 0; r < m; ++r) row_times_panel(strips, r, panel, k, tile + r * kPanelCols);
    } else if (p + 1 < panel_end) {
      strips_times_panels<2>(strips, m, k, panel, tile);
      taken = 2;
    } else {
      strips_times_panels<1>(strips, m, k, panel, tile);
    }
    // Row by row, the panels' columns side by side (one 128-byte run of `out` per row for a pair), with one
    // (masked) vector store per panel: a copy call per 16 floats took a fifth of a prefill GEMM's time.
    for (int64_t r = 0; r < m; ++r)
      for (int t = 0; t < taken; ++t) {
        const int64_t col0 = (p + t) * kPanelCols;
        const __mmask16 cols = static_cast<__mmask16>((1u << std::min<int64_t>(kPanelCols, n - col0)) - 1);
        _mm512_mask_storeu_ps(out + r * out_stride + col0, cols,
                              _mm512_loadu_ps(tile + t * tile_stride + r * kPanelCols));
      }
    p += taken;
  }
}

}  // namespace paged::cpu::avx512
#endif  // PAGED_X86

// fp32 GEMM for few rows against a very wide weight, out[M, N] = x[M, K] @ W[N, K]^T: the LM head's shape
// (M = the rows that sample, N = the vocabulary, 262,144 for Gemma). The weight is packed once into panels of 16
// output columns, [ceil(N / 16)][K][16], so the inner loop streams one panel with aligned loads while 6 rows
// of x are broadcast against it (a 6 x 16 register tile: 12 accumulators). Results are gathered in a small
// per-thread tile and written out row by row: storing straight into `out`, whose rows are N floats apart, put
// every row of a tile in the same cache set and ran at a third of the speed. Without AVX2 a scalar loop
// computes the same tile.
#pragma once

#include <algorithm>
#include <cstdint>

#include "vec.h"

namespace paged::cpu {

constexpr int kPanelCols = 16;  // output columns per weight panel: two 8-float vectors
constexpr int kStripRows = 6;   // rows of x per register tile

inline int64_t num_panels(int64_t n) { return (n + kPanelCols - 1) / kPanelCols; }

// w [n, k] row-major -> panels [num_panels(n)][k][16]; columns past n are zero.
inline void pack_panels(const float* w, int64_t n, int64_t k, float* panels, int64_t panel_begin, int64_t panel_end) {
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    float* dst = panels + p * k * kPanelCols;
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int c = 0; c < kPanelCols; ++c) {
        const int64_t col = p * kPanelCols + c;
        dst[kk * kPanelCols + c] = col < n ? w[col * k + kk] : 0.0f;
      }
    }
  }
}

// x [m, k] (rows x_stride apart) -> strips [ceil(m / R)][k][R] for R = strip_rows (6 here, 12 for the AVX-512
// kernel); rows past m are zero.
inline void pack_strips(const float* x, int64_t x_stride, int64_t m, int64_t k, float* strips,
                        int strip_rows = kStripRows) {
  const int64_t num_strips = (m + strip_rows - 1) / strip_rows;
  for (int64_t s = 0; s < num_strips; ++s) {
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int r = 0; r < strip_rows; ++r) {
        const int64_t row = s * strip_rows + r;
        strips[(s * k + kk) * strip_rows + r] = row < m ? x[row * x_stride + kk] : 0.0f;
      }
    }
  }
}

// 32-byte aligned storage for a per-thread tile (std::vector honours over-alignment since C++17).
struct alignas(32) TileVector {
  float v[8];
};

// tile[0:6][0:16] = strip . panel over k. Always six rows: strips are zero-padded, and the padding's wasted
// multiply-adds (the last strip only) cost less than narrower kernels. The accumulators are named variables
// because GCC kept an array of them in registers only when the function was inlined.
inline void strip_times_panel(const float* strip, const float* panel, int64_t k, float* tile, const float* next) {
#if PAGED_AVX2
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* a = strip + kk * kStripRows;
    const __m256 b0 = _mm256_load_ps(panel + kk * kPanelCols);
    const __m256 b1 = _mm256_load_ps(panel + kk * kPanelCols + 8);
    if (next != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next + kk * kPanelCols), _MM_HINT_T1);
    __m256 x = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(x, b0, c00), c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10), c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20), c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30), c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(x, b0, c40), c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(x, b0, c50), c51 = _mm256_fmadd_ps(x, b1, c51);
  }
  const __m256 rows[kStripRows][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int i = 0; i < kStripRows; ++i) {
    _mm256_store_ps(tile + i * kPanelCols, rows[i][0]);
    _mm256_store_ps(tile + i * kPanelCols + 8, rows[i][1]);
  }
#else
  std::fill(tile, tile + kStripRows * kPanelCols, 0.0f);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int i = 0; i < kStripRows; ++i)
      for (int c = 0; c < kPanelCols; ++c) tile[i * kPanelCols + c] += strip[kk * kStripRows + i] * panel[kk * kPanelCols + c];
#endif
}

// tile[0][0:16] = row `row` of the strip . panel: for one or two rows, where streaming the weight is the whole
// cost and the six-row kernel's wasted multiply-adds would stall the stream.
inline void row_times_panel(const float* strip, int row, const float* panel, int64_t k, float* tile) {
#if PAGED_AVX2
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, d0 = c0, d1 = c0;  // two chains per half: even and odd k
  int64_t kk = 0;
  for (; kk + 2 <= k; kk += 2) {
    const __m256 x0 = _mm256_broadcast_ss(strip + kk * kStripRows + row);
    const __m256 x1 = _mm256_broadcast_ss(strip + (kk + 1) * kStripRows + row);
    c0 = _mm256_fmadd_ps(x0, _mm256_load_ps(panel + kk * kPanelCols), c0);
    c1 = _mm256_fmadd_ps(x0, _mm256_load_ps(panel + kk * kPanelCols + 8), c1);
    d0 = _mm256_fmadd_ps(x1, _mm256_load_ps(panel + (kk + 1) * kPanelCols), d0);
    d1 = _mm256_fmadd_ps(x1, _mm256_load_ps(panel + (kk + 1) * kPanelCols + 8), d1);
  }
  if (kk < k) {
    const __m256 x0 = _mm256_broadcast_ss(strip + kk * kStripRows + row);
    c0 = _mm256_fmadd_ps(x0, _mm256_load_ps(panel + kk * kPanelCols), c0);
    c1 = _mm256_fmadd_ps(x0, _mm256_load_ps(panel + kk * kPanelCols + 8), c1);
  }
  _mm256_store_ps(tile, _mm256_add_ps(c0, d0));
  _mm256_store_ps(tile + 8, _mm256_add_ps(c1, d1));
#else
  std::fill(tile, tile + kPanelCols, 0.0f);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int c = 0; c < kPanelCols; ++c) tile[c] += strip[kk * kStripRows + row] * panel[kk * kPanelCols + c];
#endif
}

// Floats of the per-thread tile gemm_panels needs for m rows: one panel's worth of 6-row strips.
inline int64_t tile_floats(int64_t m) { return (m + kStripRows - 1) / kStripRows * kStripRows * kPanelCols; }

// Up to this many rows go through row_times_panel.
constexpr int64_t kNarrowRows = 2;

// out[:, panels [panel_begin, panel_end)] for all m rows (6-row strips). `tile` holds tile_floats(m) floats,
// 32-byte aligned. Panels are 64-byte aligned when `panels` is (each is k * 64 bytes).
inline void gemm_panels(const float* strips, int64_t m, int64_t k, const float* panels, int64_t n, float* out,
                        int64_t out_stride, int64_t panel_begin, int64_t panel_end, float* tile) {
  const int64_t num_strips = (m + kStripRows - 1) / kStripRows;
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    const float* panel = panels + p * k * kPanelCols;
    if (m <= kNarrowRows) {
      for (int r = 0; r < m; ++r) row_times_panel(strips, r, panel, k, tile + r * kPanelCols);
    } else {
      for (int64_t s = 0; s < num_strips; ++s) {
        const float* next = s == 0 && p + 1 < panel_end ? panel + k * kPanelCols : nullptr;
        strip_times_panel(strips + s * k * kStripRows, panel, k, tile + s * kStripRows * kPanelCols, next);
      }
    }
    const int64_t col0 = p * kPanelCols;
    const int64_t cols = std::min<int64_t>(kPanelCols, n - col0);
    // A copy of a constant 16 floats compiles to vector moves; one of `cols` floats is a library call per row.
    for (int64_t r = 0; r < m; ++r) {
      const float* row = tile + r * kPanelCols;
      if (cols == kPanelCols)
        std::copy_n(row, kPanelCols, out + r * out_stride + col0);
      else
        std::copy_n(row, cols, out + r * out_stride + col0);
    }
  }
}

}  // namespace paged::cpu

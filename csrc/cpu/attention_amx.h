// The AMX variant of the paged attention's work item (attention.h), for bf16 caches: both products on the tile
// unit, the online softmax in AVX-512, over spans of up to 256 keys. An item holds up to 64 query rows (four
// tiles of 16), which share every K tile load and every V interleave: work that a 16-row item would repeat for
// each tile of queries over the same keys.
//
// Scores are computed transposed, S^T = K Q^T, 16 keys at a time: K rows are the tile multiply's left operand
// exactly as the cache stores them (16 rows of 32 bf16, token_stride apart), so K is never copied; the queries
// are put into the right operand's pair-interleaved layout once per item. S^T holds one vector of 16 query rows
// per key, so the softmax is vertical (max, exp and sums across keys are lane-wise). The value sum O += P V then
// runs per 32 of the head's values over the whole span, its two 16 x 16 fp32 accumulator tiles loaded and stored
// once per span: P (rows x keys, bf16) is the left operand, transposed 16 x 16 at a time, and V the right one,
// interleaved by key pairs with one unpack per 32 values. The unpack leaves the head's values in a fixed order
// within each 32 (kOrder), which the accumulator keeps until the item's results are written. P is rounded
// to bf16 for that product, as GPU flash attention does; sums stay fp32.
//
// Invariants: a tile holds 16 query rows (kRows), an item at most four tiles, and the block size is a multiple
// of 16, so 16 keys never cross a block; they start at a multiple of 16 within their block, so every K row a
// tile load reads lies inside a block the sequence owns. Keys outside the item's range or a row's causal window get probability 0,
// and V rows outside the item's range are replaced by zeros (an unwritten slot may hold any bits, and 0 x NaN
// is NaN). Each item loads its own tile configuration, since oneDNN's AMX GEMMs on the same threads load theirs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "attention.h"
#include "isa.h"
#include "simd.h"

#if PAGED_X86
#include <immintrin.h>

namespace paged::cpu::amx {

constexpr int kChunk = 16;                // keys per score tile (its rows)
constexpr int kRows = 16;                 // query rows per tile (a score tile's fp32 columns)
constexpr int kTiles = 4;                 // query tiles per item
constexpr int kItemRows = kRows * kTiles;  // the plan's rows per item for this variant
constexpr int kPair = 32;                 // bf16 values per tile row (64 bytes): the head's values per score multiply
constexpr int kSpan = 256;                // keys per softmax span

// Whether a batch can run here: whole 16-key chunks per block, a head a multiple of 32 and at most 64 query
// heads per KV head.
inline bool fits(int block_size, int group, int head_dim) {
  return block_size % kChunk == 0 && group <= kItemRows && head_dim % kPair == 0;
}

// Palette 1, eight tiles of 16 rows x 64 bytes. Scores: 0, 3, 4, 5 = S^T of query tiles 0-3 (16 keys x 16
// fp32), 1 = keys (16 x 32 bf16), 2 and 6 = queries (16 pairs x 16 rows x 2 bf16), alternating. Values: 3 = P
// (16 rows x 32 keys bf16), 4 and 5 = V (16 key pairs x 16 values x 2 bf16, the low and high unpack), 6 and 7 =
// the accumulator's 16 rows x 32 values (fp32).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// Per-thread buffers of the AMX items, sized for head_dim D and left uninitialised (every value is written before
// it is read): zeroing a quarter of a megabyte would cost a small decode call more than its work.
struct AmxScratch {
  std::unique_ptr<uint32_t[]> q_pairs;  // [tile][D / 32][16 pairs][16 rows]: Q^T, pair-interleaved
  std::unique_ptr<float[]> acc;         // [64 rows][D], values in kOrder
  std::unique_ptr<float[]> scores;      // [tile][kSpan keys][16 rows]: S^T, then P, of a span
  std::unique_ptr<bf16_t[]> probs;      // [tile][16 rows][kSpan keys]: P in bf16
  std::unique_ptr<uint32_t[]> v_pairs;  // [kSpan / 32][low, high][16 key pairs][16 values]: V of a span
  explicit AmxScratch(int head_dim)
      : q_pairs(new uint32_t[static_cast<size_t>(kTiles) * (head_dim / 2) * kRows]),
        acc(new float[static_cast<size_t>(kItemRows) * head_dim]),
        scores(new float[static_cast<size_t>(kTiles) * kSpan * kRows]),
        probs(new bf16_t[static_cast<size_t>(kTiles) * kRows * kSpan]),
        v_pairs(new uint32_t[static_cast<size_t>(kSpan / 2) * 2 * 16]) {}
};

PAGED_BEGIN_AVX512_REGION

// Where the accumulator keeps the head's values: unpacking a key pair's 32 values puts values 0-3, 8-11, 16-19
// and 24-27 of each 32 into its first 16 columns and the rest into the next 16. kOrder[h] lists, for values
// 16h..16h+15 of a 32, the columns holding them (0-15 the first 16 columns, 16-31 the next).
alignas(64) constexpr int32_t kOrder[2][16] = {{0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23},
                                               {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31}};

// In place: rows[i] (16 floats each) becomes column i of the 16 x 16 matrix they formed.
inline void transpose16(__m512 rows[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(rows[i], rows[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(rows[i], rows[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  // u[4b + c] holds, per 128-bit lane L, column 4L + c of rows 4b..4b+3.
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    rows[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    rows[4 + c] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    rows[8 + c] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
    rows[12 + c] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
  }
}

PAGED_END_AVX512_REGION

// S^T of 16 keys (K rows `k`, `k_stride` bytes apart) against T query tiles, into scores[t] (16 x 16 fp32 each).
// Tile numbers are immediates, so the tile count is a template parameter.
template <int T, int D>
PAGED_TARGET_AMX inline void score_chunk(const bf16_t* k, int64_t k_stride, const uint32_t* q_pairs,
                                         float* const scores[T]) {
  constexpr int64_t q_tile_words = (D / 2) * kRows;
  _tile_zero(0);
  if constexpr (T > 1) _tile_zero(3);
  if constexpr (T > 2) _tile_zero(4);
  if constexpr (T > 3) _tile_zero(5);
  for (int p = 0; p < D / kPair; ++p) {
    const uint32_t* q = q_pairs + p * kRows * kRows;
    _tile_loadd(1, k + p * kPair, k_stride);
    _tile_loadd(2, q, 64);
    _tile_dpbf16ps(0, 1, 2);
    if constexpr (T > 1) {
      _tile_loadd(6, q + q_tile_words, 64);
      _tile_dpbf16ps(3, 1, 6);
    }
    if constexpr (T > 2) {
      _tile_loadd(2, q + 2 * q_tile_words, 64);
      _tile_dpbf16ps(4, 1, 2);
    }
    if constexpr (T > 3) {
      _tile_loadd(6, q + 3 * q_tile_words, 64);
      _tile_dpbf16ps(5, 1, 6);
    }
  }
  _tile_stored(0, scores[0], 64);
  if constexpr (T > 1) _tile_stored(3, scores[1], 64);
  if constexpr (T > 2) _tile_stored(4, scores[2], 64);
  if constexpr (T > 3) _tile_stored(5, scores[3], 64);
}

template <int D>
PAGED_TARGET_AMX void attend_item(const AttentionArgs<bf16_t>& a, const WorkItem& it, AmxScratch& sc,
                                  float* partials, int max_rows) {
  using S = Avx512Simd;
  static_assert(D % kPair == 0, "head_dim must be a multiple of 32 for the AMX variant");
  const int group = a.num_heads / a.num_kv_heads;
  const int rows = it.q_count * group;
  const int tiles = (rows + kRows - 1) / kRows;
  const int bs = a.block_size;
  const int32_t q_start = a.query_start_loc[it.seq];
  const int32_t q_len = a.query_start_loc[it.seq + 1] - q_start;
  const int32_t first_pos = a.seq_lens[it.seq] - q_len + it.q_begin;
  constexpr int64_t q_tile_words = (D / 2) * kRows;

  // Q^T in pairs, per tile: q_pairs[t][(c * 16 + i) * 16 + r] = the i-th bf16 pair of row 16t + r's c-th 32
  // values. Rows past `rows` are zero and see no key (hi = -1).
  alignas(64) int32_t lo[kItemRows], hi[kItemRows];
  const bf16_t* q_rows[kItemRows] = {};
  std::fill(lo, lo + kItemRows, 0);
  std::fill(hi, hi + kItemRows, -1);
  for (int qi = 0; qi < it.q_count; ++qi) {
    for (int hg = 0; hg < group; ++hg) {
      const int r = qi * group + hg;
      q_rows[r] =
          a.query + (q_start + it.q_begin + qi) * a.q_stride_token + (it.kv_head * group + hg) * a.q_stride_head;
      hi[r] = first_pos + qi;
      lo[r] = window_start(first_pos + qi, a.sliding_window);
    }
  }
  for (int t = 0; t < tiles; ++t) {
    for (int j0 = 0; j0 < D / 2; j0 += 16) {  // 16 pairs of every row at a time, as one 16 x 16 transpose
      __m512 block[kRows];
      for (int r = 0; r < kRows; ++r) {
        const bf16_t* q = q_rows[t * kRows + r];
        block[r] = q ? _mm512_loadu_ps(q + 2 * j0) : S::zero();
      }
      transpose16(block);
      for (int i = 0; i < 16; ++i) _mm512_storeu_ps(sc.q_pairs.get() + t * q_tile_words + (j0 + i) * kRows, block[i]);
    }
  }
  std::fill(sc.acc.get(), sc.acc.get() + static_cast<int64_t>(tiles) * kRows * D, 0.0f);
  __m512 m[kTiles], l[kTiles];
  for (int t = 0; t < kTiles; ++t) {
    m[t] = S::set1(kNegInf);
    l[t] = S::zero();
  }
  const __m512 scale = S::set1(a.scale);

  static constexpr TileConfig kConfig{};
  _tile_loadconfig(&kConfig);

  const int32_t* table = a.block_tables + it.seq * a.block_table_stride;
  const int64_t token_stride = static_cast<int64_t>(a.num_kv_heads) * D;
  const int64_t block_stride = bs * token_stride;
  for (int32_t span0 = it.key_begin / kChunk * kChunk; span0 < it.key_end; span0 += kSpan) {
    const int chunks = std::min<int32_t>(kSpan, it.key_end - span0 + kChunk - 1) / kChunk;
    const int pairs_of_chunks = (chunks + 1) / 2;  // the value product takes 32 keys at a time
    int64_t base[kSpan / kChunk];
    for (int c = 0; c < chunks; ++c) {
      const int32_t first = span0 + c * kChunk, blk = first / bs;
      base[c] = table[blk] * block_stride + (first - blk * bs) * token_stride + it.kv_head * D;
    }

    // S^T of every chunk of the span, for every query tile. An item of one tile (decode) streams its keys once
    // from memory, through scattered blocks, so the next chunk's K rows and this chunk's V rows (read once the
    // span's scores are done) are fetched ahead by hand; larger items find them in cache, read by their
    // neighbours.
    for (int c = 0; c < chunks; ++c) {
      for (int j = 0; j < kChunk && tiles == 1; ++j) {
        if (c + 1 < chunks) prefetch_bytes(a.key_cache + base[c + 1] + j * token_stride, D * sizeof(bf16_t));
        prefetch_bytes(a.value_cache + base[c] + j * token_stride, D * sizeof(bf16_t));
      }
      float* out[kTiles];
      for (int t = 0; t < kTiles; ++t) out[t] = sc.scores.get() + (t * kSpan + c * kChunk) * kRows;
      const bf16_t* k = a.key_cache + base[c];
      const int64_t stride = token_stride * sizeof(bf16_t);
      switch (tiles) {
        case 1: score_chunk<1, D>(k, stride, sc.q_pairs.get(), out); break;
        case 2: score_chunk<2, D>(k, stride, sc.q_pairs.get(), out); break;
        case 3: score_chunk<3, D>(k, stride, sc.q_pairs.get(), out); break;
        default: score_chunk<4, D>(k, stride, sc.q_pairs.get(), out); break;
      }
    }

    // Per query tile: the online softmax over the span (scale and cap, mask, shift by the new running max,
    // exponentiate), the accumulator rescaled, and P as rows x keys in bf16 (one 16 x 16 transpose per chunk).
    const int k_lo = std::max(0, it.key_begin - span0), k_hi = std::min(chunks * kChunk, it.key_end - span0);
    for (int t = 0; t < tiles; ++t) {
      float* s = sc.scores.get() + t * kSpan * kRows;
      const __m512i lo_v = _mm512_load_si512(lo + t * kRows), hi_v = _mm512_load_si512(hi + t * kRows);
      __m512 span_max = S::set1(kNegInf);
      for (int k = k_lo; k < k_hi; ++k) {
        __m512 sk = _mm512_mul_ps(S::load(s + k * kRows), scale);
        if (a.softcap > 0.0f) {
          alignas(64) float tmp[kRows];
          _mm512_store_ps(tmp, sk);
          for (float& x : tmp) x = a.softcap * std::tanh(x / a.softcap);
          sk = _mm512_load_ps(tmp);
        }
        const __m512i pos = _mm512_set1_epi32(span0 + k);
        const __mmask16 visible =
            _mm512_cmp_epi32_mask(lo_v, pos, _MM_CMPINT_LE) & _mm512_cmp_epi32_mask(pos, hi_v, _MM_CMPINT_LE);
        sk = _mm512_mask_blend_ps(visible, S::set1(kNegInf), sk);
        S::store(s + k * kRows, sk);
        span_max = _mm512_max_ps(span_max, sk);
      }
      const __m512 m_new = _mm512_max_ps(m[t], span_max);
      // Rows that have seen no key yet keep m = -inf; shifting them by 0 keeps exp() away from -inf - -inf,
      // and exp(-inf) is exactly 0 (simd.h), so masked keys get probability 0.
      const __m512 shift = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m_new, S::set1(kNegInf), _CMP_EQ_OQ), m_new,
                                                S::zero());
      const __m512 alpha = S::exp(_mm512_sub_ps(m[t], shift));  // 1 where the max held, 0 before the first key
      __m512 span_sum = S::zero();
      for (int k = 0; k < pairs_of_chunks * 2 * kChunk; ++k) {
        const __m512 p = k >= k_lo && k < k_hi ? S::exp(_mm512_sub_ps(S::load(s + k * kRows), shift)) : S::zero();
        S::store(s + k * kRows, p);
        span_sum = _mm512_add_ps(span_sum, p);
      }
      l[t] = _mm512_fmadd_ps(l[t], alpha, span_sum);
      m[t] = m_new;
      const int tile_rows = std::min(kRows, rows - t * kRows);
      const __mmask16 rescale = _mm512_cmp_ps_mask(alpha, S::set1(1.0f), _CMP_NEQ_UQ) & ((1u << tile_rows) - 1u);
      if (rescale) {
        alignas(64) float alphas[kRows];
        _mm512_store_ps(alphas, alpha);
        for (int r = 0; r < kRows; ++r) {
          if (!((rescale >> r) & 1u)) continue;
          const __m512 ar = S::set1(alphas[r]);
          float* acc = sc.acc.get() + (t * kRows + r) * D;
          for (int c = 0; c < D; c += 16) S::store(acc + c, _mm512_mul_ps(S::load(acc + c), ar));
        }
      }
      bf16_t* probs = sc.probs.get() + t * kRows * kSpan;
      for (int c = 0; c < pairs_of_chunks * 2; ++c) {
        __m512 block[kChunk];
        for (int k = 0; k < kChunk; ++k) block[k] = S::load(s + (c * kChunk + k) * kRows);
        transpose16(block);
        for (int r = 0; r < kRows; ++r) S::store(probs + r * kSpan + c * kChunk, block[r]);
      }
    }

    // O += P V, 32 of the head's values at a time over the whole span: V interleaved once, then every tile.
    for (int g = 0; g < D / kPair; ++g) {
      for (int cp = 0; cp < pairs_of_chunks; ++cp) {
        uint32_t* pairs = sc.v_pairs.get() + cp * 2 * kChunk * 16;
        for (int i = 0; i < kChunk; ++i) {  // key pair i of these 32 keys: keys 32 cp + 2i and + 1
          __m512i v[2];
          for (int j = 0; j < 2; ++j) {
            const int k = cp * 2 * kChunk + 2 * i + j;
            v[j] = k >= k_lo && k < k_hi
                       ? _mm512_loadu_si512(a.value_cache + base[k / kChunk] + (k % kChunk) * token_stride + g * kPair)
                       : _mm512_setzero_si512();
          }
          _mm512_storeu_si512(pairs + i * 16, _mm512_unpacklo_epi16(v[0], v[1]));
          _mm512_storeu_si512(pairs + (kChunk + i) * 16, _mm512_unpackhi_epi16(v[0], v[1]));
        }
      }
      for (int t = 0; t < tiles; ++t) {
        float* acc = sc.acc.get() + t * kRows * D + g * kPair;
        _tile_loadd(6, acc, D * sizeof(float));
        _tile_loadd(7, acc + 16, D * sizeof(float));
        for (int cp = 0; cp < pairs_of_chunks; ++cp) {
          const uint32_t* pairs = sc.v_pairs.get() + cp * 2 * kChunk * 16;
          _tile_loadd(3, sc.probs.get() + t * kRows * kSpan + cp * 2 * kChunk, kSpan * sizeof(bf16_t));
          _tile_loadd(4, pairs, 64);
          _tile_loadd(5, pairs + kChunk * 16, 64);
          _tile_dpbf16ps(6, 3, 4);
          _tile_dpbf16ps(7, 3, 5);
        }
        _tile_stored(6, acc, D * sizeof(float));
        _tile_stored(7, acc + 16, D * sizeof(float));
      }
    }
  }

  // Back to the head's order, normalised unless this item is one part of a split.
  alignas(64) float m_rows[kItemRows], l_rows[kItemRows];
  for (int t = 0; t < tiles; ++t) {
    _mm512_store_ps(m_rows + t * kRows, m[t]);
    _mm512_store_ps(l_rows + t * kRows, l[t]);
  }
  float* slot = it.partial >= 0 ? partials + it.partial * partial_slot_floats(max_rows, D) : nullptr;
  alignas(64) float ordered[D];
  for (int qi = 0; qi < it.q_count; ++qi) {
    for (int hg = 0; hg < group; ++hg) {
      const int r = qi * group + hg;
      const float* acc = sc.acc.get() + r * D;
      for (int g = 0; g < D; g += kPair) {  // kOrder undone, 32 values at a time
        const __m512 low = S::load(acc + g), high = S::load(acc + g + 16);
        for (int h = 0; h < 2; ++h) {
          const __m512i order = _mm512_load_si512(kOrder[h]);
          S::store(ordered + g + 16 * h, _mm512_permutex2var_ps(low, order, high));
        }
      }
      if (slot != nullptr) {
        std::copy(ordered, ordered + D, slot + static_cast<int64_t>(r) * D);
        continue;
      }
      bf16_t* dst =
          a.out + (q_start + it.q_begin + qi) * a.out_stride_token + (it.kv_head * group + hg) * a.out_stride_head;
      const __m512 inv = S::set1(1.0f / l_rows[r]);  // l >= 1: every query sees at least its own key
      for (int c = 0; c < D; c += 16) S::store(dst + c, _mm512_mul_ps(S::load(ordered + c), inv));
    }
  }
  if (slot != nullptr) {
    std::copy(m_rows, m_rows + rows, slot + static_cast<int64_t>(max_rows) * D);
    std::copy(l_rows, l_rows + rows, slot + static_cast<int64_t>(max_rows) * D + max_rows);
  }
}

}  // namespace paged::cpu::amx
#endif  // PAGED_X86

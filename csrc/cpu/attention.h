// Varlen paged attention on the CPU: prefill chunks and decode tokens in one call, reading K/V in place
// through the block table (no gather), with an online (flash-style) softmax block by block.
//
// Work is cut into items of (sequence, kv head, tile of queries, key partition). A tile holds every query head
// that shares the kv head (GQA/MQA), so each K/V row is loaded once for all of them. Long contexts with too
// little other parallelism (decode at small batch) are split over the keys; their partial softmax states are
// merged by a second pass, as in flash-decoding. Torch-free: the caller supplies raw pointers and threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "vec.h"

namespace paged::cpu {

template <typename T>
struct AttentionArgs {
  T* out;
  int64_t out_stride_token;
  int64_t out_stride_head;
  const T* query;
  int64_t q_stride_token;
  int64_t q_stride_head;
  const T* key_cache;    // [num_blocks, block_size, num_kv_heads, head_dim], contiguous
  const T* value_cache;  // same layout
  const int32_t* block_tables;
  int64_t block_table_stride;
  const int32_t* query_start_loc;
  const int32_t* seq_lens;
  int num_heads;
  int num_kv_heads;
  int block_size;
  float scale;
  int sliding_window;  // <= 0: none
  float softcap;       // <= 0: none
};

struct WorkItem {
  int32_t seq;
  int32_t kv_head;
  int32_t q_begin;  // first query of the tile, relative to the sequence's first query
  int32_t q_count;
  int32_t key_begin;  // key positions [key_begin, key_end) this item covers
  int32_t key_end;
  int64_t partial;  // slot in the partials buffer, or -1 when the item owns the whole key range
};

// A tile whose key range was split: its parts occupy partial slots [first_partial, first_partial + num_parts).
struct SplitTile {
  int32_t seq;
  int32_t kv_head;
  int32_t q_begin;
  int32_t q_count;
  int64_t first_partial;
  int32_t num_parts;
};

struct AttentionPlan {
  std::vector<WorkItem> items;
  std::vector<SplitTile> splits;
  int64_t num_partials = 0;
  int max_rows = 0;  // query rows (queries x heads per kv head) of the largest tile
};

constexpr int kTileRows = 16;        // query rows per tile: enough K/V reuse while the tile stays in L1
constexpr int kMinPartition = 256;   // keys per partition below which splitting costs more than it gains
constexpr int kItemsPerThread = 4;   // split until there are about this many items per thread

// Key positions a query at `pos` may attend to: (pos - window, pos].
inline int32_t window_start(int32_t pos, int sliding_window) {
  return sliding_window > 0 ? std::max(0, pos - sliding_window + 1) : 0;
}

// Cuts the batch into work items, largest first so a dynamic scheduler balances them (LPT order).
// Inputs are assumed validated: 0 <= q_len <= seq_len for every sequence.
inline AttentionPlan plan_attention(int num_seqs, const int32_t* query_start_loc, const int32_t* seq_lens,
                                    int num_heads, int num_kv_heads, int block_size, int sliding_window,
                                    int num_threads) {
  AttentionPlan plan;
  const int group = num_heads / num_kv_heads;
  const int q_tile = std::max(1, kTileRows / group);
  std::vector<WorkItem> tiles;
  for (int s = 0; s < num_seqs; ++s) {
    const int32_t q_len = query_start_loc[s + 1] - query_start_loc[s];
    const int32_t first_pos = seq_lens[s] - q_len;
    for (int32_t qb = 0; qb < q_len; qb += q_tile) {
      const int32_t qc = std::min<int32_t>(q_tile, q_len - qb);
      const int32_t key_begin = window_start(first_pos + qb, sliding_window);
      const int32_t key_end = first_pos + qb + qc;
      for (int h = 0; h < num_kv_heads; ++h) {
        tiles.push_back({s, h, qb, qc, key_begin, key_end, -1});
      }
      plan.max_rows = std::max(plan.max_rows, qc * group);
    }
  }
  const int64_t target = static_cast<int64_t>(kItemsPerThread) * std::max(1, num_threads);
  const int64_t want_parts = tiles.empty() ? 1 : (target + static_cast<int64_t>(tiles.size()) - 1) / tiles.size();
  for (const WorkItem& tile : tiles) {
    const int32_t len = tile.key_end - tile.key_begin;
    const int64_t parts = std::min<int64_t>(want_parts, len / kMinPartition);
    if (num_threads <= 1 || parts <= 1) {
      plan.items.push_back(tile);
      continue;
    }
    // Round the partition length up to whole blocks so no block is read by two items.
    const int32_t raw = static_cast<int32_t>((len + parts - 1) / parts);
    const int32_t part_len = (raw + block_size - 1) / block_size * block_size;
    SplitTile split{tile.seq, tile.kv_head, tile.q_begin, tile.q_count, plan.num_partials, 0};
    const int32_t aligned_begin = tile.key_begin / block_size * block_size;
    for (int32_t b = aligned_begin; b < tile.key_end; b += part_len) {
      WorkItem part = tile;
      part.key_begin = std::max(b, tile.key_begin);
      part.key_end = std::min(b + part_len, tile.key_end);
      part.partial = plan.num_partials++;
      plan.items.push_back(part);
      ++split.num_parts;
    }
    plan.splits.push_back(split);
  }
  std::stable_sort(plan.items.begin(), plan.items.end(), [](const WorkItem& a, const WorkItem& b) {
    return static_cast<int64_t>(a.key_end - a.key_begin) * a.q_count >
           static_cast<int64_t>(b.key_end - b.key_begin) * b.q_count;
  });
  return plan;
}

// Per-thread buffers, sized once for the largest tile and reused across items.
struct AttentionScratch {
  std::vector<float> q, acc, scores, m, l;
  std::vector<int32_t> lo, hi;

  AttentionScratch(int rows, int head_dim, int block_size)
      : q(static_cast<size_t>(rows) * head_dim),
        acc(static_cast<size_t>(rows) * head_dim),
        scores(static_cast<size_t>(rows) * block_size),
        m(rows),
        l(rows),
        lo(rows),
        hi(rows) {}
};

// Layout of one partial slot: acc [rows][D], then m [rows], then l [rows].
inline int64_t partial_slot_floats(int max_rows, int head_dim) {
  return static_cast<int64_t>(max_rows) * (head_dim + 2);
}

// Independent accumulator chains per (row, key) so the FMA pipes stay busy: `rows_keys` products share the
// chunk loop, and the chain count must divide the head's 8-float chunks.
template <int D>
constexpr int chains_for(int wanted) {
  for (int cb = wanted; cb > 1; cb /= 2) {
    if ((D / 8) % cb == 0) return cb;
  }
  return 1;
}

// NR query rows against NK consecutive keys (k_stride apart): out[i * out_stride + kk] = dot(q_i, k_kk).
// Each loaded K chunk feeds NR FMAs and each Q chunk NK, so loads per FMA fall as the tile grows.
template <int NR, int NK, int D, typename T>
inline void dot_tile(const float* q, const T* k, int64_t k_stride, float* out, int out_stride) {
  static_assert(D % 8 == 0, "head_dim must be a multiple of 8");
#if PAGED_AVX2
  constexpr int CB = chains_for<D>(NR * NK >= 4 ? 1 : 4 / (NR * NK));
  __m256 acc[NR][NK][CB];
  for (int i = 0; i < NR; ++i)
    for (int kk = 0; kk < NK; ++kk)
      for (int b = 0; b < CB; ++b) acc[i][kk][b] = _mm256_setzero_ps();
  for (int c = 0; c < D; c += 8 * CB) {
    for (int b = 0; b < CB; ++b) {
      __m256 kv[NK];
      for (int kk = 0; kk < NK; ++kk) kv[kk] = load8(k + kk * k_stride + c + 8 * b);
      for (int i = 0; i < NR; ++i) {
        const __m256 qv = _mm256_loadu_ps(q + i * D + c + 8 * b);
        for (int kk = 0; kk < NK; ++kk) acc[i][kk][b] = _mm256_fmadd_ps(qv, kv[kk], acc[i][kk][b]);
      }
    }
  }
  for (int i = 0; i < NR; ++i) {
    for (int kk = 0; kk < NK; ++kk) {
      __m256 s = acc[i][kk][0];
      for (int b = 1; b < CB; ++b) s = _mm256_add_ps(s, acc[i][kk][b]);
      out[i * out_stride + kk] = hsum(s);
    }
  }
#else
  for (int i = 0; i < NR; ++i) {
    for (int kk = 0; kk < NK; ++kk) {
      float s = 0.0f;
      for (int c = 0; c < D; ++c) s += q[i * D + c] * to_float(k[kk * k_stride + c]);
      out[i * out_stride + kk] = s;
    }
  }
#endif
}

// acc_i += sum_j p[i * p_stride + j] * v_j over n value rows, for NR query rows. CB chunks per pass give each
// broadcast weight CB FMAs and the short-NR cases enough independent chains.
template <int NR, int D, typename T>
inline void axpy_rows(const float* p, int p_stride, const T* v, int64_t v_stride, int n, float* acc) {
#if PAGED_AVX2
  constexpr int CB = chains_for<D>(NR >= 2 ? 2 : 4);
  for (int c = 0; c < D; c += 8 * CB) {
    __m256 a[NR][CB];
    for (int i = 0; i < NR; ++i)
      for (int b = 0; b < CB; ++b) a[i][b] = _mm256_loadu_ps(acc + i * D + c + 8 * b);
    for (int j = 0; j < n; ++j) {
      const T* vj = v + j * v_stride + c;
      __m256 vv[CB];
      for (int b = 0; b < CB; ++b) vv[b] = load8(vj + 8 * b);
      for (int i = 0; i < NR; ++i) {
        const __m256 w = _mm256_set1_ps(p[i * p_stride + j]);
        for (int b = 0; b < CB; ++b) a[i][b] = _mm256_fmadd_ps(w, vv[b], a[i][b]);
      }
    }
    for (int i = 0; i < NR; ++i)
      for (int b = 0; b < CB; ++b) _mm256_storeu_ps(acc + i * D + c + 8 * b, a[i][b]);
  }
#else
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < NR; ++i) {
      const float pj = p[i * p_stride + j];
      for (int c = 0; c < D; ++c) acc[i * D + c] += pj * to_float(v[j * v_stride + c]);
    }
#endif
}

// Scores of `rows` query rows against keys [0, n): tiles of 4 rows x 2 keys, with narrower tiles at the edges.
template <int NK, int D, typename T>
inline void score_keys(const float* q, int rows, const T* k, int64_t k_stride, float* s, int s_stride) {
  int r = 0;
  for (; r + 4 <= rows; r += 4) dot_tile<4, NK, D>(q + r * D, k, k_stride, s + r * s_stride, s_stride);
  switch (rows - r) {
    case 3: dot_tile<3, NK, D>(q + r * D, k, k_stride, s + r * s_stride, s_stride); break;
    case 2: dot_tile<2, NK, D>(q + r * D, k, k_stride, s + r * s_stride, s_stride); break;
    case 1: dot_tile<1, NK, D>(q + r * D, k, k_stride, s + r * s_stride, s_stride); break;
    default: break;
  }
}

template <int D, typename T>
inline void block_scores(const float* q, int rows, const T* k, int64_t k_stride, int n, float* s, int s_stride) {
  int j = 0;
  for (; j + 2 <= n; j += 2) score_keys<2, D>(q, rows, k + j * k_stride, k_stride, s + j, s_stride);
  if (j < n) score_keys<1, D>(q, rows, k + j * k_stride, k_stride, s + j, s_stride);
}

// Value accumulation in row groups of four; the remainder goes through a narrower instantiation.
template <int D, typename T>
inline void block_accumulate(const float* p, int rows, int p_stride, const T* v, int64_t v_stride, int n,
                             float* acc) {
  int r = 0;
  for (; r + 4 <= rows; r += 4) axpy_rows<4, D>(p + r * p_stride, p_stride, v, v_stride, n, acc + r * D);
  switch (rows - r) {
    case 3: axpy_rows<3, D>(p + r * p_stride, p_stride, v, v_stride, n, acc + r * D); break;
    case 2: axpy_rows<2, D>(p + r * p_stride, p_stride, v, v_stride, n, acc + r * D); break;
    case 1: axpy_rows<1, D>(p + r * p_stride, p_stride, v, v_stride, n, acc + r * D); break;
    default: break;
  }
}

// Computes one work item. Rows are ordered (query, head within the kv group). Writes the normalised output, or
// the raw softmax state (acc, running max m, running sum l) into `partials` when the item is one part of a split.
template <typename T, int D>
void attend_item(const AttentionArgs<T>& a, const WorkItem& it, AttentionScratch& sc, float* partials,
                 int max_rows) {
  const int group = a.num_heads / a.num_kv_heads;
  const int rows = it.q_count * group;
  const int bs = a.block_size;
  const int32_t q_start = a.query_start_loc[it.seq];
  const int32_t q_len = a.query_start_loc[it.seq + 1] - q_start;
  const int32_t first_pos = a.seq_lens[it.seq] - q_len + it.q_begin;

  for (int qi = 0; qi < it.q_count; ++qi) {
    const T* qrow = a.query + (q_start + it.q_begin + qi) * a.q_stride_token;
    for (int hg = 0; hg < group; ++hg) {
      const int r = qi * group + hg;
      const T* src = qrow + (it.kv_head * group + hg) * a.q_stride_head;
      float* dst = sc.q.data() + r * D;
      for (int c = 0; c < D; ++c) dst[c] = to_float(src[c]) * a.scale;
      sc.hi[r] = first_pos + qi;
      sc.lo[r] = window_start(first_pos + qi, a.sliding_window);
      sc.m[r] = kNegInf;
      sc.l[r] = 0.0f;
    }
  }
  std::fill(sc.acc.begin(), sc.acc.begin() + static_cast<int64_t>(rows) * D, 0.0f);

  const int32_t* table = a.block_tables + it.seq * a.block_table_stride;
  const int64_t token_stride = static_cast<int64_t>(a.num_kv_heads) * D;
  const int64_t block_stride = bs * token_stride;
  float* s = sc.scores.data();
  for (int32_t t0 = it.key_begin; t0 < it.key_end;) {
    const int32_t blk = t0 / bs;
    const int32_t t1 = std::min(it.key_end, (blk + 1) * bs);
    const int n = t1 - t0;
    const int64_t base = table[blk] * block_stride + (t0 - blk * bs) * token_stride + it.kv_head * D;
    if (t1 < it.key_end) {  // fetch the next block's rows for this kv head while this one computes
      const int64_t next = table[blk + 1] * block_stride + it.kv_head * D;
      const int next_n = std::min(bs, it.key_end - t1);
      for (int j = 0; j < next_n; ++j) {
        prefetch_bytes(a.key_cache + next + j * token_stride, D * sizeof(T));
        prefetch_bytes(a.value_cache + next + j * token_stride, D * sizeof(T));
      }
    }
    block_scores<D>(sc.q.data(), rows, a.key_cache + base, token_stride, n, s, bs);
    for (int r = 0; r < rows; ++r) {
      float* row = s + r * bs;
      if (a.softcap > 0.0f) {
        for (int j = 0; j < n; ++j) row[j] = a.softcap * std::tanh(row[j] / a.softcap);
      }
      if (t0 < sc.lo[r] || t1 - 1 > sc.hi[r]) {
        for (int j = 0; j < n; ++j) {
          if (t0 + j < sc.lo[r] || t0 + j > sc.hi[r]) row[j] = kNegInf;
        }
      }
      float block_max = kNegInf;
      for (int j = 0; j < n; ++j) block_max = std::max(block_max, row[j]);
      if (block_max == kNegInf) {
        std::fill(row, row + n, 0.0f);  // nothing visible to this row in this block
        continue;
      }
      const float m_new = std::max(sc.m[r], block_max);
      const float alpha = std::exp(sc.m[r] - m_new);  // 0 on the first visible block
      sc.l[r] = sc.l[r] * alpha + exp_shift_sum(row, n, m_new);
      sc.m[r] = m_new;
      if (alpha != 1.0f) {
        float* acc = sc.acc.data() + r * D;
        for (int c = 0; c < D; ++c) acc[c] *= alpha;
      }
    }
    block_accumulate<D>(s, rows, bs, a.value_cache + base, token_stride, n, sc.acc.data());
    t0 = t1;
  }

  if (it.partial >= 0) {
    float* slot = partials + it.partial * partial_slot_floats(max_rows, D);
    std::copy(sc.acc.begin(), sc.acc.begin() + static_cast<int64_t>(rows) * D, slot);
    std::copy(sc.m.begin(), sc.m.begin() + rows, slot + static_cast<int64_t>(max_rows) * D);
    std::copy(sc.l.begin(), sc.l.begin() + rows, slot + static_cast<int64_t>(max_rows) * D + max_rows);
    return;
  }
  for (int qi = 0; qi < it.q_count; ++qi) {
    T* orow = a.out + (q_start + it.q_begin + qi) * a.out_stride_token;
    for (int hg = 0; hg < group; ++hg) {
      const int r = qi * group + hg;
      T* dst = orow + (it.kv_head * group + hg) * a.out_stride_head;
      const float* acc = sc.acc.data() + r * D;
      const float inv = 1.0f / sc.l[r];  // l >= 1: every query sees at least its own key
      for (int c = 0; c < D; ++c) store_float(acc[c] * inv, dst + c);
    }
  }
}

// Merges the parts of one split tile: out = sum_p e^(m_p - M) acc_p / sum_p e^(m_p - M) l_p.
template <typename T, int D>
void combine_split(const AttentionArgs<T>& a, const SplitTile& sp, const float* partials, int max_rows) {
  const int group = a.num_heads / a.num_kv_heads;
  const int32_t q_start = a.query_start_loc[sp.seq];
  const int64_t slot_floats = partial_slot_floats(max_rows, D);
  float out[D];
  for (int qi = 0; qi < sp.q_count; ++qi) {
    for (int hg = 0; hg < group; ++hg) {
      const int r = qi * group + hg;
      float m_max = kNegInf;
      for (int p = 0; p < sp.num_parts; ++p) {
        const float* slot = partials + (sp.first_partial + p) * slot_floats;
        m_max = std::max(m_max, slot[static_cast<int64_t>(max_rows) * D + r]);
      }
      std::fill(out, out + D, 0.0f);
      float l_sum = 0.0f;
      for (int p = 0; p < sp.num_parts; ++p) {
        const float* slot = partials + (sp.first_partial + p) * slot_floats;
        const float m = slot[static_cast<int64_t>(max_rows) * D + r];
        if (m == kNegInf) continue;  // this part saw no key of this row
        const float w = std::exp(m - m_max);
        l_sum += w * slot[static_cast<int64_t>(max_rows) * D + max_rows + r];
        const float* acc = slot + static_cast<int64_t>(r) * D;
        for (int c = 0; c < D; ++c) out[c] += w * acc[c];
      }
      T* dst = a.out + (q_start + sp.q_begin + qi) * a.out_stride_token + (sp.kv_head * group + hg) * a.out_stride_head;
      const float inv = 1.0f / l_sum;
      for (int c = 0; c < D; ++c) store_float(out[c] * inv, dst + c);
    }
  }
}

}  // namespace paged::cpu

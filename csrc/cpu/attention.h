// Varlen paged attention on the CPU: prefill chunks and decode tokens in one call, reading K/V in place
// through the block table (no gather), with an online (flash-style) softmax block by block.
//
// Work is cut into items of (sequence, kv head, tile of queries, key partition). A tile holds every query head
// that shares the kv head (GQA/MQA), so each K/V row is loaded once for all of them. Long contexts with too
// little other parallelism (decode at small batch) are split over the keys; their partial softmax states are
// merged by a second pass, as in flash-decoding. Torch-free: the caller supplies raw pointers and threads.
// The inner kernels (attention_kernels.inc) exist once per instruction set, plus an AMX variant for bf16 caches
// (attention_amx.h); planning and merging are shared.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "simd.h"
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

// Cuts the batch into work items of about `tile_rows` query rows, largest first so a dynamic scheduler balances
// them (LPT order). Inputs are assumed validated: 0 <= q_len <= seq_len for every sequence.
inline AttentionPlan plan_attention(int num_seqs, const int32_t* query_start_loc, const int32_t* seq_lens,
                                    int num_heads, int num_kv_heads, int block_size, int sliding_window,
                                    int num_threads, int tile_rows = kTileRows) {
  AttentionPlan plan;
  const int group = num_heads / num_kv_heads;
  const int q_tile = std::max(1, tile_rows / group);
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

// The kernels, once per instruction set: cpu::baseline (AVX2, or scalar code in a build without it) and
// cpu::avx512, chosen per call by the active ISA (isa.h).
namespace baseline {
using Simd = BaselineSimd;
#include "attention_kernels.inc"
}  // namespace baseline

#if PAGED_X86
PAGED_BEGIN_AVX512_REGION
namespace avx512 {
using Simd = Avx512Simd;
#include "attention_kernels.inc"
}  // namespace avx512
PAGED_END_AVX512_REGION
#endif

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

// Paged attention on NVIDIA GPUs, reading K/V in place through the block table.
//
// One thread block handles one query token, a chunk of ROWS query heads that share one kv head (GQA/MQA), and one
// partition of PARTITION keys (split-K over the context, flash-decoding style). All rows of a block have the same
// query position, so causality and the sliding window reduce to one key range [key_lo, key_hi). A token whose keys
// fit one partition writes its output directly; otherwise each partition writes its unnormalised result with its
// running max and sum, and `reduce_partitions_kernel` merges them.
//
// Partitions are numbered in absolute key space: partitions wholly before the window return at once and the merge
// starts at key_lo / PARTITION, so a table entry outside the window (possibly the null block) is never read.
//
// This is the decode kernel, and the fallback for prefill when FlashAttention is not installed: a prefill token
// re-reads its sequence's K/V from L2, which is correct but slower than a tiled prefill kernel.
#pragma once

#include "common.cuh"

namespace paged::cuda {

constexpr int kPartition = 512;   // keys per partition
constexpr int kThreads = 128;     // threads per block
constexpr int kThreadsPerKey = 8; // lanes cooperating on one key's dot product in the score phase

template <typename T>
struct AttentionParams {
  T* out;
  int64_t out_stride_token;
  int64_t out_stride_head;
  const T* query;
  int64_t q_stride_token;
  int64_t q_stride_head;
  const T* key_cache;  // [num_blocks, block_size, num_kv_heads, head_dim], contiguous
  const T* value_cache;
  const int32_t* block_tables;
  int64_t block_table_stride;
  const int32_t* query_start_loc;
  const int32_t* seq_lens;
  float* partial_out;  // [tokens per launch, num_heads, max_partitions, head_dim]
  float* partial_max;  // [tokens per launch, num_heads, max_partitions]
  float* partial_sum;
  int token_offset;    // first token of this launch (long batches go in slices that reuse the partials)
  int num_seqs;
  int num_heads;
  int num_kv_heads;
  int block_size;
  int max_partitions;
  float scale;
  float softcap;       // <= 0: none
  int sliding_window;  // <= 0: none
};

// Where a query token sits and which keys it sees.
struct TokenRange {
  int seq;
  int key_lo;  // first visible key
  int key_hi;  // one past the last visible key (= position + 1)
};

template <typename T>
__device__ __forceinline__ bool token_range(const AttentionParams<T>& p, int token, TokenRange& r) {
  if (p.num_seqs == 0 || token >= p.query_start_loc[p.num_seqs]) return false;  // padding row
  r.seq = find_sequence(p.query_start_loc, p.num_seqs, token);
  const int q_begin = p.query_start_loc[r.seq];
  const int q_len = p.query_start_loc[r.seq + 1] - q_begin;
  const int pos = p.seq_lens[r.seq] - q_len + (token - q_begin);
  r.key_hi = pos + 1;
  r.key_lo = p.sliding_window > 0 ? max(0, pos - p.sliding_window + 1) : 0;
  return true;
}

template <typename T, int D, int ROWS>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(const AttentionParams<T> p) {
  constexpr int V = kVec<T>;                             // elements per 16-byte chunk
  constexpr int CHUNKS = D / V;                          // chunks per head row
  constexpr int KEYS_PER_ITER = kThreads / kThreadsPerKey;
  constexpr int CHUNKS_PER_LANE = CHUNKS / kThreadsPerKey;
  constexpr int V_LANES = CHUNKS < kThreads ? CHUNKS : kThreads;  // lanes covering one value row
  constexpr int V_GROUPS = kThreads / V_LANES;                    // value rows processed at once
  static_assert(CHUNKS % kThreadsPerKey == 0 && CHUNKS <= kThreads, "unsupported head_dim for this dtype");

  __shared__ __align__(16) float q_s[ROWS][D];
  __shared__ float logits[ROWS][kPartition];
  __shared__ __align__(16) float acc_s[ROWS][D];
  __shared__ float row_max[ROWS];
  __shared__ float row_sum[ROWS];

  const int local = blockIdx.x;
  const int token = p.token_offset + local;
  const int head0 = blockIdx.y * ROWS;
  const int part = blockIdx.z;
  TokenRange range;
  if (!token_range(p, token, range)) return;
  const int first_part = range.key_lo / kPartition;
  const int num_parts = (range.key_hi + kPartition - 1) / kPartition;
  if (part < first_part || part >= num_parts) return;
  const int part_base = part * kPartition;
  const int start = max(range.key_lo, part_base);
  const int end = min(range.key_hi, part_base + kPartition);
  const int kv_head = head0 / (p.num_heads / p.num_kv_heads);
  const int tid = threadIdx.x;

  for (int i = tid; i < ROWS * D; i += kThreads) {
    const int r = i / D, d = i % D;
    q_s[r][d] = to_float(p.query[token * p.q_stride_token + (head0 + r) * p.q_stride_head + d]) * p.scale;
    acc_s[r][d] = 0.0f;
  }
  __syncthreads();

  const int32_t* table = p.block_tables + range.seq * p.block_table_stride;
  const int64_t token_stride = static_cast<int64_t>(p.num_kv_heads) * D;

  // Scores: groups of kThreadsPerKey lanes take one key each; lane k owns chunks k, k + 8, ... of the row, so
  // the group's loads are contiguous. The loop bound is uniform across the block so shuffles see every lane.
  {
    const int key_group = tid / kThreadsPerKey;
    const int lane = tid % kThreadsPerKey;
    for (int base = start; base < end; base += KEYS_PER_ITER) {
      const int j = base + key_group;
      const bool valid = j < end;
      float dots[ROWS];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) dots[r] = 0.0f;
      if (valid) {
        const int64_t block = table[j / p.block_size];
        const T* k = p.key_cache + (block * p.block_size + j % p.block_size) * token_stride + kv_head * D;
#pragma unroll
        for (int c = 0; c < CHUNKS_PER_LANE; ++c) {
          const int chunk = lane + c * kThreadsPerKey;
          float kf[V];
          load_vec<T>(k + chunk * V, kf);
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
#pragma unroll
            for (int e = 0; e < V; ++e) dots[r] += q_s[r][chunk * V + e] * kf[e];
          }
        }
      }
#pragma unroll
      for (int r = 0; r < ROWS; ++r) dots[r] = group_sum<kThreadsPerKey>(dots[r]);
      if (valid && lane == 0) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          float s = dots[r];
          if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
          logits[r][j - part_base] = s;
        }
      }
    }
  }
  __syncthreads();

  // Softmax within the partition: one warp per row.
  const int warp = tid / 32, lane32 = tid % 32;
  for (int r = warp; r < ROWS; r += kThreads / 32) {
    float m = -INFINITY;
    for (int j = start + lane32; j < end; j += 32) m = fmaxf(m, logits[r][j - part_base]);
    m = warp_max(m);
    float s = 0.0f;
    for (int j = start + lane32; j < end; j += 32) {
      const float e = __expf(logits[r][j - part_base] - m);
      logits[r][j - part_base] = e;
      s += e;
    }
    s = group_sum<32>(s);
    if (lane32 == 0) {
      row_max[r] = m;
      row_sum[r] = s;
    }
  }
  __syncthreads();

  // Values: V_LANES lanes cover one value row in 16-byte chunks; V_GROUPS rows are in flight at once, and the
  // groups' partial sums meet in shared memory.
  {
    const int group = tid / V_LANES;
    const int chunk = tid % V_LANES;
    float acc[ROWS][V];
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int e = 0; e < V; ++e) acc[r][e] = 0.0f;
    for (int j = start + group; j < end; j += V_GROUPS) {
      const int64_t block = table[j / p.block_size];
      const T* v = p.value_cache + (block * p.block_size + j % p.block_size) * token_stride + kv_head * D;
      float vf[V];
      load_vec<T>(v + chunk * V, vf);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const float w = logits[r][j - part_base];
#pragma unroll
        for (int e = 0; e < V; ++e) acc[r][e] += w * vf[e];
      }
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int e = 0; e < V; ++e) {
        if (V_GROUPS == 1) {
          acc_s[r][chunk * V + e] = acc[r][e];
        } else {
          atomicAdd(&acc_s[r][chunk * V + e], acc[r][e]);
        }
      }
  }
  __syncthreads();

  const bool direct = num_parts - first_part == 1;
  for (int i = tid; i < ROWS * D; i += kThreads) {
    const int r = i / D, d = i % D;
    const int head = head0 + r;
    if (direct) {
      store_float(p.out + token * p.out_stride_token + head * p.out_stride_head + d, acc_s[r][d] / row_sum[r]);
    } else {
      const int64_t slot = (static_cast<int64_t>(local) * p.num_heads + head) * p.max_partitions + part;
      p.partial_out[slot * D + d] = acc_s[r][d];
      if (d == 0) {
        p.partial_max[slot] = row_max[r];
        p.partial_sum[slot] = row_sum[r];
      }
    }
  }
}

// Merges a token's partitions: out = sum_p e^(m_p - M) acc_p / sum_p e^(m_p - M) l_p. One block per (token, head).
// Dynamic shared memory holds one weight per partition.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) reduce_partitions_kernel(const AttentionParams<T> p) {
  extern __shared__ float weights[];
  __shared__ float inv_total;
  const int local = blockIdx.x;
  const int token = p.token_offset + local;
  const int head = blockIdx.y;
  TokenRange range;
  if (!token_range(p, token, range)) return;
  const int first_part = range.key_lo / kPartition;
  const int num_parts = (range.key_hi + kPartition - 1) / kPartition;
  if (num_parts - first_part == 1) return;  // written directly by the attention kernel
  const int64_t row = (static_cast<int64_t>(local) * p.num_heads + head) * p.max_partitions;

  if (threadIdx.x < 32) {
    float m = -INFINITY;
    for (int q = first_part + threadIdx.x; q < num_parts; q += 32) m = fmaxf(m, p.partial_max[row + q]);
    m = warp_max(m);
    float total = 0.0f;
    for (int q = first_part + threadIdx.x; q < num_parts; q += 32) {
      const float w = __expf(p.partial_max[row + q] - m);
      weights[q - first_part] = w;
      total += w * p.partial_sum[row + q];
    }
    total = group_sum<32>(total);
    if (threadIdx.x == 0) inv_total = 1.0f / total;
  }
  __syncthreads();

  for (int d = threadIdx.x; d < D; d += kThreads) {
    float acc = 0.0f;
    for (int q = first_part; q < num_parts; ++q) acc += weights[q - first_part] * p.partial_out[(row + q) * D + d];
    store_float(p.out + token * p.out_stride_token + head * p.out_stride_head + d, acc * inv_total);
  }
}

}  // namespace paged::cuda

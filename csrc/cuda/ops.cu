// Torch bindings of the CUDA kernels for the `paged` ops (schemas are defined by csrc/cpu/ops.cpp, which is
// linked into the same library). Launches go on the current stream and never synchronise, so decode steps can
// be captured in CUDA graphs; argument checks read only shapes, dtypes and devices, never device memory.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../checks.h"
#include "attention.cuh"
#include "cache.cuh"

namespace paged {
namespace {

using cuda::AttentionParams;

constexpr int64_t kPartialsBudget = int64_t{256} << 20;  // bytes of split-K partials per call

// Largest number of query heads per thread block that divides the GQA group (all rows of a block share a kv head).
int rows_per_block(int64_t group) {
  for (int rows : {8, 4, 2}) {
    if (group % rows == 0) return rows;
  }
  return 1;
}

// Launches the attention (and, with several partitions, the merge) over tokens in slices of `slice_tokens`, which
// share one partials buffer: launches on one stream run in order, so a slice never overwrites live partials.
template <typename T, int D, int ROWS>
void launch_attention(AttentionParams<T> params, int64_t num_tokens, int64_t slice_tokens, cudaStream_t stream) {
  for (int64_t first = 0; first < num_tokens; first += slice_tokens) {
    const auto tokens = static_cast<unsigned>(std::min(slice_tokens, num_tokens - first));
    params.token_offset = static_cast<int>(first);
    const dim3 grid(tokens, static_cast<unsigned>(params.num_heads / ROWS),
                    static_cast<unsigned>(params.max_partitions));
    cuda::paged_attention_kernel<T, D, ROWS><<<grid, cuda::kThreads, 0, stream>>>(params);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (params.max_partitions > 1) {
      const dim3 reduce_grid(tokens, static_cast<unsigned>(params.num_heads));
      const size_t shared = static_cast<size_t>(params.max_partitions) * sizeof(float);
      cuda::reduce_partitions_kernel<T, D><<<reduce_grid, cuda::kThreads, shared, stream>>>(params);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }
}

template <typename T, int D>
void dispatch_rows(const AttentionParams<T>& params, int rows, int64_t num_tokens, int64_t slice,
                   cudaStream_t stream) {
  switch (rows) {
    case 8: return launch_attention<T, D, 8>(params, num_tokens, slice, stream);
    case 4: return launch_attention<T, D, 4>(params, num_tokens, slice, stream);
    case 2: return launch_attention<T, D, 2>(params, num_tokens, slice, stream);
    default: return launch_attention<T, D, 1>(params, num_tokens, slice, stream);
  }
}

template <typename T>
void dispatch_head_dim(const AttentionParams<T>& params, int64_t head_dim, int rows, int64_t num_tokens,
                       int64_t slice, cudaStream_t stream) {
  switch (head_dim) {
    case 64: return dispatch_rows<T, 64>(params, rows, num_tokens, slice, stream);
    case 128: return dispatch_rows<T, 128>(params, rows, num_tokens, slice, stream);
    case 256: return dispatch_rows<T, 256>(params, rows, num_tokens, slice, stream);
    default: TORCH_CHECK(false, "paged::paged_attention: head_dim must be 64, 128 or 256, got ", head_dim);
  }
}

template <typename T>
void run_attention(at::Tensor& out, const at::Tensor& query, const at::Tensor& key_cache,
                   const at::Tensor& value_cache, const at::Tensor& block_tables, const at::Tensor& query_start_loc,
                   const at::Tensor& seq_lens, const AttentionDims& d, double scale, int64_t sliding_window,
                   double logits_soft_cap) {
  // Partitions cover the longest sequence the block table can describe: sizing by the actual longest sequence
  // would need a device-to-host copy, which CUDA graphs cannot hold.
  const int64_t max_keys = d.max_blocks_per_seq * d.block_size;
  const int64_t max_partitions = std::max<int64_t>(1, (max_keys + cuda::kPartition - 1) / cuda::kPartition);
  TORCH_CHECK(max_partitions <= 65535, "paged::paged_attention: block table covers ", max_keys,
              " keys, more than the kernel's ", 65535 * cuda::kPartition);
  // Partials are sized per token; a long prefill batch over long contexts would need gigabytes at once, so
  // tokens go in slices whose partials fit kPartialsBudget (typical decode batches fit in one slice).
  const int64_t partial_bytes_per_token = d.num_heads * max_partitions * (d.head_dim + 2) * sizeof(float);
  const int64_t slice = max_partitions > 1
                            ? std::clamp<int64_t>(kPartialsBudget / partial_bytes_per_token, 1, d.num_tokens)
                            : d.num_tokens;
  const auto f32 = query.options().dtype(at::kFloat);
  at::Tensor partial_out, partial_max, partial_sum;
  if (max_partitions > 1) {
    partial_out = at::empty({slice, d.num_heads, max_partitions, d.head_dim}, f32);
    partial_max = at::empty({slice, d.num_heads, max_partitions}, f32);
    partial_sum = at::empty({slice, d.num_heads, max_partitions}, f32);
  }
  AttentionParams<T> params{
      static_cast<T*>(out.data_ptr()),
      out.stride(0),
      out.stride(1),
      static_cast<const T*>(query.const_data_ptr()),
      query.stride(0),
      query.stride(1),
      static_cast<const T*>(key_cache.const_data_ptr()),
      static_cast<const T*>(value_cache.const_data_ptr()),
      block_tables.const_data_ptr<int32_t>(),
      block_tables.stride(0),
      query_start_loc.const_data_ptr<int32_t>(),
      seq_lens.const_data_ptr<int32_t>(),
      max_partitions > 1 ? partial_out.data_ptr<float>() : nullptr,
      max_partitions > 1 ? partial_max.data_ptr<float>() : nullptr,
      max_partitions > 1 ? partial_sum.data_ptr<float>() : nullptr,
      0,
      static_cast<int>(d.num_seqs),
      static_cast<int>(d.num_heads),
      static_cast<int>(d.num_kv_heads),
      static_cast<int>(d.block_size),
      static_cast<int>(max_partitions),
      static_cast<float>(scale),
      static_cast<float>(logits_soft_cap),
      static_cast<int>(sliding_window),
  };
  const int rows = rows_per_block(d.num_heads / d.num_kv_heads);
  dispatch_head_dim(params, d.head_dim, rows, d.num_tokens, slice, c10::cuda::getCurrentCUDAStream());
}

void paged_attention_cuda(at::Tensor& out, const at::Tensor& query, const at::Tensor& key_cache,
                          const at::Tensor& value_cache, const at::Tensor& block_tables,
                          const at::Tensor& query_start_loc, const at::Tensor& seq_lens, double scale,
                          int64_t sliding_window, double logits_soft_cap) {
  AttentionDims d{};
  check_attention_args("paged::paged_attention", out, query, key_cache, value_cache, block_tables, query_start_loc,
                       seq_lens, sliding_window, logits_soft_cap, d);
  TORCH_CHECK(d.num_tokens < INT32_MAX && d.num_blocks * d.block_size < INT32_MAX,
              "paged::paged_attention: token and slot counts must fit in int32");
  if (d.num_tokens == 0 || d.num_seqs == 0) return;
  const c10::cuda::CUDAGuard guard(query.device());
  if (query.scalar_type() == at::kFloat) {
    run_attention<float>(out, query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, d, scale,
                         sliding_window, logits_soft_cap);
  } else {
    run_attention<__nv_bfloat16>(out, query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, d,
                                 scale, sliding_window, logits_soft_cap);
  }
}

void reshape_and_cache_cuda(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                            at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  check_cache_write_args("paged::reshape_and_cache", key, value, key_cache, value_cache, slot_mapping);
  const int64_t tokens = key.size(0);
  if (tokens == 0) return;
  const c10::cuda::CUDAGuard guard(key.device());
  const int64_t elem = key.element_size();
  const int64_t row_bytes = key_cache.size(3) * elem;
  const int64_t strides[] = {key.stride(0) * elem, key.stride(1) * elem, value.stride(0) * elem,
                             value.stride(1) * elem};
  bool aligned16 = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(key.const_data_ptr()) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(value.const_data_ptr()) % 16 == 0;
  for (int64_t s : strides) aligned16 = aligned16 && s % 16 == 0;
  cuda::reshape_and_cache_kernel<<<static_cast<unsigned>(tokens), 128, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<const char*>(key.const_data_ptr()), static_cast<const char*>(value.const_data_ptr()), strides[0],
      strides[1], strides[2], strides[3], static_cast<char*>(key_cache.data_ptr()),
      static_cast<char*>(value_cache.data_ptr()), slot_mapping.const_data_ptr<int64_t>(),
      static_cast<int>(key_cache.size(2)), row_bytes, aligned16);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Block ids are not range-checked on the GPU (that would need a device-to-host copy); the block manager that
// produces the mapping owns that invariant, and the CPU op checks it for tests.
void copy_blocks_cuda(const std::vector<at::Tensor>& key_caches, const std::vector<at::Tensor>& value_caches,
                      const at::Tensor& block_mapping) {
  const char* op = "paged::copy_blocks";
  TORCH_CHECK(!key_caches.empty(), op, ": the CUDA kernel needs at least one cache");
  const at::Device device = key_caches[0].device();
  check_copy_blocks_args(op, key_caches, value_caches, block_mapping, device);
  const int64_t pairs = block_mapping.size(0);
  if (pairs == 0) return;
  const c10::cuda::CUDAGuard guard(device);
  const int64_t num_caches = 2 * static_cast<int64_t>(key_caches.size());
  std::vector<int64_t> table(2 * num_caches);
  for (int64_t i = 0; i < num_caches; ++i) {
    const at::Tensor& cache = i % 2 == 0 ? key_caches[i / 2] : value_caches[i / 2];
    table[i] = reinterpret_cast<int64_t>(cache.data_ptr());
    table[num_caches + i] = cache.numel() / cache.size(0) * cache.element_size();
  }
  const auto on_device = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor caches = at::tensor(table, at::TensorOptions().dtype(at::kLong)).to(on_device, true);
  const at::Tensor mapping = block_mapping.to(on_device, true);
  const dim3 grid(static_cast<unsigned>(num_caches), static_cast<unsigned>(pairs));
  cuda::copy_blocks_kernel<<<grid, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      caches.const_data_ptr<int64_t>(), mapping.const_data_ptr<int64_t>(), static_cast<int>(num_caches));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

TORCH_LIBRARY_IMPL(paged, CUDA, m) {
  m.impl("reshape_and_cache", &reshape_and_cache_cuda);
  m.impl("paged_attention", &paged_attention_cuda);
  m.impl("copy_blocks", &copy_blocks_cuda);
}

}  // namespace paged

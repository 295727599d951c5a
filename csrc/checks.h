// Argument checks shared by the CPU and CUDA bindings: shape, dtype, layout and device, with messages that name
// the argument and the expected shape. Value checks that need to read tensors live with each backend.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

namespace paged {

struct AttentionDims {
  int64_t num_tokens, num_heads, head_dim;
  int64_t num_blocks, block_size, num_kv_heads;
  int64_t num_seqs, max_blocks_per_seq;
};

inline void check_device(const at::Tensor& t, const char* op, const char* name, const at::Device& device) {
  TORCH_CHECK(t.device() == device, op, ": ", name, " must be on ", device, ", got ", t.device());
}

inline void check_dtype(const at::Tensor& t, const char* op, const char* name, at::ScalarType dtype) {
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " must be ", dtype, ", got ", t.scalar_type());
}

inline void check_shape(const at::Tensor& t, const char* op, const char* name, std::vector<int64_t> expected,
                        const char* expected_desc) {
  TORCH_CHECK(t.sizes() == at::IntArrayRef(expected), op, ": ", name, " must have shape ", expected_desc, " = ",
              at::IntArrayRef(expected), ", got ", t.sizes());
}

inline void check_rows(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.stride(-1) == 1, op, ": ", name, " must be contiguous in its last dimension, got strides ",
              t.strides());
}

inline void check_attention_args(const char* op, const at::Tensor& out, const at::Tensor& query,
                                 const at::Tensor& key_cache, const at::Tensor& value_cache,
                                 const at::Tensor& block_tables, const at::Tensor& query_start_loc,
                                 const at::Tensor& seq_lens, int64_t sliding_window, double logits_soft_cap,
                                 AttentionDims& d) {
  TORCH_CHECK(query.dim() == 3, op, ": query must be [num_tokens, num_heads, head_dim], got shape ", query.sizes());
  TORCH_CHECK(key_cache.dim() == 4, op, ": key_cache must be [num_blocks, block_size, num_kv_heads, head_dim], got ",
              "shape ", key_cache.sizes());
  d.num_tokens = query.size(0);
  d.num_heads = query.size(1);
  d.head_dim = query.size(2);
  d.num_blocks = key_cache.size(0);
  d.block_size = key_cache.size(1);
  d.num_kv_heads = key_cache.size(2);
  TORCH_CHECK(query.scalar_type() == at::kFloat || query.scalar_type() == at::kBFloat16, op,
              ": query must be float32 or bfloat16, got ", query.scalar_type());
  const auto dtype = query.scalar_type();
  const auto device = query.device();
  check_shape(out, op, "out", {d.num_tokens, d.num_heads, d.head_dim}, "[num_tokens, num_heads, head_dim]");
  check_shape(key_cache, op, "key_cache", {d.num_blocks, d.block_size, d.num_kv_heads, d.head_dim},
              "[num_blocks, block_size, num_kv_heads, head_dim] with query's head_dim");
  check_shape(value_cache, op, "value_cache", {d.num_blocks, d.block_size, d.num_kv_heads, d.head_dim},
              "key_cache's shape [num_blocks, block_size, num_kv_heads, head_dim]");
  for (const auto* t : {&out, &key_cache, &value_cache}) {
    const char* name = t == &out ? "out" : (t == &key_cache ? "key_cache" : "value_cache");
    check_dtype(*t, op, name, dtype);
    check_device(*t, op, name, device);
  }
  check_rows(query, op, "query");
  check_rows(out, op, "out");
  TORCH_CHECK(key_cache.is_contiguous(), op, ": key_cache must be contiguous");
  TORCH_CHECK(value_cache.is_contiguous(), op, ": value_cache must be contiguous");
  TORCH_CHECK(d.block_size > 0, op, ": block_size (key_cache.size(1)) must be positive");
  TORCH_CHECK(d.num_kv_heads > 0 && d.num_heads % d.num_kv_heads == 0, op, ": num_heads (", d.num_heads,
              ") must be a multiple of num_kv_heads (", d.num_kv_heads, ")");

  TORCH_CHECK(block_tables.dim() == 2, op, ": block_tables must be [num_seqs, max_blocks_per_seq], got shape ",
              block_tables.sizes());
  d.num_seqs = block_tables.size(0);
  d.max_blocks_per_seq = block_tables.size(1);
  check_shape(query_start_loc, op, "query_start_loc", {d.num_seqs + 1}, "[num_seqs + 1]");
  check_shape(seq_lens, op, "seq_lens", {d.num_seqs}, "[num_seqs]");
  for (const auto* t : {&block_tables, &query_start_loc, &seq_lens}) {
    const char* name = t == &block_tables ? "block_tables" : (t == &seq_lens ? "seq_lens" : "query_start_loc");
    check_dtype(*t, op, name, at::kInt);
    check_device(*t, op, name, device);
  }
  check_rows(block_tables, op, "block_tables");
  TORCH_CHECK(query_start_loc.is_contiguous() && seq_lens.is_contiguous(), op,
              ": query_start_loc and seq_lens must be contiguous");
  TORCH_CHECK(sliding_window == -1 || sliding_window > 0, op,
              ": sliding_window must be -1 (none) or a positive number of tokens, got ", sliding_window);
  TORCH_CHECK(logits_soft_cap >= 0.0, op, ": logits_soft_cap must be 0 (none) or positive, got ", logits_soft_cap);
}

inline void check_cache_write_args(const char* op, const at::Tensor& key, const at::Tensor& value,
                                   const at::Tensor& key_cache, const at::Tensor& value_cache,
                                   const at::Tensor& slot_mapping) {
  TORCH_CHECK(key_cache.dim() == 4, op, ": key_cache must be [num_blocks, block_size, num_kv_heads, head_dim], got ",
              "shape ", key_cache.sizes());
  const int64_t kv_heads = key_cache.size(2), head_dim = key_cache.size(3);
  TORCH_CHECK(key.dim() == 3, op, ": key must be [num_tokens, num_kv_heads, head_dim], got shape ", key.sizes());
  const int64_t tokens = key.size(0);
  check_shape(key, op, "key", {tokens, kv_heads, head_dim}, "[num_tokens, num_kv_heads, head_dim] of key_cache");
  check_shape(value, op, "value", {tokens, kv_heads, head_dim}, "key's shape [num_tokens, num_kv_heads, head_dim]");
  check_shape(value_cache, op, "value_cache", key_cache.sizes().vec(), "key_cache's shape");
  check_shape(slot_mapping, op, "slot_mapping", {tokens}, "[num_tokens]");
  check_dtype(slot_mapping, op, "slot_mapping", at::kLong);
  const auto dtype = key_cache.scalar_type();
  const auto device = key_cache.device();
  check_dtype(key, op, "key", dtype);
  check_dtype(value, op, "value", dtype);
  check_dtype(value_cache, op, "value_cache", dtype);
  check_device(key, op, "key", device);
  check_device(value, op, "value", device);
  check_device(value_cache, op, "value_cache", device);
  check_device(slot_mapping, op, "slot_mapping", device);
  check_rows(key, op, "key");
  check_rows(value, op, "value");
  TORCH_CHECK(key_cache.is_contiguous() && value_cache.is_contiguous(), op,
              ": key_cache and value_cache must be contiguous");
  TORCH_CHECK(slot_mapping.is_contiguous(), op, ": slot_mapping must be contiguous");
}

inline void check_copy_blocks_args(const char* op, const std::vector<at::Tensor>& key_caches,
                                   const std::vector<at::Tensor>& value_caches, const at::Tensor& block_mapping,
                                   const at::Device& device) {
  TORCH_CHECK(key_caches.size() == value_caches.size(), op, ": key_caches has ", key_caches.size(),
              " tensors but value_caches has ", value_caches.size());
  TORCH_CHECK(block_mapping.dim() == 2 && block_mapping.size(1) == 2, op,
              ": block_mapping must be [num_pairs, 2] (src, dst), got shape ", block_mapping.sizes());
  check_dtype(block_mapping, op, "block_mapping", at::kLong);
  TORCH_CHECK(block_mapping.is_contiguous(), op, ": block_mapping must be contiguous");
  for (size_t i = 0; i < key_caches.size(); ++i) {
    for (const auto* t : {&key_caches[i], &value_caches[i]}) {
      const std::string name = std::string(t == &key_caches[i] ? "key_caches[" : "value_caches[") +
                               std::to_string(i) + "]";
      TORCH_CHECK(t->dim() >= 1 && t->is_contiguous(), op, ": ", name,
                  " must be a contiguous [num_blocks, ...] tensor, got shape ", t->sizes());
      TORCH_CHECK(t->device() == device, op, ": ", name, " must be on ", device, ", got ", t->device());
    }
    TORCH_CHECK(value_caches[i].sizes() == key_caches[i].sizes() &&
                    value_caches[i].scalar_type() == key_caches[i].scalar_type(),
                op, ": value_caches[", i, "] must match key_caches[", i, "] (", key_caches[i].sizes(), " ",
                key_caches[i].scalar_type(), "), got ", value_caches[i].sizes(), " ", value_caches[i].scalar_type());
  }
}

}  // namespace paged

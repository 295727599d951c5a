// Torch bindings of the CPU kernels, and the `paged` op schemas. This is the extension's only translation unit
// that parses torch headers for the CPU build (header parsing dominates compile time), so it stays lean:
// ATen core Tensor + library registration + the parallel-for, no <torch/extension.h>.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../checks.h"
#include "activation.h"
#include "argmax.h"
#include "attention.h"
#include "attention_amx.h"
#include "cache.h"
#include "candidates.h"
#include "gemm.h"
#include "gemm_avx512.h"
#include "isa.h"
#include "norm.h"
#include "rotary.h"

namespace paged {
namespace {

using cpu::AttentionArgs;
using cpu::bf16_t;

// Runs f(i, state) for i in [0, n) on up to max_threads of torch's intra-op threads. Items are claimed one at a
// time from a shared counter, so uneven items (long and short sequences in one batch) still balance;
// `make_state` builds each worker's scratch once.
template <typename MakeState, typename F>
void parallel_dynamic(int64_t n, int max_threads, MakeState make_state, F f) {
  if (n <= 0) return;
  std::atomic<int64_t> next{0};
  const int64_t workers = std::min<int64_t>(n, max_threads);
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    auto state = make_state();
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      f(i, state);
    }
  });
}

// Values the kernel trusts: checked here once, so the kernel never reads outside the cache or the tables.
void check_attention_values(const AttentionDims& d, const at::Tensor& block_tables, const at::Tensor& query_start_loc,
                            const at::Tensor& seq_lens, int64_t sliding_window) {
  const char* op = "paged::paged_attention";
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  const int64_t table_stride = block_tables.stride(0);
  TORCH_CHECK(qsl[0] == 0, op, ": query_start_loc[0] must be 0, got ", qsl[0]);
  TORCH_CHECK(qsl[d.num_seqs] <= d.num_tokens, op, ": query_start_loc[-1] = ", qsl[d.num_seqs],
              " exceeds num_tokens = ", d.num_tokens);
  for (int64_t s = 0; s < d.num_seqs; ++s) {
    const int64_t q_len = static_cast<int64_t>(qsl[s + 1]) - qsl[s];
    TORCH_CHECK(q_len >= 0, op, ": query_start_loc must be non-decreasing, got ", qsl[s], " then ", qsl[s + 1],
                " at sequence ", s);
    TORCH_CHECK(q_len <= lens[s], op, ": sequence ", s, " has ", q_len, " queries but seq_lens[", s, "] = ", lens[s],
                "; queries are the last q_len of seq_len tokens");
    TORCH_CHECK(lens[s] <= d.max_blocks_per_seq * d.block_size, op, ": seq_lens[", s, "] = ", lens[s],
                " exceeds the block table's capacity ", d.max_blocks_per_seq, " blocks x ", d.block_size, " tokens");
    if (q_len == 0) continue;
    const int32_t first_key = cpu::window_start(lens[s] - static_cast<int32_t>(q_len), static_cast<int>(sliding_window));
    for (int64_t b = first_key / d.block_size; b * d.block_size < lens[s]; ++b) {
      const int32_t block = tables[s * table_stride + b];
      TORCH_CHECK(block >= 0 && block < d.num_blocks, op, ": block_tables[", s, ", ", b, "] = ", block,
                  " is outside the cache's ", d.num_blocks, " blocks");
    }
  }
}

// Below this many multiply-adds (~50 µs on one core) waking a second thread costs more than it saves, and on a
// busy machine far more: the call then waits for whichever thread was descheduled.
constexpr double kParallelMinWork = 1 << 20;

// Multiply-adds the batch needs: every query row against every key it sees, for QK and PV.
double attention_work(const AttentionDims& d, const int32_t* qsl, const int32_t* seq_lens, int64_t window) {
  double keys = 0;
  for (int64_t s = 0; s < d.num_seqs; ++s) {
    const int64_t q_len = qsl[s + 1] - qsl[s];
    const int64_t visible = window > 0 ? std::min<int64_t>(seq_lens[s], window) : seq_lens[s];
    keys += static_cast<double>(q_len) * static_cast<double>(visible);
  }
  return keys * static_cast<double>(d.num_heads * d.head_dim * 2);
}

#if PAGED_X86
constexpr int kAmxItemRows = cpu::amx::kItemRows;
// The AMX variant's compile-time conditions: bf16 caches, and heads that split into whole bf16 pairs.
template <typename T, int D>
constexpr bool kAmxLayout = std::is_same_v<T, bf16_t> && D % cpu::amx::kPair == 0;
#else
constexpr int kAmxItemRows = cpu::kTileRows;
#endif

// Whether the AMX variant serves this call: bf16 caches, the attention family at AMX, and a layout it takes.
template <typename T, int D>
bool amx_attention(const AttentionArgs<T>& args) {
#if PAGED_X86
  if constexpr (kAmxLayout<T, D>) {
    return cpu::active_isa(cpu::Kernel::kAttention) == cpu::Isa::kAmx &&
           cpu::amx::fits(args.block_size, args.num_heads / args.num_kv_heads, D);
  }
#endif
  return false;
}

template <typename T, int D>
void run_attention(const AttentionArgs<T>& args, const AttentionDims& d) {
  const bool small = attention_work(d, args.query_start_loc, args.seq_lens, args.sliding_window) < kParallelMinWork;
  const int threads = small ? 1 : at::get_num_threads();
  const bool amx = amx_attention<T, D>(args);
  const cpu::AttentionPlan plan = cpu::plan_attention(
      static_cast<int>(d.num_seqs), args.query_start_loc, args.seq_lens, args.num_heads, args.num_kv_heads,
      args.block_size, args.sliding_window, threads, amx ? kAmxItemRows : cpu::kTileRows);
  std::vector<float> partials(plan.num_partials * cpu::partial_slot_floats(plan.max_rows, D));
  const int64_t num_items = static_cast<int64_t>(plan.items.size());
  if (amx) {
#if PAGED_X86
    if constexpr (kAmxLayout<T, D>) {
      // Each thread keeps its scratch across calls: a quarter of a megabyte, past malloc's mmap threshold, so a
      // fresh one per call would fault its pages in every decode step.
      parallel_dynamic(
          num_items, threads,
          [] {
            thread_local cpu::amx::AmxScratch scratch(D);
            return std::ref(scratch);
          },
          [&](int64_t i, cpu::amx::AmxScratch& scratch) {
            cpu::amx::attend_item<D>(args, plan.items[i], scratch, partials.data(), plan.max_rows);
          });
    }
#endif
  } else {
    [[maybe_unused]] const bool wide = cpu::active_isa(cpu::Kernel::kAttention) >= cpu::Isa::kAvx512;
    parallel_dynamic(
        num_items, threads, [&] { return cpu::AttentionScratch(plan.max_rows, D, args.block_size); },
        [&](int64_t i, cpu::AttentionScratch& scratch) {
#if PAGED_X86
          if (wide) return cpu::avx512::attend_item<T, D>(args, plan.items[i], scratch, partials.data(), plan.max_rows);
#endif
          cpu::baseline::attend_item<T, D>(args, plan.items[i], scratch, partials.data(), plan.max_rows);
        });
  }
  parallel_dynamic(
      static_cast<int64_t>(plan.splits.size()), threads, [] { return 0; },
      [&](int64_t i, int&) { cpu::combine_split<T, D>(args, plan.splits[i], partials.data(), plan.max_rows); });
}

template <typename T>
void dispatch_head_dim(const AttentionArgs<T>& args, const AttentionDims& d) {
  switch (d.head_dim) {
    case 16: return run_attention<T, 16>(args, d);
    case 32: return run_attention<T, 32>(args, d);
    case 64: return run_attention<T, 64>(args, d);
    case 80: return run_attention<T, 80>(args, d);
    case 96: return run_attention<T, 96>(args, d);
    case 128: return run_attention<T, 128>(args, d);
    case 256: return run_attention<T, 256>(args, d);
    default:
      TORCH_CHECK(false, "paged::paged_attention: head_dim must be one of 16, 32, 64, 80, 96, 128, 256 on the CPU, got ",
                  d.head_dim);
  }
}

template <typename T>
AttentionArgs<T> make_args(at::Tensor& out, const at::Tensor& query, const at::Tensor& key_cache,
                           const at::Tensor& value_cache, const at::Tensor& block_tables,
                           const at::Tensor& query_start_loc, const at::Tensor& seq_lens, const AttentionDims& d,
                           double scale, int64_t sliding_window, double logits_soft_cap) {
  return AttentionArgs<T>{
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
      static_cast<int>(d.num_heads),
      static_cast<int>(d.num_kv_heads),
      static_cast<int>(d.block_size),
      static_cast<float>(scale),
      static_cast<int>(sliding_window),
      static_cast<float>(logits_soft_cap),
  };
}

void paged_attention_cpu(at::Tensor& out, const at::Tensor& query, const at::Tensor& key_cache,
                         const at::Tensor& value_cache, const at::Tensor& block_tables,
                         const at::Tensor& query_start_loc, const at::Tensor& seq_lens, double scale,
                         int64_t sliding_window, double logits_soft_cap) {
  AttentionDims d{};
  check_attention_args("paged::paged_attention", out, query, key_cache, value_cache, block_tables, query_start_loc,
                       seq_lens, sliding_window, logits_soft_cap, d);
  TORCH_CHECK(d.num_tokens < INT32_MAX && d.num_blocks * d.block_size < INT32_MAX,
              "paged::paged_attention: token and slot counts must fit in int32");
  check_attention_values(d, block_tables, query_start_loc, seq_lens, sliding_window);
  if (query.scalar_type() == at::kFloat) {
    dispatch_head_dim(make_args<float>(out, query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, d,
                                       scale, sliding_window, logits_soft_cap),
                      d);
  } else {
    dispatch_head_dim(make_args<bf16_t>(out, query, key_cache, value_cache, block_tables, query_start_loc, seq_lens,
                                        d, scale, sliding_window, logits_soft_cap),
                      d);
  }
}

void reshape_and_cache_cpu(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                           at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  const char* op = "paged::reshape_and_cache";
  check_cache_write_args(op, key, value, key_cache, value_cache, slot_mapping);
  const int64_t tokens = key.size(0);
  const int64_t num_slots = key_cache.size(0) * key_cache.size(1);
  const int64_t* slots = slot_mapping.const_data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    TORCH_CHECK(slots[t] >= -1 && slots[t] < num_slots, op, ": slot_mapping[", t, "] = ", slots[t],
                " is outside [-1, ", num_slots, ") (num_blocks x block_size)");
  }
  const int64_t elem = key.element_size();
  const int kv_heads = static_cast<int>(key_cache.size(2));
  const int64_t head_bytes = key_cache.size(3) * elem;
  const char* k = static_cast<const char*>(key.const_data_ptr());
  const char* v = static_cast<const char*>(value.const_data_ptr());
  char* kc = static_cast<char*>(key_cache.data_ptr());
  char* vc = static_cast<char*>(value_cache.data_ptr());
  at::parallel_for(0, tokens, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (slots[t] < 0) continue;
      cpu::write_token(k, key.stride(0) * elem, key.stride(1) * elem, t, kc, slots[t], kv_heads, head_bytes);
      cpu::write_token(v, value.stride(0) * elem, value.stride(1) * elem, t, vc, slots[t], kv_heads, head_bytes);
    }
  });
}

void copy_blocks_cpu(const std::vector<at::Tensor>& key_caches, const std::vector<at::Tensor>& value_caches,
                     const at::Tensor& block_mapping) {
  const char* op = "paged::copy_blocks";
  check_copy_blocks_args(op, key_caches, value_caches, block_mapping, at::Device(at::kCPU));
  check_device(block_mapping, op, "block_mapping", at::Device(at::kCPU));
  const int64_t pairs = block_mapping.size(0);
  const int64_t* map = block_mapping.const_data_ptr<int64_t>();
  std::unordered_set<int64_t> sources, destinations;
  for (int64_t p = 0; p < pairs; ++p) sources.insert(map[2 * p]);
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t dst = map[2 * p + 1];
    TORCH_CHECK(destinations.insert(dst).second && !sources.count(dst), op, ": block_mapping[", p, "] destination ",
                dst, " is written twice or is also a source; copies in one call must be independent");
  }
  for (size_t layer = 0; layer < key_caches.size(); ++layer) {
    const int64_t num_blocks = key_caches[layer].size(0);
    for (int64_t p = 0; p < 2 * pairs; ++p) {
      TORCH_CHECK(map[p] >= 0 && map[p] < num_blocks, op, ": block_mapping[", p / 2, ", ", p % 2, "] = ", map[p],
                  " is outside key_caches[", layer, "]'s ", num_blocks, " blocks");
    }
  }
  const int64_t layers = static_cast<int64_t>(key_caches.size());
  at::parallel_for(0, layers * pairs, 4, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t layer = i / pairs, p = i % pairs;
      for (const at::Tensor* cache : {&key_caches[layer], &value_caches[layer]}) {
        const int64_t block_bytes = cache->numel() / cache->size(0) * cache->element_size();
        cpu::copy_block(static_cast<char*>(cache->data_ptr()), block_bytes, map[2 * p], map[2 * p + 1]);
      }
    }
  });
}

// parallel_for grain for row-wise ops: rows per task so each task handles about `task_elems` elements, so that
// a decode-sized input stays on the calling thread instead of waking another one for microseconds of work.
inline int64_t row_grain(int64_t row_elems, int64_t task_elems) {
  return std::max<int64_t>(1, task_elems / std::max<int64_t>(row_elems, 1));
}

// Each tensor named must be an fp32 tensor on the CPU (the ops that compute only in fp32).
void check_cpu_fp32(const char* op, std::initializer_list<std::pair<const char*, const at::Tensor*>> tensors) {
  for (const auto& [name, t] : tensors) {
    check_device(*t, op, name, at::Device(at::kCPU));
    check_dtype(*t, op, name, at::kFloat);
  }
}

// Weight [N, K] fp32 -> panels [ceil(N / 16), K, 16] for panel_linear.
at::Tensor pack_linear_weight_cpu(const at::Tensor& weight) {
  const char* op = "paged::pack_linear_weight";
  check_cpu_fp32(op, {{"weight", &weight}});
  TORCH_CHECK(weight.dim() == 2 && weight.is_contiguous(), op, ": weight must be a contiguous [out_features, "
              "in_features] matrix, got shape ", weight.sizes(), " and strides ", weight.strides());
  const int64_t n = weight.size(0), k = weight.size(1);
  at::Tensor panels = weight.new_empty({cpu::num_panels(n), k, cpu::kPanelCols});
  const float* w = weight.const_data_ptr<float>();
  float* dst = panels.data_ptr<float>();
  at::parallel_for(0, cpu::num_panels(n), 64, [&](int64_t begin, int64_t end) {
    cpu::pack_panels(w, n, k, dst, begin, end);
  });
  return panels;
}

// input [M, K] @ weight^T with the weight packed by pack_linear_weight -> [M, out_features], fp32.
at::Tensor panel_linear_cpu(const at::Tensor& input, const at::Tensor& packed_weight, int64_t out_features) {
  const char* op = "paged::panel_linear";
  check_cpu_fp32(op, {{"input", &input}, {"packed_weight", &packed_weight}});
  TORCH_CHECK(input.dim() == 2, op, ": input must be [rows, in_features], got shape ", input.sizes());
  check_rows(input, op, "input");
  const int64_t m = input.size(0), k = input.size(1);
  check_shape(packed_weight, op, "packed_weight", {cpu::num_panels(out_features), k, cpu::kPanelCols},
              "[ceil(out_features / 16), in_features, 16]");
  TORCH_CHECK(packed_weight.is_contiguous() && reinterpret_cast<uintptr_t>(packed_weight.const_data_ptr()) % 32 == 0,
              op, ": packed_weight must be the contiguous, 32-byte aligned tensor pack_linear_weight returned");
  at::Tensor out = input.new_empty({m, out_features});
  if (m == 0 || out_features == 0) return out;
  const float* panels = packed_weight.const_data_ptr<float>();
  // Rows go through in chunks whose strips (rows x k floats) stay in L2 while every panel goes by: 512 rows at
  // once ran at half the speed of two chunks of 256 (each re-streaming the weight), and at k = 2048 a chunk of
  // 256 rows (2 MiB of strips) no longer fit next to the tile.
  const int64_t row_chunk = std::clamp<int64_t>((int64_t{1} << 18) / std::max<int64_t>(k, 1), 48, 256);
  const bool wide = cpu::active_isa(cpu::Kernel::kGemm) >= cpu::Isa::kAvx512;
#if PAGED_X86
  const int strip_rows = wide ? cpu::avx512::kStripRows : cpu::kStripRows;
  const auto tile_floats = wide ? cpu::avx512::tile_floats : cpu::tile_floats;
#else
  const int strip_rows = cpu::kStripRows;
  const auto tile_floats = cpu::tile_floats;
#endif
  const int64_t chunk_rows = std::min(m, row_chunk);
  std::vector<float> strips((chunk_rows + strip_rows - 1) / strip_rows * strip_rows * k);
  for (int64_t row0 = 0; row0 < m; row0 += row_chunk) {
    const int64_t rows = std::min(row_chunk, m - row0);
    cpu::pack_strips(input.const_data_ptr<float>() + row0 * input.stride(0), input.stride(0), rows, k, strips.data(),
                     strip_rows);
    const int64_t tile_vectors = tile_floats(rows) / 8;
    float* dst = out.data_ptr<float>() + row0 * out.stride(0);
    // parallel_for hands each thread one contiguous run of panels; the grain only keeps a tiny weight on one
    // thread. (A grain of 256 panels left a layer's 40-256 panels to a single thread.)
    at::parallel_for(0, cpu::num_panels(out_features), 8, [&](int64_t begin, int64_t end) {
      std::vector<cpu::TileVector> tile(tile_vectors);
      float* tile_data = reinterpret_cast<float*>(tile.data());
#if PAGED_X86
      if (wide) {
        cpu::avx512::gemm_panels(strips.data(), rows, k, panels, out_features, dst, out.stride(0), begin, end,
                                 tile_data);
        return;
      }
#endif
      cpu::gemm_panels(strips.data(), rows, k, panels, out_features, dst, out.stride(0), begin, end, tile_data);
    });
  }
  return out;
}

std::string cpu_isa(const std::string& kernel) {
  try {
    return cpu::isa_name(cpu::active_isa(cpu::parse_kernel(kernel)));
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "paged::cpu_isa: ", e.what());
  }
}

std::vector<std::string> supported_cpu_isas() { return cpu::supported_isas(); }

void set_cpu_isa(const std::string& name, const std::string& kernel) {
  try {
    cpu::set_isa(name, cpu::parse_kernel(kernel));
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "paged::set_cpu_isa: ", e.what());
  }
}

// float32 or bfloat16, the same for every tensor named: the element-wise kernels compute in fp32 either way.
at::ScalarType check_float_or_bf16(const char* op, const at::Tensor& input,
                                   std::initializer_list<std::pair<const char*, const at::Tensor*>> same) {
  const auto dtype = input.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, op, ": input must be float32 or bfloat16, got ", dtype);
  for (const auto& [name, t] : same) check_dtype(*t, op, name, dtype);
  return dtype;
}

// out [rows, d] = act(input[:, :d]) * input[:, d:].
template <cpu::GatedActivation A, typename T>
void gated_activation_rows_of(const at::Tensor& input, at::Tensor& out, int64_t rows, int64_t d) {
  const T* in = reinterpret_cast<const T*>(input.const_data_ptr());
  T* dst = reinterpret_cast<T*>(out.data_ptr());
  const cpu::Isa isa = cpu::active_isa(cpu::Kernel::kElementwise);
  at::parallel_for(0, rows, row_grain(d, 1 << 14), [&](int64_t begin, int64_t end) {
    cpu::gated_activation_rows<A>(in, input.stride(0), dst, out.stride(0), d, begin, end, isa);
  });
}

template <cpu::GatedActivation A>
void gated_activation_cpu(const char* op, at::Tensor& out, const at::Tensor& input) {
  check_device(input, op, "input", at::Device(at::kCPU));
  check_device(out, op, "out", at::Device(at::kCPU));
  const auto dtype = check_float_or_bf16(op, input, {{"out", &out}});
  TORCH_CHECK(input.dim() == 2 && input.size(1) % 2 == 0, op, ": input must be [rows, 2 * d] (gate then up), got ",
              "shape ", input.sizes());
  const int64_t rows = input.size(0), d = input.size(1) / 2;
  check_shape(out, op, "out", {rows, d}, "[rows, d]");
  check_rows(input, op, "input");
  check_rows(out, op, "out");
  if (dtype == at::kFloat) {
    gated_activation_rows_of<A, float>(input, out, rows, d);
  } else {
    gated_activation_rows_of<A, bf16_t>(input, out, rows, d);
  }
}

void silu_and_mul_cpu(at::Tensor& out, const at::Tensor& input) {
  gated_activation_cpu<cpu::GatedActivation::kSilu>("paged::silu_and_mul", out, input);
}

void gelu_tanh_and_mul_cpu(at::Tensor& out, const at::Tensor& input) {
  gated_activation_cpu<cpu::GatedActivation::kGeluTanh>("paged::gelu_tanh_and_mul", out, input);
}

template <typename T>
void rms_norm_rows(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight, double eps, double offset) {
  const int64_t d = input.size(-1);
  const int64_t heads = input.dim() == 3 ? input.size(1) : 1;
  const int64_t token_stride = input.stride(0), head_stride = input.dim() == 3 ? input.stride(1) : 0;
  const T* in = reinterpret_cast<const T*>(input.const_data_ptr());
  const T* w = reinterpret_cast<const T*>(weight.const_data_ptr());
  T* dst = reinterpret_cast<T*>(out.data_ptr());
  const int64_t rows = input.size(0) * heads;
  const cpu::Isa isa = cpu::active_isa(cpu::Kernel::kElementwise);
  at::parallel_for(0, rows, row_grain(d, 1 << 14), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* x = in + (r / heads) * token_stride + (r % heads) * head_stride;
      cpu::rms_norm_row(x, w, dst + r * d, d, static_cast<float>(eps), static_cast<float>(offset), isa);
    }
  });
}

// out = input * rsqrt(mean(input^2, -1) + eps) * (offset + weight); input [rows, d] or [tokens, heads, d].
void rms_norm_cpu(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight, double eps, double offset) {
  const char* op = "paged::rms_norm";
  check_device(input, op, "input", at::Device(at::kCPU));
  check_device(weight, op, "weight", at::Device(at::kCPU));
  check_device(out, op, "out", at::Device(at::kCPU));
  const auto dtype = check_float_or_bf16(op, input, {{"weight", &weight}, {"out", &out}});
  TORCH_CHECK(input.dim() == 2 || input.dim() == 3, op, ": input must be [rows, d] or [tokens, heads, d], got shape ",
              input.sizes());
  check_rows(input, op, "input");
  const int64_t d = input.size(-1);
  check_shape(weight, op, "weight", {d}, "[d]");
  TORCH_CHECK(weight.is_contiguous(), op, ": weight must be contiguous");
  TORCH_CHECK(out.sizes() == input.sizes() && out.is_contiguous(), op, ": out must be a contiguous tensor shaped like "
              "input ", input.sizes(), ", got shape ", out.sizes(), " and strides ", out.strides());
  if (dtype == at::kFloat) {
    rms_norm_rows<float>(out, input, weight, eps, offset);
  } else {
    rms_norm_rows<bf16_t>(out, input, weight, eps, offset);
  }
}

template <typename T>
void rotary_rows(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t tokens = x.size(0), heads = x.size(1), d = x.size(2);
  const int64_t token_stride = x.stride(0), head_stride = x.stride(1);
  T* data = reinterpret_cast<T*>(x.data_ptr());
  const T* c = reinterpret_cast<const T*>(cos.const_data_ptr());
  const T* s = reinterpret_cast<const T*>(sin.const_data_ptr());
  at::parallel_for(0, tokens * heads, row_grain(d, 1 << 14), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t t = r / heads;
      cpu::rotary_head(data + t * token_stride + (r % heads) * head_stride, c + t * d, s + t * d, d);
    }
  });
}

// query [tokens, heads, d] and key [tokens, kv_heads, d] rotated in place by cos/sin [tokens, d] (contiguous).
void rotary_embedding_cpu(at::Tensor& query, at::Tensor& key, const at::Tensor& cos, const at::Tensor& sin) {
  const char* op = "paged::rotary_embedding";
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&query, &key, &cos, &sin}) {
    const char* name = t == &query ? "query" : (t == &key ? "key" : (t == &cos ? "cos" : "sin"));
    check_device(*t, op, name, at::Device(at::kCPU));
  }
  const auto dtype = check_float_or_bf16(op, query, {{"key", &key}, {"cos", &cos}, {"sin", &sin}});
  TORCH_CHECK(query.dim() == 3, op, ": query must be [tokens, heads, head_dim], got shape ", query.sizes());
  TORCH_CHECK(key.dim() == 3, op, ": key must be [tokens, kv_heads, head_dim], got shape ", key.sizes());
  const int64_t tokens = query.size(0), d = query.size(2);
  TORCH_CHECK(d % 2 == 0, op, ": head_dim must be even, got ", d);
  TORCH_CHECK(key.size(0) == tokens && key.size(2) == d, op, ": key must have query's tokens and head_dim (", tokens,
              ", ", d, "), got shape ", key.sizes());
  check_shape(cos, op, "cos", {tokens, d}, "[tokens, head_dim]");
  check_shape(sin, op, "sin", {tokens, d}, "[tokens, head_dim]");
  TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous(), op, ": cos and sin must be contiguous");
  check_rows(query, op, "query");
  check_rows(key, op, "key");
  if (dtype == at::kFloat) {
    rotary_rows<float>(query, cos, sin);
    rotary_rows<float>(key, cos, sin);
  } else {
    rotary_rows<bf16_t>(query, cos, sin);
    rotary_rows<bf16_t>(key, cos, sin);
  }
}

// The index of each row's largest value (the first one; the first NaN if any), as torch.argmax(input, -1).
at::Tensor argmax_rows_cpu(const at::Tensor& input) {
  const char* op = "paged::argmax_rows";
  check_cpu_fp32(op, {{"input", &input}});
  TORCH_CHECK(input.dim() == 2, op, ": input must be [rows, n], got shape ", input.sizes());
  TORCH_CHECK(input.size(1) > 0, op, ": input rows must not be empty (argmax of nothing)");
  check_rows(input, op, "input");
  const int64_t rows = input.size(0), n = input.size(1), stride = input.stride(0);
  at::Tensor out = input.new_empty({rows}, input.options().dtype(at::kLong));
  const float* in = input.const_data_ptr<float>();
  int64_t* dst = out.data_ptr<int64_t>();
  at::parallel_for(0, rows, row_grain(n, 1 << 16), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) dst[r] = cpu::argmax_row(in + r * stride, n);
  });
  return out;
}

// The ascending ids of the 16-column panels holding a value >= threshold[r] in some row r of `scores`.
at::Tensor candidate_panels_cpu(const at::Tensor& scores, const at::Tensor& threshold) {
  const char* op = "paged::candidate_panels";
  check_cpu_fp32(op, {{"scores", &scores}, {"threshold", &threshold}});
  TORCH_CHECK(scores.dim() == 2, op, ": scores must be [rows, vocab], got shape ", scores.sizes());
  check_rows(scores, op, "scores");
  TORCH_CHECK(threshold.dim() == 1 && threshold.size(0) == scores.size(0) && threshold.is_contiguous(), op,
              ": threshold must be a contiguous [rows] = [", scores.size(0), "], got shape ", threshold.sizes());
  const int64_t rows = scores.size(0), cols = scores.size(1);
  const int64_t panels = (cols + cpu::kPanelCols - 1) / cpu::kPanelCols;
  std::vector<uint8_t> hit(panels, 0);
  const float* in = scores.const_data_ptr<float>();
  const float* thresholds = threshold.const_data_ptr<float>();
  at::parallel_for(0, panels, 1024, [&](int64_t begin, int64_t end) {
    cpu::mark_candidate_panels(in, scores.stride(0), rows, cols, thresholds, begin, end, hit.data() + begin);
  });
  std::vector<int64_t> ids;
  for (int64_t p = 0; p < panels; ++p)
    if (hit[p]) ids.push_back(p);
  at::Tensor out = scores.new_empty({static_cast<int64_t>(ids.size())}, scores.options().dtype(at::kLong));
  std::copy(ids.begin(), ids.end(), out.data_ptr<int64_t>());
  return out;
}

}  // namespace

TORCH_LIBRARY(paged, m) {
  m.def(
      "reshape_and_cache(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
      "Tensor slot_mapping) -> ()");
  m.def(
      "paged_attention(Tensor(a!) out, Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_tables, "
      "Tensor query_start_loc, Tensor seq_lens, float scale, int sliding_window, float logits_soft_cap) -> ()");
  m.def("copy_blocks(Tensor(a!)[] key_caches, Tensor(b!)[] value_caches, Tensor block_mapping) -> ()");
  m.def("pack_linear_weight(Tensor weight) -> Tensor");
  m.def("panel_linear(Tensor input, Tensor packed_weight, int out_features) -> Tensor");
  m.def("silu_and_mul(Tensor(a!) out, Tensor input) -> ()");
  m.def("gelu_tanh_and_mul(Tensor(a!) out, Tensor input) -> ()");
  m.def("rms_norm(Tensor(a!) out, Tensor input, Tensor weight, float eps, float offset) -> ()");
  m.def("rotary_embedding(Tensor(a!) query, Tensor(b!) key, Tensor cos, Tensor sin) -> ()");
  m.def("argmax_rows(Tensor input) -> Tensor");
  m.def("candidate_panels(Tensor scores, Tensor threshold) -> Tensor");
  // The instruction set each CPU kernel family runs with (isa.h): the active variant of one, those this CPU
  // supports, and a setter.
  m.def("cpu_isa(str kernel) -> str", &cpu_isa);
  m.def("supported_cpu_isas() -> str[]", &supported_cpu_isas);
  m.def("set_cpu_isa(str name, str kernel) -> ()", &set_cpu_isa);
}

TORCH_LIBRARY_IMPL(paged, CPU, m) {
  m.impl("reshape_and_cache", &reshape_and_cache_cpu);
  m.impl("paged_attention", &paged_attention_cpu);
  m.impl("copy_blocks", &copy_blocks_cpu);
  m.impl("pack_linear_weight", &pack_linear_weight_cpu);
  m.impl("panel_linear", &panel_linear_cpu);
  m.impl("silu_and_mul", &silu_and_mul_cpu);
  m.impl("gelu_tanh_and_mul", &gelu_tanh_and_mul_cpu);
  m.impl("rms_norm", &rms_norm_cpu);
  m.impl("rotary_embedding", &rotary_embedding_cpu);
  m.impl("argmax_rows", &argmax_rows_cpu);
  m.impl("candidate_panels", &candidate_panels_cpu);
}

}  // namespace paged

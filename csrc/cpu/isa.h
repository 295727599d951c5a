// Which instruction set the CPU kernels run with, chosen at load from what the CPU reports, not at build time:
// one build holds every variant (the AVX-512 ones are compiled for that target by function attributes, or by a
// target region around kernels written once against simd.h's vocabulary), so an image built on one machine runs
// the best variant on another. Each kernel family that has variants (the panel GEMM, the paged attention) holds
// its own choice, since the faster variant differs per kernel on some CPUs (Zen 4: the GEMM's variants tie, the
// attention's AVX-512 one is faster). set_isa() changes it at run time: the Python side caps it by
// PAGED_CPU_ISA / --cpu-isa or times each family, and tests run every variant the machine supports.
#pragma once

#include <atomic>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace paged::cpu {

enum class Isa : int { kAvx2 = 0, kAvx512 = 1 };

#if defined(__x86_64__) && defined(__GNUC__)
#define PAGED_X86 1
// AVX-512 F/BW/VL/DQ, the subset the kernels use (Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4 and later).
#define PAGED_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#else
#define PAGED_X86 0
#define PAGED_TARGET_AVX512
#endif

inline const char* isa_name(Isa isa) { return isa == Isa::kAvx512 ? "avx512" : "avx2"; }

inline bool cpu_supports(Isa isa) {
#if PAGED_X86
  if (isa == Isa::kAvx512) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
#endif
  return isa == Isa::kAvx2;  // the baseline: AVX2 intrinsics where the build has them, scalar code otherwise
}

inline std::vector<std::string> supported_isas() {
  std::vector<std::string> names;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    if (cpu_supports(isa)) names.emplace_back(isa_name(isa));
  return names;
}

inline Isa parse_isa(const std::string& name) {
  if (name == "avx2") return Isa::kAvx2;
  if (name == "avx512") return Isa::kAvx512;
  throw std::invalid_argument("unknown CPU instruction set '" + name + "'; choose avx2 or avx512");
}

inline Isa best_isa() { return cpu_supports(Isa::kAvx512) ? Isa::kAvx512 : Isa::kAvx2; }

// The kernel families with more than one variant; the element-wise kernels have only the baseline.
enum class Kernel : int { kGemm = 0, kAttention = 1 };
constexpr Kernel kKernels[] = {Kernel::kGemm, Kernel::kAttention};

inline const char* kernel_name(Kernel kernel) { return kernel == Kernel::kGemm ? "gemm" : "attention"; }

inline Kernel parse_kernel(const std::string& name) {
  for (Kernel kernel : kKernels)
    if (name == kernel_name(kernel)) return kernel;
  throw std::invalid_argument("unknown kernel family '" + name + "'; choose gemm or attention");
}

inline std::atomic<int>& active_isa_slot(Kernel kernel) {
  static std::atomic<int> slots[std::size(kKernels)] = {static_cast<int>(best_isa()), static_cast<int>(best_isa())};
  return slots[static_cast<int>(kernel)];
}

inline Isa active_isa(Kernel kernel) {
  return static_cast<Isa>(active_isa_slot(kernel).load(std::memory_order_relaxed));
}

// Makes `name` the active variant of `kernel`; a variant the CPU lacks is refused (std::invalid_argument, with
// the reason).
inline void set_isa(const std::string& name, Kernel kernel) {
  const Isa isa = parse_isa(name);
  if (!cpu_supports(isa)) throw std::invalid_argument("this CPU does not support " + name);
  active_isa_slot(kernel).store(static_cast<int>(isa), std::memory_order_relaxed);
}

}  // namespace paged::cpu

// Which instruction set the CPU kernels run with, chosen at load from what the CPU reports, not at build time:
// one build holds every variant (the AVX-512 and AMX ones are compiled for that target by function attributes,
// or by a target region around kernels written once against simd.h's vocabulary), so an image built on one
// machine runs the best variant on another. The levels are ordered (AVX2 < AVX-512 < AMX) and each family has a
// ceiling: the panel GEMM (fp32 weights) and the element-wise kernels stop at AVX-512, since AMX multiplies only
// bf16 and int8 matrices (the bf16 GEMMs reach AMX through oneDNN); the attention's AMX variant serves bf16
// caches and runs its AVX-512 one on fp32 caches. Each family holds its own choice, since the faster variant
// differs per kernel on some CPUs (Zen 4: the GEMM's variants tie, the attention's AVX-512 one is faster).
// set_isa() changes it at run time: the Python side caps it by PAGED_CPU_ISA / --cpu-isa or times each family,
// and tests run every variant the machine supports.
#pragma once

#include <algorithm>
#include <atomic>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace paged::cpu {

enum class Isa : int { kAvx2 = 0, kAvx512 = 1, kAmx = 2 };
constexpr Isa kIsas[] = {Isa::kAvx2, Isa::kAvx512, Isa::kAmx};

#if defined(__x86_64__) && defined(__GNUC__)
#define PAGED_X86 1
// AVX-512 F/BW/VL/DQ, the subset the kernels use (Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4 and later).
#define PAGED_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
// AVX-512 plus the AMX tile unit's bf16 multiply (Sapphire Rapids and later).
#define PAGED_TARGET_AMX \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,amx-tile,amx-bf16")))
#else
#define PAGED_X86 0
#define PAGED_TARGET_AVX512
#define PAGED_TARGET_AMX
#endif

inline const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAmx: return "amx";
    case Isa::kAvx512: return "avx512";
    default: return "avx2";
  }
}

#if PAGED_X86
// AMX needs the CPU's AMX-TILE and AMX-BF16 (CPUID leaf 7: EDX bits 24 and 22) and, on Linux, the kernel's
// permission to use the tile data state, which a process asks for once (arch_prctl ARCH_REQ_XCOMP_PERM for
// XTILEDATA); without it the first tile instruction faults. Asked once, answered from then on.
inline bool amx_usable() {
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    if (!((edx >> 24) & 1u) || !((edx >> 22) & 1u)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}
#endif

inline bool cpu_supports(Isa isa) {
#if PAGED_X86
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (isa == Isa::kAvx512) return avx512;
  if (isa == Isa::kAmx) return avx512 && amx_usable();
#endif
  return isa == Isa::kAvx2;  // the baseline: AVX2 intrinsics where the build has them, scalar code otherwise
}

inline std::vector<std::string> supported_isas() {
  std::vector<std::string> names;
  for (Isa isa : kIsas)
    if (cpu_supports(isa)) names.emplace_back(isa_name(isa));
  return names;
}

inline Isa parse_isa(const std::string& name) {
  for (Isa isa : kIsas)
    if (name == isa_name(isa)) return isa;
  throw std::invalid_argument("unknown CPU instruction set '" + name + "'; choose avx2, avx512 or amx");
}

inline Isa best_isa() {
  Isa best = Isa::kAvx2;
  for (Isa isa : kIsas)
    if (cpu_supports(isa)) best = isa;
  return best;
}

// The kernel families with variants: the panel GEMM, the paged attention, and the element-wise kernels that
// compute per value (gated activations, RMSNorm). RoPE, the cache writes and the argmax have the baseline only.
enum class Kernel : int { kGemm = 0, kAttention = 1, kElementwise = 2 };
constexpr Kernel kKernels[] = {Kernel::kGemm, Kernel::kAttention, Kernel::kElementwise};

inline const char* kernel_name(Kernel kernel) {
  switch (kernel) {
    case Kernel::kGemm: return "gemm";
    case Kernel::kAttention: return "attention";
    default: return "elementwise";
  }
}

inline Kernel parse_kernel(const std::string& name) {
  for (Kernel kernel : kKernels)
    if (name == kernel_name(kernel)) return kernel;
  throw std::invalid_argument("unknown kernel family '" + name + "'; choose gemm, attention or elementwise");
}

// The highest level a family has a variant for; asking a family for more runs this one.
inline Isa ceiling(Kernel kernel) { return kernel == Kernel::kAttention ? Isa::kAmx : Isa::kAvx512; }

inline int clamp_to_family(Isa isa, Kernel kernel) { return static_cast<int>(std::min(isa, ceiling(kernel))); }

inline std::atomic<int>& active_isa_slot(Kernel kernel) {
  static std::atomic<int> slots[std::size(kKernels)] = {clamp_to_family(best_isa(), Kernel::kGemm),
                                                        clamp_to_family(best_isa(), Kernel::kAttention),
                                                        clamp_to_family(best_isa(), Kernel::kElementwise)};
  return slots[static_cast<int>(kernel)];
}

inline Isa active_isa(Kernel kernel) {
  return static_cast<Isa>(active_isa_slot(kernel).load(std::memory_order_relaxed));
}

// Makes `name` (or the family's ceiling below it) the active variant of `kernel`; a level the CPU lacks is
// refused (std::invalid_argument, with the reason).
inline void set_isa(const std::string& name, Kernel kernel) {
  const Isa isa = parse_isa(name);
  if (!cpu_supports(isa)) throw std::invalid_argument("this CPU does not support " + name);
  active_isa_slot(kernel).store(clamp_to_family(isa, kernel), std::memory_order_relaxed);
}

}  // namespace paged::cpu

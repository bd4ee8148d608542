// Bulk conversions: picks a kernel for the CPU, format and options, and splits the work across threads.
#include "mantissa/numeric/bulk.h"

#include <cpuid.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <optional>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "bulk_loops.h"
#include "mantissa/numeric/convert.h"

namespace mantissa {
namespace {

using detail::DecodeJob;
using detail::EncodeJob;

// Below this many elements one thread does the whole array (thread start-up would cost more).
constexpr std::size_t kParallelMin = std::size_t{1} << 16;
// Elements per unit of parallel work: a multiple of every vector width.
constexpr std::size_t kChunk = std::size_t{1} << 14;

// F16C from CPUID itself: clang's __builtin_cpu_supports does not know the name.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

bool cpu_has(Isa isa) {
  switch (isa) {
    case Isa::portable: return true;
    case Isa::avx2: return __builtin_cpu_supports("avx2") && cpu_has_f16c();
    case Isa::avx512:
      return cpu_has(Isa::avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
    case Isa::avx512_bf16: return cpu_has(Isa::avx512) && __builtin_cpu_supports("avx512bf16");
  }
  return false;
}

Isa best_supported() {
  Isa best = Isa::portable;
  for (Isa isa : {Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
    if (cpu_has(isa)) best = isa;
  }
  return best;
}

Isa initial_isa() {
  Isa isa = best_supported();
  if (const char* env = std::getenv("MANTISSA_ISA")) {
    for (Isa level : {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
      if (isa_name(level) == env && level < isa) isa = level;
    }
  }
  return isa;
}

}  // namespace

std::string isa_setting_problem() {
  const char* env = std::getenv("MANTISSA_ISA");
  if (env == nullptr) return {};
  std::string names;
  for (Isa level : {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
    if (isa_name(level) == env) return {};
    names += (names.empty() ? "" : ", ") + std::string(isa_name(level));
  }
  return "MANTISSA_ISA: '" + std::string(env) + "' is not one of " + names + " (the most the kernels may use)";
}

namespace {

std::atomic<Isa>& isa_state() {
  static std::atomic<Isa> state{initial_isa()};
  return state;
}

using EncodeKernel = void (*)(const EncodeJob&);
using DecodeKernel = void (*)(const DecodeJob&);

EncodeKernel pick_encode(Format f, const CastOptions& o, Isa isa) {
  const bool fixed_rounding = o.rounding != Rounding::stochastic;
  if (isa >= Isa::avx512_bf16 && f == Format::bf16() && o.rounding == Rounding::nearest_even &&
      !o.saturate) {
    return detail::encode_bf16_avx512bf16;
  }
  if (isa >= Isa::avx512) {
    return f == Format::fp16() && fixed_rounding ? detail::encode_fp16_avx512 : detail::encode_avx512;
  }
  if (isa >= Isa::avx2) {
    if (f == Format::bf16() && o.rounding == Rounding::nearest_even && !o.saturate) return detail::encode_bf16_avx2;
    return f == Format::fp16() && fixed_rounding ? detail::encode_fp16_f16c : detail::encode_avx2;
  }
  return detail::encode_portable;
}

DecodeKernel pick_decode(Format f, Isa isa, bool has_table) {
  if (isa >= Isa::avx512) {
    if (f == Format::fp16()) return detail::decode_fp16_avx512;
    if (f == Format::bf16()) return detail::decode_bf16_avx512;
    if (has_table) return detail::decode_8bit_avx512;
  }
  if (isa >= Isa::avx2) {
    if (f == Format::bf16()) return detail::decode_bf16_avx2;
    return f == Format::fp16() ? detail::decode_fp16_f16c : detail::decode_avx2;
  }
  return detail::decode_portable;
}

// Calls body(begin, end) over [0, n) in chunks, on all threads when n is large.
template <class Body>
void for_chunks(std::size_t n, Body&& body) {
  if (n < kParallelMin || omp_get_max_threads() == 1) {
    body(std::size_t{0}, n);
    return;
  }
  const auto chunks = static_cast<std::ptrdiff_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const std::size_t begin = static_cast<std::size_t>(c) * kChunk;
    body(begin, std::min(n, begin + kChunk));
  }
}

// The 256 decoded values of an 8-bit format, built once; null for other formats. The 8-bit formats
// are eXm(7-X) for X = 1..7, with OCP's e4m3 in place of the IEEE-style one (which decodes without).
const float* decode_table(Format f) {
  static const std::array<std::array<float, 256>, 8> tables = [] {
    std::array<std::array<float, 256>, 8> t{};
    for (int e = 1; e <= 7; ++e) {
      const Format g = e == 4 ? Format::e4m3() : Format::emulated(e, 7 - e);
      for (std::uint32_t b = 0; b < 256; ++b) t[static_cast<std::size_t>(e)][b] = decode(g, b);
    }
    return t;
  }();
  if (f.bits() != 8 || (f.exp_bits() == 4 && f != Format::e4m3())) return nullptr;
  return tables[static_cast<std::size_t>(f.exp_bits())].data();
}

// The parameters and kernel of the last conversion this thread set up, reused while the format, the
// options and the kernel level stay the same: rows of a few dozen elements (attention's heads) made the
// set-up cost more than the conversion.
struct EncodeSetup {
  std::optional<Format> format;
  Rounding rounding{};
  bool saturate = false;
  Isa isa{};
  detail::EncodeParams params{};
  std::uint32_t overflow = 0;
  EncodeKernel kernel = nullptr;
};

const EncodeSetup& encode_setup(Format format, const CastOptions& options) {
  thread_local EncodeSetup last;
  const Isa isa = active_isa();
  if (last.format != format || last.rounding != options.rounding || last.saturate != options.saturate || last.isa != isa) {
    last.format = format;
    last.rounding = options.rounding;
    last.saturate = options.saturate;
    last.isa = isa;
    last.params = detail::make_encode_params(format, options);
    last.overflow = options.rounding == Rounding::toward_zero ? last.params.max_finite : last.params.on_overflow;
    last.kernel = pick_encode(format, options, isa);
  }
  return last;
}

struct DecodeSetup {
  std::optional<Format> format;
  Isa isa{};
  detail::DecodeParams params{};
  const float* table = nullptr;
  DecodeKernel kernel = nullptr;
};

const DecodeSetup& decode_setup(Format format) {
  thread_local DecodeSetup last;
  const Isa isa = active_isa();
  if (last.format != format || last.isa != isa) {
    last.format = format;
    last.isa = isa;
    last.params = detail::make_decode_params(format);
    last.table = decode_table(format);
    last.kernel = pick_decode(format, isa, last.table != nullptr);
  }
  return last;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::portable: return "portable";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_bf16: return "avx512_bf16";
  }
  return "?";
}

bool isa_supported(Isa isa) { return cpu_has(isa); }

Isa active_isa() { return isa_state().load(std::memory_order_relaxed); }

void set_isa(Isa isa) {
  if (!cpu_has(isa)) {
    throw std::invalid_argument("this CPU does not support the " + std::string(isa_name(isa)) +
                                " kernels");
  }
  isa_state().store(isa, std::memory_order_relaxed);
}

void encode_array(Format format, const float* src, void* dst, std::size_t n, const CastOptions& options,
                  std::uint64_t first_index) {
  const EncodeSetup& setup = encode_setup(format, options);
  EncodeJob base{};
  base.params = setup.params;
  base.overflow = setup.overflow;
  base.storage_bytes = format.storage_bytes();
  base.src = src;
  base.dst = dst;
  const EncodeKernel kernel = setup.kernel;
  for_chunks(n, [&](std::size_t begin, std::size_t end) {
    // Split where the counter's high half changes, so each job has one stochastic key.
    while (begin < end) {
      const std::uint64_t index = first_index + begin;
      const std::uint64_t to_boundary = (std::uint64_t{1} << 32) - (index & 0xffffffffULL);
      const std::size_t stop = static_cast<std::size_t>(std::min<std::uint64_t>(end, begin + to_boundary));
      EncodeJob job = base;
      job.begin = begin;
      job.end = stop;
      job.index_low = static_cast<std::uint32_t>(index);
      job.key = detail::stochastic_key(options.seed, static_cast<std::uint32_t>(index >> 32));
      kernel(job);
      begin = stop;
    }
  });
}

void decode_array(Format format, const void* src, float* dst, std::size_t n) {
  const DecodeSetup& setup = decode_setup(format);
  DecodeJob base{};
  base.params = setup.params;
  base.storage_bytes = format.storage_bytes();
  base.src = src;
  base.dst = dst;
  base.table = setup.table;
  const DecodeKernel kernel = setup.kernel;
  for_chunks(n, [&](std::size_t begin, std::size_t end) {
    DecodeJob job = base;
    job.begin = begin;
    job.end = end;
    kernel(job);
  });
}

namespace detail {

void encode_portable(const EncodeJob& job) { encode_any_width(job); }
void decode_portable(const DecodeJob& job) { decode_any_width(job); }

}  // namespace detail
}  // namespace mantissa

// Bulk conversion over arrays: the path training uses to make low-precision copies of tensors.
//
// Each call picks the fastest kernel this CPU runs (AVX512-BF16 for bf16, F16C for fp16, AVX-512 or
// AVX2 for every other format, a portable loop everywhere else), chosen at run time from CPUID, and
// splits large arrays across threads. Every kernel gives exactly the bits of the scalar encode()/decode().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "mantissa/numeric/format.h"
#include "mantissa/numeric/rounding.h"

namespace mantissa {

// Element i of src becomes element i of dst, which holds format.storage_bytes() bytes per element (the
// low format.bits() bits of a little-endian unsigned integer). Stochastic rounding uses the counter
// first_index + i, so converting an array in pieces gives the same bits as converting it whole.
void encode_array(Format format, const float* src, void* dst, std::size_t n,
                  const CastOptions& options = {}, std::uint64_t first_index = 0);
void decode_array(Format format, const void* src, float* dst, std::size_t n);

// Instruction-set levels of the kernels, each including the ones before it.
enum class Isa : std::uint8_t { portable, avx2, avx512, avx512_bf16 };  // avx2 includes F16C

std::string_view isa_name(Isa isa);
// Whether this CPU and operating system run the level (from CPUID and XGETBV).
bool isa_supported(Isa isa);
// The level the bulk conversions use: the best supported one, or lower if set_isa() or the
// environment variable MANTISSA_ISA (portable, avx2, avx512, avx512_bf16) asks for less.
Isa active_isa();
// What is wrong with MANTISSA_ISA, empty when it is unset or a level's name. A name that is none (a typo)
// would otherwise leave the kernels uncapped, silently; the command refuses to run with it.
std::string isa_setting_problem();
// Caps the level (tests run every kernel on one machine this way); throws std::invalid_argument if the
// CPU does not support it. Not meant to be changed while conversions run on other threads.
void set_isa(Isa isa);

// Caps the level for a scope and restores the previous one after.
class IsaScope {
 public:
  explicit IsaScope(Isa isa) : saved_(active_isa()) { set_isa(isa); }
  ~IsaScope() { set_isa(saved_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  Isa saved_;
};

}  // namespace mantissa

// The scalar conversion API: thin wrappers over the rules in encode_rules.h.
#include "mantissa/numeric/convert.h"

#include <bit>

#include "encode_rules.h"

namespace mantissa {

std::uint32_t encode(Format format, float x, const CastOptions& options, std::uint64_t index) {
  const detail::EncodeParams p = detail::make_encode_params(format, options);
  const std::uint32_t random = options.rounding == Rounding::stochastic
                                   ? stochastic_bits(options.seed, index)
                                   : 0;
  return detail::encode_bits(p, std::bit_cast<std::uint32_t>(x), random);
}

float decode(Format format, std::uint32_t bits) {
  return std::bit_cast<float>(detail::decode_bits(detail::make_decode_params(format), bits));
}

float round_to(Format format, float x, const CastOptions& options, std::uint64_t index) {
  return decode(format, encode(format, x, options, index));
}

std::uint32_t stochastic_bits(std::uint64_t seed, std::uint64_t index) {
  const detail::StochasticKey key = detail::stochastic_key(seed, static_cast<std::uint32_t>(index >> 32));
  return detail::random_bits(key, static_cast<std::uint32_t>(index));
}

}  // namespace mantissa

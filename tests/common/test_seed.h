// The seed of every test that draws random inputs or moments. Fixed by default, so that `make test`
// gives the same result on every run of a commit (CI must not pass or fail by luck); MANTISSA_TEST_SEED
// replays a number, or with "random" draws a fresh seed, to search wider by hand (the tests that
// use it print it in a failure's trace).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string_view>

namespace mantissa::testing {

inline std::uint64_t test_seed() {
  static const std::uint64_t seed = [] {
    const char* s = std::getenv("MANTISSA_TEST_SEED");
    if (s == nullptr || *s == '\0') return std::uint64_t{20261205};
    if (std::string_view(s) != "random") return std::uint64_t{std::strtoull(s, nullptr, 10)};
    std::random_device device;
    return (std::uint64_t{device()} << 32) | std::uint64_t{device()};
  }();
  return seed;
}

}  // namespace mantissa::testing

// The smallest program that uses mantissa from outside: round pi to bf16 and print it with its bits,
// then convert an array in bulk.
#include <cstdio>
#include <vector>

#include "mantissa/numeric/bfloat16.h"
#include "mantissa/numeric/bulk.h"

int main() {
  const float pi = 3.14159265f;
  const mantissa::bf16 b(pi);
  std::printf("bf16(%.9g) = %.9g (0x%04x)\n", static_cast<double>(pi), static_cast<double>(b.to_float()),
              b.bits);
  std::vector<float> x(1000, pi);
  std::vector<mantissa::bf16> y(x.size());
  mantissa::encode_array(mantissa::Format::bf16(), x.data(), y.data(), x.size());
  std::printf("bulk: %zu values, kernels %s\n", y.size(), mantissa::isa_name(mantissa::active_isa()).data());
  return y[999] == b ? 0 : 1;
}

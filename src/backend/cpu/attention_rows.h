// One row of attention's softmax and of its backward, forward writing the probabilities in their dtype
// as it goes (f32, or bf16 rounded to nearest even) and backward reading them where they are: the
// attention kernel's per-row work, which was most of attention's time besides its products (a call to
// the bulk conversion a row, glibc's scalar expf on every row's last n % 16 keys, a horizontal sum).
//
// Each is written twice with the same arithmetic in the same order, so both give the same bits: a plain
// loop (attention_rows.cpp, compiled per ISA) and an AVX-512 kernel (attention_rows_avx512.cpp, called
// only where active_isa() has it). Sixteen lanes: key j goes to lane j % 16; the lanes' maxima and sums
// meet in a fixed tree (lanes l and l + 8, then l + 4, l + 2, l + 1); exp is exp_of_nonpositive
// (unary_math.h), within an ulp of exp.
#pragma once

#include <cstdint>

namespace mantissa::detail {

// p[0, n) = softmax(scale * s[0, n)), p[n, len) = 0; n == 0 gives NaN throughout. work holds n floats
// (the exponentials before they are scaled); p is f32, or bf16 bits.
void attention_softmax_row(const float* s, float* work, float* p, std::int64_t n, std::int64_t len, float scale);
void attention_softmax_row(const float* s, float* work, std::uint16_t* p, std::int64_t n, std::int64_t len,
                           float scale);

// g[j] = (scale * p[j]) * (dp[j] - sum_k p[k] dp[k]) for j < n (only those are read), g[n, len) = 0;
// p and g each f32 or bf16 bits.
void attention_softmax_backward_row(const float* p, const float* dp, float* g, std::int64_t n, std::int64_t len,
                                    float scale);
void attention_softmax_backward_row(const float* p, const float* dp, std::uint16_t* g, std::int64_t n, std::int64_t len,
                                    float scale);
void attention_softmax_backward_row(const std::uint16_t* p, const float* dp, float* g, std::int64_t n, std::int64_t len,
                                    float scale);
void attention_softmax_backward_row(const std::uint16_t* p, const float* dp, std::uint16_t* g, std::int64_t n, std::int64_t len,
                                    float scale);

// The same with AVX-512.
void attention_softmax_row_avx512(const float* s, float* work, float* p, std::int64_t n, std::int64_t len, float scale);
void attention_softmax_row_avx512(const float* s, float* work, std::uint16_t* p, std::int64_t n, std::int64_t len,
                                  float scale);
void attention_softmax_backward_row_avx512(const float* p, const float* dp, float* g, std::int64_t n, std::int64_t len,
                                           float scale);
void attention_softmax_backward_row_avx512(const float* p, const float* dp, std::uint16_t* g, std::int64_t n, std::int64_t len,
                                           float scale);
void attention_softmax_backward_row_avx512(const std::uint16_t* p, const float* dp, float* g, std::int64_t n, std::int64_t len,
                                           float scale);
void attention_softmax_backward_row_avx512(const std::uint16_t* p, const float* dp, std::uint16_t* g, std::int64_t n,
                                           std::int64_t len, float scale);

}  // namespace mantissa::detail

// Hot loops over raw arrays carry MANTISSA_VECTOR_CLONES: GCC compiles them for AVX-512 (x86-64-v4),
// AVX2 + FMA (x86-64-v3) and the baseline, and picks the widest the CPU has when the program starts. The
// library itself is built for the baseline, so it runs on every x86-64. (MANTISSA_ISA and
// ONEDNN_MAX_CPU_ISA do not reach this choice: the baseline copy is what the other compilers build.)
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MANTISSA_VECTOR_CLONES [[gnu::target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")]]
#else
#define MANTISSA_VECTOR_CLONES
#endif

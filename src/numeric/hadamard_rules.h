// NVFP4's random Hadamard transform of one group of 16 values, for the host and the device alike
// (numeric/microscale.cpp's hadamard16, and the GPU's kernel in cuda_fp8.cu): the signs applied, the
// Walsh-Hadamard butterflies (Sylvester order: H[i][j] = (-1)^popcount(i & j)), then 1 / 4. Only
// additions, subtractions and exact scalings, so every machine gets the same bits.
#pragma once

#include <cstdint>

#include "host_device.h"

namespace mantissa {

MANTISSA_HOST_DEVICE inline void hadamard16_group(float (&v)[16], std::uint16_t signs) {
  for (int k = 0; k < 16; ++k) {
    if ((signs >> k) & 1U) v[k] = -v[k];
  }
  for (int h = 1; h < 16; h *= 2) {
    for (int i = 0; i < 16; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
  for (int k = 0; k < 16; ++k) v[k] *= 0.25f;
}

}  // namespace mantissa

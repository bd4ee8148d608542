// MANTISSA_HOST_DEVICE marks the functions that are compiled for the GPU as well as the CPU (by nvcc,
// in src/backend/cuda/): the rounding rule and the elementwise math, written once for both.
#pragma once

#ifdef __CUDACC__
#define MANTISSA_HOST_DEVICE __host__ __device__
#else
#define MANTISSA_HOST_DEVICE
#endif

// cuBLASLt, loaded when the first product runs on the GPU rather than linked: the library is 541 MB,
// and mapping it cost every process of a CUDA build about 0.15 s at start, GPU or not (each of the
// suite's ~2,600 test processes among them). The functions mantissa calls, by their own types.
#pragma once

#include <cublasLt.h>

#include <string>

namespace mantissa::detail::cuda {

struct CublasLt {
  decltype(&cublasLtGetVersion) GetVersion;
  decltype(&cublasLtGetStatusName) GetStatusName;
  decltype(&cublasLtGetStatusString) GetStatusString;
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmul) Matmul;
};

// The loaded library (libcublasLt.so.<major it was built with>, from the loader's path, else from the
// toolkit it was built with); throws one line saying what was tried when it cannot be loaded.
const CublasLt& cublaslt();

}  // namespace mantissa::detail::cuda

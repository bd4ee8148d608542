// Loading cuBLASLt on first use (see cublaslt_api.h).
#include "cublaslt_api.h"

#include "library_loader.h"

namespace mantissa::detail::cuda {
namespace {

CublasLt load() {
  const Symbols bind(open_library("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR), "cuBLASLt"), "cuBLASLt");
  CublasLt api{};
  bind(api.GetVersion, "cublasLtGetVersion");
  bind(api.GetStatusName, "cublasLtGetStatusName");
  bind(api.GetStatusString, "cublasLtGetStatusString");
  bind(api.Create, "cublasLtCreate");
  bind(api.MatmulDescCreate, "cublasLtMatmulDescCreate");
  bind(api.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  bind(api.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  bind(api.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  bind(api.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  bind(api.MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  bind(api.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  bind(api.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  bind(api.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  bind(api.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  bind(api.Matmul, "cublasLtMatmul");
  return api;
}

}  // namespace

const CublasLt& cublaslt() {
  static const CublasLt api = load();  // a failed load throws, and the next call tries again
  return api;
}

}  // namespace mantissa::detail::cuda

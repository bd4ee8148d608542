// Loading cuBLASLt on first use (see cublaslt_api.h).
#include "cublaslt_api.h"

#include <dlfcn.h>

#include <stdexcept>

namespace mantissa::detail::cuda {
namespace {

template <class F>
void bind(void* lib, F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (f == nullptr) throw std::runtime_error(std::string("cuBLASLt: the library has no ") + name);
}

CublasLt load() {
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  const std::string fallback = std::string(MANTISSA_CUDA_LIBRARY_DIR) + "/" + soname;
  if (lib == nullptr) lib = dlopen(fallback.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    throw std::runtime_error("cuBLASLt: cannot load " + soname + " (tried the loader's path and " + fallback +
                             "; set LD_LIBRARY_PATH to the folder that has it)");
  }
  CublasLt api{};
  bind(lib, api.GetVersion, "cublasLtGetVersion");
  bind(lib, api.GetStatusName, "cublasLtGetStatusName");
  bind(lib, api.GetStatusString, "cublasLtGetStatusString");
  bind(lib, api.Create, "cublasLtCreate");
  bind(lib, api.MatmulDescCreate, "cublasLtMatmulDescCreate");
  bind(lib, api.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  bind(lib, api.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  bind(lib, api.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  bind(lib, api.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  bind(lib, api.MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  bind(lib, api.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  bind(lib, api.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  bind(lib, api.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  bind(lib, api.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  bind(lib, api.Matmul, "cublasLtMatmul");
  return api;
}

}  // namespace

const CublasLt& cublaslt() {
  static const CublasLt api = load();  // a failed load throws, and the next call tries again
  return api;
}

}  // namespace mantissa::detail::cuda

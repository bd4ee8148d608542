// NVIDIA's libraries loaded with dlopen at their first use rather than linked: cuBLASLt is 541 MB, and
// mapping it cost every process of a CUDA build 0.15 s at start, GPU or not; cuDNN and NCCL need not be
// on a machine that never convolves or runs data parallel on GPUs. The loader's path is tried first (the
// GPU machine's PyTorch wheels, through LD_LIBRARY_PATH), then the CUDA toolkit the build was made with.
#pragma once

#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace mantissa::detail::cuda {

// The library `soname` ("libcudnn.so.9"), opened once per call; throws std::runtime_error "<what>:
// cannot load ..." saying where it looked.
void* open_library(const std::string& soname, const char* what);

// An opened library's functions, bound by name: symbols(api.Create, "cublasLtCreate") sets api.Create or
// throws std::runtime_error "<what>: the library has no cublasLtCreate".
class Symbols {
 public:
  Symbols(void* lib, const char* what) : lib_(lib), what_(what) {}
  template <class F>
  void operator()(F& f, const char* name) const {
    f = reinterpret_cast<F>(dlsym(lib_, name));
    if (f == nullptr) throw std::runtime_error(std::string(what_) + ": the library has no " + name);
  }

 private:
  void* lib_;
  const char* what_;
};

}  // namespace mantissa::detail::cuda

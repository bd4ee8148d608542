// Opening NVIDIA's libraries at their first use; see library_loader.h.
#include "library_loader.h"

namespace mantissa::detail::cuda {

void* open_library(const std::string& soname, const char* what) {
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  const std::string fallback = std::string(MANTISSA_CUDA_LIBRARY_DIR) + "/" + soname;
  if (lib == nullptr) lib = dlopen(fallback.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    throw std::runtime_error(std::string(what) + ": cannot load " + soname + " (tried the loader's path and " + fallback +
                             "; set LD_LIBRARY_PATH to the folder that has it)");
  }
  return lib;
}

}  // namespace mantissa::detail::cuda

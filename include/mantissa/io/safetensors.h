// safetensors files: an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
// shape and byte range, then the raw little-endian data. Python's safetensors, PyTorch and others read
// them, so mantissa's checkpoints are readable without mantissa.
//
// Writing is atomic: the file is written under a temporary name, synced, renamed over the target and
// the directory synced, so a crash leaves either the old file or the new one, never a torn one.
// Reading checks every field and names the file and the problem.
#pragma once

#include <filesystem>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mantissa/base/errors.h"
#include "mantissa/core/tensor.h"

namespace mantissa {

class CheckpointError : public Error {
 public:
  using Error::Error;
};

struct Safetensors {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order
  std::map<std::string, std::string> metadata;
  std::vector<std::pair<std::string, std::string>> skipped;  // (name, dtype) of tensors of dtypes mantissa has not, when asked
  const Tensor* find(const std::string& name) const;
};

void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A tensor of a dtype mantissa computes in not, written as its bytes: "F4" (OCP FP4 E2M1, two a byte, the
// first in the low nibble; `shape` counts values), "F8_E8M0" (OCP's scale format), "U8", ...
struct RawTensor {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};
// The same with raw tensors after the others (names unique across both).
void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::vector<std::pair<std::string, RawTensor>>& raw, const std::map<std::string, std::string>& metadata);
// Throws CheckpointError naming the file and what is wrong; a tensor of a dtype mantissa has not (I64,
// say: PyTorch's num_batches_tracked) is an error unless `skip_unsupported_dtypes`, which lists it in
// `skipped` instead.
Safetensors read_safetensors(const std::filesystem::path& path, bool skip_unsupported_dtypes = false);

// The safetensors name of a dtype ("F32", "BF16", "F16", "F64", "F8_E4M3", "F8_E5M2").
std::string safetensors_dtype(DType t);

}  // namespace mantissa

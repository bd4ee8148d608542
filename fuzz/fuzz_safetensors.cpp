// Fuzzes the safetensors reader (read_safetensors), which reads checkpoints and any file a user names.
// A file read without error must describe tensors that fit in it without overlapping, and must write
// back and read again to the same names, dtypes, shapes, bytes and metadata.
#include <cstring>

#include "fuzz_target.h"
#include "mantissa/io/safetensors.h"

namespace {

using mantissa::fuzz::require;

void require_same(const mantissa::Safetensors& a, const mantissa::Safetensors& b) {
  require(a.tensors.size() == b.tensors.size() && a.metadata == b.metadata, "same tensors and metadata");
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& [name_a, x] = a.tensors[i];
    const auto& [name_b, y] = b.tensors[i];
    require(name_a == name_b && x.dtype() == y.dtype() && x.shape() == y.shape(), "same name, dtype, shape");
    const std::size_t bytes = static_cast<std::size_t>(x.numel()) * mantissa::dtype_size(x.dtype());
    require(bytes == 0 || std::memcmp(x.data(), y.data(), bytes) == 0, "same bytes");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = mantissa::fuzz::write_scratch("input.safetensors", data, size);
  mantissa::Safetensors file;
  try {
    file = mantissa::read_safetensors(path);
  } catch (const mantissa::CheckpointError&) {
    return 0;
  }
  std::size_t total = 0;
  for (const auto& [name, t] : file.tensors) {
    require(t.numel() >= 0, "a non-negative element count");
    total += static_cast<std::size_t>(t.numel()) * mantissa::dtype_size(t.dtype());
  }
  require(total <= size, "the tensors fit in the file");
  const auto copy = mantissa::fuzz::scratch_dir() / "copy.safetensors";
  mantissa::write_safetensors(copy, file.tensors, file.metadata);
  require_same(file, mantissa::read_safetensors(copy));
  return 0;
}

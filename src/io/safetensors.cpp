// safetensors reading and writing (see the header for the format and the guarantees).
#include "mantissa/io/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "mantissa/core/input_file.h"
#include "mantissa/core/output_file.h"
#include "mantissa/io/json_number.h"
#include "mantissa/autograd/node.h"
#include "mantissa/ops/ops.h"

namespace mantissa {
namespace {

[[noreturn]] void fail(const std::filesystem::path& p, const std::string& what) {
  throw CheckpointError(p.string() + ": " + what);
}

// A name the writer gives a tensor, and so the only kind the reader takes: one a file written by mantissa
// can hold, read back the same (an empty name was read, then refused when written back).
bool tensor_name_ok(const std::string& name) { return !name.empty() && name != "__metadata__"; }

DType dtype_of(const std::filesystem::path& p, const std::string& name) {
  for (DType t : kAllDTypes) {
    if (safetensors_dtype(t) == name) return t;
  }
  fail(p, "unsupported dtype '" + name + "'");
}

}  // namespace

std::string safetensors_dtype(DType t) {
  switch (t) {
    case DType::f64: return "F64";
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::e4m3: return "F8_E4M3";
    case DType::e5m2: return "F8_E5M2";
  }
  return "?";
}

const Tensor* Safetensors::find(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_safetensors(path, tensors, {}, metadata);
}

void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::vector<std::pair<std::string, RawTensor>>& raw, const std::map<std::string, std::string>& metadata) {
  NoGradGuard no_grad;
  nlohmann::json header = nlohmann::json::object();
  std::vector<Tensor> data;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (!tensor_name_ok(name) || header.contains(name)) fail(path, "bad or repeated tensor name '" + name + "'");
    const Tensor c = t.device() == Device::cpu() ? contiguous(t) : t.to(Device::cpu());  // written from host memory
    const std::uint64_t bytes = static_cast<std::uint64_t>(c.numel()) * dtype_size(c.dtype());
    header[name] = {{"dtype", safetensors_dtype(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(c);
  }
  for (const auto& [name, t] : raw) {
    if (!tensor_name_ok(name) || header.contains(name)) fail(path, "bad or repeated tensor name '" + name + "'");
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const std::uint64_t n = text.size();
  std::uint8_t size[8];
  for (int i = 0; i < 8; ++i) size[i] = static_cast<std::uint8_t>(n >> (8 * i));

  AtomicFile out(path, "the safetensors file");
  out.write(size, 8);
  out.write(text);
  for (const Tensor& c : data) out.write(c.data(), static_cast<std::size_t>(c.numel()) * dtype_size(c.dtype()));
  for (const auto& [name, t] : raw) out.write(t.bytes.data(), t.bytes.size());
  out.commit();
}

namespace {

// Bytes at an offset of the file, or a CheckpointError ("<path>: truncated: <what> ends after ...").
void read_part(InputFile& f, std::uint64_t offset, void* out, std::uint64_t n, const std::string& what) {
  try {
    f.read_exactly_at(offset, out, static_cast<std::size_t>(n), what);
  } catch (const InputFileError& e) {
    throw CheckpointError(e.what());
  }
}

// A JSON list of integers of type T, each through json_value (named `what` in errors).
template <class T>
std::vector<T> json_list(const nlohmann::json& list, const std::string& what) {
  if (!list.is_array()) throw std::invalid_argument(what + " is not a list");
  std::vector<T> values;
  for (const nlohmann::json& v : list) values.push_back(json_value<T>(v, what));
  return values;
}

}  // namespace

Safetensors read_safetensors(const std::filesystem::path& path, bool skip_unsupported_dtypes) try {
  std::optional<InputFile> opened;
  try {
    opened.emplace(path, "a safetensors file", kMaxSafetensorsBytes);
  } catch (const InputFileError& e) {
    throw CheckpointError(e.what());
  }
  InputFile& f = *opened;
  const std::uint64_t file_size = f.size();
  std::uint8_t size[8];
  if (file_size < 8) fail(path, "truncated: no header length");
  read_part(f, 0, size, 8, "the header length");
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{size[i]} << (8 * i);
  if (n > file_size - 8 || n > (std::uint64_t{100} << 20)) fail(path, "header length " + std::to_string(n) + " is beyond the file");
  std::string text(n, '\0');
  read_part(f, 8, text.data(), n, "the header");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const std::exception&) {
    fail(path, "the header is not valid JSON");
  }
  if (!header.is_object()) fail(path, "the header is not a JSON object");
  const std::uint64_t data_size = file_size - 8 - n;
  Safetensors out;
  std::vector<std::pair<std::uint64_t, std::string>> order;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path, "__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail(path, "metadata '" + k + "' is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!tensor_name_ok(name)) fail(path, "a tensor has an empty name");
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets")) {
      fail(path, "tensor '" + name + "' lacks dtype, shape or data_offsets");
    }
    if (skip_unsupported_dtypes && entry["dtype"].is_string()) {
      const std::string dtype = entry["dtype"].get<std::string>();
      if (std::none_of(std::begin(kAllDTypes), std::end(kAllDTypes), [&](DType t) { return safetensors_dtype(t) == dtype; })) {
        out.skipped.emplace_back(name, dtype);
        continue;
      }
    }
    try {
      const DType t = dtype_of(path, entry["dtype"].get<std::string>());
      const Shape shape = json_list<std::int64_t>(entry["shape"], "tensor '" + name + "': shape");
      const auto offsets = json_list<std::uint64_t>(entry["data_offsets"], "tensor '" + name + "': data_offsets");
      // The element count, bounded by the file's data as it is multiplied out (a shape whose count would
      // wrap, such as 2^62 + 1 elements, is refused before anything is allocated).
      std::uint64_t count = 1;
      for (std::int64_t d : shape) {
        if (d < 0) fail(path, "tensor '" + name + "' has a negative dimension");
        const auto u = static_cast<std::uint64_t>(d);
        if (u != 0 && count > data_size / u) fail(path, "tensor '" + name + "' has a shape larger than the file");
        count *= u;
      }
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size ||
          offsets[1] - offsets[0] != count * dtype_size(t)) {
        fail(path, "tensor '" + name + "' has data offsets that do not match its shape or the file (truncated?)");
      }
      Tensor x = Tensor::empty(shape, t);
      read_part(f, 8 + n + offsets[0], x.data(), offsets[1] - offsets[0], "the data of tensor '" + name + "'");
      order.emplace_back(offsets[0], name);
      out.tensors.emplace_back(name, x);
    } catch (const nlohmann::json::exception&) {
      fail(path, "tensor '" + name + "' has a malformed entry");
    }
  }
  // Keep the file's order (by offset), which is the order the writer used; tensors may not overlap.
  std::vector<std::pair<std::string, Tensor>> sorted;
  std::sort(order.begin(), order.end());
  std::uint64_t end = 0;
  for (const auto& [off, name] : order) {
    const Tensor& t = *out.find(name);
    if (off < end) fail(path, "tensor '" + name + "' overlaps the tensor before it");
    end = off + static_cast<std::uint64_t>(t.numel()) * dtype_size(t.dtype());
    sorted.emplace_back(name, t);
  }
  out.tensors = std::move(sorted);
  return out;
} catch (...) {
  rethrow_as<CheckpointError>(path.string());
}

}  // namespace mantissa

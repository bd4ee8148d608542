// PyTorch state_dicts in and out; see mantissa/io/weights.h.
#include "mantissa/io/weights.h"

#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

#include "mantissa/io/safetensors.h"
#include "mantissa/ops/ops.h"

namespace mantissa {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

bool is_mantissa_state(const std::string& name) {
  const auto leaf = name.rfind('.');
  return name.compare(leaf == std::string::npos ? 0 : leaf + 1, 4, "fp8_") == 0;
}

std::vector<std::pair<std::string, Tensor>> checkpoint_weights(const std::filesystem::path& checkpoint, DType dtype) {
  return checkpoint_weights(read_safetensors(checkpoint), checkpoint, dtype);
}

std::vector<std::pair<std::string, Tensor>> checkpoint_weights(const Safetensors& f, const std::filesystem::path& checkpoint,
                                                                DType dtype) {
  if (dtype != DType::f32 && dtype != DType::bf16) {
    throw std::invalid_argument("weights are exported in fp32 or bf16, not " + std::string(dtype_name(dtype)));
  }
  if (f.metadata.count("step") == 0) throw CheckpointError(checkpoint.string() + ": not a mantissa checkpoint (no 'step' in its metadata)");
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [key, t] : f.tensors) {
    if (key.rfind("model/", 0) != 0 || is_mantissa_state(key)) continue;
    out.emplace_back(key.substr(6), cast(t, dtype));
  }
  if (out.empty()) throw CheckpointError(checkpoint.string() + ": holds no model tensors");
  return out;
}

std::vector<std::pair<std::string, Tensor>> model_weights(const nn::Module& model) {
  std::vector<std::pair<std::string, Tensor>> out = model.named_parameters();
  for (const auto& [name, t] : model.named_buffers()) {
    if (!is_mantissa_state(name)) out.emplace_back(name, t);
  }
  return out;
}

void load_weights(nn::Module& model, const std::filesystem::path& path) try {
  const Safetensors f = read_safetensors(path, /*skip_unsupported_dtypes=*/true);
  for (const auto& [name, dtype] : f.skipped) {
    if (!ends_with(name, "num_batches_tracked")) {
      throw CheckpointError(path.string() + ": '" + name + "' is " + dtype + ", which no tensor of mantissa's models is");
    }
  }
  load_weights(model, f.tensors, path.string());
} catch (...) {
  rethrow_as<CheckpointError>(path.string());
}

void load_weights(nn::Module& model, const std::vector<std::pair<std::string, Tensor>>& weights, const std::string& where) {
  const auto fail = [&](const std::string& what) { throw CheckpointError(where + ": " + what); };
  std::map<std::string, Tensor> wanted;
  for (const auto& [name, t] : model_weights(model)) wanted.emplace(name, t);
  std::set<std::string> seen;
  for (const auto& [name, t] : weights) {
    const auto it = wanted.find(name);
    if (it == wanted.end()) {
      if (ends_with(name, "num_batches_tracked")) continue;
      std::string some;
      for (auto w = wanted.begin(); w != wanted.end() && some.size() < 80; ++w) some += (some.empty() ? "" : ", ") + w->first;
      fail("'" + name + "' is no parameter or buffer of this model (its names: " + some + ", ...; docs/interop.md)");
    }
    if (!seen.insert(name).second) fail("'" + name + "' is given twice");
    if (t.shape() != it->second.shape()) {
      fail("'" + name + "' has shape " + shape_str(t.shape()) + ", the model's " + shape_str(it->second.shape()));
    }
    if (!std::isfinite(sum(cast(t, DType::f64)).item())) fail("'" + name + "' holds NaN or infinite values");
  }
  for (const auto& [name, t] : wanted) {
    if (seen.count(name) == 0) fail("has no tensor '" + name + "' (the model's " + shape_str(t.shape()) + ")");
  }
  for (const auto& [name, t] : weights) {
    const auto it = wanted.find(name);
    if (it != wanted.end()) copy_into(it->second, cast(t, it->second.dtype()));
  }
}

}  // namespace mantissa

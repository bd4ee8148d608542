// Training checkpoints on safetensors files; see mantissa/io/checkpoint.h.
#include "mantissa/io/checkpoint.h"
#include "mantissa/io/json_number.h"

#include <algorithm>
#include <cmath>
#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "mantissa/io/safetensors.h"
#include "mantissa/ops/ops.h"
#include "mantissa/numeric/parse_number.h"

namespace mantissa {

std::string exact_number(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::int64_t metadata_integer(const std::filesystem::path& path, const std::map<std::string, std::string>& meta,
                              const std::string& key) {
  const auto it = meta.find(key);
  if (it == meta.end()) throw CheckpointError(path.string() + ": has no '" + key + "' in its metadata");
  try {
    return parse_number<std::int64_t>(std::string_view(it->second).substr(0, 40), "metadata '" + key + "'");
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(path.string() + ": " + e.what());
  }
}

std::filesystem::path checkpoint_path(const std::filesystem::path& dir, std::int64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, "ckpt-%08lld.safetensors", static_cast<long long>(step));
  return dir / name;
}

std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& dir) {
  // Regular files named ckpt-STEP.safetensors, in step order (by number: past step 99,999,999 the names
  // grow a digit and would sort before older ones as strings); anything else (a pipe, a stray name) is
  // not a checkpoint.
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return {};
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("ckpt-", 0) != 0 || e.path().extension() != ".safetensors" || !e.is_regular_file(ec)) continue;
    const std::string digits = n.substr(5, n.size() - 5 - std::string(".safetensors").size());
    if (digits.empty() || digits.front() == '+' || !is_number<std::int64_t>(digits)) continue;
    found.emplace_back(parse_number<std::int64_t>(digits, "checkpoint step"), e.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::filesystem::path> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

void prune_checkpoints(const std::filesystem::path& dir, int keep, const std::filesystem::path& newest) {
  const std::vector<std::filesystem::path> all = list_checkpoints(dir);
  // Those up to the one just written count; later ones (an earlier run's, say a damaged one a resume passed
  // over) neither count nor go: the run overwrites each when it reaches its step.
  const auto last = std::find_if(all.begin(), all.end(), [&](const auto& p) { return p.filename() == newest.filename(); });
  const auto counted = static_cast<std::size_t>(last == all.end() ? all.size() : last - all.begin() + 1);
  for (std::size_t i = 0; i + static_cast<std::size_t>(std::max(keep, 1)) < counted; ++i) std::filesystem::remove(all[i]);
}

std::optional<std::filesystem::path> newest_readable_checkpoint(
    const std::filesystem::path& dir, const std::function<void(const std::filesystem::path&, const std::string& why)>& on_skip) {
  const std::vector<std::filesystem::path> all = list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      (void)read_safetensors(*it);
      return *it;
    } catch (const CheckpointError& e) {
      if (on_skip) on_skip(*it, e.what());
    }
  }
  return std::nullopt;
}

void save_checkpoint(const std::filesystem::path& path, const nn::Module& model, const Optimizer& optimizer,
                     const CheckpointState& state) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : model.named_parameters()) tensors.emplace_back("model/" + name, t);
  for (const auto& [name, t] : model.named_buffers()) tensors.emplace_back("model/" + name, t);
  const OptimizerState os = optimizer.state();
  for (const auto& [name, t] : os.tensors) tensors.emplace_back("optim/" + name, t);
  std::map<std::string, std::string> meta = state.extra;
  meta["step"] = std::to_string(state.step);
  meta["optim_step"] = std::to_string(os.step);
  const LossScalerState& s = state.scaler;
  meta["loss_scaler"] = nlohmann::json{{"scale", exact_number(s.scale)},
                                       {"growth_tracker", s.growth_tracker},
                                       {"hysteresis_left", s.hysteresis_left},
                                       {"floor_overflows", s.floor_overflows},
                                       {"steps", s.steps},
                                       {"skipped", s.skipped}}
                            .dump();
  write_safetensors(path, tensors, meta);
}

namespace {

// The checkpoint's tensors into the model and the optimizer, and its state back, checked.
CheckpointState restore(const std::filesystem::path& path, const Safetensors& f, nn::Module& model, Optimizer& optimizer) try {
  const auto fail = [&](const std::string& what) { throw CheckpointError(path.string() + ": " + what); };
  const auto load_into = [&](const std::string& key, const Tensor& target) {
    const Tensor* t = f.find(key);
    if (t == nullptr) fail("has no tensor '" + key + "' (a checkpoint of another model?)");
    if (t->shape() != target.shape()) {
      fail("'" + key + "' has shape " + shape_str(t->shape()) + ", the model " + shape_str(target.shape()));
    }
    if (t->dtype() != target.dtype()) {
      fail("'" + key + "' is " + std::string(dtype_name(t->dtype())) + ", the model " + std::string(dtype_name(target.dtype())));
    }
    copy_into(target, *t);
  };
  for (const auto& [name, t] : model.named_parameters()) load_into("model/" + name, t);
  for (const auto& [name, t] : model.named_buffers()) load_into("model/" + name, t);
  // Weights and optimizer state must be numbers: NaN or inf would only show up as a ruined run.
  for (const auto& [name, t] : f.tensors) {
    if (!std::isfinite(sum(cast(t, DType::f64)).item())) fail("'" + name + "' holds NaN or infinite values");
  }
  CheckpointState state;
  try {
    OptimizerState os;
    os.step = metadata_integer(path, f.metadata, "optim_step");
    for (const auto& [name, t] : f.tensors) {
      if (name.rfind("optim/", 0) == 0) os.tensors.emplace_back(name.substr(6), t);
    }
    optimizer.load_state(os, /*complete=*/true);
    state.step = metadata_integer(path, f.metadata, "step");
    if (state.step < 1 || os.step < 1) fail("step " + f.metadata.at("step") + " is not a step a run saves after (1 or more)");
    const nlohmann::json s = nlohmann::json::parse(f.metadata.at("loss_scaler"));
    const std::string scale = s.at("scale").get<std::string>();
    if (!is_number<double>(scale)) fail("loss scale '" + scale.substr(0, 40) + "' is not a finite decimal number");
    state.scaler.scale = parse_number<double>(scale, "loss scale");
    state.scaler.growth_tracker = json_number<std::int64_t>(s, "growth_tracker");
    state.scaler.hysteresis_left = json_number<int>(s, "hysteresis_left");
    state.scaler.floor_overflows = json_number<int>(s, "floor_overflows");
    state.scaler.steps = json_number<std::int64_t>(s, "steps");
    state.scaler.skipped = json_number<std::int64_t>(s, "skipped");
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::invalid_argument& e) {  // what the optimizer refused, named there
    fail(e.what());
  } catch (const std::exception& e) {  // a missing or mistyped field of the loss scaler's JSON
    fail(std::string("missing or malformed loss-scaler state (") + e.what() + ")");
  }
  state.extra = f.metadata;
  return state;
} catch (...) {
  rethrow_as<CheckpointError>(path.string());
}

}  // namespace

CheckpointState load_checkpoint(const std::filesystem::path& path, nn::Module& model, Optimizer& optimizer,
                                const std::function<void(const std::map<std::string, std::string>&)>& check) {
  const Safetensors f = read_safetensors(path);
  if (check) check(f.metadata);  // the caller's agreement check: what it throws is its own
  return restore(path, f, model, optimizer);
}

}  // namespace mantissa

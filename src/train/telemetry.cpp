// The numerics telemetry's measurements, collection and JSON form; see mantissa/train/telemetry.h.
#include "mantissa/train/telemetry.h"
#include "mantissa/io/json_number.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "../backend/registry.h"
#include "mantissa/autograd/node.h"
#include "mantissa/numeric/format.h"

namespace mantissa::train {
namespace {

// floor(log2 x) of a power of 2.
int exponent_of(double power_of_2) { return static_cast<int>(std::lround(std::log2(power_of_2))); }

// The layer a parameter belongs to, and its own name: "blocks.0.ln1.gamma" -> ("blocks.0.ln1", "gamma").
std::pair<std::string, std::string> split_name(const std::string& name) {
  const std::size_t dot = name.rfind('.');
  if (dot == std::string::npos) return {"", name};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

}  // namespace

std::string_view tensor_kind_name(TensorKind kind) {
  switch (kind) {
    case TensorKind::activation: return "activation";
    case TensorKind::weight: return "weight";
    case TensorKind::weight_grad: return "weight_grad";
    case TensorKind::activation_grad: return "activation_grad";
  }
  return "?";
}

TensorKind parse_tensor_kind(std::string_view name) {
  std::string n(name);
  for (char& ch : n) ch = ch == '-' ? '_' : ch;
  if (!n.empty() && n.back() == 's') n.pop_back();
  for (const TensorKind k : kTensorKinds) {
    if (n == tensor_kind_name(k)) return k;
  }
  throw std::invalid_argument("'" + std::string(name) +
                              "' is not a tensor kind (activations, weights, weight-grads, activation-grads)");
}

bool TelemetryPolicy::wants(TensorKind kind, const std::string& layer) const {
  if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) return false;
  if (layers.empty()) return true;
  for (const std::string& p : layers) {
    if (nn::path_within(layer, p)) return true;
  }
  return false;
}

void TelemetryPolicy::check() const {
  if (every < 1) throw std::invalid_argument("telemetry: the interval must be at least 1 step, got " + std::to_string(every));
}

const FormatShares& TensorNumerics::shares(DType format) const {
  for (std::size_t i = 0; i < kTelemetryFormats.size(); ++i) {
    if (kTelemetryFormats[i] == format) return formats[i];
  }
  throw std::invalid_argument("telemetry: no shares for " + std::string(dtype_name(format)));
}

TensorNumerics measure(const Tensor& t, double factor) {
  std::array<double, kTelemetryFormats.size()> limits{};
  for (std::size_t i = 0; i < limits.size(); ++i) limits[i] = traits(format_of(kTelemetryFormats[i])).max_finite;
  NoGradGuard no_grad;
  const detail::NumericsStats s = detail::run_kernel<detail::kernel::Numerics>(t.device(), t, factor, limits);
  TensorNumerics r;
  r.dtype = t.dtype();
  r.count = s.count;
  r.zeros = s.zeros;
  r.nonfinite = s.nonfinite;
  r.amax = s.amax;
  const std::int64_t nonzero = r.nonzero();
  const auto share = [&](std::int64_t n) { return nonzero > 0 ? static_cast<double>(n) / static_cast<double>(nonzero) : 0.0; };
  // The thresholds below are powers of 2: |v| < 2^k exactly when floor(log2 |v|) < k.
  const auto below = [&](double power_of_2) {
    std::int64_t n = 0;
    const int k = exponent_of(power_of_2) - detail::kLog2Lowest;
    for (int b = 0; b < std::min(k, detail::kLog2Bins); ++b) n += s.log2[static_cast<std::size_t>(b)];
    return n;
  };
  for (std::size_t i = 0; i < kTelemetryFormats.size(); ++i) {
    const FormatTraits f = traits(format_of(kTelemetryFormats[i]));
    r.formats[i] = {share(below(f.min_subnormal)), share(below(f.min_normal)), share(s.above[i])};
  }
  int lo = detail::kLog2Bins, hi = -1;
  for (int b = 0; b < detail::kLog2Bins; ++b) {
    if (s.log2[static_cast<std::size_t>(b)] == 0) continue;
    lo = std::min(lo, b);
    hi = b;
  }
  if (hi >= 0) {
    r.log2_lo = lo + detail::kLog2Lowest;
    r.log2_counts.assign(s.log2.begin() + lo, s.log2.begin() + hi + 1);
  }
  return r;
}

std::string TensorNumerics::json() const {
  nlohmann::json f = nlohmann::json::object();
  for (std::size_t i = 0; i < kTelemetryFormats.size(); ++i) {
    const FormatShares& s = formats[i];
    f[std::string(dtype_name(kTelemetryFormats[i]))] = {
        {"below_subnormal", s.below_subnormal}, {"below_normal", s.below_normal}, {"overflow", s.overflow}};
  }
  const nlohmann::json j = {{"step", step},         {"kind", tensor_kind_name(kind)},
                            {"layer", layer},       {"tensor", tensor},
                            {"dtype", dtype_name(dtype)}, {"loss_scale", loss_scale},
                            {"count", count},       {"zeros", zeros},
                            {"nonfinite", nonfinite}, {"amax", amax},
                            {"formats", f},         {"log2", {{"lo", log2_lo}, {"counts", log2_counts}}}};
  return j.dump();
}

namespace {

// A record whose numbers cannot all be true is refused, naming the field: what inspect would otherwise
// sort, sum and draw as if it were measured.
void check_meaning(const TensorNumerics& r) {
  const auto refuse = [](const std::string& what) { throw std::invalid_argument(what); };
  if (r.step < 1) refuse("step " + std::to_string(r.step) + " (steps count from 1)");
  if (!(r.loss_scale > 0) || !std::isfinite(r.loss_scale)) refuse("loss_scale " + std::to_string(r.loss_scale) + " (a positive number)");
  if (r.count < 0 || r.zeros < 0 || r.nonfinite < 0 || r.nonzero() < 0) {
    refuse("counts that cannot be (count " + std::to_string(r.count) + ", zeros " + std::to_string(r.zeros) + ", nonfinite " +
           std::to_string(r.nonfinite) + ")");
  }
  if (!(r.amax >= 0) || !std::isfinite(r.amax)) refuse("amax " + std::to_string(r.amax) + " (the largest finite magnitude, at least 0)");
  if ((r.amax > 0) != (r.nonzero() > 0)) refuse("amax " + std::to_string(r.amax) + " for " + std::to_string(r.nonzero()) + " non-zero values");
  for (std::size_t i = 0; i < kTelemetryFormats.size(); ++i) {
    const FormatShares& f = r.formats[i];
    const std::string name = "formats." + std::string(dtype_name(kTelemetryFormats[i])) + ".";
    for (const auto& [field, v] : {std::pair{"below_subnormal", f.below_subnormal}, {"below_normal", f.below_normal}, {"overflow", f.overflow}}) {
      if (!(v >= 0 && v <= 1)) refuse(name + field + " " + std::to_string(v) + " (a share, in [0, 1])");
    }
    if (f.below_subnormal > f.below_normal) refuse(name + "below_subnormal is above below_normal (which includes it)");
  }
  // The histogram: non-negative counts of the non-zero values, in bins the held format (over the loss
  // scale, for gradients) can have, its top bin amax's.
  std::int64_t sum = 0;
  for (const std::int64_t c : r.log2_counts) {
    if (c < 0) refuse("log2.counts holds " + std::to_string(c));
    sum += c;
  }
  if (sum != r.nonzero()) refuse("log2.counts add up to " + std::to_string(sum) + ", not the " + std::to_string(r.nonzero()) + " non-zero values");
  if (r.log2_counts.empty()) return;
  // (The measuring kernel clamps its bins to [2^-160, 2^130).)
  const FormatTraits held = traits(format_of(r.dtype));
  const double shift = std::log2(r.loss_scale);
  const int first_bin = detail::kLog2Lowest, last_bin = detail::kLog2Lowest + detail::kLog2Bins - 1;
  const int lowest = std::max(first_bin, static_cast<int>(std::floor(std::log2(held.min_subnormal) - shift)) - 1);
  const int highest = std::min(last_bin, static_cast<int>(std::floor(std::log2(held.max_finite) + shift)) + 1);
  const int top = r.log2_lo + static_cast<int>(r.log2_counts.size()) - 1;
  if (r.log2_lo < lowest || top > highest) {
    refuse("log2 bins " + std::to_string(r.log2_lo) + ".." + std::to_string(top) + " lie outside what " + std::string(dtype_name(r.dtype)) +
           " holds (" + std::to_string(lowest) + ".." + std::to_string(highest) + ")");
  }
  if (std::clamp(std::ilogb(r.amax), first_bin, last_bin) != top) {
    refuse("amax " + std::to_string(r.amax) + " is not in the histogram's top bin (2^" + std::to_string(top) + ")");
  }
}

}  // namespace

TensorNumerics TensorNumerics::parse(std::string_view json_line) {
  try {
    const nlohmann::json j = nlohmann::json::parse(json_line);
    TensorNumerics r;
    r.step = json_number<std::int64_t>(j, "step");
    r.kind = parse_tensor_kind(j.at("kind").get<std::string>());
    r.layer = j.at("layer").get<std::string>();
    r.tensor = j.at("tensor").get<std::string>();
    r.dtype = parse_dtype(j.at("dtype").get<std::string>());
    r.loss_scale = json_number<double>(j, "loss_scale");
    r.count = json_number<std::int64_t>(j, "count");
    r.zeros = json_number<std::int64_t>(j, "zeros");
    r.nonfinite = json_number<std::int64_t>(j, "nonfinite");
    r.amax = json_number<double>(j, "amax");
    for (std::size_t i = 0; i < kTelemetryFormats.size(); ++i) {
      const nlohmann::json& s = j.at("formats").at(std::string(dtype_name(kTelemetryFormats[i])));
      r.formats[i] = {json_number<double>(s, "below_subnormal"), json_number<double>(s, "below_normal"), json_number<double>(s, "overflow")};
    }
    r.log2_lo = json_number<int>(j.at("log2"), "lo");
    const nlohmann::json& counts = j.at("log2").at("counts");
    if (!counts.is_array()) throw std::invalid_argument("log2.counts is not an array");
    for (const nlohmann::json& c : counts) r.log2_counts.push_back(json_value<std::int64_t>(c, "log2.counts"));
    check_meaning(r);
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("not a telemetry record: ") + e.what());
  }
}

Telemetry::Telemetry(TelemetryPolicy policy) : policy_(std::move(policy)) { policy_.check(); }

void Telemetry::begin_step(std::int64_t step, double loss_scale) {
  step_ = step;
  scale_ = loss_scale;
  records_.clear();
  index_.clear();
}

void Telemetry::activation(const std::string& layer, const Tensor& output) {
  if (policy_.wants(TensorKind::activation, layer)) add(TensorKind::activation, layer, "", output, 1.0);
}

void Telemetry::activation_grad(const std::string& layer, const Tensor& grad) {
  if (policy_.wants(TensorKind::activation_grad, layer)) add(TensorKind::activation_grad, layer, "", grad, 1.0 / scale_);
}

void Telemetry::parameters(const nn::Module& model) {
  for (const auto& [name, p] : model.named_parameters()) {
    const auto [layer, tensor] = split_name(name);
    if (policy_.wants(TensorKind::weight, layer)) add(TensorKind::weight, layer, tensor, p, 1.0);
    if (p.grad().defined() && policy_.wants(TensorKind::weight_grad, layer)) {
      add(TensorKind::weight_grad, layer, tensor, p.grad(), 1.0 / scale_);
    }
  }
}

std::vector<TensorNumerics> Telemetry::take() {
  std::vector<TensorNumerics> out = std::move(records_);
  records_.clear();
  index_.clear();
  return out;
}

void Telemetry::add(TensorKind kind, const std::string& layer, const std::string& tensor, const Tensor& t, double factor) {
  TensorNumerics m = measure(t, factor);
  m.step = step_;
  m.kind = kind;
  m.layer = layer;
  m.tensor = tensor;
  m.loss_scale = scale_;
  const std::string key = std::string(tensor_kind_name(kind)) + "/" + layer + "/" + tensor;
  const auto [it, fresh] = index_.emplace(key, records_.size());
  if (fresh) {
    records_.push_back(std::move(m));
    return;
  }
  // Another micro-batch: counts add, shares are re-weighted by the non-zero counts, amax is the larger.
  TensorNumerics& r = records_[it->second];
  const auto n0 = static_cast<double>(r.nonzero()), n1 = static_cast<double>(m.nonzero());
  const auto mix = [&](double a, double b) { return n0 + n1 > 0 ? (a * n0 + b * n1) / (n0 + n1) : 0.0; };
  for (std::size_t i = 0; i < r.formats.size(); ++i) {
    r.formats[i] = {mix(r.formats[i].below_subnormal, m.formats[i].below_subnormal),
                    mix(r.formats[i].below_normal, m.formats[i].below_normal),
                    mix(r.formats[i].overflow, m.formats[i].overflow)};
  }
  r.count += m.count;
  r.zeros += m.zeros;
  r.nonfinite += m.nonfinite;
  r.amax = std::max(r.amax, m.amax);
  if (m.log2_counts.empty()) return;
  if (r.log2_counts.empty()) {
    r.log2_lo = m.log2_lo;
    r.log2_counts = m.log2_counts;
    return;
  }
  const int lo = std::min(r.log2_lo, m.log2_lo);
  const int hi = std::max(r.log2_lo + static_cast<int>(r.log2_counts.size()), m.log2_lo + static_cast<int>(m.log2_counts.size()));
  std::vector<std::int64_t> sum(static_cast<std::size_t>(hi - lo), 0);
  for (std::size_t i = 0; i < r.log2_counts.size(); ++i) sum[static_cast<std::size_t>(r.log2_lo - lo) + i] += r.log2_counts[i];
  for (std::size_t i = 0; i < m.log2_counts.size(); ++i) sum[static_cast<std::size_t>(m.log2_lo - lo) + i] += m.log2_counts[i];
  r.log2_lo = lo;
  r.log2_counts = std::move(sum);
}

}  // namespace mantissa::train

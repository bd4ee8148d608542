// mantissa against PyTorch: golden cases computed by PyTorch in float64 (tests/golden/make_golden.py,
// committed as safetensors files), for an oracle that shares no code or author with mantissa. Each case
// runs in f64 on the reference backend (agreement to ~1e-12: the same mathematics) and in f32 on the CPU
// backend (agreement to f32 rounding): linear, layer norm, causal attention and cross-entropy, forward and
// backward, and three AdamW steps under GradScaler with an overflowing step in the middle.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "mantissa/amp/step.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/ops/ops.h"
#include "mantissa/optim/optimizer.h"

namespace mantissa {
namespace {

struct Golden {
  Safetensors file;
  explicit Golden(const std::string& name)
      : file(read_safetensors(std::filesystem::path(MANTISSA_SOURCE_DIR) / "tests" / "golden" / (name + ".safetensors"))) {}
  // Tensor `key` in `dtype`, a leaf that records gradients when asked.
  Tensor get(const std::string& key, DType dtype, bool grad = false) const {
    const Tensor* t = file.find(key);
    if (t == nullptr) throw std::runtime_error("golden file has no '" + key + "'");
    Tensor x = contiguous_copy(cast(*t, dtype));
    return grad ? x.set_requires_grad() : x;
  }
  std::vector<double> values(const std::string& key) const { return get(key, DType::f64).to_doubles(); }
  std::string meta(const std::string& key) const { return file.metadata.at(key); }
};

// Every element within rel * (the largest magnitude of `want`) of PyTorch's.
void expect_close(const Tensor& got, const std::vector<double>& want, double rel, const std::string& what) {
  const std::vector<double> g = got.to_doubles();
  ASSERT_EQ(g.size(), want.size()) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], want[i], rel * scale) << what << "[" << i << "]";
  }
}

// The two ways each case runs: f64 on the reference backend, f32 on the CPU backend.
struct Mode {
  CpuBackend backend;
  DType dtype;
  double rel;
  const char* name;
};
const Mode kModes[] = {{CpuBackend::reference, DType::f64, 1e-12, "f64 reference"},
                       {CpuBackend::onednn, DType::f32, 2e-6, "f32 cpu"}};

TEST(GoldenPyTorch, Linear) {
  const Golden g("linear");
  for (const Mode& m : kModes) {
    CpuBackendScope scope(m.backend);
    Tensor x = g.get("x", m.dtype, true), w = g.get("w", m.dtype, true), b = g.get("b", m.dtype, true);
    const Tensor y = linear(x, w, b);
    expect_close(y, g.values("y"), m.rel, std::string(m.name) + " y");
    sum(mul(y, g.get("gy", m.dtype))).backward();
    expect_close(x.grad(), g.values("gx"), m.rel, std::string(m.name) + " gx");
    expect_close(w.grad(), g.values("gw"), m.rel, std::string(m.name) + " gw");
    expect_close(b.grad(), g.values("gb"), m.rel, std::string(m.name) + " gb");
  }
}

TEST(GoldenPyTorch, LayerNorm) {
  const Golden g("layer_norm");
  for (const Mode& m : kModes) {
    CpuBackendScope scope(m.backend);
    Tensor x = g.get("x", m.dtype, true), gamma = g.get("gamma", m.dtype, true), beta = g.get("beta", m.dtype, true);
    const Tensor y = layer_norm(x, gamma, beta, std::stod(g.meta("eps")));
    expect_close(y, g.values("y"), m.rel * 4, std::string(m.name) + " y");
    sum(mul(y, g.get("gy", m.dtype))).backward();
    expect_close(x.grad(), g.values("gx"), m.rel * 4, std::string(m.name) + " gx");
    expect_close(gamma.grad(), g.values("ggamma"), m.rel * 4, std::string(m.name) + " ggamma");
    expect_close(beta.grad(), g.values("gbeta"), m.rel * 4, std::string(m.name) + " gbeta");
  }
}

TEST(GoldenPyTorch, CausalAttention) {
  const Golden g("attention");
  for (const Mode& m : kModes) {
    CpuBackendScope scope(m.backend);
    Tensor q = g.get("q", m.dtype, true), k = g.get("k", m.dtype, true), v = g.get("v", m.dtype, true);
    const Tensor y = scaled_dot_product_attention(q, k, v, /*causal=*/true);
    expect_close(y, g.values("y"), m.rel * 4, std::string(m.name) + " y");
    sum(mul(y, g.get("gy", m.dtype))).backward();
    expect_close(q.grad(), g.values("gq"), m.rel * 4, std::string(m.name) + " gq");
    expect_close(k.grad(), g.values("gk"), m.rel * 4, std::string(m.name) + " gk");
    expect_close(v.grad(), g.values("gv"), m.rel * 4, std::string(m.name) + " gv");
  }
}

TEST(GoldenPyTorch, CrossEntropyWithLabelSmoothingAndAnIgnoredRow) {
  const Golden g("cross_entropy");
  const std::vector<std::int64_t> targets = nlohmann::json::parse(g.meta("targets")).get<std::vector<std::int64_t>>();
  for (const Mode& m : kModes) {
    CpuBackendScope scope(m.backend);
    Tensor logits = g.get("logits", m.dtype, true);
    const Tensor loss = cross_entropy(logits, targets, Reduction::mean, std::stoll(g.meta("ignore_index")),
                                      std::stod(g.meta("label_smoothing")));
    expect_close(reshape(loss, {1}), g.values("loss"), m.rel, std::string(m.name) + " loss");
    loss.backward();
    expect_close(logits.grad(), g.values("glogits"), m.rel * 4, std::string(m.name) + " glogits");
  }
}

TEST(GoldenPyTorch, AdamWUnderGradScalerSkipsTheOverflowingStep) {
  const Golden g("adamw_gradscaler");
  const std::vector<double> c = g.values("c");
  const std::vector<double> want_scales = g.values("scales");
  for (const Mode& m : kModes) {
    CpuBackendScope scope(m.backend);
    Tensor p = g.get("p0", m.dtype, true);
    Adam opt({p}, {.lr = std::stod(g.meta("lr")), .weight_decay = std::stod(g.meta("weight_decay"))}, /*decoupled=*/true);
    LossScalerOptions o;
    o.init_scale = std::stod(g.meta("init_scale"));
    o.growth_interval = std::stoll(g.meta("growth_interval"));
    LossScaler scaler(o);
    for (std::size_t t = 0; t < want_scales.size(); ++t) {
      const std::vector<double> ct(c.begin() + static_cast<std::ptrdiff_t>(10 * t), c.begin() + static_cast<std::ptrdiff_t>(10 * (t + 1)));
      // The gradient of sum(p * c_t) scaled by the loss scale, as backward of the scaled loss gives it.
      p.set_grad(mul(Tensor::from_values(ct, {10}, m.dtype), scaler.scale()));
      const StepReport r = scaled_step(scaler, opt);
      EXPECT_EQ(r.skipped, t == 1) << m.name << " step " << t;
      opt.zero_grad();
      EXPECT_EQ(scaler.scale(), want_scales[t]) << m.name << " scale after step " << t;
    }
    // The moments are kept in f32 (the optimizer's state dtype) even for f64 parameters: 1e-9, not 1e-12.
    expect_close(p, g.values("p"), m.dtype == DType::f64 ? 1e-9 : 1e-6, std::string(m.name) + " p");
  }
}

}  // namespace
}  // namespace mantissa

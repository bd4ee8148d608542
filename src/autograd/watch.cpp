// Layer scopes, the telemetry tap and the non-finite tracer; see mantissa/autograd/watch.h.
#include "mantissa/autograd/watch.h"

#include <atomic>
#include <cstdio>

#include "../backend/registry.h"
#include "mantissa/autograd/node.h"

namespace mantissa {
namespace {

thread_local LayerScope* tls_scope = nullptr;
thread_local LayerTap* tls_tap = nullptr;
thread_local double tls_loss_scale = 1;
std::atomic<bool> g_trace{false};

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

LayerScope::LayerScope(LayerPath path, bool tap) : outer_(tls_scope), path_(std::move(path)), tap_(tap) {
  tls_scope = this;
}

LayerScope::~LayerScope() {
  tls_scope = outer_;
  if (!tap_ || !last_output_.defined() || tls_tap == nullptr) return;
  last_node_->tap_grad = true;
  tls_tap->activation(*path_, last_output_);
}

void LayerScope::note_output(const Tensor& out, Node& node) {
  if (!tap_ || tls_tap == nullptr) return;
  last_output_ = out;
  last_node_ = &node;  // kept alive by the output's history
}

LayerScope* current_layer_scope() { return tls_scope; }
LayerPath current_layer() { return tls_scope != nullptr ? tls_scope->path() : nullptr; }

LayerTapGuard::LayerTapGuard(LayerTap* tap) : saved_(tls_tap) { tls_tap = tap; }
LayerTapGuard::~LayerTapGuard() { tls_tap = saved_; }
LayerTap* current_layer_tap() { return tls_tap; }

std::string NonFiniteReport::str() const {
  std::string s = "non-finite in " + std::string(backward ? "backward" : "forward") + " of " + op + " at " +
                  (layer.empty() ? "the model" : layer) + " (" + std::string(dtype_name(dtype)) + "): " +
                  std::to_string(nonfinite) + " of " + std::to_string(count) + " values inf/NaN";
  if (nonfinite_input >= 0) {
    s += "; its input " + std::to_string(nonfinite_input) + " (no history: data or a parameter) was already not finite";
  } else {
    s += backward ? " from a finite gradient (largest magnitude " : " from finite inputs (largest magnitudes ";
    for (std::size_t i = 0; i < input_amax.size(); ++i) s += (i > 0 ? ", " : "") + number(input_amax[i]);
    s += ")";
  }
  return s + "; loss scale " + number(loss_scale);
}

NonFiniteError::NonFiniteError(NonFiniteReport report) : Error(report.str()), report_(std::move(report)) {}

void set_trace_nonfinite(bool on) { g_trace.store(on, std::memory_order_relaxed); }
bool trace_nonfinite() { return g_trace.load(std::memory_order_relaxed); }
void set_trace_loss_scale(double scale) { tls_loss_scale = scale; }

namespace detail {

std::int64_t count_nonfinite(const Tensor& t) {
  if (!t.defined() || is_storage_only(t.dtype())) return 0;
  return run_kernel<kernel::ScaleAndCheck>(t.device(), std::span<const Tensor>(&t, 1), 1.0, 0.0, Tensor()).nonfinite;
}

double finite_amax(const Tensor& t) {
  if (!t.defined() || is_storage_only(t.dtype())) return 0;
  return run_kernel<kernel::Numerics>(t.device(), t, 1.0, std::span<const double>{}).amax;
}

void trace_forward(const Tensor& out, const Node& node, const std::vector<const Tensor*>& inputs) {
  // A view shares its input's storage: its values were checked when they were made.
  for (const Tensor* in : inputs) {
    if (in->defined() && in->storage() == out.storage()) return;
  }
  const std::int64_t bad = count_nonfinite(out);
  if (bad == 0) return;
  NonFiniteReport r{std::string(node.name()), node.layer ? *node.layer : "", false, out.dtype(), bad, out.numel(),
                    {}, -1, tls_loss_scale};
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    r.input_amax.push_back(finite_amax(*inputs[i]));
    if (r.nonfinite_input < 0 && count_nonfinite(*inputs[i]) > 0) r.nonfinite_input = static_cast<int>(i);
  }
  throw NonFiniteError(std::move(r));
}

void trace_backward(const Tensor& grad_in, const Node& node, const Tensor& grad_out) {
  const std::int64_t bad = count_nonfinite(grad_in);
  if (bad == 0) return;
  NonFiniteReport r{std::string(node.name()), node.layer ? *node.layer : "", true, grad_in.dtype(), bad,
                    grad_in.numel(), {finite_amax(grad_out)}, -1, tls_loss_scale};
  // The gradient reaching the node was itself not finite: the sum of its consumers' gradients overflowed.
  if (count_nonfinite(grad_out) > 0) r.op = "the sum of the gradients reaching " + r.op;
  throw NonFiniteError(std::move(r));
}

}  // namespace detail
}  // namespace mantissa

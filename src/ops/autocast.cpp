// Autocast regions: a thread-local stack of (dtype, policy), and the cache of parameter casts that
// lives as long as the outermost region. Part of op dispatch: each op front-end passes its floating inputs
// through autocast_input on entry; a backward pass runs without it.
#include "mantissa/ops/autocast.h"

#include "mantissa/autograd/node.h"

#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "mantissa/ops/ops.h"

namespace mantissa {
namespace {

struct Region {
  std::optional<DType> dtype;
  AutocastPolicy policy;
};

struct ThreadState {
  std::optional<Region> current;
  int depth = 0;
  // (parameter, dtype) -> its cast, cleared when the outermost region ends. The entry holds the parameter
  // too, so its address cannot be reused by another tensor while cached, and the storage version the cast
  // was made from, so that a parameter updated in place inside the region is cast again.
  struct CacheKey {
    const TensorImpl* tensor;
    DType dtype;
    bool operator==(const CacheKey&) const = default;
  };
  struct CacheKeyHash {
    std::size_t operator()(const CacheKey& k) const {
      return std::hash<const void*>()(k.tensor) ^ (static_cast<std::size_t>(k.dtype) << 1);
    }
  };
  struct CachedCast {
    std::shared_ptr<TensorImpl> parameter;
    std::uint64_t version;
    Tensor cast;
  };
  std::unordered_map<CacheKey, CachedCast, CacheKeyHash> cache;
};

thread_local ThreadState tls;

}  // namespace

std::string_view autocast_op_name(AutocastOp op) {
  static constexpr std::array<std::string_view, kAutocastOps> names = {
      "matmul", "linear", "conv2d", "attention", "linear_cross_entropy", "softmax", "log_softmax", "layer_norm",
      "batch_norm", "cross_entropy", "mse_loss", "exp", "log", "pow", "sqrt", "sum", "mean", "variance", "lstm_cell"};
  return names[static_cast<std::size_t>(op)];
}

std::optional<AutocastOp> parse_autocast_op(std::string_view name) {
  for (std::size_t i = 0; i < kAutocastOps; ++i) {
    if (autocast_op_name(static_cast<AutocastOp>(i)) == name) return static_cast<AutocastOp>(i);
  }
  return std::nullopt;
}

AutocastPolicy AutocastPolicy::defaults() {
  AutocastPolicy p;
  p.table_.fill(AutocastPrecision::f32);
  p.table_[static_cast<std::size_t>(AutocastOp::matmul)] = AutocastPrecision::low;
  p.table_[static_cast<std::size_t>(AutocastOp::linear)] = AutocastPrecision::low;
  p.table_[static_cast<std::size_t>(AutocastOp::conv2d)] = AutocastPrecision::low;
  p.table_[static_cast<std::size_t>(AutocastOp::attention)] = AutocastPrecision::low;
  p.table_[static_cast<std::size_t>(AutocastOp::linear_cross_entropy)] = AutocastPrecision::low;
  p.table_[static_cast<std::size_t>(AutocastOp::batch_norm)] = AutocastPrecision::input;
  return p;
}

AutocastPolicy AutocastPolicy::all_low() {
  AutocastPolicy p;
  p.table_.fill(AutocastPrecision::low);
  return p;
}

AutocastPolicy& AutocastPolicy::set(AutocastOp op, AutocastPrecision precision) {
  table_[static_cast<std::size_t>(op)] = precision;
  return *this;
}

std::string AutocastPolicy::str() const {
  std::ostringstream s;
  constexpr std::size_t kColumn = 22;  // the longest name, linear_cross_entropy, and two spaces
  const auto row = [](std::string_view name) { return std::string(name) + std::string(kColumn - name.size(), ' '); };
  s << row("op") << "runs in\n";
  for (std::size_t i = 0; i < kAutocastOps; ++i) {
    const AutocastPrecision p = table_[i];
    s << row(autocast_op_name(static_cast<AutocastOp>(i)));
    s << (p == AutocastPrecision::low ? "low precision (f32 accumulation)" : p == AutocastPrecision::f32 ? "f32" : "its inputs' dtype")
      << "\n";
  }
  s << row("any other op") << "its inputs' dtype (binary ops: the wider input)\n";
  return s.str();
}

struct Autocast::Saved {
  std::optional<Region> region;
};

Autocast::Autocast(std::optional<DType> dtype, AutocastPolicy policy) : saved_(std::make_unique<Saved>()) {
  if (dtype && *dtype != DType::bf16 && *dtype != DType::f16) {
    throw std::invalid_argument("autocast: the region's dtype must be bf16 or f16, got " + std::string(dtype_name(*dtype)));
  }
  saved_->region = tls.current;
  tls.current = Region{dtype, policy};
  ++tls.depth;
}

Autocast::~Autocast() {
  tls.current = saved_->region;
  if (--tls.depth == 0) tls.cache.clear();
}

std::optional<DType> autocast_dtype() { return tls.current && !in_backward() ? tls.current->dtype : std::nullopt; }
std::size_t autocast_cache_size() { return tls.cache.size(); }

namespace detail {

Tensor autocast_cast(const Tensor& x, DType dtype) {
  if (!x.defined() || x.dtype() == dtype) return x;
  // f32 parameters (leaves that require grad) are cast to the low dtype once per region, and again after
  // an in-place update.
  if (tls.current && x.dtype() == DType::f32 && x.is_leaf() && x.requires_grad()) {
    const std::uint64_t version = x.storage()->version();
    auto [it, fresh] = tls.cache.try_emplace(ThreadState::CacheKey{x.impl(), dtype});
    if (fresh || it->second.version != version) it->second = {x.impl_ptr(), version, cast(x, dtype)};
    return it->second.cast;
  }
  return cast(x, dtype);
}

Tensor autocast_input(const Tensor& x, AutocastOp op) { return autocast_cast(x, autocast_input_dtype(x, op)); }

bool autocast_runs_low(AutocastOp op) {
  return tls.current && tls.current->dtype && !in_backward() && tls.current->policy.precision(op) == AutocastPrecision::low;
}

DType autocast_input_dtype(const Tensor& x, AutocastOp op) {
  return x.defined() ? autocast_input_dtype(x.dtype(), op) : x.dtype();
}

DType autocast_input_dtype(DType x, AutocastOp op) {
  if (!tls.current || !tls.current->dtype || in_backward()) return x;
  switch (tls.current->policy.precision(op)) {
    case AutocastPrecision::low: return x == DType::f32 ? *tls.current->dtype : x;
    case AutocastPrecision::f32: return x == DType::f16 || x == DType::bf16 ? DType::f32 : x;
    case AutocastPrecision::input: return x;
  }
  return x;
}

}  // namespace detail
}  // namespace mantissa

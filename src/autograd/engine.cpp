// The backward pass: walks the graph from the output in dependency order, sums the gradients reaching
// each node, and accumulates the gradients of leaves into their .grad (in the leaf's dtype).
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "../backend/registry.h"
#include "../core/channels_last.h"
#include "mantissa/autograd/node.h"
#include "mantissa/autograd/watch.h"
#include "mantissa/backend/kernel_timer.h"

namespace mantissa {
namespace {

thread_local bool tls_grad_enabled = true;
thread_local int tls_backward_depth = 0;
thread_local GradReadyHook* tls_grad_ready_hook = nullptr;

// The engine's own arithmetic, straight on the kernels (the op front-ends sit above autograd): a
// contiguous copy of x in `dtype`, and the sum of two gradients of one shape and dtype (in their layout
// where they share the convolution chain's channels-last one).
Tensor converted(const Tensor& x, DType dtype) {
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  detail::run_kernel<detail::kernel::Copy>(x.device(), x, out);
  return out;
}

Tensor sum_of(const Tensor& a, const Tensor& b) {
  Tensor out = a.strides() == b.strides() ? detail::empty_like_layout(a, a.shape(), a.dtype())
                                          : Tensor::empty(a.shape(), a.dtype(), a.device());
  detail::run_kernel<detail::kernel::Binary>(a.device(), BinaryOp::add, a, b, out);
  return out;
}

// The node a leaf's gradient goes to: adds it into the leaf's .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {}
  std::string_view name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> backward(const Tensor& grad) override {
    const std::shared_ptr<TensorImpl> leaf = leaf_.lock();
    if (!leaf) return {};
    MemoryCategoryScope scope(MemoryCategory::gradients);
    const Tensor g = grad.dtype() == leaf->dtype ? grad : converted(grad, leaf->dtype);
    if (!leaf->grad) {
      // Keep the gradient itself when nothing else can see it (a fresh, contiguous result, as almost
      // every op's backward returns); copy it otherwise, since .grad may be changed in place. The
      // engine's handle and `g` are the only owners of an unshared tensor (just `g` after a cast).
      const long owners = g.impl() == grad.impl() ? 2 : 1;
      const auto whole = static_cast<std::size_t>(g.numel()) * dtype_size(g.dtype());
      const bool unshared = g.impl_ptr().use_count() <= owners && g.storage().use_count() == 1 &&
                            g.is_contiguous() && g.offset() == 0 && g.storage()->bytes() == whole;
      leaf->grad = unshared ? g.impl_ptr() : converted(g, g.dtype()).impl_ptr();
    } else {
      leaf->grad = sum_of(Tensor(leaf->grad), g).impl_ptr();
    }
    leaf->grad->storage->set_category(MemoryCategory::gradients);
    // The engine runs this node once per pass, after every contribution has arrived: the gradient is final.
    if (tls_grad_ready_hook != nullptr) tls_grad_ready_hook->ready(Tensor(leaf));
    return {};
  }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// After a backward pass: the node's saved tensors go, and a second pass through it is an error. A
// leaf's accumulator outlives graphs (every step's graph ends in it), so it is never marked.
void release(Node& n) {
  n.release();
  if (dynamic_cast<AccumulateGrad*>(&n) == nullptr) n.released = true;
}

const std::shared_ptr<Node>& gradient_node(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (impl->grad_fn) return impl->grad_fn;
  if (impl->requires_grad && !impl->grad_accumulator) {
    impl->grad_accumulator = std::make_shared<AccumulateGrad>(t.impl_ptr());
  }
  return impl->grad_accumulator;
}

}  // namespace

bool grad_enabled() { return tls_grad_enabled; }
bool in_backward() { return tls_backward_depth > 0; }
GradReadyHookGuard::GradReadyHookGuard(GradReadyHook* hook) : saved_(tls_grad_ready_hook) { tls_grad_ready_hook = hook; }
GradReadyHookGuard::~GradReadyHookGuard() { tls_grad_ready_hook = saved_; }
NoGradGuard::NoGradGuard() : saved_(tls_grad_enabled) { tls_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { tls_grad_enabled = saved_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!tls_grad_enabled) return false;
  for (const Tensor* t : inputs) {
    if (t->defined() && t->requires_grad()) return true;
  }
  return false;
}

void record(const Tensor& out, std::shared_ptr<Node> node, std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs) {
    Node::Input in{nullptr, {}, DType::f32};
    if (t->defined()) {
      in.shape = t->shape();
      in.dtype = t->dtype();
      if (t->requires_grad()) in.node = gradient_node(*t);
    }
    node->inputs.push_back(std::move(in));
  }
  node->region = current_kernel_region();
  if (LayerScope* scope = current_layer_scope()) {
    node->layer = scope->path();
    scope->note_output(out, *node);
  }
  if (trace_nonfinite()) detail::trace_forward(out, *node, std::vector<const Tensor*>(inputs));
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
}

Tensor save_for_backward(const Tensor& t) {
  if (!t.defined()) return t;
  if (t.storage()->category() == MemoryCategory::temporary) {
    t.storage()->set_category(MemoryCategory::activations);
  }
  return t.detach();
}

bool Tensor::requires_grad() const { return impl_->requires_grad; }
bool Tensor::is_leaf() const { return impl_->grad_fn == nullptr; }
const std::shared_ptr<Node>& Tensor::grad_fn() const { return impl_->grad_fn; }
Tensor Tensor::grad() const { return Tensor(impl_->grad); }
void Tensor::set_grad(const Tensor& grad) const { impl_->grad = grad.impl_ptr(); }
void Tensor::zero_grad() const { impl_->grad.reset(); }

Tensor& Tensor::set_requires_grad(bool on) {
  if (!is_leaf()) {
    throw std::logic_error("set_requires_grad on a tensor computed by an op (" +
                           std::string(impl_->grad_fn->name()) + "); detach() it first");
  }
  impl_->requires_grad = on;
  if (!on) impl_->grad_accumulator.reset();
  return *this;
}

Tensor Tensor::detach() const {
  return make_view(*this, shape(), strides(), offset());
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  if (!requires_grad()) {
    throw std::logic_error("backward() on a tensor that does not require grad (no input needed it)");
  }
  Tensor seed = gradient;
  if (!seed.defined()) {
    if (numel() != 1) {
      throw std::invalid_argument("backward() of a tensor of shape " + shape_str(shape()) +
                                  " needs a gradient of that shape (it is not a scalar)");
    }
    seed = Tensor::full(shape(), 1.0, dtype(), device());
  }
  if (seed.shape() != shape()) {
    throw std::invalid_argument("backward(): gradient of shape " + shape_str(seed.shape()) +
                                " for a tensor of shape " + shape_str(shape()));
  }
  if (seed.dtype() != dtype()) {
    throw std::invalid_argument("backward(): gradient of dtype " + std::string(dtype_name(seed.dtype())) +
                                " for a tensor of dtype " + std::string(dtype_name(dtype())));
  }
  NoGradGuard no_grad;
  // Autocast stays out of the nodes' backward (in_backward()).
  struct BackwardScope {
    BackwardScope() { ++tls_backward_depth; }
    ~BackwardScope() { --tls_backward_depth; }
    BackwardScope(const BackwardScope&) = delete;
    BackwardScope& operator=(const BackwardScope&) = delete;
  } backward_scope;
  const std::shared_ptr<Node> root = gradient_node(*this);

  // Count, for every node reachable from the root, how many edges lead into it.
  std::unordered_map<Node*, int> pending;
  std::vector<Node*> stack{root.get()};
  pending[root.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Node::Input& in : n->inputs) {
      if (!in.node) continue;
      if (pending.find(in.node.get()) == pending.end()) {
        pending[in.node.get()] = 0;
        stack.push_back(in.node.get());
      }
      ++pending[in.node.get()];
    }
  }

  // Run each node once all gradients flowing into it have arrived.
  std::unordered_map<Node*, Tensor> grads{{root.get(), seed}};
  std::vector<Node*> ready{root.get()};
  std::vector<std::shared_ptr<Node>> keep_alive{root};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    if (n->released) {
      throw std::logic_error(std::string("backward through a graph that was already freed (at ") +
                             std::string(n->name()) +
                             "); pass retain_graph = true to the first backward() to go through it twice");
    }
    Tensor grad = std::move(grads[n]);
    grads.erase(n);
    std::vector<Tensor> input_grads;
    {
      const KernelRegion region(n->region);
      if (n->tap_grad && n->layer) {
        if (LayerTap* tap = current_layer_tap()) tap->activation_grad(*n->layer, grad);
      }
      input_grads = n->backward(grad);
    }
    const bool trace = trace_nonfinite();
    for (std::size_t i = 0; i < n->inputs.size(); ++i) {
      const Node::Input& in = n->inputs[i];
      if (!in.node) continue;
      Tensor g = i < input_grads.size() ? input_grads[i] : Tensor();
      if (g.defined()) {
        if (g.shape() != in.shape) {
          throw std::logic_error(std::string(n->name()) + " returned a gradient of shape " + shape_str(g.shape()) +
                                 " for an input of shape " + shape_str(in.shape));
        }
        if (g.dtype() != in.dtype) g = converted(g, in.dtype);
        if (trace) detail::trace_backward(g, *n, grad);
        Tensor& slot = grads[in.node.get()];
        slot = slot.defined() ? sum_of(slot, g) : g;
      }
      if (--pending[in.node.get()] == 0) {
        keep_alive.push_back(in.node);
        if (grads.count(in.node.get()) != 0) {
          ready.push_back(in.node.get());
        } else if (!retain_graph) {
          release(*in.node);  // no gradient reached it, but its part of the graph is done
        }
      }
    }
    if (!retain_graph) release(*n);
  }
}

}  // namespace mantissa

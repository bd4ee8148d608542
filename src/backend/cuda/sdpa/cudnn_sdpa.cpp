// mantissa's fused-attention plugin (see sdpa_plugin.h): cuDNN's scaled-dot-product attention, forward
// with the softmax statistics and backward from them, expressed as cuDNN frontend graphs. One graph per
// shape, dtype, mask and direction, built on first use with cuDNN's heuristics (mode A, then its
// fallback list) and kept; calls are serialized on one cuDNN handle.
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "sdpa_plugin.h"

namespace {

namespace fe = cudnn_frontend;

// The tensors' ids in the graphs' variant packs.
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kGradO, kGradQ, kGradK, kGradV };

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace = 0;
};

using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, int, float, int>;

std::mutex mutex;  // guards everything below
std::map<Key, Built> built;
cudnnHandle_t handle = nullptr;

void check(fe::error_t e, const char* step) {
  if (!e.is_good()) throw std::runtime_error(std::string(step) + ": " + e.get_message());
}

void check(cudnnStatus_t s, const char* step) {
  if (s != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string(step) + ": " + cudnnGetErrorString(s));
}

cudnnHandle_t the_handle() {
  if (handle == nullptr) check(cudnnCreate(&handle), "cudnnCreate");
  return handle;
}

// q, k and v as [B, H, T, D] views of qkv [B, T, 3 H D]; the output and its gradient of [B, T, H D].
std::vector<std::int64_t> qkv_strides(const MantissaSdpaShape& s) {
  const std::int64_t width = 3 * s.heads * s.head_dim;
  return {s.seq * width, s.head_dim, width, 1};
}
std::vector<std::int64_t> out_strides(const MantissaSdpaShape& s) {
  const std::int64_t width = s.heads * s.head_dim;
  return {s.seq * width, s.head_dim, width, 1};
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, Uid uid,
                                                    const std::vector<std::int64_t>& dims,
                                                    const std::vector<std::int64_t>& strides) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
}

Built build(const MantissaSdpaShape& s, bool backward) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(s.bf16 != 0 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::vector<std::int64_t> dims{s.batch, s.heads, s.seq, s.head_dim};
  const std::vector<std::int64_t> stats_dims{s.batch, s.heads, s.seq, 1};
  const std::vector<std::int64_t> stats_strides{s.heads * s.seq, s.seq, 1, 1};
  const auto q = input(*g, "q", kQ, dims, qkv_strides(s));
  const auto k = input(*g, "k", kK, dims, qkv_strides(s));
  const auto v = input(*g, "v", kV, dims, qkv_strides(s));
  if (!backward) {
    auto options = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(true).set_attn_scale(s.scale);
    if (s.causal != 0) options.set_causal_mask(true);
    auto [o, stats] = g->sdpa(q, k, v, options);
    o->set_output(true).set_uid(kO).set_dim(dims).set_stride(out_strides(s));
    stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dims).set_stride(stats_strides);
  } else {
    const auto o = input(*g, "o", kO, dims, out_strides(s));
    const auto grad_o = input(*g, "grad_o", kGradO, dims, out_strides(s));
    const auto stats = g->tensor(fe::graph::Tensor_attributes()
                                     .set_name("stats")
                                     .set_uid(kStats)
                                     .set_dim(stats_dims)
                                     .set_stride(stats_strides)
                                     .set_data_type(fe::DataType_t::FLOAT));
    auto options = fe::graph::SDPA_backward_attributes().set_name("attention_backward").set_attn_scale(s.scale);
    if (s.causal != 0) options.set_causal_mask(true);
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, grad_o, stats, options);
    dq->set_output(true).set_uid(kGradQ).set_dim(dims).set_stride(qkv_strides(s));
    dk->set_output(true).set_uid(kGradK).set_dim(dims).set_stride(qkv_strides(s));
    dv->set_output(true).set_uid(kGradV).set_dim(dims).set_stride(qkv_strides(s));
  }
  check(g->validate(), "validate");
  check(g->build_operation_graph(the_handle()), "build_operation_graph");
  check(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans");
  check(g->check_support(the_handle()), "check_support");
  check(g->build_plans(the_handle()), "build_plans");
  Built b{g, 0};
  check(g->get_workspace_size(b.workspace), "get_workspace_size");
  return b;
}

// The cached graph for the shape and direction, built if need be. Called with the mutex held.
const Built& graph_for(const MantissaSdpaShape& s, bool backward) {
  const Key key{s.batch, s.heads, s.seq, s.head_dim, s.bf16, s.causal, s.scale, backward ? 1 : 0};
  auto it = built.find(key);
  if (it == built.end()) it = built.emplace(key, build(s, backward)).first;
  return it->second;
}

void execute(const Built& b, std::unordered_map<std::int64_t, void*>& pack, void* workspace, void* stream) {
  check(cudnnSetStream(the_handle(), static_cast<cudaStream_t>(stream)), "cudnnSetStream");
  check(b.graph->execute(the_handle(), pack, workspace), "execute");
}

// q, k and v of qkv: one head-width apart, 2 bytes an element.
void* part(const void* qkv, const MantissaSdpaShape& s, int i) {
  return const_cast<char*>(static_cast<const char*>(qkv) + i * s.heads * s.head_dim * 2);
}

// Runs f, turning an exception into the error string and a non-zero result.
template <class F>
int guarded(char* error, std::size_t error_size, F&& f) {
  try {
    std::lock_guard lock(mutex);
    f();
    return 0;
  } catch (const std::exception& e) {
    if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "cuDNN fused attention: %s", e.what());
    return 1;
  }
}

}  // namespace

extern "C" {

int mantissa_sdpa_prepare(const MantissaSdpaShape* shape, int backward, std::int64_t* workspace_bytes, char* error,
                          std::size_t error_size) {
  return guarded(error, error_size, [&] { *workspace_bytes = graph_for(*shape, backward != 0).workspace; });
}

int mantissa_sdpa_forward(const MantissaSdpaShape* shape, const void* qkv, void* out, float* stats, void* workspace,
                          void* stream, char* error, std::size_t error_size) {
  return guarded(error, error_size, [&] {
    std::unordered_map<std::int64_t, void*> pack{{kQ, part(qkv, *shape, 0)}, {kK, part(qkv, *shape, 1)},
                                                 {kV, part(qkv, *shape, 2)}, {kO, out}, {kStats, stats}};
    execute(graph_for(*shape, false), pack, workspace, stream);
  });
}

int mantissa_sdpa_backward(const MantissaSdpaShape* shape, const void* qkv, const void* out, const void* grad_out,
                           const float* stats, void* grad_qkv, void* workspace, void* stream, char* error,
                           std::size_t error_size) {
  return guarded(error, error_size, [&] {
    std::unordered_map<std::int64_t, void*> pack{
        {kQ, part(qkv, *shape, 0)},           {kK, part(qkv, *shape, 1)},
        {kV, part(qkv, *shape, 2)},           {kO, const_cast<void*>(out)},
        {kGradO, const_cast<void*>(grad_out)}, {kStats, const_cast<float*>(stats)},
        {kGradQ, part(grad_qkv, *shape, 0)},  {kGradK, part(grad_qkv, *shape, 1)},
        {kGradV, part(grad_qkv, *shape, 2)}};
    execute(graph_for(*shape, true), pack, workspace, stream);
  });
}

}  // extern "C"

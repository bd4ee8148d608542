// Self-attention on the GPU as one fused kernel: cuDNN's scaled-dot-product attention, through mantissa's
// plugin (sdpa/sdpa_plugin.h), registered as the CUDA backend's FusedAttention (../fused_attention.h).
// The plugin is looked for next to the program, in ../lib, then on the loader's path (or where
// MANTISSA_SDPA_PLUGIN says); where it or cuDNN is missing, or cuDNN refuses a shape, self_attention
// composes products and the attention softmax instead, and cuda_info() says why.
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "../fused_attention.h"
#include "../profiler.h"
#include "cuda_kernels.h"
#include "cuda_support.cuh"
#include "kernel_ways.h"
#include "mantissa/backend/cuda.h"
#include "sdpa/sdpa_plugin.h"

namespace mantissa {
namespace detail::cuda {
namespace {

constexpr const char* kPluginName = "libmantissa_cudnn_sdpa.so";

struct Plugin {
  decltype(&mantissa_sdpa_prepare) prepare = nullptr;
  decltype(&mantissa_sdpa_forward) forward = nullptr;
  decltype(&mantissa_sdpa_backward) backward = nullptr;
  std::string path;     // where it was loaded from
  std::string missing;  // why it was not
};

Plugin load_plugin() {
  namespace fs = std::filesystem;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("MANTISSA_SDPA_PLUGIN"); env != nullptr && *env != '\0') candidates.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back((exe.parent_path() / kPluginName).string());
    candidates.push_back((exe.parent_path().parent_path() / "lib" / kPluginName).string());
  }
  candidates.emplace_back(kPluginName);
  Plugin p;
  for (const std::string& c : candidates) {
    const bool is_path = c.find('/') != std::string::npos;
    if (is_path && !fs::exists(c, ec)) continue;
    void* lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      // A plugin that is there but does not load (cuDNN missing) says more than one not found.
      if (p.missing.empty() || is_path) p.missing = e != nullptr ? e : "cannot load " + c;
      continue;
    }
    p.prepare = reinterpret_cast<decltype(p.prepare)>(dlsym(lib, "mantissa_sdpa_prepare"));
    p.forward = reinterpret_cast<decltype(p.forward)>(dlsym(lib, "mantissa_sdpa_forward"));
    p.backward = reinterpret_cast<decltype(p.backward)>(dlsym(lib, "mantissa_sdpa_backward"));
    if (p.prepare == nullptr || p.forward == nullptr || p.backward == nullptr) {
      p = Plugin{};
      p.missing = c + " is not mantissa's attention plugin (its functions are missing)";
      continue;
    }
    p.path = c;
    p.missing.clear();
    return p;
  }
  if (p.missing.empty()) {
    p.missing = std::string("no ") + kPluginName + " next to the program, in ../lib or on the loader's path (built " +
                "where scripts/install-deps.sh fetched the cuDNN frontend)";
  }
  return p;
}

const Plugin& plugin() {
  static const Plugin p = load_plugin();
  return p;
}

std::atomic<bool> allowed{way_on(Way::fused_attention)};

MantissaSdpaShape shape_of(const Tensor& qkv, std::int64_t heads, bool causal, double scale) {
  return {qkv.size(0), heads,  qkv.size(1), qkv.size(2) / 3 / heads, qkv.dtype() == DType::bf16 ? 1 : 0,
          causal ? 1 : 0, static_cast<float>(scale)};
}

// Shapes cuDNN refused, with its reason, so that they are not built again at every call.
using ShapeKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, int, float>;
std::mutex refusals_mutex;
std::map<ShapeKey, std::string> refusals;
std::string last_refusal;

bool supports(const Tensor& qkv, std::int64_t heads, bool causal, double scale, std::string& why) {
  if (!allowed) {
    why = "turned off (set_cuda_fused_attention(false), or MANTISSA_ATTENTION=unfused)";
    return false;
  }
  if (qkv.dtype() != DType::bf16 && qkv.dtype() != DType::f16) {
    why = "cuDNN's fused attention takes bf16 or fp16, not " + std::string(dtype_name(qkv.dtype()));
    return false;
  }
  const std::int64_t d = qkv.size(2) / 3 / heads;
  if (d % 8 != 0 || d > 128) {
    why = "a head width of " + std::to_string(d) + " (cuDNN's fused attention: multiples of 8 up to 128)";
    return false;
  }
  if (!qkv.is_contiguous()) {
    why = "q, k and v not in one contiguous [B, T, 3 C] tensor";
    return false;
  }
  const Plugin& p = plugin();
  if (p.prepare == nullptr) {
    why = p.missing;
    return false;
  }
  const MantissaSdpaShape s = shape_of(qkv, heads, causal, scale);
  const ShapeKey key{s.batch, s.heads, s.seq, s.head_dim, s.bf16, s.causal, s.scale};
  std::lock_guard lock(refusals_mutex);
  if (const auto it = refusals.find(key); it != refusals.end()) {
    why = it->second;
    return false;
  }
  // Both directions now: a shape whose backward cuDNN refuses runs unfused from the start.
  std::int64_t workspace = 0;
  char error[512] = "";
  if (p.prepare(&s, 0, &workspace, error, sizeof error) != 0 || p.prepare(&s, 1, &workspace, error, sizeof error) != 0) {
    why = error;
    refusals[key] = why;
    last_refusal = why;
    return false;
  }
  return true;
}

// The workspace a direction needs, from the caching allocator (freed in stream order).
Tensor workspace_for(const MantissaSdpaShape& s, int backward, Device device) {
  std::int64_t bytes = 0;
  char error[512] = "";
  if (plugin().prepare(&s, backward, &bytes, error, sizeof error) != 0) throw std::runtime_error(std::string("self_attention: ") + error);
  return bytes > 0 ? Tensor::empty({bytes}, DType::e4m3, device) : Tensor();
}

// The FLOPs of the products the composition runs for one direction (forward: scores and their sum over
// v; backward: four), whole rows as in the CPU's count, so that model FLOP/s compare across devices.
double products_flops(const Tensor& qkv, int products) {
  const auto tokens = static_cast<double>(qkv.size(1));
  return 2.0 * products * static_cast<double>(qkv.size(0)) * tokens * tokens * static_cast<double>(qkv.size(2) / 3);
}

void forward(const Tensor& qkv, std::int64_t heads, bool causal, double scale, const Tensor& out, const Tensor& stats) {
  FamilyTimer timer("attention", "fused_attention", qkv.device(),
                    static_cast<double>(held_bytes(qkv) + held_bytes(out) + held_bytes(stats)),
                    products_flops(qkv, 2));
  const MantissaSdpaShape s = shape_of(qkv, heads, causal, scale);
  const Tensor workspace = workspace_for(s, 0, qkv.device());
  char error[512] = "";
  if (plugin().forward(&s, qkv.data(), out.data(), stats.data_as<float>(), workspace.defined() ? workspace.data() : nullptr,
                       stream(), error, sizeof error) != 0) {
    throw std::runtime_error(std::string("self_attention: ") + error);
  }
}

void backward(const Tensor& qkv, const Tensor& out, const Tensor& grad_out, const Tensor& stats, std::int64_t heads,
              bool causal, double scale, const Tensor& grad_qkv) {
  FamilyTimer timer("attention", "fused_attention_backward", qkv.device(),
                    static_cast<double>(held_bytes(qkv) + held_bytes(out) + held_bytes(grad_out) + held_bytes(stats) + held_bytes(grad_qkv)),
                    products_flops(qkv, 4));
  const MantissaSdpaShape s = shape_of(qkv, heads, causal, scale);
  const Tensor workspace = workspace_for(s, 1, qkv.device());
  char error[512] = "";
  if (plugin().backward(&s, qkv.data(), out.data(), grad_out.data(), stats.data_as<float>(), grad_qkv.data(),
                        workspace.defined() ? workspace.data() : nullptr, stream(), error, sizeof error) != 0) {
    throw std::runtime_error(std::string("self_attention backward: ") + error);
  }
}

}  // namespace

void register_fused_attention() { set_fused_attention(DeviceType::cuda, {supports, forward, backward}); }

std::string fused_attention_summary() {
  if (!allowed) return "off (set_cuda_fused_attention(false), or MANTISSA_ATTENTION=unfused)";
  const Plugin& p = plugin();
  if (p.prepare == nullptr) return "not available: " + p.missing;
  std::lock_guard lock(refusals_mutex);
  return "cuDNN's (plugin " + p.path + ")" + (last_refusal.empty() ? "" : "; refused a shape: " + last_refusal);
}

}  // namespace detail::cuda

void set_cuda_fused_attention(bool allow) { detail::cuda::allowed = allow; }
bool cuda_fused_attention() { return detail::cuda::allowed; }

}  // namespace mantissa

// CUDA kernels of the optimizer family: the CPU's element rules (cpu/optimizer_math.h, compiled for the
// GPU) in f32, the gradient unscaled as it is read (the loss scaler's fused unscale), and the f32 master
// weights written back into their bf16/f16 parameters in the same pass by the CPU's rounding rule,
// stochastic rounding drawing the same bits from (seed, element index) as the CPU does. A step's whole
// list of parameters goes a few launches at a time (chunk_lists.h: GPT-2's 148 parameters, 124M values,
// are 8 launches), grouped by the dtypes of gradient, state and parameter.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../cpu/optimizer_math.h"
#include "chunk_lists.h"
#include "cuda_kernels.h"
#include "cuda_support.cuh"
#include "flat_types.cuh"

namespace mantissa::detail::cuda {
namespace {

// Element i of a list's tensor, with the write-back's rounding rule in t.encode: stochastic rounding
// draws its bits from (seed, i).
__device__ inline void store_rounded(const ElementType& t, void* base, std::int64_t i, float v, std::uint64_t seed) {
  std::uint32_t random = 0;
  if (t.encode.rounding == Rounding::stochastic) {
    random = random_bits(stochastic_key(seed, static_cast<std::uint32_t>(static_cast<std::uint64_t>(i) >> 32)),
                         static_cast<std::uint32_t>(i));
  }
  const std::uint32_t bits = encode_value(t.encode, v, random);
  if (dtype_size(t.dtype) == 2) {
    static_cast<std::uint16_t*>(base)[i] = static_cast<std::uint16_t>(bits);
  } else {
    static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(bits);
  }
}

// One launch's parameters, a kernel parameter (under 4 KiB): each block updates one chunk of
// kUpdateChunk elements of one of them.
constexpr std::size_t kUpdateTensors = kUpdateLists.tensors;
constexpr std::size_t kUpdateBlocks = kUpdateLists.blocks;
constexpr std::int64_t kUpdateChunk = kUpdateLists.chunk;
struct UpdateList {
  float* param[kUpdateTensors];
  const void* grad[kUpdateTensors];
  void* state0[kUpdateTensors];
  void* state1[kUpdateTensors];
  void* low[kUpdateTensors];  // null: no low-precision parameter to write back into
  std::int64_t count[kUpdateTensors];
  bool first[kUpdateTensors];
  std::uint8_t block_slot[kUpdateBlocks];
  std::int32_t block_chunk[kUpdateBlocks];
};

// The dtypes a launch shares, and how it writes back.
struct ListTypes {
  ElementType grad, state, low;
  std::uint64_t seed;
};
static_assert(sizeof(UpdateList) + sizeof(ListTypes) + sizeof(AdamStep) + 64 <= 4096, "kernel parameters past 4 KiB");

// The elements [begin, end) this block updates, and its tensor's slot.
struct BlockSpan {
  int slot;
  std::int64_t begin, end;
};
__device__ inline BlockSpan block_span(const UpdateList& list) {
  const int t = list.block_slot[blockIdx.x];
  const std::int64_t begin = static_cast<std::int64_t>(list.block_chunk[blockIdx.x]) * kUpdateChunk;
  return {t, begin, begin + kUpdateChunk < list.count[t] ? begin + kUpdateChunk : list.count[t]};
}

// The update kernels take kUpdateUnroll elements a thread at a time (i, i + blockDim.x, ...), every
// load issued before any is used: one element an iteration left a thread waiting on each of its loads
// (AdamW ran at 1.7 TB/s, 44% of the device's copy rate, on an H200). G, S: the gradients' and the
// state's dtypes as types (flat_types.cuh; AnyDType: load() and store()), so no element switches on a
// dtype. Each element's arithmetic is the CPU's rule, as before: the same bits.
constexpr int kUpdateUnroll = 4;

template <class G, class S>
__global__ void sgd_list_kernel(UpdateList list, ListTypes types, SgdStep s, float grad_scale) {
  const BlockSpan b = block_span(list);
  float* param = list.param[b.slot];
  const void* grad = list.grad[b.slot];
  void* buffer = list.state0[b.slot];
  void* low = list.low[b.slot];
  const bool first = list.first[b.slot];
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x);
  for (std::int64_t i0 = b.begin + threadIdx.x; i0 < b.end; i0 += step * kUpdateUnroll) {
    float p[kUpdateUnroll], g[kUpdateUnroll], m[kUpdateUnroll];
#pragma unroll
    for (int k = 0; k < kUpdateUnroll; ++k) {
      const std::int64_t i = i0 + k * step;
      const bool in = i < b.end;
      p[k] = in ? param[i] : 0.0f;
      g[k] = in ? get<G>(types.grad, grad, i) : 0.0f;
      m[k] = in && buffer != nullptr ? get<S>(types.state, buffer, i) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kUpdateUnroll; ++k) {
      const std::int64_t i = i0 + k * step;
      if (i >= b.end) continue;
      const float q = sgd_element(p[k], g[k] * grad_scale, m[k], s, first);
      param[i] = q;
      if (buffer != nullptr) put<S>(types.state, buffer, i, m[k]);
      if (low != nullptr) store_rounded(types.low, low, i, q, types.seed);
    }
  }
}

template <class G, class S>
__global__ void adam_list_kernel(UpdateList list, ListTypes types, AdamStep s, float grad_scale, float bias1,
                                 float bias2_sqrt) {
  const BlockSpan b = block_span(list);
  float* param = list.param[b.slot];
  const void* grad = list.grad[b.slot];
  void* m = list.state0[b.slot];
  void* v = list.state1[b.slot];
  void* low = list.low[b.slot];
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x);
  for (std::int64_t i0 = b.begin + threadIdx.x; i0 < b.end; i0 += step * kUpdateUnroll) {
    float p[kUpdateUnroll], g[kUpdateUnroll], mi[kUpdateUnroll], vi[kUpdateUnroll];
#pragma unroll
    for (int k = 0; k < kUpdateUnroll; ++k) {
      const std::int64_t i = i0 + k * step;
      const bool in = i < b.end;
      p[k] = in ? param[i] : 0.0f;
      g[k] = in ? get<G>(types.grad, grad, i) : 0.0f;
      mi[k] = in ? get<S>(types.state, m, i) : 0.0f;
      vi[k] = in ? get<S>(types.state, v, i) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kUpdateUnroll; ++k) {
      const std::int64_t i = i0 + k * step;
      if (i >= b.end) continue;
      const float q = adam_element(p[k], g[k] * grad_scale, mi[k], vi[k], s, bias1, bias2_sqrt);
      param[i] = q;
      put<S>(types.state, m, i, mi[k]);
      put<S>(types.state, v, i, vi[k]);
      if (low != nullptr) store_rounded(types.low, low, i, q, types.seed);
    }
  }
}

// f(g, s) with the gradients' and the state's dtypes as types (null pointers; AnyDType for fp8).
template <class F>
void with_update_types(const ListTypes& types, F&& f) {
  const auto with_grad = [&](auto* g) {
    if (!with_flat_type(types.state.dtype, [&](auto* st) { f(g, st); })) f(g, static_cast<AnyDType*>(nullptr));
  };
  if (!with_flat_type(types.grad.dtype, with_grad)) with_grad(static_cast<AnyDType*>(nullptr));
}

__global__ void round_into_kernel(std::int64_t n, const float* src, ElementType to, std::uint64_t seed, void* dst) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    store_rounded(to, dst, i, src[i], seed);
  }
}

// The rounding of a write-back into `dtype`, as an ElementType's encode rule.
ElementType write_back_type(DType dtype, const WriteBack& w) {
  ElementType t = element_type(dtype);
  t.encode = make_encode_params(format_of(dtype), CastOptions{w.rounding, false, w.seed});
  return t;
}

void check_list(const char* what, std::span<const ParamUpdate> list) {
  for (const ParamUpdate& u : list) {
    if (u.param.dtype() != DType::f32) throw std::invalid_argument(std::string(what) + ": cuda updates f32 parameters (master weights)");
    for (const Tensor* t : u.tensors()) {
      refuse_f64(what, *t);
      if (t->defined() && !t->is_contiguous()) throw std::invalid_argument(std::string(what) + ": tensors must be contiguous");
    }
    if (u.low.defined() && dtype_size(u.low.dtype()) > 2) {
      throw std::invalid_argument(std::string(what) + ": a parameter written back is 8 or 16 bits, not " +
                                  std::string(dtype_name(u.low.dtype())));
    }
  }
}

// launch(list, types, blocks) for each launch over `updates`, grouped by (gradient, state, parameter
// written back) dtypes.
template <class Launch>
void launch_lists(std::span<const ParamUpdate> updates, const WriteBack& w, Launch launch) {
  using Key = std::tuple<DType, DType, DType, bool, bool>;  // grad, state, low; has state, has low
  const auto key_of = [](const ParamUpdate& u) {
    return Key{u.grad.dtype(), u.state[0].defined() ? u.state[0].dtype() : DType::f32,
               u.low.defined() ? u.low.dtype() : DType::f32, u.state[0].defined(), u.low.defined()};
  };
  std::vector<Key> keys;
  for (const ParamUpdate& u : updates) {
    if (u.param.numel() > 0 && std::find(keys.begin(), keys.end(), key_of(u)) == keys.end()) keys.push_back(key_of(u));
  }
  for (const Key& key : keys) {
    std::vector<const ParamUpdate*> group;
    std::vector<std::int64_t> counts;
    for (const ParamUpdate& u : updates) {
      if (u.param.numel() > 0 && key_of(u) == key) {
        group.push_back(&u);
        counts.push_back(u.param.numel());
      }
    }
    const ListTypes types{element_type(std::get<0>(key)), element_type(std::get<1>(key)),
                          write_back_type(std::get<2>(key), w), w.seed};
    for (const ChunkLaunch& l : plan_chunk_launches(counts, kUpdateLists)) {
      UpdateList list{};
      for (std::size_t slot = 0; slot < l.members.size(); ++slot) {
        const ParamUpdate& u = *group[l.members[slot]];
        list.param[slot] = u.param.data_as<float>();
        list.grad[slot] = u.grad.data();
        list.state0[slot] = u.state[0].defined() ? u.state[0].data() : nullptr;
        list.state1[slot] = u.state[1].defined() ? u.state[1].data() : nullptr;
        list.low[slot] = u.low.defined() ? u.low.data() : nullptr;
        list.count[slot] = u.param.numel();
        list.first[slot] = u.first;
      }
      for (std::size_t b = 0; b < l.blocks.size(); ++b) {
        list.block_slot[b] = static_cast<std::uint8_t>(l.blocks[b].slot);
        list.block_chunk[b] = static_cast<std::int32_t>(l.blocks[b].chunk);
      }
      launch(list, types, static_cast<unsigned>(l.blocks.size()));
    }
  }
}

}  // namespace

void sgd_update(std::span<const ParamUpdate> list, const SgdStep& s, const WriteBack& w) {
  check_list("sgd_update", list);
  launch_lists(list, w, [&](const UpdateList& l, const ListTypes& types, unsigned blocks) {
    with_update_types(types, [&](auto* g, auto* st) {
      sgd_list_kernel<std::remove_pointer_t<decltype(g)>, std::remove_pointer_t<decltype(st)>>
          <<<blocks, kThreads, 0, stream()>>>(l, types, s, static_cast<float>(s.grad_scale));
    });
    check_launch("sgd_update");
  });
}

void adam_update(std::span<const ParamUpdate> list, const AdamStep& s, const WriteBack& w) {
  check_list("adam_update", list);
  // The bias corrections as the CPU computes them: in double, then f32.
  const auto bias1 = static_cast<float>(1 - std::pow(s.beta1, static_cast<double>(s.step)));
  const auto bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(s.beta2, static_cast<double>(s.step))));
  launch_lists(list, w, [&](const UpdateList& l, const ListTypes& types, unsigned blocks) {
    with_update_types(types, [&](auto* g, auto* st) {
      adam_list_kernel<std::remove_pointer_t<decltype(g)>, std::remove_pointer_t<decltype(st)>>
          <<<blocks, kThreads, 0, stream()>>>(l, types, s, static_cast<float>(s.grad_scale), bias1, bias2_sqrt);
    });
    check_launch("adam_update");
  });
}

void round_into(const Tensor& src, const Tensor& dst, Rounding rounding, std::uint64_t seed) {
  if (src.dtype() != DType::f32 || !src.is_contiguous() || !dst.is_contiguous()) {
    throw std::invalid_argument("round_into: an f32 source and a destination, both contiguous");
  }
  refuse_f64("round_into", dst);
  const std::int64_t n = src.numel();
  if (n == 0) return;
  if (dst.dtype() == DType::f32) {
    check(cudaMemcpyAsync(dst.data(), src.data(), static_cast<std::size_t>(n) * 4, cudaMemcpyDeviceToDevice, stream()),
          "round_into");
    return;
  }
  round_into_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(n, src.data_as<float>(),
                                                              write_back_type(dst.dtype(), WriteBack{rounding, seed}), seed,
                                                              dst.data());
  check_launch("round_into");
}

}  // namespace mantissa::detail::cuda

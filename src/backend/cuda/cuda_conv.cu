// Convolution on the GPU through cuDNN (what it does best; the issue's choice): forward, backward data
// and backward weights, NCHW, f32 / f16 / bf16 data with f32 accumulation. f32 runs on FMA kernels only
// (no TF32) unless set_cuda_allow_tf32(true), as the products do. Among cuDNN's heuristic choices the
// first deterministic one that works is taken, cached per shape, and its workspace (the size cuDNN gives
// for it) comes from the caching allocator.
//
// cuDNN is loaded with dlopen at the first convolution (libcudnn.so.9, a shim that loads its own parts),
// as cuBLASLt is: the machines that build mantissa have it in the CUDA toolkit, the GPU machine inside
// PyTorch's wheels. Its legacy convolution API is used (deprecated in cuDNN 9 but shipped and supported);
// the graph API is the way to fused convolution epilogues later.
#include <cudnn.h>

#include <array>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "cuda_kernels.h"
#include "cuda_support.cuh"
#include "library_loader.h"
#include "mantissa/backend/cuda.h"
#include "mantissa/core/memory.h"

namespace mantissa::detail::cuda {
namespace {

// The cuDNN functions mantissa calls, by their own types.
struct Cudnn {
  decltype(&cudnnGetVersion) GetVersion;
  decltype(&cudnnGetErrorString) GetErrorString;
  decltype(&cudnnCreate) Create;
  decltype(&cudnnSetStream) SetStream;
  decltype(&cudnnCreateTensorDescriptor) CreateTensorDescriptor;
  decltype(&cudnnDestroyTensorDescriptor) DestroyTensorDescriptor;
  decltype(&cudnnSetTensor4dDescriptor) SetTensor4dDescriptor;
  decltype(&cudnnCreateFilterDescriptor) CreateFilterDescriptor;
  decltype(&cudnnDestroyFilterDescriptor) DestroyFilterDescriptor;
  decltype(&cudnnSetFilter4dDescriptor) SetFilter4dDescriptor;
  decltype(&cudnnCreateConvolutionDescriptor) CreateConvolutionDescriptor;
  decltype(&cudnnDestroyConvolutionDescriptor) DestroyConvolutionDescriptor;
  decltype(&cudnnSetConvolution2dDescriptor) SetConvolution2dDescriptor;
  decltype(&cudnnSetConvolutionGroupCount) SetConvolutionGroupCount;
  decltype(&cudnnSetConvolutionMathType) SetConvolutionMathType;
  decltype(&cudnnGetConvolutionForwardAlgorithm_v7) GetForwardAlgorithm;
  decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) GetBackwardDataAlgorithm;
  decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) GetBackwardFilterAlgorithm;
  decltype(&cudnnGetConvolutionForwardWorkspaceSize) ForwardWorkspaceSize;
  decltype(&cudnnGetConvolutionBackwardDataWorkspaceSize) BackwardDataWorkspaceSize;
  decltype(&cudnnGetConvolutionBackwardFilterWorkspaceSize) BackwardFilterWorkspaceSize;
  decltype(&cudnnConvolutionForward) ConvolutionForward;
  decltype(&cudnnConvolutionBackwardData) ConvolutionBackwardData;
  decltype(&cudnnConvolutionBackwardFilter) ConvolutionBackwardFilter;
};

Cudnn load() {
  const Symbols bind(open_library("libcudnn.so." + std::to_string(CUDNN_MAJOR), "cuDNN"), "cuDNN");
  Cudnn api{};
  bind(api.GetVersion, "cudnnGetVersion");
  bind(api.GetErrorString, "cudnnGetErrorString");
  bind(api.Create, "cudnnCreate");
  bind(api.SetStream, "cudnnSetStream");
  bind(api.CreateTensorDescriptor, "cudnnCreateTensorDescriptor");
  bind(api.DestroyTensorDescriptor, "cudnnDestroyTensorDescriptor");
  bind(api.SetTensor4dDescriptor, "cudnnSetTensor4dDescriptor");
  bind(api.CreateFilterDescriptor, "cudnnCreateFilterDescriptor");
  bind(api.DestroyFilterDescriptor, "cudnnDestroyFilterDescriptor");
  bind(api.SetFilter4dDescriptor, "cudnnSetFilter4dDescriptor");
  bind(api.CreateConvolutionDescriptor, "cudnnCreateConvolutionDescriptor");
  bind(api.DestroyConvolutionDescriptor, "cudnnDestroyConvolutionDescriptor");
  bind(api.SetConvolution2dDescriptor, "cudnnSetConvolution2dDescriptor");
  bind(api.SetConvolutionGroupCount, "cudnnSetConvolutionGroupCount");
  bind(api.SetConvolutionMathType, "cudnnSetConvolutionMathType");
  bind(api.GetForwardAlgorithm, "cudnnGetConvolutionForwardAlgorithm_v7");
  bind(api.GetBackwardDataAlgorithm, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
  bind(api.GetBackwardFilterAlgorithm, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
  bind(api.ForwardWorkspaceSize, "cudnnGetConvolutionForwardWorkspaceSize");
  bind(api.BackwardDataWorkspaceSize, "cudnnGetConvolutionBackwardDataWorkspaceSize");
  bind(api.BackwardFilterWorkspaceSize, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
  bind(api.ConvolutionForward, "cudnnConvolutionForward");
  bind(api.ConvolutionBackwardData, "cudnnConvolutionBackwardData");
  bind(api.ConvolutionBackwardFilter, "cudnnConvolutionBackwardFilter");
  return api;
}

const Cudnn& cudnn() {
  static const Cudnn api = load();  // a failed load throws, and the next call tries again
  return api;
}

void check(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuDNN error " + cudnn().GetErrorString(s));
}

// The one handle, on the backend's stream.
cudnnHandle_t handle() {
  static const cudnnHandle_t h = [] {
    cudnnHandle_t made = nullptr;
    check(cudnn().Create(&made), "creating the cuDNN handle");
    check(cudnn().SetStream(made, stream()), "setting the cuDNN stream");
    return made;
  }();
  return h;
}

cudnnDataType_t data_type(DType t, const char* what) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: throw std::invalid_argument(std::string(what) + ": cuda convolves f32, f16 and bf16, not " + std::string(dtype_name(t)));
  }
}

int dim(std::int64_t v, const char* what) {
  if (v > 0x7fffffff) throw std::invalid_argument(std::string(what) + ": a dimension past 2^31");
  return static_cast<int>(v);
}

// A convolution's descriptors, made for one call and destroyed with it.
class Descriptors {
 public:
  // x [N, C, H, W], w [O, C / groups, KH, KW], y [N, O, OH, OW], all of one dtype.
  Descriptors(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p, const char* what) {
    const Cudnn& api = cudnn();
    const cudnnDataType_t t = data_type(x.dtype(), what);
    check(api.CreateTensorDescriptor(&x_), what);
    check(api.CreateTensorDescriptor(&y_), what);
    check(api.CreateFilterDescriptor(&w_), what);
    check(api.CreateConvolutionDescriptor(&conv_), what);
    check(api.SetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, t, dim(x.size(0), what), dim(x.size(1), what),
                                    dim(x.size(2), what), dim(x.size(3), what)),
          what);
    check(api.SetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, t, dim(y.size(0), what), dim(y.size(1), what),
                                    dim(y.size(2), what), dim(y.size(3), what)),
          what);
    check(api.SetFilter4dDescriptor(w_, t, CUDNN_TENSOR_NCHW, dim(w.size(0), what), dim(w.size(1), what),
                                    dim(w.size(2), what), dim(w.size(3), what)),
          what);
    check(api.SetConvolution2dDescriptor(conv_, dim(p.pad_h, what), dim(p.pad_w, what), dim(p.stride_h, what),
                                         dim(p.stride_w, what), dim(p.dilation_h, what), dim(p.dilation_w, what),
                                         CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          what);
    check(api.SetConvolutionGroupCount(conv_, dim(p.groups, what)), what);
    // f32: FMA kernels only, unless TF32 is allowed; f16 and bf16: tensor cores.
    const cudnnMathType_t math =
        x.dtype() != DType::f32 ? CUDNN_TENSOR_OP_MATH : cuda_allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    check(api.SetConvolutionMathType(conv_, math), what);
  }
  ~Descriptors() {
    const Cudnn& api = cudnn();
    api.DestroyTensorDescriptor(x_);
    api.DestroyTensorDescriptor(y_);
    api.DestroyFilterDescriptor(w_);
    api.DestroyConvolutionDescriptor(conv_);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
};

// What a pass was given by the heuristic: its algorithm and the workspace it needs.
struct Choice {
  int algo = 0;
  std::size_t workspace = 0;
};

// A pass's shape: which pass, the dtype, x's and w's dims, the geometry, and whether TF32 was allowed.
using ShapeKey = std::tuple<int, int, std::array<std::int64_t, 8>, std::array<std::int64_t, 7>, bool>;

ShapeKey key_of(int pass, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  return {pass,
          static_cast<int>(x.dtype()),
          {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(1), w.size(2), w.size(3)},
          {p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.groups},
          cuda_allow_tf32()};
}

// The first of the heuristic's results (best first) that works, deterministic ones first. The math type
// stays the descriptor's (FMA only for f32 without TF32, as PyTorch does), whatever a result says.
// `workspace_of` asks cuDNN for the algorithm's exact workspace.
template <class Perf, class Workspace>
Choice pick(const Perf* results, int count, Workspace&& workspace_of, const char* what) {
  for (bool deterministic : {true, false}) {
    for (int i = 0; i < count; ++i) {
      const Perf& r = results[i];
      if (r.status != CUDNN_STATUS_SUCCESS) continue;
      if (deterministic && r.determinism != CUDNN_DETERMINISTIC) continue;
      std::size_t bytes = 0;
      if (workspace_of(r.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
      return {static_cast<int>(r.algo), bytes};
    }
  }
  throw std::runtime_error(std::string(what) + ": cuDNN has no algorithm for this convolution");
}

std::mutex cache_mutex;
std::map<ShapeKey, Choice> choices;

// The cached choice for this pass and shape, or the heuristic's (asked once).
template <class Ask>
Choice choice_for(const ShapeKey& key, Ask&& ask) {
  {
    const std::lock_guard lock(cache_mutex);
    const auto it = choices.find(key);
    if (it != choices.end()) return it->second;
  }
  const Choice c = ask();
  const std::lock_guard lock(cache_mutex);
  choices.emplace(key, c);
  return c;
}

// A workspace of `bytes` from the caching allocator, held until the handle goes (stream order keeps it
// alive for the pass).
Tensor workspace(std::size_t bytes, Device device) {
  MemoryCategoryScope scope(MemoryCategory::temporary);
  return Tensor::empty({static_cast<std::int64_t>((bytes + 3) / 4)}, DType::f32, device);
}

void* data_or_null(const Tensor& t) { return t.numel() > 0 ? t.data() : nullptr; }

void check_inputs(const char* what, std::initializer_list<const Tensor*> tensors) {
  const DType t = (*tensors.begin())->dtype();
  for (const Tensor* x : tensors) {
    refuse_f64(what, *x);
    if (x->dtype() != t || !x->is_contiguous() || x->dim() != 4) {
      throw std::invalid_argument(std::string(what) + ": cuda convolves contiguous 4-D tensors of one dtype");
    }
  }
}

constexpr int kMaxResults = 16;

}  // namespace

void conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& out) {
  constexpr const char* what = "conv2d";
  check_inputs(what, {&x, &w, &out});
  if (out.numel() == 0) return;
  const Descriptors d(x, w, out, p, what);
  const Choice c = choice_for(key_of(0, x, w, p), [&] {
    cudnnConvolutionFwdAlgoPerf_t results[kMaxResults];
    int count = 0;
    check(cudnn().GetForwardAlgorithm(handle(), d.x_, d.w_, d.conv_, d.y_, kMaxResults, &count, results), what);
    return pick(results, count, [&](cudnnConvolutionFwdAlgo_t algo, std::size_t* bytes) {
      return cudnn().ForwardWorkspaceSize(handle(), d.x_, d.w_, d.conv_, d.y_, algo, bytes);
    }, what);
  });
  const Tensor ws = workspace(c.workspace, out.device());
  const float alpha = 1, beta = 0;
  check(cudnn().ConvolutionForward(handle(), &alpha, d.x_, x.data(), d.w_, w.data(), d.conv_,
                                   static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), data_or_null(ws), c.workspace, &beta,
                                   d.y_, out.data()),
        what);
}

void conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x) {
  constexpr const char* what = "conv2d_backward_data";
  check_inputs(what, {&grad_out, &w, &grad_x});
  if (grad_x.numel() == 0) return;
  const Descriptors d(grad_x, w, grad_out, p, what);
  const Choice c = choice_for(key_of(1, grad_x, w, p), [&] {
    cudnnConvolutionBwdDataAlgoPerf_t results[kMaxResults];
    int count = 0;
    check(cudnn().GetBackwardDataAlgorithm(handle(), d.w_, d.y_, d.conv_, d.x_, kMaxResults, &count, results), what);
    return pick(results, count, [&](cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes) {
      return cudnn().BackwardDataWorkspaceSize(handle(), d.w_, d.y_, d.conv_, d.x_, algo, bytes);
    }, what);
  });
  const Tensor ws = workspace(c.workspace, grad_x.device());
  const float alpha = 1, beta = 0;
  check(cudnn().ConvolutionBackwardData(handle(), &alpha, d.w_, w.data(), d.y_, grad_out.data(), d.conv_,
                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), data_or_null(ws), c.workspace,
                                        &beta, d.x_, grad_x.data()),
        what);
}

void conv2d_backward_weights(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p, const Tensor& grad_w) {
  constexpr const char* what = "conv2d_backward_weights";
  check_inputs(what, {&x, &grad_out, &grad_w});
  if (grad_w.numel() == 0) return;
  if (x.numel() == 0) {
    check(cudaMemsetAsync(grad_w.data(), 0, static_cast<std::size_t>(grad_w.numel()) * dtype_size(grad_w.dtype()),
                               stream()),
               what);
    return;
  }
  const Descriptors d(x, grad_w, grad_out, p, what);
  const Choice c = choice_for(key_of(2, x, grad_w, p), [&] {
    cudnnConvolutionBwdFilterAlgoPerf_t results[kMaxResults];
    int count = 0;
    check(cudnn().GetBackwardFilterAlgorithm(handle(), d.x_, d.y_, d.conv_, d.w_, kMaxResults, &count, results), what);
    return pick(results, count, [&](cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes) {
      return cudnn().BackwardFilterWorkspaceSize(handle(), d.x_, d.y_, d.conv_, d.w_, algo, bytes);
    }, what);
  });
  const Tensor ws = workspace(c.workspace, grad_w.device());
  const float alpha = 1, beta = 0;
  check(cudnn().ConvolutionBackwardFilter(handle(), &alpha, d.x_, x.data(), d.y_, grad_out.data(), d.conv_,
                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), data_or_null(ws),
                                          c.workspace, &beta, d.w_, grad_w.data()),
        what);
}

std::string cudnn_version() {
  const std::size_t v = cudnn().GetVersion();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace mantissa::detail::cuda

// The product on the GPU: cuBLASLt, f32 accumulation for every dtype (f16/bf16 operands on tensor
// cores; f32 operands in full f32 unless TF32 is allowed), the bias added by the epilogue before the one
// rounding, the algorithm cuBLASLt's heuristic picks cached per shape, strides and dtypes. FP8's scaled
// product is the same call with alpha; an accumulating product the same call with beta = 1.
//
// Row-major tensors are column-major transposes, so out = a . w is computed as out^T = w^T . a^T:
// cuBLASLt's A is w (N x K, leading dimension w's row stride), its B is a (K x M), D is out (N x M),
// and the bias is D's column vector of length N. Batches are strided (a stride of 0 repeats a matrix).
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "cublaslt_api.h"
#include "cuda_kernels.h"
#include "cuda_support.cuh"
#include "mantissa/backend/cuda.h"

namespace mantissa::detail::cuda {
namespace {

void check_lt(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string("matmul: ") + what + ": cuBLASLt error " + cublaslt().GetStatusName(s) + " (" +
                           cublaslt().GetStatusString(s) + ")");
}

cublasLtHandle_t handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t made = nullptr;
    check_lt(cublaslt().Create(&made), "cublasLtCreate");
    return made;
  }();
  return h;
}

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;  // what cuBLASLt's Hopper kernels ask for

void* workspace() {
  static const Tensor* w = new Tensor(Tensor::empty({static_cast<std::int64_t>(kWorkspaceBytes)}, DType::e4m3,
                                                    Device{DeviceType::cuda, 0}));  // kept for the process
  return w->data();
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: throw std::invalid_argument("matmul: no cuBLASLt type for " + std::string(dtype_name(t)));
  }
}

// A descriptor and three layouts, destroyed with the call.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  ~Descriptors() {
    if (d != nullptr) cublaslt().MatrixLayoutDestroy(d);
    if (b != nullptr) cublaslt().MatrixLayoutDestroy(b);
    if (a != nullptr) cublaslt().MatrixLayoutDestroy(a);
    if (op != nullptr) cublaslt().MatmulDescDestroy(op);
  }
};

cublasLtMatrixLayout_t layout(DType t, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int32_t batch,
                              std::int64_t batch_stride) {
  cublasLtMatrixLayout_t l = nullptr;
  check_lt(cublaslt().MatrixLayoutCreate(&l, cuda_type(t), static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols), ld),
           "layout");
  if (batch > 1) {
    check_lt(cublaslt().MatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch), "batch count");
    check_lt(cublaslt().MatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                              sizeof batch_stride),
             "batch stride");
  }
  return l;
}

// The alignment in bytes cuBLASLt may assume of a matrix: the largest power of 2, up to 256, dividing its
// address and (batched) its batch stride. The heuristic assumes 256 unless told, and a view that starts
// inside its storage (a slice, q/k/v out of one product) is often less aligned: an algorithm chosen for
// 256 would fault there, or read wrongly.
std::uint32_t alignment(const void* p, std::int64_t batch_stride_elements, DType t, bool batched) {
  std::uint64_t bits = reinterpret_cast<std::uintptr_t>(p) | 256U;
  if (batched) bits |= static_cast<std::uint64_t>(batch_stride_elements) * dtype_size(t);
  return static_cast<std::uint32_t>(bits & (~bits + 1));  // the lowest bit set
}

// The cached choices: every property of the call that changes which algorithm is valid.
using PlanKey = std::tuple<int, int, bool, bool, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           std::vector<std::int64_t>>;

std::mutex plans_mutex;
std::map<PlanKey, cublasLtMatmulAlgo_t> plans;

// A view whose innermost stride is 1 (cuBLASLt reads rows with a leading dimension), copied if need be.
Tensor unit_inner_stride(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype && t.strides().back() == 1 && t.strides()[1] >= t.size(2)) return t;
  Tensor c = Tensor::empty(t.shape(), dtype, t.device());
  copy(t, c);
  return c;
}

// out = alpha (a . w) + bias (+ out, accumulating), alpha and the bias applied in f32 before the one
// rounding.
void product(const Tensor& a_in, const Tensor& w_in, float alpha, const Tensor& bias_in, const Tensor& out,
             bool accumulate = false) {
  for (const Tensor* t : {&a_in, &w_in, &bias_in, &out}) refuse_f64("matmul", *t);
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a_in.size(2);
  if (out.numel() == 0) return;
  if (batch > INT32_MAX) throw std::invalid_argument("matmul: too many batches for cuBLASLt");
  // Operands in one dtype (f32 when a and w differ); the output directly when cuBLASLt can write it
  // (the operands' dtype, or f32), else through an f32 product rounded once by copy().
  const DType in = a_in.dtype() == w_in.dtype() ? a_in.dtype() : DType::f32;
  const Tensor a = unit_inner_stride(a_in, in);
  const Tensor w = unit_inner_stride(w_in, in);
  const bool direct = (out.dtype() == in || out.dtype() == DType::f32) && out.strides().back() == 1 && out.strides()[1] >= n;
  const Tensor d = direct ? out : Tensor::empty(out.shape(), DType::f32, out.device());
  if (accumulate && !direct) copy(out, d);
  Tensor bias = bias_in;
  // The bias epilogue reads the vector in 16-byte pieces.
  if (bias.defined() && (bias.dtype() != d.dtype() || !bias.is_contiguous() ||
                         reinterpret_cast<std::uintptr_t>(bias.data()) % 16 != 0)) {
    bias = Tensor::empty(bias_in.shape(), d.dtype(), d.device());
    copy(bias_in, bias);
  }
  if (k == 0 && accumulate) return;  // nothing to add
  if (k == 0) {  // an empty sum: out = bias (or 0)
    const Tensor zero = Tensor::zeros({1, 1, 1}, d.dtype(), d.device());
    const Tensor b = bias.defined() ? bias : Tensor::zeros({n}, d.dtype(), d.device());
    const Tensor bexp = make_view(b, d.shape(), {0, 0, 1}, b.offset());
    binary(BinaryOp::add, bexp, make_view(zero, d.shape(), {0, 0, 0}, 0), d);
    if (!direct) copy(d, out);
    return;
  }

  const bool tf32 = in == DType::f32 && cuda_allow_tf32();
  Descriptors desc;
  check_lt(cublaslt().MatmulDescCreate(&desc.op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F),
           "descriptor");
  if (bias.defined()) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    check_lt(cublaslt().MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue), "epilogue");
    const void* bias_ptr = bias.data();
    check_lt(cublaslt().MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr),
             "bias");
  }
  const auto b32 = static_cast<std::int32_t>(batch);
  desc.a = layout(in, n, k, w.strides()[1], b32, w.strides()[0]);
  desc.b = layout(in, k, m, a.strides()[1], b32, a.strides()[0]);
  desc.d = layout(d.dtype(), n, m, d.strides()[1], b32, d.strides()[0]);

  const std::uint32_t align_w = alignment(w.data(), w.strides()[0], in, batch > 1),
                      align_a = alignment(a.data(), a.strides()[0], in, batch > 1),
                      align_d = alignment(d.data(), d.strides()[0], d.dtype(), batch > 1);
  const PlanKey key{static_cast<int>(in), static_cast<int>(d.dtype()), bias.defined(), tf32, accumulate, m, n, k, batch,
                    {w.strides()[0], w.strides()[1], a.strides()[0], a.strides()[1], d.strides()[0], d.strides()[1],
                     align_w, align_a, align_d}};
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard lock(plans_mutex);
    auto it = plans.find(key);
    if (it == plans.end()) {
      cublasLtMatmulPreference_t pref = nullptr;
      check_lt(cublaslt().MatmulPreferenceCreate(&pref), "preference");
      const std::uint64_t ws = kWorkspaceBytes;
      cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
      // cuBLASLt's A is w, its B is a, C and D are d.
      cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_w, sizeof align_w);
      cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_a, sizeof align_a);
      cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof align_d);
      cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d);
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const cublasStatus_t s =
          cublaslt().MatmulAlgoGetHeuristic(handle(), desc.op, desc.a, desc.b, desc.d, desc.d, pref, 1, &result, &found);
      cublaslt().MatmulPreferenceDestroy(pref);
      check_lt(s, "heuristic");
      if (found == 0) {
        throw std::runtime_error("matmul: cuBLASLt has no algorithm for " + std::string(dtype_name(in)) + " -> " +
                                 std::string(dtype_name(d.dtype())) + " [" + std::to_string(batch) + ", " +
                                 std::to_string(m) + ", " + std::to_string(k) + "] x [" + std::to_string(k) + ", " +
                                 std::to_string(n) + "]");
      }
      it = plans.emplace(key, result.algo).first;
    }
    algo = it->second;
  }
  const float beta = accumulate ? 1.0f : 0.0f;  // C is D: beta = 1 adds the product into it
  check_lt(cublaslt().Matmul(handle(), desc.op, &alpha, w.data(), desc.a, a.data(), desc.b, &beta, d.data(), desc.d, d.data(),
                          desc.d, &algo, workspace(), kWorkspaceBytes, stream()),
           "cublasLtMatmul");
  if (!direct) copy(d, out);
}

}  // namespace

void matmul(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out) { product(a, w, 1.0f, bias, out); }

void matmul_accumulate(const Tensor& a, const Tensor& w, const Tensor& out) { product(a, w, 1.0f, Tensor(), out, true); }

// FP8's product: the operands hold fp8 values in bf16 (exactly), so this is the bf16 product with alpha.
void scaled_matmul(const Tensor& a, const Tensor& w, double alpha, const Tensor& bias, const Tensor& out) {
  product(a, w, static_cast<float>(alpha), bias, out);
}

}  // namespace mantissa::detail::cuda

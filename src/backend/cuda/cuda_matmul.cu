// The product on the GPU: cuBLASLt, f32 accumulation for every dtype (f16/bf16 operands on tensor
// cores; f32 operands in full f32 unless TF32 is allowed), the bias added by the epilogue before the one
// rounding, the algorithm cuBLASLt's heuristic picks cached per shape, strides and dtypes. FP8's scaled
// product is the same call with alpha, or, for operands on fp8 grids, one on fp8 tensor cores (Hopper,
// Ada); an accumulating product the same call with beta = 1.
//
// Row-major tensors are column-major transposes, so out = a . w is computed as out^T = w^T . a^T:
// cuBLASLt's A is w (N x K, leading dimension w's row stride), its B is a (K x M), D is out (N x M),
// and the bias is D's column vector of length N. Batches are strided (a stride of 0 repeats a matrix).
#include <cublasLt.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <tuple>
#include <vector>

#include "cublaslt_api.h"
#include "gemm_layout.h"
#include "cuda_kernels.h"
#include "cuda_support.cuh"
#include "../scaled_operands.h"
#include "kernel_ways.h"
#include "mantissa/backend/cuda.h"

namespace mantissa {
namespace detail::cuda {
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
    case DType::e4m3: return CUDA_R_8F_E4M3;
    case DType::e5m2: return CUDA_R_8F_E5M2;
    default: throw std::invalid_argument("matmul: no cuBLASLt type for " + std::string(dtype_name(t)));
  }
}

// A descriptor and three layouts, made once per distinct call (Plan) and kept for the process.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
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
using PlanKey = std::tuple<int, int, int, bool, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           std::vector<std::int64_t>>;

// What a distinct call needs, made the first time it is seen: its descriptors and the algorithm
// cuBLASLt's heuristic picked, or none (a refusal is remembered too: an epilogue cuBLASLt has no
// algorithm for is not asked about again on every call). Only the epilogue's vector pointer changes
// between calls; it is set, and the product queued, under the cache's lock.
struct Plan {
  Descriptors desc;
  std::optional<cublasLtMatmulAlgo_t> algo;
};
std::mutex plans_mutex;
std::map<PlanKey, std::unique_ptr<Plan>> plans;

// An operand [B, R, C] in `dtype` and a layout cuBLASLt reads: the view itself where it is already
// (plan_gemm says), else a contiguous copy; a weight shared by every batch (batch stride 0) is copied once
// and shared again, not once per batch.
Tensor readable(const Tensor& t, DType dtype, bool layout_ok) {
  if (t.dtype() == dtype && layout_ok) return t;
  const bool shared = t.size(0) > 1 && t.strides()[0] == 0;
  const Tensor one = shared ? make_view(t, {1, t.size(1), t.size(2)}, {0, t.strides()[1], t.strides()[2]}, t.offset()) : t;
  Tensor c = Tensor::empty(one.shape(), dtype, t.device());
  copy(one, c);
  return shared ? make_view(c, t.shape(), {0, c.strides()[1], c.strides()[2]}, 0) : c;
}

cublasOperation_t op_of(const GemmOperand& o) { return o.transposed ? CUBLAS_OP_T : CUBLAS_OP_N; }

// The algorithm cuBLASLt's heuristic picks for the descriptors, or nullopt where it has none.
std::optional<cublasLtMatmulAlgo_t> heuristic(const Descriptors& desc, std::uint32_t align_w, std::uint32_t align_a,
                                              std::uint32_t align_d) {
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
  const cublasStatus_t st =
      cublaslt().MatmulAlgoGetHeuristic(handle(), desc.op, desc.a, desc.b, desc.d, desc.d, pref, 1, &result, &found);
  cublaslt().MatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) return std::nullopt;
  check_lt(st, "heuristic");
  return result.algo;
}

// The cached plan for `key` (the caller holds plans_mutex), made by `make` (which fills the descriptors)
// and the heuristic the first time.
template <class Make>
Plan& plan_for(const PlanKey& key, std::uint32_t align_w, std::uint32_t align_a, std::uint32_t align_d, Make&& make) {
  if (const auto it = plans.find(key); it != plans.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  make(plan->desc);
  plan->algo = heuristic(plan->desc, align_w, align_a, align_d);
  return *plans.emplace(key, std::move(plan)).first->second;
}

void set_vector_of(cublasLtMatmulDesc_t op, const void* vector) {
  check_lt(cublaslt().MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector, sizeof vector), "bias");
}
void set_vector(const Plan& plan, const void* vector) { set_vector_of(plan.desc.op, vector); }

// What the epilogue adds to a product (a PlanKey field).
enum class Epilogue { none = 0, bias = 1, row_sums = 2, gelu = 3, gelu_bias = 4, gelu_gradient = 5 };

// GPT-2's GELU in a product's epilogue (kernel::MatmulGelu, kernel::MatmulGeluBackward): forward, out is
// gelu_tanh of the sum (bias added) and `aux` the sum itself; backward, out is gelu_tanh'(aux) times the
// product. aux is a matrix of out's shape and dtype, rows of unit stride.
enum class GeluWay { none, forward, backward };

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::row_sums: return CUBLASLT_EPILOGUE_BGRADB;  // the sums over k of cuBLASLt's B, which is a
    case Epilogue::gelu: return CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::gelu_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::gelu_gradient: return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::none: break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

void set_aux(cublasLtMatmulDesc_t op, const void* aux) {
  check_lt(cublaslt().MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux), "aux");
}

// What a product multiplies its sums by: `host`, or, where `device` is set, the f32 there (and beta the
// f32 after it), which cuBLASLt reads when the product runs: a scaled product's factors are multiplied
// on the GPU and never wait for the host.
struct Alpha {
  float host = 1;
  const float* device = nullptr;
};

// out = alpha (a . w) + bias (+ out, accumulating), alpha and the bias applied in f32 before the one
// rounding; with row_sums (one matrix, no bias) also row_sums[m] = sum_k a[m, k], by cuBLASLt's
// bias-gradient epilogue; with a GELU way, the GELU's epilogue (GeluWay) on one matrix with `aux`.
// Returns false, having done nothing, only where row sums, a GELU (or alpha on the device) were asked
// for and cuBLASLt has no algorithm for them (or the call does not suit the epilogue: K is 0, a batch,
// an output or aux it cannot write directly).
bool product(const Tensor& a_in, const Tensor& w_in, Alpha alpha, const Tensor& bias_in, const Tensor& out,
             bool accumulate = false, const Tensor& row_sums = Tensor(), GeluWay gelu = GeluWay::none,
             const Tensor& aux = Tensor()) {
  const bool extra = row_sums.defined() || gelu != GeluWay::none;
  if (alpha.device != nullptr && (accumulate || extra)) {
    throw std::logic_error("matmul: alpha on the device is for scaled products alone");
  }
  for (const Tensor* t : {&a_in, &w_in, &bias_in, &out}) refuse_f64("matmul", *t);
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a_in.size(2);
  if (extra && (k == 0 || m == 0 || batch != 1)) return false;
  // The GELU's aux matrix as D's: its dtype, rows of unit stride; a leading dimension of a multiple of 8
  // and 16-byte alignment, as cuBLASLt's epilogues read and write it.
  if (gelu != GeluWay::none &&
      (aux.dtype() != out.dtype() || aux.shape() != out.shape() || aux.strides()[2] != 1 || aux.strides()[1] % 8 != 0 ||
       reinterpret_cast<std::uintptr_t>(aux.data()) % 16 != 0 || (gelu == GeluWay::backward && bias_in.defined()))) {
    return false;
  }
  if (out.numel() == 0) return true;
  if (batch > INT32_MAX) throw std::invalid_argument("matmul: too many batches for cuBLASLt");
  // Operands in one dtype (f32 when a and w differ), read where they lie with cuBLASLt's transpose
  // flags (plan_gemm), copied only for a dtype or a layout no flag expresses; the output directly when
  // cuBLASLt can write it (the operands' dtype, or f32, rows of unit stride), else through an f32
  // product rounded once by copy().
  const DType in = a_in.dtype() == w_in.dtype() ? a_in.dtype() : DType::f32;
  const GemmLayout given = plan_gemm(a_in, w_in, out);
  const Tensor a = readable(a_in, in, !given.copy_a);
  const Tensor w = readable(w_in, in, !given.copy_w);
  const bool direct = (out.dtype() == in || out.dtype() == DType::f32) && !given.copy_out;
  if (gelu != GeluWay::none && !direct) return false;
  const Tensor d = direct ? out : Tensor::empty(out.shape(), DType::f32, out.device());
  if (accumulate && !direct) copy(out, d);
  Tensor bias = bias_in;
  // The bias epilogue reads the vector in 16-byte pieces.
  if (bias.defined() && (bias.dtype() != d.dtype() || !bias.is_contiguous() ||
                         reinterpret_cast<std::uintptr_t>(bias.data()) % 16 != 0)) {
    bias = Tensor::empty(bias_in.shape(), d.dtype(), d.device());
    copy(bias_in, bias);
  }
  if (k == 0 && accumulate) return true;  // nothing to add
  if (k == 0) {  // an empty sum: out = bias (or 0)
    const Tensor zero = Tensor::zeros({1, 1, 1}, d.dtype(), d.device());
    const Tensor b = bias.defined() ? bias : Tensor::zeros({n}, d.dtype(), d.device());
    const Tensor bexp = make_view(b, d.shape(), {0, 0, 1}, b.offset());
    binary(BinaryOp::add, bexp, make_view(zero, d.shape(), {0, 0, 0}, 0), d);
    if (!direct) copy(d, out);
    return true;
  }
  const GemmLayout g = plan_gemm(a, w, d);  // (after the empty sum: a [M, 0] operand has no leading dimension)
  if (g.copies()) throw std::logic_error("matmul: a copied operand has no cuBLASLt layout");
  // The epilogue writes the sums in D's dtype, contiguous and 16-byte aligned.
  Tensor sums = row_sums;
  if (row_sums.defined() && (row_sums.dtype() != d.dtype() || !row_sums.is_contiguous() ||
                             reinterpret_cast<std::uintptr_t>(row_sums.data()) % 16 != 0)) {
    sums = Tensor::empty(row_sums.shape(), d.dtype(), d.device());
  }
  const Epilogue epilogue = gelu == GeluWay::forward    ? (bias.defined() ? Epilogue::gelu_bias : Epilogue::gelu)
                            : gelu == GeluWay::backward ? Epilogue::gelu_gradient
                            : sums.defined()            ? Epilogue::row_sums
                            : bias.defined()            ? Epilogue::bias
                                                        : Epilogue::none;
  const std::int64_t aux_ld = gelu != GeluWay::none ? aux.strides()[1] : 0;

  const bool tf32 = in == DType::f32 && cuda_allow_tf32();
  const bool batched = g.batch > 1;
  const std::uint32_t align_w = alignment(w.data(), g.w.batch_stride, in, batched),
                      align_a = alignment(a.data(), g.a.batch_stride, in, batched),
                      align_d = alignment(d.data(), g.d.batch_stride, d.dtype(), batched);
  const PlanKey key{static_cast<int>(in), static_cast<int>(d.dtype()), static_cast<int>(epilogue), tf32, accumulate,
                    g.m, g.n, g.k, g.batch,
                    {g.w.transposed, g.w.ld, g.w.batch_stride, g.a.transposed, g.a.ld, g.a.batch_stride, g.d.ld,
                     g.d.batch_stride, align_w, align_a, align_d, alpha.device != nullptr, aux_ld}};
  std::lock_guard lock(plans_mutex);
  const Plan& plan = plan_for(key, align_w, align_a, align_d, [&](Descriptors& desc) {
    check_lt(cublaslt().MatmulDescCreate(&desc.op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F),
             "descriptor");
    const cublasOperation_t op_w = op_of(g.w), op_a = op_of(g.a);
    check_lt(cublaslt().MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_w, sizeof op_w), "transa");
    check_lt(cublaslt().MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a), "transb");
    if (alpha.device != nullptr) {
      const cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
      check_lt(cublaslt().MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode), "pointer mode");
    }
    if (epilogue != Epilogue::none) {
      const cublasLtEpilogue_t e = lt_epilogue(epilogue);
      check_lt(cublaslt().MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "epilogue");
    }
    if (const void* vector = sums.defined() ? sums.data() : bias.defined() ? bias.data() : nullptr) {
      set_vector_of(desc.op, vector);  // set again on every call
    }
    if (gelu != GeluWay::none) {
      set_aux(desc.op, aux.data());  // set again on every call
      check_lt(cublaslt().MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld),
               "aux leading dimension");
    }
    const auto b32 = static_cast<std::int32_t>(g.batch);
    desc.a = layout(in, g.w.rows, g.w.cols, g.w.ld, b32, g.w.batch_stride);
    desc.b = layout(in, g.a.rows, g.a.cols, g.a.ld, b32, g.a.batch_stride);
    desc.d = layout(d.dtype(), g.d.rows, g.d.cols, g.d.ld, b32, g.d.batch_stride);
  });
  if (!plan.algo && (extra || alpha.device != nullptr)) return false;
  if (!plan.algo) {
    throw std::runtime_error("matmul: cuBLASLt has no algorithm for " + std::string(dtype_name(in)) + " -> " +
                             std::string(dtype_name(d.dtype())) + " [" + std::to_string(batch) + ", " + std::to_string(m) +
                             ", " + std::to_string(k) + "] x [" + std::to_string(k) + ", " + std::to_string(n) + "]");
  }
  if (sums.defined() || bias.defined()) set_vector(plan, sums.defined() ? sums.data() : bias.data());
  if (gelu != GeluWay::none) set_aux(plan.desc.op, aux.data());
  const float beta = accumulate ? 1.0f : 0.0f;  // C is D: beta = 1 adds the product into it
  const bool on_device = alpha.device != nullptr;
  const void* alpha_at = on_device ? static_cast<const void*>(alpha.device) : &alpha.host;
  const void* beta_at = on_device ? static_cast<const void*>(alpha.device + 1) : &beta;
  check_lt(cublaslt().Matmul(handle(), plan.desc.op, alpha_at, w.data(), plan.desc.a, a.data(), plan.desc.b, beta_at, d.data(),
                             plan.desc.d, d.data(), plan.desc.d, &*plan.algo, workspace(), kWorkspaceBytes, stream()),
           "cublasLtMatmul");
  if (!direct) copy(d, out);
  if (sums.defined() && sums.data() != row_sums.data()) copy(sums, row_sums);
  return true;
}

// Whether the GPU multiplies fp8 on tensor cores: compute capability 8.9 (Ada) and up.
bool has_fp8_tensor_cores(int device) {
  static std::mutex m;
  static std::map<int, bool> known;
  std::lock_guard lock(m);
  if (const auto it = known.find(device); it != known.end()) return it->second;
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "matmul");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "matmul");
  return known[device] = major > 8 || (major == 8 && minor >= 9);
}

std::atomic<bool> fp8_allowed{way_on(Way::fp8_tensor_cores)};
std::atomic<std::int64_t> fp8_products{0};  // cuda_fp8_products()

// An fp8 operand with K contiguous, as cuBLASLt's fp8 kernels take it: `view` itself where it already is
// (stored [rows, K], 256-byte aligned: both operands of the forward product, x as quantized and the
// quantized w seen transposed), else a byte copy in that layout (the backward products' transposes: one
// byte a value, no conversion).
Tensor k_contiguous(const Tensor& view, std::int64_t rows, std::int64_t k, std::int64_t row_stride, std::int64_t k_stride) {
  if (k_stride == 1 && row_stride == k && reinterpret_cast<std::uintptr_t>(view.data()) % 256 == 0) return view;
  const Tensor packed = Tensor::empty({1, rows, k}, view.dtype(), view.device());
  copy(make_view(view, {1, rows, k}, {rows * k, row_stride, k_stride}, view.offset()), packed);
  return packed;
}

// FP8's product on fp8 tensor cores, for operands held in fp8 dtypes (their grids): each with K
// contiguous, the layout cuBLASLt's fp8 kernels take ("TN": its A is w^T stored [N, K] and transposed,
// its B is a stored [M, K]), used in place where it is so (the forward product's operands) and packed
// by a byte copy where not (the backward products' transposes), multiplied with f32 accumulation (fast
// accumulation off), alpha and the bias applied before the one rounding; an alpha on the device goes in
// as the scale of cuBLASLt's A (fp8 kernels read their operands' scales from the device), its alpha
// then 1. Returns false, having done nothing, where the call does not qualify; the bf16 product runs then.
bool fp8_product(const Tensor& a, const Tensor& w, Alpha alpha, const Tensor& bias_in, const Tensor& out) {
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  const DType od = out.dtype();
  const DType grid_a = a.dtype(), grid_w = w.dtype();
  const bool on_grids = is_storage_only(grid_a) && is_storage_only(grid_w) &&
                        !(grid_a == DType::e5m2 && grid_w == DType::e5m2);  // no e5m2 x e5m2 kernels
  if (!fp8_allowed || !on_grids || batch != 1 || m == 0 || m % 16 != 0 || n % 16 != 0 || k % 16 != 0) return false;
  if ((od != DType::bf16 && od != DType::f16 && od != DType::f32) || out.strides()[2] != 1 || out.strides()[1] < n ||
      out.strides()[1] * static_cast<std::int64_t>(dtype_size(od)) % 16 != 0) {
    return false;
  }
  if (!has_fp8_tensor_cores(out.device().index)) return false;
  // The bias by the epilogue in the output's dtype (bf16/f16); added after the product for f32 outputs,
  // whose fp8 kernels take a bias of another type.
  const bool epilogue_bias = bias_in.defined() && od != DType::f32;
  Tensor bias = bias_in;
  if (epilogue_bias &&
      (bias.dtype() != od || !bias.is_contiguous() || reinterpret_cast<std::uintptr_t>(bias.data()) % 16 != 0)) {
    bias = Tensor::empty(bias_in.shape(), od, out.device());
    copy(bias_in, bias);
  }
  const std::uint32_t align_d = alignment(out.data(), 0, od, false);
  // Fresh operand buffers are 256-byte aligned. The key's first field (both grids) is apart from every
  // dtype of the other products'.
  const PlanKey key{16 + 4 * static_cast<int>(grid_a) + static_cast<int>(grid_w), static_cast<int>(od),
                    static_cast<int>(epilogue_bias ? Epilogue::bias : Epilogue::none),
                    false, false, m, n, k, 1, {out.strides()[1], align_d, alpha.device != nullptr}};
  std::lock_guard lock(plans_mutex);
  const Plan& plan = plan_for(key, 256, 256, align_d, [&](Descriptors& desc) {
    check_lt(cublaslt().MatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "descriptor");
    const cublasOperation_t transposed = CUBLAS_OP_T;
    check_lt(cublaslt().MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &transposed, sizeof transposed),
             "transa");
    if (epilogue_bias) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      check_lt(cublaslt().MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
               "epilogue");
      set_vector_of(desc.op, bias.data());  // set again on every call
    }
    if (alpha.device != nullptr) {
      const void* scale = alpha.device;  // set again on every call
      check_lt(cublaslt().MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof scale),
               "a scale");
    }
    desc.a = layout(grid_w, k, n, k, 1, 0);  // stored K x N, used transposed
    desc.b = layout(grid_a, k, m, k, 1, 0);
    desc.d = layout(od, n, m, out.strides()[1], 1, 0);
  });
  if (!plan.algo) return false;
  if (epilogue_bias) set_vector(plan, bias.data());
  if (alpha.device != nullptr) {
    const void* scale = alpha.device;
    check_lt(cublaslt().MatmulDescSetAttribute(plan.desc.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof scale),
             "a scale");
  }
  const Tensor a8 = k_contiguous(a, m, k, a.strides()[1], a.strides()[2]);
  const Tensor w8 = k_contiguous(w, n, k, w.strides()[2], w.strides()[1]);  // w^T
  const float host_alpha = alpha.device != nullptr ? 1.0f : alpha.host, beta = 0.0f;
  check_lt(cublaslt().Matmul(handle(), plan.desc.op, &host_alpha, w8.data(), plan.desc.a, a8.data(), plan.desc.b, &beta,
                             out.data(), plan.desc.d, out.data(), plan.desc.d, &*plan.algo, workspace(), kWorkspaceBytes,
                             stream()),
           "cublasLtMatmul (fp8)");
  ++fp8_products;
  if (bias_in.defined() && !epilogue_bias) {
    const Tensor across_rows = make_view(bias_in, out.shape(), {0, 0, bias_in.strides()[0]}, bias_in.offset());
    binary(BinaryOp::add, out, across_rows, out);
  }
  return true;
}

// A scaled product's alpha and beta (0) on the GPU, by one thread: alpha times each factor there, in
// f64 in that order, rounded to f32 once (read_later.h's product_scale_on_host, the host backends' rule).
__global__ void product_scale_kernel(double alpha, const double* a_factor, const double* w_factor, float* alpha_beta) {
  if (a_factor != nullptr) alpha *= *a_factor;
  if (w_factor != nullptr) alpha *= *w_factor;
  alpha_beta[0] = static_cast<float>(alpha);
  alpha_beta[1] = 0.0f;
}

const double* factor_at(const Tensor& f) { return f.defined() ? static_cast<const double*>(f.data()) : nullptr; }

}  // namespace

void matmul(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out) { product(a, w, Alpha{}, bias, out); }

void matmul_accumulate(const Tensor& a, const Tensor& w, const Tensor& out) { product(a, w, Alpha{}, Tensor(), out, true); }

// (MANTISSA_BIAS_GRADIENT=separate, kernel_ways.h: on an H200 the products with the BGRADB epilogue ran at
// ~520 TFLOP/s where plain ones ran near 800; gpu-check's kernels part times the step both ways.)
// With cuBLASLt's bias-gradient epilogue where it has an algorithm for the call (and it is not turned
// off); otherwise the product, then the row sums as a product with a column of ones.
void matmul_row_sums(const Tensor& a, const Tensor& w, const Tensor& out, const Tensor& sums) {
  static const bool epilogue = way_on(Way::bias_gradient_epilogue);
  if (epilogue && product(a, w, Alpha{}, Tensor(), out, false, sums)) return;
  product(a, w, Alpha{}, Tensor(), out);
  const std::int64_t m = a.size(1), k = a.size(2);
  const Tensor ones = Tensor::full({1, k, 1}, 1, a.dtype(), a.device());
  product(a, ones, Alpha{}, Tensor(), make_view(sums, {1, m, 1}, {m * sums.strides()[0], sums.strides()[0], 1}, sums.offset()));
}

// GPT-2's MLP's first product and GELU: by the GELU_AUX(_BIAS) epilogue where cuBLASLt has it for the
// call; else the product in f32 (into pre itself where pre is f32), the GELU of it into out, the product
// rounded into pre.
void matmul_gelu(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& pre, const Tensor& out) {
  static const bool epilogue = way_on(Way::gelu_epilogue);
  if (epilogue && product(a, w, Alpha{}, bias, out, false, Tensor(), GeluWay::forward, pre)) return;
  const Tensor sum = pre.dtype() == DType::f32 ? pre : Tensor::empty(pre.shape(), DType::f32, pre.device());
  product(a, w, Alpha{}, bias, sum);
  unary(UnaryOp::gelu_tanh, 0, sum, out);
  if (sum.data() != pre.data()) copy(sum, pre);
}

// The product the GELU's gradient follows: by the DGELU epilogue where cuBLASLt has it for the call;
// else the product in f32, then times the GELU's gradient at pre.
void matmul_gelu_backward(const Tensor& a, const Tensor& w, const Tensor& pre, const Tensor& out) {
  static const bool epilogue = way_on(Way::gelu_epilogue);
  if (epilogue && product(a, w, Alpha{}, Tensor(), out, false, Tensor(), GeluWay::backward, pre)) return;
  const Tensor sum = Tensor::empty(out.shape(), DType::f32, out.device());
  product(a, w, Alpha{}, Tensor(), sum);
  unary_backward(UnaryOp::gelu_tanh, 0, pre, sum, out);
}

// FP8's product: on fp8 tensor cores where the operands are held in fp8 dtypes and the GPU has them;
// otherwise the bf16 product with alpha, fp8 operands widened to bf16 (exact; scaled_operands.h).
// Factors on the device are multiplied there and read by cuBLASLt where the product runs (no wait),
// except for a call cuBLASLt has no such algorithm for, which reads the one f32 back first (counted as a
// wait).
void scaled_matmul(const Tensor& a8, const Tensor& w8, const ProductScale& scale, const Tensor& bias, const Tensor& out) {
  const auto wide = [](const Tensor& t) { return widened_operand(t, [](const Tensor& s, const Tensor& d) { copy(s, d); }); };
  if (!scale.on_device()) {
    const Alpha alpha{static_cast<float>(scale.alpha)};
    if (!fp8_product(a8, w8, alpha, bias, out)) product(wide(a8), wide(w8), alpha, bias, out);
    return;
  }
  const Tensor alpha_beta = Tensor::empty({2}, DType::f32, out.device());
  product_scale_kernel<<<1, 1, 0, stream()>>>(scale.alpha, factor_at(scale.a_factor), factor_at(scale.w_factor),
                                              static_cast<float*>(alpha_beta.data()));
  check_launch("scaled_matmul");
  const Alpha on_device{1.0f, static_cast<const float*>(alpha_beta.data())};
  if (fp8_product(a8, w8, on_device, bias, out)) return;
  const Tensor a = wide(a8), w = wide(w8);
  if (product(a, w, on_device, bias, out)) return;
  product(a, w, Alpha{alpha_beta.to(Device::cpu()).data_as<float>()[0]}, bias, out);
}

}  // namespace detail::cuda

void set_cuda_fp8_tensor_cores(bool allow) { detail::cuda::fp8_allowed = allow; }
bool cuda_fp8_tensor_cores() { return detail::cuda::fp8_allowed; }
std::int64_t cuda_fp8_products() { return detail::cuda::fp8_products; }

}  // namespace mantissa

// Reading f32 values from Python objects in place (see arrays.h).
#include "arrays.h"

#include <dlpack/dlpack.h>

#include <functional>
#include <numeric>

namespace mantissa::python {
namespace {

// DLPack's description of a dtype, for errors: "bfloat16", "float16", "int64", ...
std::string dlpack_dtype_name(const DLDataType& t) {
  std::string kind = t.code == kDLFloat ? "float" : t.code == kDLBfloat ? "bfloat" : t.code == kDLInt ? "int" : t.code == kDLUInt ? "uint" : "type ";
  if (t.code != kDLFloat && t.code != kDLBfloat && t.code != kDLInt && t.code != kDLUInt) kind += std::to_string(t.code) + " of ";
  return kind + std::to_string(t.bits) + (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

F32View from_numpy(py::array a, const char* what) {
  if (!a.dtype().is(py::dtype::of<float>())) {
    throw py::type_error(std::string(what) + ": a " + py::str(a.dtype()).cast<std::string>() +
                         " array; mantissa rounds f32 values (convert with .astype(numpy.float32), which rounds to f32 first)");
  }
  // A strided view (a slice, a transpose) is copied once into row-major order.
  if (!(a.flags() & py::array::c_style)) a = py::array::ensure(a, py::array::c_style);
  F32View v;
  v.data = static_cast<const float*>(a.data());
  for (py::ssize_t i = 0; i < a.ndim(); ++i) v.shape.push_back(a.shape(i));
  v.keep = a;
  return v;
}

F32View from_dlpack(const py::handle& x, const char* what) {
  py::object capsule = x.attr("__dlpack__")();
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) throw py::error_already_set();
  const DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != kDLCPU) {
    throw py::value_error(std::string(what) + ": the tensor is not in the CPU's memory (DLPack device " +
                          std::to_string(t.device.device_type) + "); mantissa's Python functions read CPU memory: pass x.cpu()");
  }
  if (t.dtype.code != kDLFloat || t.dtype.bits != 32 || t.dtype.lanes != 1) {
    throw py::type_error(std::string(what) + ": a " + dlpack_dtype_name(t.dtype) +
                         " tensor; mantissa rounds f32 values (convert with .float(), which rounds to f32 first)");
  }
  F32View v;
  v.shape.assign(t.shape, t.shape + t.ndim);
  if (t.strides != nullptr) {  // row-major strides (in elements), or a view mantissa does not walk
    std::int64_t expected = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (t.shape[d] != 1 && t.strides[d] != expected) {
        throw py::value_error(std::string(what) + ": a strided tensor (a transpose or a slice); pass x.contiguous()");
      }
      expected *= t.shape[d];
    }
  }
  v.data = reinterpret_cast<const float*>(static_cast<const char*>(t.data) + t.byte_offset);
  v.keep = capsule;  // the capsule's destructor hands the tensor back to its owner (we never rename it)
  return v;
}

}  // namespace

std::int64_t F32View::size() const {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

F32View f32_view(const py::handle& x, const char* what) {
  if (py::isinstance<py::array>(x)) return from_numpy(py::reinterpret_borrow<py::array>(x), what);
  if (py::hasattr(x, "__dlpack__")) return from_dlpack(x, what);
  if (x.is_none()) throw py::type_error(std::string(what) + ": None, not values");
  // A list, a tuple, a number: through NumPy, each Python float rounded to f32 first.
  py::module_ numpy = py::module_::import("numpy");
  py::object array;
  try {
    array = numpy.attr("asarray")(x, py::arg("dtype") = numpy.attr("float32"));
  } catch (py::error_already_set& e) {
    throw py::value_error(std::string(what) + ": not numbers (" + py::str(e.value()).cast<std::string>() + ")");
  }
  return from_numpy(array, what);
}

}  // namespace mantissa::python

// What Python hands mantissa and what it gets back. Values come in as f32 read in place (zero copy): a
// NumPy array through its buffer, anything else with __dlpack__ (a torch tensor, a JAX array) through
// DLPack, and Python lists through NumPy. Results go out as NumPy arrays, which torch.from_numpy() or
// torch.from_dlpack() take without a copy.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mantissa::python {

namespace py = pybind11;

// f32 values held by a Python object, read in place. `keep` keeps their memory alive as long as the view.
struct F32View {
  const float* data = nullptr;
  std::vector<std::int64_t> shape;
  py::object keep;
  std::int64_t size() const;
};
// Throws TypeError (py::type_error) for values that are not f32 (naming their type and how to convert),
// ValueError for memory mantissa cannot read in place (another device, a strided DLPack tensor). `what`
// names the argument in errors.
F32View f32_view(const py::handle& x, const char* what);

// A new NumPy array of this shape holding the values.
template <typename T>
py::array_t<T> numpy_array(const std::vector<std::int64_t>& shape, const T* values) {
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  py::array_t<T> out(dims);
  std::copy(values, values + out.size(), out.mutable_data());
  return out;
}

}  // namespace mantissa::python

// The extension module mantissa._mantissa (pybind11): number formats and recipes (formats.cpp), the
// Trainer (trainer.cpp), and mantissa's errors as Python exceptions. The package's Python side
// (python/mantissa/__init__.py) is what users import.
#include "arrays.h"
#include "mantissa/amp/loss_scaler.h"
#include "mantissa/core/input_file.h"
#include "mantissa/data/datasets.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/train/trainer.h"
#include "machine.h"

namespace mantissa::python {
void bind_formats(py::module_& m);
void bind_trainer(py::module_& m);
}  // namespace mantissa::python

PYBIND11_MODULE(_mantissa, m) {
  namespace py = pybind11;
  m.doc() = "mantissa: mixed-precision training and number formats (the C++ library's Python module)";
  m.attr("__version__") = mantissa::cli::version();
  // Bad data and bad checkpoints are bad values (ValueError), as a missing file is an OSError; a run that
  // stalled is its own error. mantissa's other errors (mantissa/base/errors.h) are mantissa.Error, a
  // RuntimeError; UsageError is a std::invalid_argument, ValueError by pybind11's own rule. (The base
  // first: pybind11 tries the translators registered last first.)
  py::register_exception<mantissa::Error>(m, "Error", PyExc_RuntimeError);
  py::register_exception<mantissa::DataError>(m, "DataError", PyExc_ValueError);
  py::register_exception<mantissa::CheckpointError>(m, "CheckpointError", PyExc_ValueError);
  py::register_exception<mantissa::InputFileError>(m, "InputFileError", PyExc_OSError);
  py::register_exception<mantissa::train::TrainingStalled>(m, "TrainingStalled", PyExc_RuntimeError);
  py::register_exception<mantissa::LossScaleCollapse>(m, "LossScaleCollapse", PyExc_RuntimeError);
  mantissa::python::bind_formats(m);
  mantissa::python::bind_trainer(m);
}

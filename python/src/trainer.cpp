// The Trainer for Python: the command's training run (cli::prepare_run) over the library's run options
// (train::RunOptions), each keyword set through the library's table of settings by its key, so that a run
// from Python is checked and built as `mantissa train` builds it, its refusals naming keywords, on files or on
// NumPy arrays, with a Python callback per step and evaluation, and its weights as NumPy arrays by
// PyTorch's names. Records are the metrics file's (records.h), handed over as JSON text for the package's
// Python side to read.

#include <optional>

#include "arrays.h"
#include "mantissa/data/datasets.h"
#include "mantissa/ops/ops.h"
#include "mantissa/train/run_options.h"
#include "records.h"
#include "suggest.h"
#include "training.h"

namespace mantissa::python {
namespace {

using namespace pybind11::literals;

// A keyword's value as its setting's kind takes it (run_options.h): a TypeError naming the keyword for
// a value of another type.
train::OptionValue option_value(const train::RunOption& row, const py::handle& v) {
  const std::string key = row.key;
  const bool is_bool = py::isinstance<py::bool_>(v);
  const auto refuse = [&](const char* what) {
    return py::type_error(key + ": " + what + ", not " + py::repr(v).cast<std::string>());
  };
  switch (row.kind) {
    case train::OptionKind::integer:  // a Python int, or any integer type (NumPy's) that says it is one (__index__)
      if (is_bool || PyIndex_Check(v.ptr()) == 0) throw refuse("an integer");
      try {
        return py::int_(py::reinterpret_borrow<py::object>(v)).cast<std::int64_t>();
      } catch (const py::cast_error&) {
        throw py::value_error(key + ": " + py::repr(v).cast<std::string>() + " is out of range");
      }
    case train::OptionKind::real:  // an int or a float, or a NumPy scalar of either
      if (is_bool || py::isinstance<py::str>(v) || !(PyIndex_Check(v.ptr()) != 0 || py::hasattr(v, "__float__"))) {
        throw refuse("a number");
      }
      return py::float_(py::reinterpret_borrow<py::object>(v)).cast<double>();
    case train::OptionKind::flag:
    case train::OptionKind::on_off:
      if (!is_bool) throw refuse("True or False");
      return v.cast<bool>();
    case train::OptionKind::text:
      if (!py::isinstance<py::str>(v)) throw refuse("a str");
      return v.cast<std::string>();
    case train::OptionKind::list: {
      if (py::isinstance<py::str>(v)) return v.cast<std::string>();  // "fc0,fc1", as the command takes it
      if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) throw refuse("a list");
      std::vector<std::string> items;
      for (const py::handle& item : v) items.push_back(py::str(item).cast<std::string>());
      return items;
    }
  }
  throw refuse("a value");
}

// The run's options from the Trainer's keywords, each set through the library's table of settings by its
// key (a keyword is a setting's name), and said in keywords when refused. telemetry: sample the numerics
// (their records go to the step callbacks rather than to a file).
train::RunOptions options_from_keywords(const py::dict& keywords, bool telemetry) {
  train::RunOptions o;
  o.spelling = train::Spelling::keywords;
  for (const auto& [k, v] : keywords) {
    const std::string key = py::str(k);
    if (v.is_none()) continue;  // the default
    const train::RunOption* row = train::find_run_option(key);
    if (row == nullptr) {
      std::vector<std::string> names;
      for (const train::RunOption& r : train::run_option_table()) names.emplace_back(r.key);
      throw UsageError(key + " is no keyword of Trainer" + cli::did_you_mean(key, names));
    }
    const train::OptionValue value = option_value(*row, v);
    if (row->kind == train::OptionKind::flag && !std::get<bool>(value)) continue;  // a switch left off
    train::set_run_option(o, key, value);
    o.given.insert(key);
  }
  train::resolve_precision(o);
  if (telemetry) o.telemetry = train::telemetry_policy(o);
  return o;
}

// A NumPy array of pixels or labels as an IDX array (the files' form), checked: `what` names it.
IdxArray idx_array(const py::handle& x, const char* what, bool labels) {
  const py::array a = py::array::ensure(x);
  if (!a) throw py::type_error(std::string(what) + ": not an array");
  IdxArray out;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) out.dims.push_back(a.shape(i));
  if (labels) {
    const char kind = a.dtype().kind();
    if (kind != 'u' && kind != 'i') throw py::type_error(std::string(what) + ": integer class labels, not " + py::str(a.dtype()).cast<std::string>());
    const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast> v(a);
    for (py::ssize_t i = 0; i < v.size(); ++i) {
      const std::int64_t label = v.data()[i];
      if (label < 0 || label > 255) {
        throw py::value_error(std::string(what) + ": label " + std::to_string(label) + " at index " + std::to_string(i) + " is not 0..255");
      }
      out.data.push_back(static_cast<std::uint8_t>(label));
    }
    return out;
  }
  if (!a.dtype().is(py::dtype::of<std::uint8_t>())) {
    throw py::type_error(std::string(what) + ": uint8 pixels 0..255 (as the MNIST files hold them), not " + py::str(a.dtype()).cast<std::string>() +
                         "; mantissa normalizes them by the training set's mean and standard deviation");
  }
  const py::array_t<std::uint8_t, py::array::c_style> v(a);
  out.data.assign(v.data(), v.data() + v.size());
  return out;
}

// The data from memory: (train_images, train_labels, test_images, test_labels) or text.
std::optional<train::Dataset> in_memory_data(const py::object& images, const py::object& text, double mean, double stddev) {
  if (!images.is_none()) {
    const py::tuple t = images;
    return train::image_dataset_in_memory(idx_array(t[0], "train_images", false), idx_array(t[1], "train_labels", true),
                                          idx_array(t[2], "test_images", false), idx_array(t[3], "test_labels", true), "arrays", mean,
                                          stddev);
  }
  if (!text.is_none()) {
    const std::string bytes = text.cast<std::string>();  // str as UTF-8, or bytes
    return train::text_dataset_in_memory({bytes.begin(), bytes.end()}, "text");
  }
  return std::nullopt;
}

// A step's record as the metrics file has it, with its telemetry ("numerics") where the step was sampled.
std::string step_record(const train::StepRecord& r) {
  nlohmann::json j = cli::step_json(r);
  for (const train::TensorNumerics& n : r.numerics) j["numerics"].push_back(nlohmann::json::parse(n.json()));
  return j.dump();
}

// The run, on the data given in memory (normalized as --normalize says) or else as the flags say.
cli::PreparedRun prepare(const train::RunOptions& c, const py::object& images, const py::object& text) {
  const auto [mean, stddev] = cli::normalization(c);
  return cli::prepare_run(c, in_memory_data(images, text, mean, stddev));
}

class Trainer {
 public:
  Trainer(const py::dict& keywords, bool telemetry, const py::object& images, const py::object& text)
      : run_(prepare(options_from_keywords(keywords, telemetry), images, text)) {}

  // Runs to the last step; callbacks get each record as JSON text. Ctrl-C stops the run after its step
  // (with a checkpoint, where there is a directory) and raises KeyboardInterrupt; an exception in a
  // callback ends the run and is raised.
  py::dict run(const py::object& on_step, const py::object& on_eval, const py::object& on_save) {
    // Ctrl-C: Python's handler notes it and the next Python code raises KeyboardInterrupt, in a callback
    // or in should_stop's check; either way it is kept, the run stops after the step, and it is raised.
    std::optional<py::error_already_set> stopped;
    const auto call = [&](const py::object& callback, auto&&... args) {
      const py::gil_scoped_acquire gil;
      try {
        callback(std::forward<decltype(args)>(args)...);
      } catch (py::error_already_set& e) {
        if (!e.matches(PyExc_KeyboardInterrupt)) throw;
        if (!stopped) stopped.emplace(std::move(e));
      }
    };
    cli::TrainCallbacks cb;
    if (!on_step.is_none()) cb.on_step = [&](const train::StepRecord& r, std::int64_t) { call(on_step, step_record(r)); };
    if (!on_eval.is_none()) cb.on_eval = [&](const train::EvalRecord& r) { call(on_eval, cli::eval_json(r).dump()); };
    if (!on_save.is_none()) cb.on_save = [&](const std::filesystem::path& path, std::int64_t step) { call(on_save, path.string(), step); };
    cb.should_stop = [&] {
      const py::gil_scoped_acquire gil;
      if (!stopped && PyErr_CheckSignals() != 0) stopped.emplace();
      return stopped.has_value();
    };
    train::TrainResult result;
    {
      const py::gil_scoped_release free;
      result = cli::run(run_, cb, {}, /*catch_signals=*/false);
    }
    if (stopped) throw std::move(*stopped);
    py::list steps, evals;
    for (const train::StepRecord& r : result.steps) steps.append(step_record(r));
    for (const train::EvalRecord& r : result.evals) evals.append(cli::eval_json(r).dump());
    return py::dict("steps"_a = steps, "evals"_a = evals, "wall_seconds"_a = result.wall_seconds,
                    "skipped_steps"_a = result.skipped_steps, "peak_bytes"_a = cli::peak_json(result.peak_bytes).dump(),
                    "throughput_unit"_a = result.throughput_unit, "warnings"_a = result.warnings);
  }

  std::string step() {
    train::StepRecord r;
    {
      const py::gil_scoped_release free;
      r = run_.trainer->step();
    }
    return step_record(r);
  }

  std::string evaluate(bool full) {
    train::EvalRecord r;
    {
      const py::gil_scoped_release free;
      r = run_.trainer->evaluate(full);
    }
    return cli::eval_json(r).dump();
  }

  // name -> f32 NumPy array (copies), the master weights where the parameters are bf16/f16.
  py::dict state_dict() const {
    py::dict out;
    for (const auto& [name, t] : run_.trainer->weights()) {
      const std::vector<std::int64_t>& shape = t.shape();
      out[py::str(name)] = numpy_array<float>(shape, t.data_as<float>());
    }
    return out;
  }

  void load_state_dict(const py::dict& state) {
    std::vector<std::pair<std::string, Tensor>> weights;
    for (const auto& [key, value] : state) {
      const std::string name = py::str(key);
      const F32View v = f32_view(value, ("state_dict['" + name + "']").c_str());
      Tensor t = Tensor::empty(v.shape, DType::f32);
      std::copy(v.data, v.data + v.size(), t.data_as<float>());
      weights.emplace_back(name, t);
    }
    run_.trainer->set_weights(weights, "load_state_dict");
  }

  void save(const std::filesystem::path& path) const { run_.trainer->save(path); }

  std::int64_t next_step() const { return run_.trainer->next_step(); }
  std::int64_t steps() const { return run_.trainer->options().steps; }
  double loss_scale() { return run_.trainer->scaler().scale(); }
  std::string precision_plan() const { return run_.trainer->precision_plan().str(true); }
  std::string precision_plan_json() const { return run_.trainer->precision_plan().json(); }
  std::string data_summary() const { return run_.data_summary; }
  std::string normalization() const { return run_.normalization; }

 private:
  cli::PreparedRun run_;
};

// A --telemetry file's records, as dicts.
py::list read_telemetry(const std::filesystem::path& path) {
  py::module_ json = py::module_::import("json");
  py::list out;
  for (const train::TensorNumerics& n : cli::read_telemetry(path.string())) out.append(json.attr("loads")(n.json()));
  return out;
}

}  // namespace

void bind_trainer(py::module_& m) {
  m.def("read_telemetry", &read_telemetry, "path"_a, "The records of a --telemetry file (or Trainer's), as dicts.");
  m.def(
      "_run_options",
      [] {
        py::dict out;
        constexpr const char* kKinds[] = {"integer", "real", "flag", "on_off", "text", "list"};
        for (const train::RunOption& row : train::run_option_table()) out[py::str(row.key)] = kKinds[static_cast<int>(row.kind)];
        return out;
      },
      "Trainer's keywords, the library's run settings, each with its kind (tests).");
  py::class_<Trainer>(m, "_Trainer")
      .def(py::init<const py::dict&, bool, const py::object&, const py::object&>(), "keywords"_a, "telemetry"_a,
           "images"_a, "text"_a)
      .def("run", &Trainer::run, "on_step"_a, "on_eval"_a, "on_save"_a)
      .def("step", &Trainer::step)
      .def("evaluate", &Trainer::evaluate, "full"_a)
      .def("state_dict", &Trainer::state_dict)
      .def("load_state_dict", &Trainer::load_state_dict, "state"_a)
      .def("save", &Trainer::save, "path"_a)
      .def_property_readonly("next_step", &Trainer::next_step)
      .def_property_readonly("steps", &Trainer::steps)
      .def_property_readonly("loss_scale", &Trainer::loss_scale)
      .def_property_readonly("precision_plan", &Trainer::precision_plan)
      .def_property_readonly("precision_plan_json", &Trainer::precision_plan_json)
      .def_property_readonly("data_summary", &Trainer::data_summary)
      .def_property_readonly("normalization", &Trainer::normalization);
}

}  // namespace mantissa::python

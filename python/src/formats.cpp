// Number formats and block-scaled recipes for Python: cast, encode and decode arrays in any format the
// command's `cast` takes (bit for bit the same: one library call, the same counter per element), and
// quantize them by the recipes training uses (the recipe table's, or a spec of one's own).
#include <optional>
#include <type_traits>
#include <string>

#include "arrays.h"
#include "mantissa/numeric/bulk.h"
#include "mantissa/numeric/convert.h"
#include "mantissa/numeric/format.h"
#include "mantissa/numeric/microscale.h"
#include "mantissa/numeric/recipes.h"

namespace mantissa::python {
namespace {

using namespace pybind11::literals;

CastOptions cast_options(const std::string& rounding, bool saturate, std::uint64_t seed) {
  return {parse_rounding(rounding), saturate, seed};
}

// The codes of n values of `format`, one unsigned integer each, in its storage width.
py::array encode_values(Format format, const F32View& x, const CastOptions& options) {
  const std::vector<py::ssize_t> dims(x.shape.begin(), x.shape.end());
  py::array out = format.storage_bytes() == 1   ? py::array(py::array_t<std::uint8_t>(dims))
                  : format.storage_bytes() == 2 ? py::array(py::array_t<std::uint16_t>(dims))
                                                : py::array(py::array_t<std::uint32_t>(dims));
  void* dst = out.mutable_data();
  {
    py::gil_scoped_release free;
    encode_array(format, x.data, dst, static_cast<std::size_t>(x.size()), options);
  }
  return out;
}

// The f32 values of codes held in the format's storage width (encode_values' arrays).
py::array_t<float> decode_storage(Format format, const void* codes, const std::vector<py::ssize_t>& dims) {
  py::array_t<float> out(dims);
  float* dst = out.mutable_data();
  const auto n = static_cast<std::size_t>(out.size());
  py::gil_scoped_release free;
  decode_array(format, codes, dst, n);
  return out;
}

// An integer array's values as codes of `format`'s bits, each checked to fit (`what` names the caller).
std::vector<std::uint32_t> checked_codes(const py::array& codes, Format format, const char* what) {
  const int bits = format.bits();
  const char kind = codes.dtype().kind();
  if (kind != 'u' && kind != 'i') {
    throw py::type_error(std::string(what) + ": codes are integers, not " + py::str(codes.dtype()).cast<std::string>());
  }
  const std::uint64_t limit = std::uint64_t{1} << bits;
  std::vector<std::uint32_t> out(static_cast<std::size_t>(codes.size()));
  const auto check = [&](auto values, auto show) {
    for (py::ssize_t i = 0; i < values.size(); ++i) {
      const auto c = values.data()[i];
      bool negative = false;
      if constexpr (std::is_signed_v<std::remove_const_t<decltype(c)>>) negative = c < 0;
      if (negative || static_cast<std::uint64_t>(c) >= limit) {
        throw py::value_error(std::string(what) + ": code " + std::to_string(show(c)) + " at flat index " + std::to_string(i) + " does not fit " +
                              format.name() + "'s " + std::to_string(bits) + " bits");
      }
      out[static_cast<std::size_t>(i)] = static_cast<std::uint32_t>(c);
    }
  };
  if (kind == 'u') {  // unsigned: read as such, so that 2^63 and above are shown as they are
    check(py::array_t<std::uint64_t, py::array::c_style | py::array::forcecast>(codes), [](std::uint64_t c) { return c; });
  } else {
    check(py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>(codes), [](std::int64_t c) { return c; });
  }
  return out;
}

// Codes of any integer array, each checked to fit the format.
py::array_t<float> decode_codes(Format format, const py::array& codes) {
  const std::vector<std::uint32_t> bits = checked_codes(codes, format, "decode");
  const std::vector<py::ssize_t> dims(codes.shape(), codes.shape() + codes.ndim());
  py::array_t<float> out(dims);
  float* dst = out.mutable_data();
  for (std::size_t i = 0; i < bits.size(); ++i) dst[i] = decode(format, bits[i]);
  return out;
}

// A quantized tensor as Python sees it: [rows, cols] codes, the block scales' codes, the tensor scale, and
// how the values fared.
struct Quantized {
  QuantSpec spec;
  std::int64_t rows = 0, cols = 0;
  std::vector<std::int64_t> shape;  // the input's
  QuantizedBlocks q;
};

// The spec: a recipe by name or a spec in QuantSpec::str's words ("e4m3 1x32 e8m0 rceil nearest"), with
// any of its values replaced.
QuantSpec make_spec(const std::string& recipe, const std::optional<std::string>& element,
                    const std::optional<std::pair<std::int64_t, std::int64_t>>& block, const std::optional<std::string>& scale,
                    const std::optional<std::string>& rule, const std::optional<std::string>& rounding) {
  QuantSpec s = recipe.find(' ') != std::string::npos ? QuantSpec::parse(recipe) : quant_spec(recipe);
  if (element) s.element = Format::parse(*element);
  if (block) std::tie(s.block_rows, s.block_cols) = *block;
  if (scale) {
    if (*scale == "e8m0") s.scale = ScaleFormat::e8m0;
    else if (*scale == "e4m3") s.scale = ScaleFormat::e4m3;
    else throw std::invalid_argument("quantize: scale '" + *scale + "' is not e8m0 or e4m3");
  }
  if (rule) s.rule = parse_scale_rule(*rule);
  if (rounding) s.rounding = parse_rounding(*rounding);
  s.check();
  return s;
}

}  // namespace

void bind_formats(py::module_& m) {
  m.def("formats", [] {
    py::list names;
    for (const Format& f : named_formats()) names.append(f.name());
    return names;
  }, "The formats with well-known names (any eXmY is taken too).");

  m.def("recipes", [] {
    py::list out;
    for (const QuantRecipe r : QuantRecipe::all()) {
      const RecipeInfo& i = r.info();
      py::dict d("name"_a = std::string(i.name), "summary"_a = std::string(i.summary), "microscaled"_a = i.microscaled(),
                 "precision"_a = i.microscaled());  // (a microscaled recipe's name is also a precision)
      if (i.microscaled()) {
        d["forward"] = i.forward.name();
        d["gradient"] = i.gradient.name();
        d["block"] = i.block;
        d["scale"] = i.scale == ScaleFormat::e8m0 ? "e8m0" : "e4m3";  // (f32 scales are FP8's per-tensor ones)
      }
      out.append(d);
    }
    return out;
  }, "The quantization recipes of the products, as `mantissa formats` lists them: name, summary, and for a "
     "microscaled one (also a precision name) its elements (forward operands, output gradient), block and scale format.");

  m.def("format_info", [](const std::string& name) {
    const FormatTraits t = traits(Format::parse(name));
    return py::dict("name"_a = t.name, "bits"_a = t.bits, "exp_bits"_a = t.exp_bits, "man_bits"_a = t.man_bits, "bias"_a = t.bias,
                    "max_finite"_a = t.max_finite, "min_normal"_a = t.min_normal, "min_subnormal"_a = t.min_subnormal,
                    "epsilon"_a = t.epsilon, "has_inf"_a = t.has_inf, "nan_encoding"_a = t.nan_encoding);
  }, "format"_a, "A format's properties, as `mantissa formats` prints them.");

  m.def("encode", [](const py::handle& x, const std::string& format, const std::string& rounding, bool saturate, std::uint64_t seed) {
    const F32View v = f32_view(x, "encode");
    return encode_values(Format::parse(format), v, cast_options(rounding, saturate, seed));
  }, "x"_a, "format"_a, py::kw_only(), "rounding"_a = "nearest", "saturate"_a = false, "seed"_a = 0,
        "f32 values rounded into `format`, as its bit patterns (uint8, uint16 or uint32: the format's storage).");

  m.def("decode", [](const py::array& codes, const std::string& format) { return decode_codes(Format::parse(format), codes); },
        "codes"_a, "format"_a, "The f32 values of a format's bit patterns.");

  m.def("cast", [](const py::handle& x, const std::string& format, const std::string& rounding, bool saturate, std::uint64_t seed) {
    const Format f = Format::parse(format);
    const F32View v = f32_view(x, "cast");
    const py::array codes = encode_values(f, v, cast_options(rounding, saturate, seed));
    return decode_storage(f, codes.data(), {codes.shape(), codes.shape() + codes.ndim()});
  }, "x"_a, "format"_a, py::kw_only(), "rounding"_a = "nearest", "saturate"_a = false, "seed"_a = 0,
        "f32 values rounded into `format` and back: the values `mantissa cast` prints.");

  py::class_<Quantized>(m, "Quantized", "A tensor quantized by a block-scaled recipe (mantissa.quantize).")
      .def_property_readonly("spec", [](const Quantized& q) { return q.spec.str(); })
      .def_property_readonly("codes", [](const Quantized& q) { return numpy_array<std::uint8_t>({q.rows, q.cols}, q.q.codes.data()); },
                             "The elements' codes, [rows, cols] (the input as 2-D: its last dimension the columns).")
      .def_property_readonly("scales", [](const Quantized& q) {
        const std::int64_t br = (q.rows + q.spec.block_rows - 1) / q.spec.block_rows, bc = (q.cols + q.spec.block_cols - 1) / q.spec.block_cols;
        return numpy_array<std::uint8_t>({br, bc}, q.q.scale_codes.data());
      }, "The block scales' codes (E8M0 or E4M3), one per block, row-major.")
      .def_property_readonly("tensor_scale", [](const Quantized& q) { return q.q.tensor_scale; })
      .def_property_readonly("saturated", [](const Quantized& q) { return q.q.saturated; })
      .def_property_readonly("underflowed", [](const Quantized& q) { return q.q.underflowed; })
      .def_property_readonly("amax", [](const Quantized& q) { return q.q.amax; })
      .def("values", [](const Quantized& q, bool with_tensor_scale) {
        const std::vector<float> v = dequantize_blocks(q.q, q.rows, q.cols, q.spec, with_tensor_scale);
        return numpy_array<float>(q.shape, v.data());
      }, py::kw_only(), "with_tensor_scale"_a = true, "The values the codes stand for, in the input's shape.")
      .def("__repr__", [](const Quantized& q) {
        return "<mantissa.Quantized " + std::to_string(q.rows) + "x" + std::to_string(q.cols) + " " + q.spec.str() + ">";
      });

  m.def("quantize", [](const py::handle& x, const std::string& recipe, std::uint64_t seed, const std::optional<std::string>& element,
                       const std::optional<std::pair<std::int64_t, std::int64_t>>& block, const std::optional<std::string>& scale,
                       const std::optional<std::string>& rule, const std::optional<std::string>& rounding) {
    Quantized out;
    out.spec = make_spec(recipe, element, block, scale, rule, rounding);
    const F32View v = f32_view(x, "quantize");
    if (v.shape.empty()) throw py::value_error("quantize: a scalar; give an array (1-D or more)");
    out.shape = v.shape;
    out.cols = v.shape.back();
    out.rows = out.cols == 0 ? 0 : v.size() / out.cols;
    {
      py::gil_scoped_release free;
      out.q = quantize_blocks({v.data, static_cast<std::size_t>(v.size())}, out.rows, out.cols, out.spec, seed);
    }
    return out;
  }, "x"_a, "recipe"_a = "mxfp8", py::kw_only(), "seed"_a = 0, "element"_a = py::none(), "block"_a = py::none(),
        "scale"_a = py::none(), "rule"_a = py::none(), "rounding"_a = py::none(),
        "x quantized by a microscaled recipe (a name of recipes() such as mxfp8 or nvfp4; an E8M0 one with -rceil), any of its values replaced: element format, "
        "block (rows, cols), scale (e8m0, e4m3), rule (floor, even, rceil; for e4m3 scales floor, torchao's, or te, Transformer Engine's), rounding (nearest, stochastic). The "
        "last dimension is the columns, the others the rows. Stochastic rounding draws element i's bits from (seed, i).");

  m.def("pack_fp4", [](const py::array& codes) {
    const std::vector<std::uint32_t> wide = checked_codes(codes, Format::e2m1(), "pack_fp4");
    const std::vector<std::uint8_t> narrow(wide.begin(), wide.end());
    const std::vector<std::uint8_t> packed = pack_fp4(narrow);
    return numpy_array<std::uint8_t>({static_cast<std::int64_t>(packed.size())}, packed.data());
  }, "codes"_a, "E2M1 codes two a byte, the first in the low nibble (PyTorch's float4_e2m1fn_x2).");
  m.def("unpack_fp4", [](const py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>& packed, std::size_t count) {
    const std::vector<std::uint8_t> codes = unpack_fp4({packed.data(), static_cast<std::size_t>(packed.size())}, count);
    return numpy_array<std::uint8_t>({static_cast<std::int64_t>(codes.size())}, codes.data());
  }, "packed"_a, "count"_a, "`count` E2M1 codes from bytes of two.");

  m.def("isa", [] { return std::string(isa_name(active_isa())); },
        "The instruction set the bulk conversions use on this CPU (MANTISSA_ISA caps it).");
}

}  // namespace mantissa::python

// NumPy's .npy files (numpy.save) as data: images and labels for those whose data lives in NumPy. The
// format is a magic string, a version, a header that is a Python dict literal ({'descr': '|u1',
// 'fortran_order': False, 'shape': (60000, 28, 28), }) and the raw array. mantissa reads what image sets
// hold: unsigned bytes, and integer labels of any width (each must be 0..255), little-endian, C order.
// read_array() is the one door for array files: IDX (gzipped or not) or .npy, by their first bytes.
#include <cstring>
#include <string>
#include <utility>
#include <string_view>

#include "array_file.h"
#include "mantissa/core/input_file.h"
#include "mantissa/data/datasets.h"
#include "mantissa/numeric/parse_number.h"

namespace mantissa {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw DataError(path.string() + ": " + what);
}

// The header dict's fields mantissa needs.
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
};

// Reads the dict literal numpy writes: quoted keys, a quoted string, True/False, a tuple of integers.
NpyHeader parse_header(std::string_view h, const std::filesystem::path& path) {
  const auto bad = [&](const std::string& what) { fail(path, "not a .npy header numpy writes (" + what + ")"); };
  std::size_t i = 0;
  const auto skip = [&] {
    while (i < h.size() && (h[i] == ' ' || h[i] == '\n' || h[i] == '\t')) ++i;
  };
  const auto expect = [&](char c) {
    skip();
    if (i >= h.size() || h[i] != c) bad(std::string("expected '") + c + "'");
    ++i;
  };
  const auto quoted = [&] {
    skip();
    if (i >= h.size() || (h[i] != '\'' && h[i] != '"')) bad("expected a quoted name");
    const char q = h[i++];
    const std::size_t end = h.find(q, i);
    if (end == std::string_view::npos) bad("an unclosed quote");
    const std::string s(h.substr(i, end - i));
    i = end + 1;
    return s;
  };
  NpyHeader out;
  bool has_descr = false, has_shape = false;
  expect('{');
  for (skip(); i < h.size() && h[i] != '}'; skip()) {
    const std::string key = quoted();
    expect(':');
    skip();
    if (key == "descr") {
      out.descr = quoted();
      has_descr = true;
    } else if (key == "fortran_order") {
      if (h.substr(i, 4) == "True") out.fortran_order = true, i += 4;
      else if (h.substr(i, 5) == "False") i += 5;
      else bad("fortran_order is neither True nor False");
    } else if (key == "shape") {
      expect('(');
      for (skip(); i < h.size() && h[i] != ')'; skip()) {
        std::size_t end = i;
        while (end < h.size() && h[end] >= '0' && h[end] <= '9') ++end;
        if (end == i) bad("a dimension that is not a number");
        out.shape.push_back(parse_number<std::int64_t>(h.substr(i, end - i), "a .npy dimension"));
        i = end;
        skip();
        if (i < h.size() && h[i] == ',') ++i;
      }
      expect(')');
      has_shape = true;
    } else {
      bad("the key '" + key + "'");
    }
    skip();
    if (i < h.size() && h[i] == ',') ++i;
  }
  expect('}');
  if (!has_descr || !has_shape) bad("no descr or shape");
  return out;
}

}  // namespace

IdxArray read_npy(const std::filesystem::path& path) try {
  return detail::read_npy(detail::open_array_file(path, "a NumPy .npy file"));
} catch (...) {
  rethrow_as<DataError>(path.string());
}

IdxArray detail::read_npy(InputFile&& in) {
  const std::filesystem::path path = in.path();
  std::vector<std::uint8_t> bytes;
  try {
    bytes = in.read_all();
  } catch (const InputFileError& e) {
    throw DataError(e.what());
  }
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) fail(path, "not a .npy file (bad magic string)");
  const int major = bytes[6];
  if (major < 1 || major > 3) fail(path, ".npy format version " + std::to_string(major) + " is not 1, 2 or 3");
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + length_bytes) fail(path, "truncated in the header");
  std::size_t header_len = 0;
  for (std::size_t b = 0; b < length_bytes; ++b) header_len |= std::size_t{bytes[8 + b]} << (8 * b);
  const std::size_t data_start = 8 + length_bytes + header_len;
  if (data_start > bytes.size()) fail(path, "truncated in the header");
  const NpyHeader h = parse_header({reinterpret_cast<const char*>(bytes.data()) + 8 + length_bytes, header_len}, path);
  if (h.fortran_order) fail(path, "in Fortran order: save it with numpy.save(path, numpy.ascontiguousarray(a))");
  // Unsigned bytes, or integers of any width in little-endian order ('|u1', '<i8', ...).
  const std::string& d = h.descr;
  const bool little = d.size() == 3 && (d[0] == '<' || d[0] == '|');
  const int width = little ? d[2] - '0' : 0;
  if (!little || (d[1] != 'u' && d[1] != 'i') || (width != 1 && width != 2 && width != 4 && width != 8)) {
    fail(path, "elements of type '" + d + "': mantissa reads pixels and labels as integers 0..255 (save images as uint8)");
  }
  if (h.shape.empty() || h.shape.size() > 4) fail(path, std::to_string(h.shape.size()) + " dimensions (1 to 4: labels [N], images [N, H, W] or [N, C, H, W])");
  IdxArray a;
  std::uint64_t count = 1;
  for (const std::int64_t n : h.shape) {
    if (n <= 0 || n > (std::int64_t{1} << 31)) fail(path, "a dimension of " + std::to_string(n));
    if (static_cast<std::uint64_t>(n) > (std::uint64_t{1} << 34) / count) fail(path, "the array would be larger than 16 GiB");
    count *= static_cast<std::uint64_t>(n);
    a.dims.push_back(n);
  }
  if (bytes.size() - data_start != count * static_cast<std::uint64_t>(width)) {
    fail(path, "holds " + std::to_string(bytes.size() - data_start) + " bytes of data where its shape needs " +
                   std::to_string(count * static_cast<std::uint64_t>(width)));
  }
  a.data.resize(count);
  const std::uint8_t* p = bytes.data() + data_start;
  for (std::uint64_t k = 0; k < count; ++k, p += width) {
    std::uint64_t v = 0;
    for (int b = 0; b < width; ++b) v |= std::uint64_t{p[b]} << (8 * b);
    const bool negative = d[1] == 'i' && (p[width - 1] & 0x80) != 0;
    if (negative || v > 255) {
      const long long shown = negative ? static_cast<long long>(v | (width < 8 ? ~std::uint64_t{0} << (8 * width) : 0)) : static_cast<long long>(v);
      fail(path, "value " + std::to_string(shown) + " at flat index " + std::to_string(k) + " is not 0..255");
    }
    a.data[k] = static_cast<std::uint8_t>(v);
  }
  return a;
}

IdxArray read_array(const std::filesystem::path& path) try {
  InputFile in = detail::open_array_file(path, "an array file");
  // Its first bytes, read where they lie (the reader then starts at the beginning): a file too short
  // for them is no .npy file, and read_idx says what it lacks.
  char head[6] = {};
  try {
    if (in.size() >= sizeof head) in.read_exactly_at(0, head, sizeof head, "the first bytes");
  } catch (const InputFileError& e) {
    throw DataError(e.what());
  }
  if (std::memcmp(head, kMagic.data(), kMagic.size()) == 0) return detail::read_npy(std::move(in));
  return detail::read_idx(std::move(in));
} catch (...) {
  rethrow_as<DataError>(path.string());
}

}  // namespace mantissa

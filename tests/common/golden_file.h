// A committed golden file of tests/golden/ (safetensors, as the makers there write it) read for the
// tests: its header, and a tensor's bytes as a vector of T. Read once per file and kept.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace mantissa::testing {

struct GoldenFile {
  nlohmann::json header;
  std::vector<char> bytes;
  std::size_t data_start = 0;

  // `name` under tests/golden/ of the source tree.
  explicit GoldenFile(const std::string& name) {
    const auto path = std::filesystem::path(MANTISSA_SOURCE_DIR) / "tests" / "golden" / name;
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
    if (bytes.size() < 8) throw std::runtime_error(path.string() + ": not a golden file");
    std::uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
    data_start = 8 + n;
  }
  bool has(const std::string& key) const { return header.contains(key); }
  template <class T>
  std::vector<T> get(const std::string& key) const {
    const auto& e = header.at(key);
    const std::size_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    std::vector<T> out((end - begin) / sizeof(T));
    std::memcpy(out.data(), bytes.data() + data_start + begin, end - begin);
    return out;
  }
};

}  // namespace mantissa::testing

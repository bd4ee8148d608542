// safetensors: round trips in every dtype, a file read back by an independent Python reader, and each
// kind of damaged file refused with one line naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "mantissa/io/safetensors.h"

namespace mantissa {
namespace {

namespace fs = std::filesystem;

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("mantissa_st_test_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
};

std::vector<std::pair<std::string, Tensor>> sample() {
  return {{"a", Tensor::from_values({0, 1, 2, 3, 4, 5}, {2, 3}, DType::f32)},
          {"b", Tensor::from_values({0, 1.5, 3, 4.5}, {4}, DType::bf16)},
          {"c", Tensor::from_values({0, -0.25, -0.5}, {3}, DType::f16)},
          {"d", Tensor::from_values({std::numbers::pi}, {1}, DType::f64)}};
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  Scratch s;
  const fs::path p = s.dir / "x.safetensors";
  auto tensors = sample();
  tensors.emplace_back("e", Tensor::from_values({1, -2, 448}, {3}, DType::e4m3));
  tensors.emplace_back("f", Tensor::from_values({0.5, 57344}, {2}, DType::e5m2));
  write_safetensors(p, tensors, {{"step", "7"}, {"config", "{\"model\":\"mlp\"}"}});
  EXPECT_FALSE(fs::exists(p.string() + ".tmp"));
  const Safetensors r = read_safetensors(p);
  ASSERT_EQ(r.tensors.size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(r.tensors[i].first, tensors[i].first);
    EXPECT_EQ(r.tensors[i].second.dtype(), tensors[i].second.dtype());
    EXPECT_EQ(r.tensors[i].second.shape(), tensors[i].second.shape());
    EXPECT_EQ(r.tensors[i].second.to_doubles(), tensors[i].second.to_doubles());
  }
  EXPECT_EQ(r.metadata.at("step"), "7");
  EXPECT_EQ(r.metadata.at("config"), "{\"model\":\"mlp\"}");
}

TEST(Safetensors, AnIndependentReaderSeesTheSameNamesShapesDtypesAndValues) {
  Scratch s;
  const fs::path p = s.dir / "py.safetensors";
  write_safetensors(p, sample(), {{"step", "7"}});
  const std::string cmd = std::string("python3 ") + MANTISSA_SOURCE_DIR + "/tests/io/read_safetensors.py " + p.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(Safetensors, DamagedFilesAreRefusedNamingTheFile) {
  Scratch s;
  const fs::path p = s.dir / "good.safetensors";
  write_safetensors(p, sample());
  const auto expect_refused = [](const fs::path& bad, const std::string& fragment) {
    try {
      read_safetensors(bad);
      FAIL() << bad;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  fs::copy_file(p, s.dir / "trunc.safetensors");
  fs::resize_file(s.dir / "trunc.safetensors", fs::file_size(p) - 3);
  expect_refused(s.dir / "trunc.safetensors", "truncated");
  std::ofstream(s.dir / "tiny.safetensors", std::ios::binary) << "abc";
  expect_refused(s.dir / "tiny.safetensors", "header length");
  {
    std::ofstream f(s.dir / "json.safetensors", std::ios::binary);
    const char n[8] = {4, 0, 0, 0, 0, 0, 0, 0};
    f.write(n, 8);
    f << "{oop";
  }
  expect_refused(s.dir / "json.safetensors", "not valid JSON");
  expect_refused(s.dir / "absent.safetensors", "cannot open");
  // Crafted headers: a shape whose element count wraps (2^62 + 1 elements over 4 bytes of data), two
  // tensors over the same bytes, and a path that is not a regular file.
  const auto crafted = [&](const char* name, const std::string& header, std::size_t data_bytes) {
    std::ofstream f(s.dir / name, std::ios::binary);
    char n[8] = {};
    for (int i = 0; i < 8; ++i) n[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    f.write(n, 8);
    f << header << std::string(data_bytes, '\0');
    return s.dir / name;
  };
  expect_refused(crafted("wrap.safetensors",
                         R"({"w":{"dtype":"F32","shape":[4611686018427387905,4],"data_offsets":[0,4]}})", 4),
                 "shape larger than the file");
  expect_refused(crafted("overlap.safetensors",
                         R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         12),
                 "overlaps");
  expect_refused("/dev/zero", "not a regular file");
  // A failed write (a bad name) leaves an existing file as it was.
  const auto before = fs::file_size(p);
  EXPECT_THROW(write_safetensors(p, {{"", sample()[0].second}}), CheckpointError);
  EXPECT_EQ(fs::file_size(p), before);
  EXPECT_NO_THROW(read_safetensors(p));
}

}  // namespace
}  // namespace mantissa

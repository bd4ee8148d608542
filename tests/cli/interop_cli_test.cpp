// PyTorch interop from the command line: a checkpoint exported as a state_dict (PyTorch's names, fp32 or
// bf16) starts another run with --init-from and comes back bit for bit; a state_dict that does not fit
// the model is refused in one line naming the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "mantissa/io/safetensors.h"

namespace {

// A safetensors file written byte by byte (an I64 tensor mantissa's writer has no dtype for), from
// (name, dtype, shape, raw bytes).
void write_raw_safetensors(const std::string& path, const std::vector<std::tuple<std::string, std::string, std::vector<int>, std::string>>& ts) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  for (const auto& [name, dtype, shape, bytes] : ts) {
    header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data += bytes;
  }
  const std::string h = header.dump();
  std::string out(8, '\0');
  const std::uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  std::ofstream(path, std::ios::binary) << out << h << data;
}

TEST(Interop, ExportedWeightsStartARunAndComeBackBitForBit) {
  Scratch s;
  const std::string mlp = "train --model mlp --hidden 32 --batch-size 32 ";
  ASSERT_EQ(run(mlp + "--steps 5 --eval-every 5 --checkpoint-dir " + s.path("a")).status, 0);
  const Result e = run("export " + s.path("a") + "/ckpt-00000005.safetensors --to pytorch " + s.path("w.safetensors"));
  ASSERT_EQ(e.status, 0) << e.err;
  EXPECT_NE(e.out.find("6 tensors"), std::string::npos) << e.out;
  const mantissa::Safetensors w = mantissa::read_safetensors(s.path("w.safetensors"));
  EXPECT_EQ(w.metadata.at("format"), "pt");
  ASSERT_NE(w.find("fc0.weight"), nullptr);  // PyTorch's names: no "model/" prefix, no optimizer state
  EXPECT_EQ(w.find("model/fc0.weight"), nullptr);
  EXPECT_EQ(w.find("fc0.weight")->dtype(), mantissa::DType::f32);
  // A learning rate too small to move an f32 weight: the run's checkpoint holds the weights it started from.
  const Result b = run(mlp + "--steps 1 --eval-every 1 --lr 1e-30 --init-from " + s.path("w.safetensors") + " --checkpoint-dir " + s.path("b"));
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_NE(b.err.find("weights from " + s.path("w.safetensors")), std::string::npos) << b.err;
  ASSERT_EQ(run("export " + s.path("b") + "/ckpt-00000001.safetensors " + s.path("back.safetensors")).status, 0);
  const mantissa::Safetensors back = mantissa::read_safetensors(s.path("back.safetensors"));
  ASSERT_EQ(back.tensors.size(), w.tensors.size());
  for (const auto& [name, t] : w.tensors) {
    const mantissa::Tensor* u = back.find(name);
    ASSERT_NE(u, nullptr) << name;
    EXPECT_EQ(u->to_doubles(), t.to_doubles()) << name;
  }
  const Result bf16 = run("export " + s.path("a") + "/ckpt-00000005.safetensors " + s.path("h.safetensors") + " --dtype bf16");
  ASSERT_EQ(bf16.status, 0) << bf16.err;
  EXPECT_EQ(mantissa::read_safetensors(s.path("h.safetensors")).find("fc1.weight")->dtype(), mantissa::DType::bf16);
  expect_refused("export " + s.path("w.safetensors") + " " + s.path("x.safetensors"), {"not a mantissa checkpoint"});
  expect_refused("export " + s.path("a") + "/ckpt-00000005.safetensors " + s.path("x.safetensors") + " --to onnx", {"--to"});
}

TEST(Interop, AStateDictThatDoesNotFitIsRefusedNamingTheTensor) {
  Scratch s;
  ASSERT_EQ(run("train --model mlp --hidden 32 --steps 1 --eval-every 1 --batch-size 32 --checkpoint-dir " + s.path("a")).status, 0);
  ASSERT_EQ(run("export " + s.path("a") + "/ckpt-00000001.safetensors " + s.path("w.safetensors")).status, 0);
  const std::string start = "train --model mlp --steps 1 --batch-size 32 --init-from ";
  expect_refused("train --model mlp --hidden 64 --steps 1 --init-from " + s.path("w.safetensors"),
                 {"'fc0.weight' has shape [32, 784], the model's [64, 784]"});
  // Missing, extra, and of a dtype no model tensor has; PyTorch's num_batches_tracked (I64) is passed over.
  const mantissa::Safetensors w = mantissa::read_safetensors(s.path("w.safetensors"));
  auto fewer = w.tensors;
  fewer.pop_back();
  mantissa::write_safetensors(s.path("fewer.safetensors"), fewer);
  expect_refused(start + s.path("fewer.safetensors") + " --hidden 32", {"has no tensor 'fc2.bias' (the model's [10])"});
  auto more = w.tensors;
  more.emplace_back("fc9.weight", w.tensors.front().second);
  mantissa::write_safetensors(s.path("more.safetensors"), more);
  expect_refused(start + s.path("more.safetensors") + " --hidden 32", {"'fc9.weight' is no parameter or buffer of this model"});
  std::vector<std::tuple<std::string, std::string, std::vector<int>, std::string>> raw;
  for (const auto& [name, t] : w.tensors) {
    const std::vector<double> v = t.to_doubles();
    std::string bytes;
    for (const double x : v) {
      const auto f = static_cast<float>(x);
      bytes.append(reinterpret_cast<const char*>(&f), 4);
    }
    std::vector<int> shape(t.shape().begin(), t.shape().end());
    raw.emplace_back(name, "F32", shape, bytes);
  }
  raw.emplace_back("bn.num_batches_tracked", "I64", std::vector<int>{}, std::string(8, '\0'));
  write_raw_safetensors(s.path("tracked.safetensors"), raw);
  EXPECT_EQ(run(start + s.path("tracked.safetensors") + " --hidden 32 --eval-every 1").status, 0);
  std::get<1>(raw.front()) = "I64";
  std::get<3>(raw.front()) += std::get<3>(raw.front());
  write_raw_safetensors(s.path("i64.safetensors"), raw);
  expect_refused(start + s.path("i64.safetensors") + " --hidden 32", {"is I64, which no tensor of mantissa's models is"});
  expect_refused("train --model mlp --steps 2 --init-from " + s.path("w.safetensors") + " --checkpoint-dir " + s.path("a") + " --resume",
                 {"--init-from"});
}

}  // namespace

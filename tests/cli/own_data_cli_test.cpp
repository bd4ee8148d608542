// A user's own data from the command line: image sets under the other usual names, with their own pixel
// statistics (computed from the training set, printed, kept in the checkpoint), and text models given
// gzipped text (read as text) or binary data (one line, not a run on bytes).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cli_support.h"

namespace {

// The mean and standard deviation of pixel / 255 over an uncompressed [N, H, W] IDX file's pixels.
std::pair<double, double> pixel_statistics(const std::string& path) {
  const std::string bytes = slurp(path).substr(16);
  double sum = 0, squares = 0;
  for (const char ch : bytes) {
    const double x = static_cast<unsigned char>(ch) / 255.0;
    sum += x;
    squares += x * x;
  }
  const double n = static_cast<double>(bytes.size()), mean = sum / n;
  return {mean, std::sqrt(squares / n - mean * mean)};
}

// How the run states a normalization: rounded to 4 decimals.
std::string fmt_said(double mean, double stddev) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "normalized by the training set's mean %.4f and std %.4f", std::round(mean * 1e4) / 1e4,
                std::round(stddev * 1e4) / 1e4);
  return buf;
}

TEST(OwnData, ImageSetsUnderOtherNamesTrainNormalizedByTheirOwnStatistics) {
  Scratch s;
  const std::string dir = s.path("images");
  write_image_set(dir, 1, 12, 12, 2);  // (one channel: two classes tell apart)
  std::filesystem::rename(dir + "/train-images-idx3-ubyte", dir + "/train-images.idx3-ubyte");
  std::filesystem::rename(dir + "/t10k-images-idx3-ubyte", dir + "/test-images-idx3-ubyte");
  std::filesystem::rename(dir + "/t10k-labels-idx1-ubyte", dir + "/test_labels.idx1-ubyte");
  const auto [mean, stddev] = pixel_statistics(dir + "/train-images.idx3-ubyte");
  ASSERT_GT(std::abs(mean - 0.2860), 0.01);  // not Fashion-MNIST's
  const Result r = run("train --model mlp --data " + dir + " --steps 60 --eval-every 60 --batch-size 32 --json --checkpoint-dir " +
                       s.path("ckpt"));
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string said = fmt_said(mean, stddev);
  EXPECT_NE(r.err.find("data: " + dir + ": 800 training images of 1x12x12, 200 test, 2 classes; " + said), std::string::npos)
      << said << "\n" << r.err;
  EXPECT_GT(nlohmann::json::parse(r.out).at("final_val_accuracy").get<double>(), 0.9) << r.out;
  // The checkpoint records the normalization (its header is JSON at the start of the file).
  const std::string ckpt = slurp(s.path("ckpt") + "/ckpt-00000060.safetensors");
  EXPECT_NE(ckpt.find("\"normalization\""), std::string::npos);

  // Two files for one part: one line naming both.
  std::filesystem::copy_file(dir + "/train-images.idx3-ubyte", dir + "/emnist-train-images-idx3-ubyte");
  const Result two = run("train --model mlp --data " + dir + " --steps 1");
  EXPECT_EQ(two.status, 2);
  EXPECT_EQ(lines(two.err), 1) << two.err;
  EXPECT_NE(two.err.find("more than one file of training images"), std::string::npos) << two.err;
}

TEST(OwnData, TextModelsReadGzippedTextAndRefuseBinaryData) {
  Scratch s;
  const std::string dir = s.path("corpus");
  std::filesystem::create_directories(dir);
  for (const char* name : {"science", "computers"}) {
    ASSERT_EQ(std::system(("gzip -c /usr/share/games/fortunes/" + std::string(name) + " > " + dir + "/" + name + ".gz").c_str()), 0);
  }
  const Result r = run("train --model gpt --data " + dir + " --steps 40 --eval-every 40 --eval-batches 2 --n-layer 1 --n-embd 64 "
                       "--block-size 32 --batch-size 16 --lr 3e-3 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("data: " + dir + ": "), std::string::npos) << r.err;
  // Learned from the text: well below a model of uniform bytes (ln 256 = 5.55), where compressed bytes stay.
  EXPECT_LT(nlohmann::json::parse(r.out).at("final_val_loss").get<double>(), 4.0) << r.out;
  expect_refused("train --model gpt --steps 1 --data /usr/share/datasets/fashion-mnist", {"binary data, not text"});
}

}  // namespace

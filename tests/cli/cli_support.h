// What the command-line tests share: running `mantissa` as a user does (arguments, standard input,
// environment) and reading back its exit status and output, and a scratch directory per test.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Result {
  int status;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs `mantissa ARGS` with INPUT on standard input, with ENV (NAME=VALUE ...) added to its environment.
inline Result run(const std::string& args, const std::string& input = "", const std::string& env = "") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mantissa_cli_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "in") << input;
  const std::string cmd = "env " + env + " " + std::string(MANTISSA_CLI) + " " + args + " <" + (dir / "in").string() + " >" +
                          (dir / "out").string() + " 2>" + (dir / "err").string();
  const int raw = std::system(cmd.c_str());
  Result r{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(dir / "out"), slurp(dir / "err")};
  std::filesystem::remove_all(dir);
  return r;
}

inline int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// A refusal as the commands give one: exit status 2, one line on standard error holding each of `says`,
// within `limit` seconds (before any training).
inline void expect_refused(const std::string& args, std::initializer_list<std::string> says, int limit = 10) {
  const auto t0 = std::chrono::steady_clock::now();
  const Result r = run(args);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(limit)) << args;
  EXPECT_EQ(r.status, 2) << args << ": " << r.err;
  EXPECT_EQ(lines(r.err), 1) << args << ": " << r.err;
  for (const std::string& s : says) EXPECT_NE(r.err.find(s), std::string::npos) << args << ": " << r.err;
}

struct Scratch {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("mantissa_train_test_" + std::to_string(::getpid()));
  Scratch() { std::filesystem::create_directories(dir); }
  ~Scratch() { std::filesystem::remove_all(dir); }
  std::string path(const std::string& name) const { return (dir / name).string(); }
  // A small text corpus: `lines` numbered copies of `sentence`; returns its path.
  std::string text(const std::string& sentence, int lines) const {
    std::ofstream f(path("text.txt"));
    for (int i = 0; i < lines; ++i) f << sentence << ' ' << i << '\n';
    return path("text.txt");
  }
};

// Writes an uncompressed IDX file of unsigned bytes with the given dimensions.
inline void write_idx_file(const std::string& path, const std::vector<std::uint32_t>& dims, const std::vector<std::uint8_t>& data) {
  std::ofstream f(path, std::ios::binary);
  f.put(0).put(0).put(0x08).put(static_cast<char>(dims.size()));
  for (std::uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) f.put(static_cast<char>((d >> shift) & 0xff));
  }
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

// A generated image set in the MNIST layout in `dir`: images [N, C, H, W] (or [N, H, W] for one channel)
// with `classes` classes: class k lights channel k % C with stripes, horizontal for even k / C, vertical
// for odd, over noise. Learnable by a linear model and by a CNN that pools globally.
inline void write_image_set(const std::string& dir, std::uint32_t c, std::uint32_t h, std::uint32_t w, std::uint32_t classes) {
  std::filesystem::create_directories(dir);
  std::uint64_t state = 12345;
  const auto next = [&] { return static_cast<std::uint32_t>((state = state * 6364136223846793005ULL + 1442695040888963407ULL) >> 33); };
  for (const auto& [name, n] : {std::pair<std::string, std::uint32_t>{"train", 800}, {"t10k", 200}}) {
    std::vector<std::uint8_t> pixels, labels;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t k = i % classes;
      labels.push_back(static_cast<std::uint8_t>(k));
      for (std::uint32_t ch = 0; ch < c; ++ch) {
        for (std::uint32_t y = 0; y < h; ++y) {
          for (std::uint32_t x = 0; x < w; ++x) {
            const bool on = ch == k % c && ((k / c) % 2 == 0 ? y % 2 == 0 : x % 2 == 0);
            pixels.push_back(static_cast<std::uint8_t>(next() % 80 + (on ? 150 : 0)));
          }
        }
      }
    }
    const std::vector<std::uint32_t> dims = c == 1 ? std::vector<std::uint32_t>{n, h, w} : std::vector<std::uint32_t>{n, c, h, w};
    write_idx_file(dir + "/" + name + "-images-idx3-ubyte", dims, pixels);
    write_idx_file(dir + "/" + name + "-labels-idx1-ubyte", {n}, labels);
  }
}

}  // namespace

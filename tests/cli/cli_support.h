// What the command-line tests share: running `mantissa` as a user does (arguments, standard input,
// environment) and reading back its exit status and output, and a scratch directory per test.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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

}  // namespace

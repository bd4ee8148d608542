// The one opener of the files users name (mantissa/core/input_file.h): what is not a regular file is
// refused at once (a FIFO with no writer must not hang open(), /dev/zero must not be read until memory
// runs out), so is a file past its kind's limit, a directory of texts whose sum is past it, and a read
// past the limit; and the mechanism's other half: no other way of opening a file for reading in the
// sources.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "mantissa/core/input_file.h"
#include "mantissa/data/datasets.h"
#include "source_scan.h"

namespace mantissa {
namespace {

namespace fs = std::filesystem;

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("mantissa_input_file_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  fs::path file(const std::string& name, std::size_t bytes) const {
    std::ofstream(dir / name, std::ios::binary) << std::string(bytes, 'a');
    return dir / name;
  }
};

template <class F>
std::string refusal(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    f();
  } catch (const std::exception& e) {
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "took long to refuse";
    return e.what();
  }
  return "accepted";
}

TEST(InputFile, OnlyRegularFilesWithinTheirLimitAreRead) {
  const Scratch s;
  const fs::path fifo = s.dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(refusal([&] { InputFile(fifo, "a test file", 100); }).find("fifo: not a regular file (a FIFO)"), std::string::npos);
  EXPECT_NE(refusal([&] { InputFile("/dev/zero", "a test file", 100); }).find("/dev/zero: not a regular file (a character device)"),
            std::string::npos);
  EXPECT_NE(refusal([&] { InputFile(s.dir, "a test file", 100); }).find("(a directory)"), std::string::npos);
  EXPECT_NE(refusal([&] { InputFile(s.dir / "none", "a test file", 100); }).find("none: cannot open (no such file)"), std::string::npos);
  const fs::path big = s.file("big", 101);
  EXPECT_NE(refusal([&] { InputFile(big, "a test file", 100); }).find("101 bytes, more than a test file may be (100 bytes)"),
            std::string::npos);
  // At the limit: read whole, and exactly; past the end, a truncation naming what was asked.
  const fs::path ok = s.file("ok", 100);
  EXPECT_EQ(InputFile(ok, "a test file", 100).read_all().size(), 100U);
  InputFile f(ok, "a test file", 200);
  EXPECT_EQ(f.size(), 100U);
  char buf[8];
  f.read_exactly_at(92, buf, 8, "the tail");
  EXPECT_NE(refusal([&] { f.read_exactly_at(96, buf, 8, "the tail"); }).find("truncated: the tail ends after 4 of 8 bytes"),
            std::string::npos);
  EXPECT_NE(refusal([&] { f.read_exactly_at(196, buf, 8, "the end"); }).find("the end lies past 200 bytes"), std::string::npos);
  // A symlink to a regular file is that file.
  fs::create_symlink(ok, s.dir / "link");
  EXPECT_EQ(InputFile(s.dir / "link", "a test file", 100).read_text(), std::string(100, 'a'));
}

TEST(InputFile, ReadersOfDataGoThroughItAndADirectorysFilesShareOneLimit) {
  const Scratch s;
  const fs::path fifo = s.dir / "fifo.idx";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(refusal([&] { (void)read_idx(fifo); }).find("not a regular file (a FIFO)"), std::string::npos);
  EXPECT_NE(refusal([&] { (void)TextCorpus::load(fifo); }).find("not a regular file (a FIFO)"), std::string::npos);
  EXPECT_NE(refusal([&] { (void)TextCorpus::load("/dev/zero"); }).find("/dev/zero: not a regular file"), std::string::npos);
  // Two files of 600 MiB each, sparse: each alone is under a text corpus's 1 GiB, together past it.
  const fs::path texts = s.dir / "texts";
  fs::create_directories(texts);
  for (const char* name : {"a.txt", "b.txt"}) {
    std::ofstream(texts / name) << "x";
    fs::resize_file(texts / name, std::uintmax_t{600} << 20);
  }
  EXPECT_NE(refusal([&] { (void)TextCorpus::load(texts); }).find("more than a text corpus"), std::string::npos);
}

TEST(InputFile, LinesAreReadOneAtATimeAndAnEndlessOneIsRefusedAtOnce) {
  const Scratch s;
  { std::ofstream(s.dir / "lines") << "one\n\nthree is longer\nlast without newline"; }
  InputFile f(s.dir / "lines", "a test file", 1000);
  std::vector<std::string> got;
  for (std::string line; f.read_line(line, 20);) got.push_back(line);
  EXPECT_EQ(got, (std::vector<std::string>{"one", "", "three is longer", "last without newline"}));
  InputFile g(s.dir / "lines", "a test file", 1000);
  std::string line;
  EXPECT_TRUE(g.read_line(line, 10));
  EXPECT_TRUE(g.read_line(line, 10));
  EXPECT_NE(refusal([&] { g.read_line(line, 10); }).find("line 3 is longer than a line of a test file may be (10 bytes)"), std::string::npos);
  // A sparse gibibyte of zeros, one endless line: refused within the first mebibyte, not read whole.
  { std::ofstream(s.dir / "zeros") << "x"; }
  fs::resize_file(s.dir / "zeros", std::uintmax_t{1} << 30);
  InputFile z(s.dir / "zeros", "a test file", std::uint64_t{4} << 30);
  EXPECT_NE(refusal([&] { z.read_line(line, std::size_t{1} << 20); }).find("line 1 is longer"), std::string::npos);
}

TEST(InputFile, NoOtherWayOfOpeningAFileForReadingInTheSources) {
  const std::set<std::string> home = {"src/core/input_file.cpp"};
  const testing::SourceScan streams = testing::scan_sources({"ifstream", "cin", "gzopen"}, false, home);
  const testing::SourceScan fopens = testing::scan_sources({"fopen"}, true, home, [](std::string_view statement) {
    return statement.find("\"r") != std::string_view::npos;  // for reading
  });
  const testing::SourceScan opens = testing::scan_sources({"open"}, true, home, [](std::string_view statement) {
    return statement.find("O_RDONLY") != std::string_view::npos && statement.find("O_DIRECTORY") == std::string_view::npos;
  });
  EXPECT_GT(streams.files, 100);
  for (const testing::SourceScan* scan : {&streams, &fopens, &opens}) {
    for (const std::string& m : scan->matches) ADD_FAILURE() << m << " (open through InputFile)";
  }
}

}  // namespace
}  // namespace mantissa

// The one writer (mantissa/core/output_file.h): a link, a FIFO, a device or a directory at the target is
// refused and left as it was; links planted at the names a careless writer would use for its temporary
// (X.partial, X.tmp) are never followed; an uncommitted file leaves the target untouched and no
// temporary behind; appends refuse links unless asked; the checks say what is wrong before any work.
// And the mechanism's other half: no other way of writing a file in the sources.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <string>

#include "mantissa/core/input_file.h"
#include "mantissa/core/output_file.h"
#include "../common/scratch_dir.h"
#include "source_scan.h"

namespace mantissa {
namespace {

namespace fs = std::filesystem;

std::string text_of(const fs::path& p) { return InputFile(p, "a test file", 1 << 20).read_text(); }

void put(const fs::path& p, const std::string& text) { write_file_atomically(p, text, "a test file"); }

// What f threw (it must throw, and at once), or "accepted".
template <class F>
std::string refusal(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    f();
  } catch (const OutputPathError& e) {
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << "took long to refuse";
    return e.what();
  }
  return "accepted";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Names in dir, for "nothing was left behind".
std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

class OutputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = testing::scratch_dir("output_file");
    victim = dir / "victim";
    put(victim, "the user's data");
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir, victim;
};

TEST_F(OutputFile, AWholeFileReplacesOnlyARegularFileAndNeverWritesThroughALink) {
  const fs::path out = dir / "out.svg";
  put(out, "one");
  put(out, "two");
  EXPECT_EQ(text_of(out), "two");
  // Links planted where a temporary might go are not followed, truncated or renamed into place.
  for (const char* planted : {"x.svg.partial", "x.svg.tmp", "x.svg.partial-00000000"}) fs::create_symlink(victim, dir / planted);
  put(dir / "x.svg", "new");
  EXPECT_EQ(text_of(dir / "x.svg"), "new");
  EXPECT_FALSE(fs::is_symlink(dir / "x.svg"));
  EXPECT_EQ(text_of(victim), "the user's data");
  // A link, a FIFO, a directory at the target: refused, left as they were.
  fs::create_symlink(victim, dir / "link.svg");
  EXPECT_TRUE(contains(refusal([&] { put(dir / "link.svg", "x"); }), "link.svg: a symbolic link"));
  EXPECT_TRUE(fs::is_symlink(dir / "link.svg"));
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_TRUE(contains(refusal([&] { put(dir / "fifo", "x"); }), "not a regular file (a FIFO)"));
  EXPECT_TRUE(contains(refusal([&] { put(dir, "x"); }), "not a regular file (a directory)"));
  EXPECT_TRUE(contains(refusal([&] { put("/dev/null", "x"); }), "not a regular file (a character device)"));
  EXPECT_TRUE(contains(refusal([&] { put("", "x"); }), "an empty path"));
  EXPECT_EQ(text_of(victim), "the user's data");
  EXPECT_EQ(names_in(dir), (std::set<std::string>{"victim", "out.svg", "x.svg", "x.svg.partial", "x.svg.tmp",
                                                  "x.svg.partial-00000000", "link.svg", "fifo"}));
}

TEST_F(OutputFile, AnUncommittedFileLeavesTheTargetAndNoTemporary) {
  {
    AtomicFile f(victim, "a test file");
    f.write("half of a new");
  }  // not committed: as if the write had failed midway
  EXPECT_EQ(text_of(victim), "the user's data");
  EXPECT_EQ(names_in(dir), std::set<std::string>{"victim"});
  // A link put at the target after the start is still refused at the commit.
  AtomicFile late(dir / "late", "a test file");
  late.write("x");
  fs::create_symlink(victim, dir / "late");
  EXPECT_TRUE(contains(refusal([&] { late.commit(); }), "a symbolic link"));
  EXPECT_EQ(text_of(victim), "the user's data");
}

TEST_F(OutputFile, TheChecksSayWhatIsWrongBeforeAnyWork) {
  // A directory under a file, a directory that is missing, one that takes no file (/proc, even for root).
  EXPECT_TRUE(contains(refusal([&] { check_output_file(victim / "x.svg", "--plot"); }), "--plot " + (victim / "x.svg").string() + ": "));
  EXPECT_TRUE(contains(refusal([&] { check_output_file(victim / "x.svg", "--plot"); }), "is not a directory"));
  EXPECT_TRUE(contains(refusal([&] { check_output_file(dir / "no" / "x.svg", "--plot"); }), "does not exist"));
  EXPECT_TRUE(contains(refusal([&] { check_output_file("/proc/mantissa-test.svg", "--plot"); }), "cannot create a file in /proc"));
  check_output_file(dir / "fine.svg", "--plot");
  check_output_file(victim, "--plot");  // an existing regular file is replaced
  EXPECT_EQ(names_in(dir), std::set<std::string>{"victim"});  // the probe left nothing
  // Directories: made when absent; a file where one should be, or under a file, is refused.
  check_output_directory(dir / "a" / "b", "--checkpoint-dir");
  EXPECT_TRUE(fs::is_directory(dir / "a" / "b"));
  EXPECT_TRUE(fs::is_empty(dir / "a" / "b"));
  EXPECT_TRUE(contains(refusal([&] { check_output_directory(victim, "--checkpoint-dir"); }), "not a directory (a regular file)"));
  EXPECT_TRUE(contains(refusal([&] { check_output_directory(victim / "sub", "--checkpoint-dir"); }), "cannot make the directory"));
  EXPECT_TRUE(contains(refusal([&] { check_output_directory("", "--checkpoint-dir"); }), "--checkpoint-dir: an empty path"));
  EXPECT_TRUE(contains(refusal([&] { check_output_directory("/proc/mantissa-test", "--checkpoint-dir"); }), "/proc/mantissa-test"));
}

TEST_F(OutputFile, LinesAreAppendedToARegularFileAndThroughALinkOnlyWhenAsked) {
  const fs::path m = dir / "m.jsonl";
  {
    AppendFile a(m, "--metrics", false);
    a.write("1\n");
  }
  {
    AppendFile a(m, "--metrics", false);
    a.write("2\n");
  }
  EXPECT_EQ(text_of(m), "1\n2\n");
  fs::create_symlink(victim, dir / "link.jsonl");
  EXPECT_TRUE(contains(refusal([&] { AppendFile(dir / "link.jsonl", "--metrics", false); }), "--follow-symlinks"));
  EXPECT_TRUE(contains(refusal([&] { check_append_file(dir / "link.jsonl", "--metrics", false); }), "a symbolic link"));
  EXPECT_EQ(text_of(victim), "the user's data");
  check_append_file(dir / "link.jsonl", "--metrics", true);
  AppendFile(dir / "link.jsonl", "--metrics", true).write("\nasked for");
  EXPECT_EQ(text_of(victim), "the user's data\nasked for");
  // A FIFO with no reader, a device, a directory: refused at once (open() must not wait for a reader).
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_TRUE(contains(refusal([&] { AppendFile(dir / "fifo", "--metrics", false); }), "(a FIFO)"));
  EXPECT_TRUE(contains(refusal([&] { check_append_file("/dev/null", "--metrics", false); }), "(a character device)"));
  EXPECT_TRUE(contains(refusal([&] { AppendFile(dir, "--metrics", false); }), "--metrics " + dir.string()));
  EXPECT_TRUE(contains(refusal([&] { check_append_file(victim / "m", "--metrics", false); }), "is not a directory"));
  check_append_file(dir / "new.jsonl", "--metrics", false);
  EXPECT_FALSE(fs::exists(dir / "new.jsonl"));  // checked, not made
}

// Every file the library and the commands write goes through the writer: no other call that creates,
// truncates, appends to or renames a file anywhere in the sources.
TEST(OutputFileSources, NoOtherWayOfWritingAFile) {
  const std::set<std::string> home = {"src/core/output_file.cpp"};
  const testing::SourceScan streams = testing::scan_sources({"ofstream", "fstream", "gzopen"}, false, home);
  const testing::SourceScan calls =
      testing::scan_sources({"creat", "rename", "renameat", "copy_file", "mkstemp", "mkostemp", "tmpfile"}, true, home);
  const testing::SourceScan fopens = testing::scan_sources({"fopen", "freopen"}, true, home, [](std::string_view statement) {
    // For writing or appending; rank > 0 of a data-parallel job sends its standard output to /dev/null.
    return (statement.find("\"w") != std::string_view::npos || statement.find("\"a") != std::string_view::npos ||
            statement.find("\"r+") != std::string_view::npos) &&
           statement.find("\"/dev/null\"") == std::string_view::npos;
  });
  const testing::SourceScan opens = testing::scan_sources({"open", "openat"}, true, home, [](std::string_view statement) {
    return statement.find("O_WRONLY") != std::string_view::npos || statement.find("O_RDWR") != std::string_view::npos ||
           statement.find("O_CREAT") != std::string_view::npos;
  });
  EXPECT_GT(streams.files, 100);
  for (const testing::SourceScan* scan : {&streams, &calls, &fopens, &opens}) {
    for (const std::string& m : scan->matches) ADD_FAILURE() << m << " (write through mantissa/core/output_file.h)";
  }
}

}  // namespace
}  // namespace mantissa

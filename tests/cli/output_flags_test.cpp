// Every output flag of every command goes through the one writer and its checks before the command
// runs: the flags are found by their kind in each command's help (OUT_FILE, APPEND_FILE, OUT_DIR,
// OUT_PREFIX), so a flag added later is covered or this fails. Each gets an empty path, a path under a
// regular file, a symbolic link and a FIFO at the path (exit 2, one line, at once, nothing written
// through the link), and then a real run with links planted at the names a careless writer would use
// for its temporary (X.partial, X.tmp): the output is written, the links' target is untouched.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_support.h"

namespace {

namespace fs = std::filesystem;

struct OutputFlag {
  std::string command, flag, kind;
};

// The output flags in the help of each command.
std::vector<OutputFlag> output_flags() {
  std::vector<OutputFlag> out;
  for (const std::string command : {"train", "compare", "paper", "inspect", "export", "cast", "formats", "info", "bench",
                                    "bench matmul", "bench mlp"}) {
    const Result help = run(command + " --help");
    EXPECT_EQ(help.status, 0) << command;
    std::istringstream lines_of(help.out);
    for (std::string line, flag, value; std::getline(lines_of, line);) {
      std::istringstream words(line);
      if (!(words >> flag >> value) || flag.rfind("--", 0) != 0) continue;
      const std::string kind = value.substr(0, value.find('='));
      if (kind == "OUT_FILE" || kind == "APPEND_FILE" || kind == "OUT_DIR" || kind == "OUT_PREFIX") out.push_back({command, flag, kind});
    }
  }
  return out;
}

TEST(OutputFlags, EveryOutputFlagIsCheckedAtStartAndNeverWrittenThroughALink) {
  Scratch s;
  const std::string quick = "--model mlp --hidden 16 --steps 2 --eval-every 2 --batch-size 32";
  const std::string telemetry = s.path("t.jsonl");
  ASSERT_EQ(run("train " + quick + " --telemetry " + telemetry + " --telemetry-every 1 --checkpoint-dir " + s.path("ckpt")).status, 0);
  const std::string checkpoint = s.path("ckpt") + "/ckpt-00000002.safetensors";
  // A run that writes the flag's output, with OUT standing for the path; none for paper's (an hour of
  // training: its flags are checked, and it writes through the same function as the others).
  const std::map<std::string, std::string> writes = {
      {"train --metrics", "train " + quick + " --metrics OUT"},
      {"train --telemetry", "train " + quick + " --telemetry OUT"},
      {"train --plan-out", "train " + quick + " --precision adaptive --plan-out OUT"},
      {"train --checkpoint-dir", "train " + quick + " --checkpoint-dir OUT"},
      {"compare --plot", "compare " + quick + " --precisions fp32 --plot OUT"},
      {"compare --checkpoint-dir", "compare " + quick + " --precisions fp32 --no-plot --checkpoint-dir OUT"},
      {"inspect --plot", "inspect " + telemetry + " --plot OUT"},
      {"export --out", "export " + checkpoint + " --out OUT"},
      {"bench --export", "bench --model gpt-small --batch-size 2 --steps 1 --warmup 0 --precisions fp32 --mode autocast --export OUT"},
      {"paper --out", ""},
      {"paper --plot", ""},
  };
  const std::vector<OutputFlag> flags = output_flags();
  EXPECT_EQ(flags.size(), writes.size());
  const std::string victim = s.path("victim");
  { std::ofstream(victim) << "the user's data"; }
  const std::string fifo = s.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const OutputFlag& f : flags) {
    const std::string key = f.command + " " + f.flag;
    ASSERT_TRUE(writes.count(key)) << key << ": a new output flag; add a run that writes it";
    // A model that does not exist: were a bad path let through, the command would stop on it at once
    // (with another message), not train for minutes.
    const std::string guard = f.command == "inspect"  ? telemetry
                              : f.command == "export" ? checkpoint
                              : f.command == "paper"  ? "--models nosuch"
                                                      : "--model nosuch";
    const std::string base = f.command + " " + guard + " " + f.flag + " ";
    expect_refused(base + "''", {f.flag, "an empty value"});  // (route_number_flags refuses any empty value)
    expect_refused(base + victim + "/sub/out", {f.flag, f.kind == "OUT_DIR" ? "cannot make the directory" : "is not a directory"});
    if (f.kind != "OUT_PREFIX") expect_refused(base + fifo, {f.flag, f.kind == "OUT_DIR" ? "not a directory (a FIFO)" : "(a FIFO)"});
    if (f.kind == "OUT_FILE" || f.kind == "APPEND_FILE") {
      fs::create_symlink(victim, s.path("link"));
      expect_refused(base + s.path("link"), {f.flag, "a symbolic link"});
      EXPECT_TRUE(fs::is_symlink(s.path("link"))) << key;
      fs::remove(s.path("link"));
    }
    EXPECT_EQ(slurp(victim), "the user's data") << key;
    const std::string& command = writes.at(key);
    if (command.empty()) continue;
    // The real run, with links planted beside its output.
    const fs::path dir = s.dir / "out";
    fs::remove_all(dir);
    fs::create_directories(dir);
    const fs::path out = dir / "x";
    for (const char* planted : {"x.partial", "x.tmp"}) fs::create_symlink(victim, dir / planted);
    std::string args = command;
    args.replace(args.find("OUT"), 3, out.string());
    const Result r = run(args);
    ASSERT_EQ(r.status, 0) << args << ": " << r.err;
    EXPECT_EQ(slurp(victim), "the user's data") << key;
    if (f.kind == "OUT_DIR") {
      ASSERT_TRUE(fs::is_directory(out)) << key;
      EXPECT_FALSE(fs::is_empty(out)) << key;
    } else {
      EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(out))) << key;
      EXPECT_GT(fs::file_size(out), 0U) << key;
    }
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
    EXPECT_EQ(names, (std::set<std::string>{"x", "x.partial", "x.tmp"})) << key << ": a temporary left behind";
  }
}

// What was there stays when a run cannot start: an output path refused at the start writes nothing.
TEST(OutputFlags, ARunThatCannotWriteItsOutputsTrainsNothing) {
  Scratch s;
  { std::ofstream(s.path("m.jsonl")) << "precious\n"; }
  const Result r = run("train --model mlp --steps 100000 --metrics " + s.path("m.jsonl") + " --checkpoint-dir " + s.path("m.jsonl"));
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--checkpoint-dir"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(s.path("m.jsonl")), "precious\n");
}

// --quiet: no progress lines from a run (start, steps, evaluations, saves); its summary and files as
// without.
TEST(QuietFlag, ARunPrintsNoProgressButItsResultsAndWarnings) {
  Scratch s;
  const std::string args = "train --model mlp --steps 4 --eval-every 2 --json --checkpoint-dir " + s.path("c") + " --metrics " + s.path("m.jsonl");
  const Result loud = run(args);
  ASSERT_EQ(loud.status, 0) << loud.err;
  EXPECT_NE(loud.err.find("eval step 2"), std::string::npos) << loud.err;
  std::filesystem::remove_all(s.path("c"));
  std::filesystem::remove(s.path("m.jsonl"));
  const Result quiet = run(args + " --quiet");
  ASSERT_EQ(quiet.status, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(nlohmann::json::parse(quiet.out).at("final_val_loss"), nlohmann::json::parse(loud.out).at("final_val_loss"));
  EXPECT_EQ(lines(slurp(s.path("m.jsonl"))), 1 + 4 + 2);
  EXPECT_TRUE(std::filesystem::exists(s.path("c") + "/ckpt-00000004.safetensors"));
}

}  // namespace

// Never losing a run, from the command line: Ctrl-C (SIGINT) or SIGTERM at any step leaves a checkpoint
// and a resume from it continues bit for bit as if nothing had happened; checkpoints are also written by
// time; a newest checkpoint that does not read whole is passed over, by name; --resume-from picks a file.
#include <gtest/gtest.h>

#include <csignal>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "../common/test_seed.h"
#include "cli_support.h"

namespace {

// The MLP with a constant learning rate, so that a run's length does not change its steps.
const std::string kRun = "train --model mlp --batch-size 32 --schedule constant --lr 1e-3 ";

// Starts `mantissa ARGS` in the background, sends it `signal` once its metrics file holds `after` lines,
// and returns its exit status (as the shell reports it) with its standard error.
Result signal_after(const std::string& args, const std::string& metrics, int after, int signal, const Scratch& s) {
  const std::string err = s.path("signalled.err");
  // (Appended piece by piece: GCC 12 warns of an overlapping copy in a long chain of +, wrongly.)
  std::string script = "(";
  script.append(MANTISSA_CLI).append(" ").append(args).append(" --metrics ").append(metrics);
  script.append(" >/dev/null 2>").append(err).append(" & pid=$!; i=0; while { [ ! -s ").append(metrics);
  script.append(" ] || [ $(wc -l < ").append(metrics).append(") -lt ").append(std::to_string(after));
  script.append(" ]; } && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; kill -").append(std::to_string(signal));
  script.append(" $pid; wait $pid; echo $? > ").append(s.path("status")).append(")");
  (void)std::system(script.c_str());
  return {std::stoi(slurp(s.path("status"))), "", slurp(err)};
}

// The loss of each step in a metrics file, by step.
std::map<std::int64_t, double> losses(const std::string& metrics) {
  std::map<std::int64_t, double> out;
  std::istringstream in(slurp(metrics));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out[j.at("step").get<std::int64_t>()] = j.at("loss").get<double>();
  }
  return out;
}

TEST(NeverLoseARun, SigintAtARandomStepLeavesACheckpointThatResumesBitIdentically) {
  Scratch s;
  std::mt19937 pick(static_cast<std::mt19937::result_type>(mantissa::testing::test_seed()));
  const int after = std::uniform_int_distribution<int>(2, 30)(pick);
  SCOPED_TRACE("SIGINT after " + std::to_string(after) + " metrics lines");
  const std::string dir = " --checkpoint-dir " + s.path("ckpt");
  const Result stopped = signal_after(kRun + "--steps 1000000 --eval-every 1000000" + dir, s.path("m1.jsonl"), after, SIGINT, s);
  ASSERT_EQ(stopped.status, 130) << stopped.err;
  const auto at = stopped.err.find("interrupted (SIGINT) after step ");
  ASSERT_NE(at, std::string::npos) << stopped.err;
  const std::int64_t step = std::stoll(stopped.err.substr(at + 32));
  EXPECT_GE(step, after);
  EXPECT_NE(stopped.err.find("saved " + s.path("ckpt") + "/ckpt-"), std::string::npos) << stopped.err;
  EXPECT_NE(stopped.err.find("continue with --resume"), std::string::npos) << stopped.err;

  // Resumed to 5 steps past it, against a run of that length that was never stopped.
  const std::string steps = "--steps " + std::to_string(step + 5) + " --eval-every 1000000 --json";
  const Result resumed = run(kRun + steps + dir + " --resume --metrics " + s.path("m2.jsonl"));
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resumed from " + s.path("ckpt") + "/ckpt-"), std::string::npos) << resumed.err;
  const Result whole = run(kRun + steps + " --metrics " + s.path("m3.jsonl"));
  ASSERT_EQ(whole.status, 0) << whole.err;
  EXPECT_EQ(nlohmann::json::parse(resumed.out).at("final_val_loss").get<double>(),
            nlohmann::json::parse(whole.out).at("final_val_loss").get<double>());
  const auto after_resume = losses(s.path("m2.jsonl")), uninterrupted = losses(s.path("m3.jsonl"));
  ASSERT_EQ(after_resume.size(), 5u);
  for (const auto& [k, loss] : after_resume) EXPECT_EQ(loss, uninterrupted.at(k)) << "step " << k;
}

// No signal handler runs on a computing thread: in a training run every thread but one blocks SIGINT and
// SIGTERM and none has a handler for them (the one left waits for them: interrupt.cpp). A handler that ran
// wherever the kernel delivered it left about one Ctrl-C in fifteen, under load, crashing in oneDNN's next
// product with a corrupted heap.
TEST(NeverLoseARun, NoThreadIsInterruptedByASignalHandler) {
  Scratch s;
  const std::string metrics = s.path("m.jsonl"), masks = s.path("masks");
  std::string script = "(";
  script.append(MANTISSA_CLI).append(" ").append(kRun).append("--steps 1000000 --eval-every 1000000 --metrics ").append(metrics);
  script.append(" >/dev/null 2>&1 & pid=$!; i=0; while { [ ! -s ").append(metrics).append(" ] || [ $(wc -l < ").append(metrics);
  script.append(") -lt 3 ]; } && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; grep -h '^SigCgt' /proc/$pid/status > ");
  script.append(masks).append("; grep -h '^SigBlk' /proc/$pid/task/*/status >> ").append(masks);
  script.append("; kill -INT $pid; wait $pid)");
  (void)std::system(script.c_str());
  const std::uint64_t stop_bits = (1ULL << (SIGINT - 1)) | (1ULL << (SIGTERM - 1));
  std::istringstream in(slurp(masks));
  int threads = 0, open = 0;
  for (std::string name, hex; in >> name >> hex;) {
    const std::uint64_t mask = std::stoull(hex, nullptr, 16);
    if (name == "SigCgt:") {
      EXPECT_EQ(mask & stop_bits, 0U) << "a handler for SIGINT or SIGTERM is installed";
    } else {
      ++threads;
      open += (mask & stop_bits) == stop_bits ? 0 : 1;
    }
  }
  EXPECT_GE(threads, 3);  // the main thread, an OpenMP worker, the one that waits for signals
  EXPECT_EQ(open, 1) << "threads that take SIGINT or SIGTERM";
}

TEST(NeverLoseARun, SigtermStopsWith143AndARunWithoutADirectoryKeepsNothingButSaysSo) {
  Scratch s;
  const Result term = signal_after(kRun + "--steps 1000000 --eval-every 1000000", s.path("m.jsonl"), 3, SIGTERM, s);
  EXPECT_EQ(term.status, 143) << term.err;
  EXPECT_NE(term.err.find("stopped (SIGTERM) after step"), std::string::npos) << term.err;
  EXPECT_NE(term.err.find("nothing saved (no --checkpoint-dir)"), std::string::npos) << term.err;
}

TEST(NeverLoseARun, CheckpointsAreWrittenByTimeTooEachWithALine) {
  Scratch s;
  // Every 6 ms: about every step.
  const Result r = run(kRun + "--steps 12 --eval-every 12 --checkpoint-minutes 0.0001 --keep 50 --checkpoint-dir " + s.path("t"));
  ASSERT_EQ(r.status, 0) << r.err;
  int saves = 0;
  for (const auto& e : std::filesystem::directory_iterator(s.path("t"))) saves += e.path().extension() == ".safetensors" ? 1 : 0;
  EXPECT_GT(saves, 2);
  int said = 0;
  std::istringstream err(r.err);
  for (std::string line; std::getline(err, line);) said += line.rfind("saved ", 0) == 0 ? 1 : 0;
  EXPECT_EQ(said, saves);
  const Result off = run(kRun + "--steps 12 --eval-every 12 --checkpoint-minutes 0 --checkpoint-dir " + s.path("o"));
  ASSERT_EQ(off.status, 0) << off.err;
  EXPECT_TRUE(std::filesystem::exists(s.path("o") + "/ckpt-00000012.safetensors"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(s.path("o")), {}), 1);
  expect_refused(kRun + "--steps 2 --checkpoint-minutes -1 --checkpoint-dir " + s.path("x"), {"--checkpoint-minutes"});
}

TEST(NeverLoseARun, ANewestCheckpointThatDoesNotReadWholeIsPassedOverByName) {
  Scratch s;
  const std::string dir = s.path("ckpt");
  ASSERT_EQ(run(kRun + "--steps 10 --eval-every 10 --checkpoint-every 5 --checkpoint-dir " + dir).status, 0);
  const std::string newest = dir + "/ckpt-00000010.safetensors";
  std::filesystem::resize_file(newest, std::filesystem::file_size(newest) / 2);
  const Result r = run(kRun + "--steps 12 --eval-every 12 --resume --checkpoint-dir " + dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("skipping ckpt-00000010.safetensors, which does not read whole"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("resumed from " + dir + "/ckpt-00000005.safetensors (step 5)"), std::string::npos) << r.err;

  // --resume-from: that file, whatever is newer; a file that does not read is one line.
  ASSERT_EQ(run(kRun + "--steps 10 --eval-every 10 --checkpoint-every 5 --checkpoint-dir " + s.path("b")).status, 0);
  const Result from = run(kRun + "--steps 7 --eval-every 7 --resume-from " + s.path("b") + "/ckpt-00000005.safetensors");
  ASSERT_EQ(from.status, 0) << from.err;
  EXPECT_NE(from.err.find("(step 5)"), std::string::npos) << from.err;
  const Result torn = run(kRun + "--steps 12 --resume-from " + newest);
  EXPECT_EQ(torn.status, 2);
  EXPECT_EQ(lines(torn.err), 1) << torn.err;
  EXPECT_NE(torn.err.find("ckpt-00000010.safetensors"), std::string::npos) << torn.err;
}

// A damaged newer checkpoint that a resume passed over neither counts toward --keep nor costs the ones the
// resumed run writes: with --keep 1 it once left the damaged file alone in the directory.
TEST(NeverLoseARun, ADamagedNewerCheckpointNeverCostsTheOneJustWritten) {
  Scratch s;
  const std::string dir = s.path("ckpt");
  ASSERT_EQ(run(kRun + "--steps 10 --eval-every 10 --checkpoint-every 5 --checkpoint-dir " + dir).status, 0);
  const std::string damaged = dir + "/ckpt-00000010.safetensors";
  std::filesystem::resize_file(damaged, std::filesystem::file_size(damaged) / 2);
  const Result r = run(kRun + "--steps 8 --eval-every 8 --checkpoint-every 1 --keep 1 --resume --checkpoint-dir " + dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt-00000008.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt-00000007.safetensors"));  // --keep 1 of those up to step 8
  EXPECT_TRUE(std::filesystem::exists(damaged));                              // left to be overwritten at step 10
  const Result again = run(kRun + "--steps 10 --eval-every 10 --resume --checkpoint-dir " + dir);
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.err.find("resumed from " + dir + "/ckpt-00000008.safetensors (step 8)"), std::string::npos) << again.err;
  // Step 10 written again, whole: the next resume starts there.
  const Result last = run(kRun + "--steps 11 --eval-every 11 --resume --checkpoint-dir " + dir);
  ASSERT_EQ(last.status, 0) << last.err;
  EXPECT_NE(last.err.find("(step 10)"), std::string::npos) << last.err;
  EXPECT_EQ(last.err.find("skipping"), std::string::npos) << last.err;
}

}  // namespace

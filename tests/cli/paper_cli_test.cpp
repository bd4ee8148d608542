// The paper's experiments from the command line: the LSTM trains on a text with its segments and
// writes the metrics the ablations are judged by; the ablation flags refuse what they cannot mean; and
// `mantissa paper` writes a table in which fp16 without loss scaling fails on the underflow-prone model
// while loss scaling matches fp32, every cell with the command that reproduces it.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli_support.h"

namespace {

TEST(LstmCommand, TrainsOnTextInSegmentsAndReportsLostUpdates) {
  Scratch s;
  const std::string text = s.text("a stacked lstm reads these bytes one segment after another", 200);
  const Result r = run("train --model lstm --data " + text + " --hidden 32 --layers 2 --embd 16 --bptt 16 --batch-size 8 "
                       "--steps 12 --eval-every 6 --eval-batches 2 --lr 1e-2 --clip 1 --precision bf16 --mode "
                       "low-precision-model --master-weights off --update-stats-every 6 --metrics " + s.path("m.jsonl") + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto summary = nlohmann::json::parse(r.out);
  EXPECT_LT(summary["final_val_loss"].get<double>(), 5.0);  // below log(256) = 5.55 after 12 steps
  EXPECT_TRUE(summary["final_val_accuracy"].is_null());
  int measured = 0;
  std::istringstream lines_in(slurp(s.path("m.jsonl")));
  for (std::string line; std::getline(lines_in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("lost_updates")) continue;
    ++measured;
    EXPECT_EQ(j["lost_updates"].size(), 1U) << line;  // bf16 parameters: bf16 only
    const double share = j["lost_updates"]["bf16"].get<double>();
    EXPECT_TRUE(share >= 0 && share <= 1) << line;
  }
  EXPECT_EQ(measured, 3);  // steps 1, 6, 12
}

TEST(AblationFlags, RefuseWhatTheyCannotMean) {
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--precision bf16 --master-weights off", "--mode low-precision-model"},
           {"--precision fp16 --mode low-precision-model --master-weights maybe", "--master-weights: 'maybe'"},
           {"--precision fp32 --fp32-ops none", "--fp32-ops none needs --precision bf16 or fp16"},
           {"--precision bf16 --fp32-ops some", "--fp32-ops: 'some'"},
           {"--precision bf16 --fp32-ops softmax", "--fp32-ops: 'softmax' is not default, none or an op to run in fp32 as well"},
           {"--precision bf16 --fp32-ops none,attention", "--fp32-ops: none runs every op in the compute dtype"},
           {"--precision fp32 --fp32-ops attention", "--fp32-ops default,attention needs --precision bf16 or fp16"},
           {"--model lstm --bptt 0", "--bptt must be in"},
           {"--model rnn", "is not mlp, cnn, segment, gpt or lstm"}}) {
    const Result r = run("train --steps 1 " + args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_NE(r.err.find(says), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
  }
  Scratch s;
  const Result short_text = run("train --model lstm --steps 1 --bptt 64 --batch-size 64 --data " + s.text("a line of text", 200));
  EXPECT_EQ(short_text.status, 2);
  EXPECT_NE(short_text.err.find("bytes of training text cannot make 64 streams"), std::string::npos) << short_text.err;
}

// --fp32-ops with more ops: the char GPT's attention in f32 (issue 50) changes the run, which says so in
// its start line and run record, and its checkpoint resumes only with the same ops in f32.
TEST(AblationFlags, MoreOpsInFp32ChangeTheRunAndTheCheckpointKeepsThem) {
  Scratch s;
  const std::string flags = "train --model gpt --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch-size 4 --eval-every 3 "
                            "--eval-batches 1 --precision bf16 --data " + s.text("the quick brown fox jumps over the lazy dog. ", 400) + " ";
  const std::string dir = s.path("ck");
  const Result plain = run(flags + "--steps 3 --json");
  const Result attention = run(flags + "--steps 3 --json --fp32-ops attention --metrics " + s.path("m.jsonl") + " --checkpoint-dir " + dir);
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(attention.status, 0) << attention.err;
  const auto losses = [](const Result& r) { return nlohmann::json::parse(r.out)["final_val_loss"].dump(); };
  EXPECT_NE(losses(plain), losses(attention));
  EXPECT_NE((attention.out + attention.err).find("bf16 autocast (attention in fp32)"), std::string::npos) << attention.err;
  std::ifstream metrics(s.path("m.jsonl"));
  std::string first;
  std::getline(metrics, first);
  EXPECT_EQ(nlohmann::json::parse(first)["precision"], "bf16 autocast (attention in fp32)") << first;
  const Result changed = run(flags + "--steps 5 --checkpoint-dir " + dir + " --resume");
  EXPECT_EQ(changed.status, 2);
  EXPECT_NE(changed.err.find("--fp32-ops default,attention (this run: default)"), std::string::npos) << changed.err;
  const Result resumed = run(flags + "--steps 5 --fp32-ops default,attention --checkpoint-dir " + dir + " --resume");
  EXPECT_EQ(resumed.status, 0) << resumed.err;
}

// A checkpoint written before the ablation flags existed has no --master-weights or --fp32-ops in its
// settings: it was written with master weights and the fp32 ops, and resumes as such; a run that switches
// master weights off is refused, naming the flag.
TEST(AblationFlags, CheckpointsWithoutThemResumeAsWrittenWithTheDefaults) {
  Scratch s;
  const std::string flags = "train --model mlp --hidden 16 --layers 1 --precision bf16 --mode low-precision-model --eval-every 4 ";
  const std::string dir = s.path("ck"), file = dir + "/ckpt-00000002.safetensors";
  ASSERT_EQ(run(flags + "--steps 2 --checkpoint-dir " + dir).status, 0);
  std::ifstream in(file, std::ios::binary);
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, ' ');
  in.read(header.data(), static_cast<std::streamsize>(n));
  auto config = nlohmann::json::parse(nlohmann::json::parse(header)["__metadata__"]["config"].get<std::string>());
  ASSERT_EQ(config.erase("--master-weights") + config.erase("--fp32-ops"), 2U);
  const std::string editor = std::string("python3 ") + MANTISSA_SOURCE_DIR + "/tests/io/edit_checkpoint.py ";
  ASSERT_EQ(std::system((editor + file + " " + file + ".old set-meta config '" + config.dump() + "'").c_str()), 0);
  std::filesystem::rename(file + ".old", file);
  const Result off = run(flags + "--steps 4 --master-weights off --checkpoint-dir " + dir + " --resume");
  EXPECT_EQ(off.status, 2);
  EXPECT_NE(off.err.find("--master-weights on (this run: off)"), std::string::npos) << off.err;
  const Result resumed = run(flags + "--steps 4 --checkpoint-dir " + dir + " --resume");
  EXPECT_EQ(resumed.status, 0) << resumed.err;
}

TEST(PaperCommand, ShowsFp16FailingWithoutLossScalingOnTheUnderflowProneModel) {
  Scratch s;
  const Result r = run("paper --quick --models underflow --out " + s.path("paper.md") + " --plot " + s.path("curves"));
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string md = slurp(s.path("paper.md"));
  EXPECT_EQ(md, r.out);
  EXPECT_NE(slurp(s.path("curves-underflow.svg")).find("fp16, no master weights"), std::string::npos);
  // The detail rows: configuration | quality | vs fp32 | skipped | diverged | lost | seconds | command | layers.
  std::map<std::string, double> delta;
  std::istringstream in(md);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| fp", 0) != 0 && line.rfind("| bf16", 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) {
      const auto first = cell.find_first_not_of(' '), last = cell.find_last_not_of(' ');
      cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
    }
    ASSERT_GE(cells.size(), 8U) << line;
    EXPECT_NE(cells[7].find("`mantissa train --model mlp"), std::string::npos) << line;
    ASSERT_GE(cells.size(), 9U) << line;
    EXPECT_NE(cells[8].find(" in 3 of 3 layers"), std::string::npos) << line;  // (the MLP's three, each cell's plan)
    delta[cells[0]] = std::stod(cells[2]);
  }
  ASSERT_EQ(delta.size(), 9U) << md;
  EXPECT_LT(delta["fp16, no scaling"], -10) << md;  // accuracy points
  for (const char* scaled : {"fp16, static 128", "fp16, dynamic", "bf16"}) EXPECT_GT(delta[scaled], -1) << scaled << "\n" << md;
  EXPECT_NE(md.find("Activation gradients below fp16's smallest subnormal"), std::string::npos);
  const Result bad = run("paper --models cnn,resnet --out " + s.path("x.md"));
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("'resnet' is not cnn, gpt, lstm, underflow or sgd"), std::string::npos) << bad.err;
  // The NVFP4 suite's usage errors, before anything runs.
  const Result suite = run("paper --suite nvfp5 --out " + s.path("x.md"));
  EXPECT_EQ(suite.status, 2);
  EXPECT_NE(suite.err.find("--suite: 'nvfp5' is not mixed-precision or nvfp4"), std::string::npos) << suite.err;
  // A cell the command would refuse is refused before the first cell trains, naming the suite's cell (the
  // CNN's one linear layer is its head, which stays bf16: mxfp8 would quantize nothing).
  const Result cnn = run("paper --suite nvfp4 --models cnn --quick --out " + s.path("cnn.md") + " --no-plot");
  EXPECT_EQ(cnn.status, 2) << cnn.err;
  EXPECT_EQ(lines(cnn.err), 1) << cnn.err;
  EXPECT_NE(cnn.err.find("paper --suite nvfp4, cnn mxfp8: mxfp8 puts no layer of this model in it"), std::string::npos) << cnn.err;
  EXPECT_FALSE(std::filesystem::exists(s.path("cnn.md")));
  const Result seeds = run("paper --suite nvfp4 --seeds 0 --out " + s.path("x.md"));
  EXPECT_EQ(seeds.status, 2);
  EXPECT_NE(seeds.err.find("--seeds: give 1 to 100, not 0"), std::string::npos) << seeds.err;
}

// The paper's door (issue 49): each cell's precision plan as its run records it, resolved without
// training (--plans-only), for every column of both suites: a column runs what its name says (the NVFP4
// columns in NVFP4 where the recipe puts them; the 16-bit ones in their format), and nothing is written.
TEST(PaperCommand, PlansOnlyPrintsEachCellsPlanAndTrainsNothing) {
  Scratch s;
  const Result nv = run("paper --suite nvfp4 --plans-only --out " + s.path("nv.md"));
  ASSERT_EQ(nv.status, 0) << nv.err;
  for (const char* line : {"gpt, bf16: bf16 in 8 of 8 layers", "gpt, mxfp8: mxfp8 in 6 of 8 layers",
                           "gpt, nvfp4: nvfp4 in 3 of 8 layers", "gpt, nvfp4, no SR: nvfp4 in 3 of 8 layers",
                           "gpt, nvfp4, bf16 first and last only: nvfp4 in 6 of 8 layers",
                           "gpt, nvfp4-torchao: nvfp4-torchao in 6 of 8 layers"}) {
    EXPECT_NE(("\n" + nv.out).find(std::string("\n") + line), std::string::npos) << line << "\n" << nv.out;
  }
  EXPECT_EQ(lines(nv.out), 9) << nv.out;  // one a column
  EXPECT_FALSE(std::filesystem::exists(s.path("nv.md")));
  const Result mp = run("paper --plans-only --models underflow --out " + s.path("mp.md"));
  ASSERT_EQ(mp.status, 0) << mp.err;
  for (const char* line : {"underflow, fp32: fp32 in 3 of 3 layers", "underflow, fp16, dynamic: fp16 in 3 of 3 layers",
                           "underflow, bf16, no master weights: bf16 in 3 of 3 layers"}) {
    EXPECT_NE(mp.out.find(line), std::string::npos) << line << "\n" << mp.out;
  }
}

}  // namespace

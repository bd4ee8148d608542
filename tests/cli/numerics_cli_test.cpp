// The numerics tools from the command line: telemetry written and inspected (tables, the histogram
// picture, a damaged file named with its line), skipped steps explained and the run stopped with its
// own status, and adaptive precision rescuing fp16 without loss scaling, its plan written and replayed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

#include "cli_support.h"

namespace {

// The MLP on Fashion-MNIST with a loss weight of 2^-16: gradients fp16 flushes without loss scaling.
const std::string kUnderflowProne = "train --model mlp --batch-size 64 --eval-every 1000 --loss-weight 1.52587890625e-05 ";

// Each fp8 layer's saturated and underflowed shares over the run, summed by inspect from the metrics'
// per-layer counts (the recipe's numbers, whatever it is), checked against the records themselves.
TEST(TelemetryCommand, InspectSumsEachFp8LayersClippedAndLostValuesOverTheRun) {
  Scratch s;
  const std::string m = s.path("m.jsonl");
  ASSERT_EQ(run("train --model mlp --steps 4 --eval-every 4 --precision nvfp4 --metrics " + m).status, 0);
  std::int64_t quantized = 0, saturated = 0;
  std::istringstream records(slurp(m));
  for (std::string line; std::getline(records, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("fp8_layers")) continue;
    quantized += j.at("fp8_layers").at("fc1").at("quantized").get<std::int64_t>();
    saturated += j.at("fp8_layers").at("fc1").at("saturated").get<std::int64_t>();
  }
  ASSERT_GT(quantized, 0);
  const Result i = run("inspect " + m);
  ASSERT_EQ(i.status, 0) << i.err;
  EXPECT_NE(i.out.find("fp8 layers over the run, saturated / underflowed of the values quantized:"), std::string::npos) << i.out;
  char share[32];
  std::snprintf(share, sizeof share, "%.2f%%", 100.0 * static_cast<double>(saturated) / static_cast<double>(quantized));
  EXPECT_NE(i.out.find("    fc1: " + std::string(share) + " / "), std::string::npos) << share << "\n" << i.out;
  EXPECT_NE(i.out.find(" of " + std::to_string(quantized) + "\n"), std::string::npos) << i.out;
  // A run without fp8 says nothing of it.
  ASSERT_EQ(run("train --model mlp --steps 2 --eval-every 2 --metrics " + s.path("b.jsonl")).status, 0);
  EXPECT_EQ(run("inspect " + s.path("b.jsonl")).out.find("fp8 layers"), std::string::npos);
}

TEST(TelemetryCommand, WritesRecordsThatInspectSummarizesAndDraws) {
  Scratch s;
  const Result r = run("train --model mlp --steps 10 --eval-every 10 --precision fp16 --telemetry " + s.path("t.jsonl") +
                       " --telemetry-every 5 --telemetry-tensors activations,activation-grads");
  ASSERT_EQ(r.status, 0) << r.err;
  // Steps 1, 5, 10; three layers; outputs and output gradients.
  EXPECT_EQ(lines(slurp(s.path("t.jsonl"))), 3 * 3 * 2);
  const Result i = run("inspect " + s.path("t.jsonl") + " --plot " + s.path("h.svg"));
  ASSERT_EQ(i.status, 0) << i.err;
  EXPECT_NE(i.out.find("closest to underflow"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("closest to overflow"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("activation gradients at step 10 (3 layers)"), std::string::npos) << i.out;
  EXPECT_NE(slurp(s.path("h.svg")).find("fp16 subnormal"), std::string::npos);
  // A damaged record: one line naming the file and the line; the picture is left as it was.
  const std::string good = slurp(s.path("t.jsonl"));
  std::ofstream(s.path("bad.jsonl")) << good << "{\"step\": oops}\n";
  const Result bad = run("inspect " + s.path("bad.jsonl") + " --plot " + s.path("h.svg"));
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("bad.jsonl:19:"), std::string::npos) << bad.err;
  EXPECT_EQ(lines(bad.err), 1) << bad.err;
  EXPECT_EQ(run("inspect " + s.path("missing.jsonl")).status, 2);
  const Result kinds = run("train --model mlp --steps 2 --telemetry " + s.path("x.jsonl") + " --telemetry-tensors biases");
  EXPECT_EQ(kinds.status, 2);
  EXPECT_NE(kinds.err.find("--telemetry-tensors"), std::string::npos) << kinds.err;
}

TEST(StallCommand, ARunOfSkipsIsExplainedOnceAndStopsWithStatusThree) {
  Scratch s;
  const Result r = run("train --model mlp --steps 20 --eval-every 20 --precision fp16 --inject-nonfinite 3,4,5,6,7 "
                       "--skip-patience 3 --stop-on-stall");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_NE(r.err.find("step 3 skipped: non-finite gradient in fc0.weight"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mantissa: stopped: 3 steps in a row skipped (steps 3-5)"), std::string::npos) << r.err;
  // Without --stop-on-stall: one explanation, one summary line for the run of skips, the run finishes.
  const Result on = run("train --model mlp --steps 12 --eval-every 12 --precision fp16 --inject-nonfinite 3,4,5,6,7 --skip-patience 3");
  EXPECT_EQ(on.status, 0) << on.err;
  std::size_t n = 0;
  for (std::size_t at = on.err.find("warning: "); at != std::string::npos; at = on.err.find("warning: ", at + 1)) ++n;
  EXPECT_EQ(n, 1u) << on.err;
  EXPECT_NE(on.err.find("steps 3-7 skipped (5 in a row)"), std::string::npos) << on.err;
  EXPECT_EQ(run("train --model mlp --steps 2 --fp32-layers nope").status, 2);
}

TEST(AdaptiveCommand, RescuesFp16WithoutLossScalingAndItsPlanReplays) {
  Scratch s;
  const Result none = run(kUnderflowProne + "--steps 300 --precision fp16 --loss-scale none --json");
  const Result adaptive = run(kUnderflowProne + "--steps 300 --precision adaptive --adaptive-dtype fp16 --loss-scale none "
                              "--adaptive-fp8 off --json --plan-out " + s.path("plan.json") + " --metrics " + s.path("m.jsonl"));
  ASSERT_EQ(none.status, 0) << none.err;
  ASSERT_EQ(adaptive.status, 0) << adaptive.err;
  const double acc_none = nlohmann::json::parse(none.out).at("final_val_accuracy").get<double>();
  const auto j = nlohmann::json::parse(adaptive.out);
  EXPECT_GT(j.at("final_val_accuracy").get<double>(), acc_none + 0.1) << none.out << adaptive.out;
  EXPECT_EQ(j.at("product_shares").at("fp32").get<double>(), 1.0);
  EXPECT_NE(adaptive.err.find("step 1: precision: fc0 fp16 -> fp32"), std::string::npos) << adaptive.err;
  EXPECT_NE(slurp(s.path("m.jsonl")).find("\"precision_change\""), std::string::npos);
  const auto plan = nlohmann::json::parse(slurp(s.path("plan.json")));
  EXPECT_EQ(plan.at("layers").at("fc1").get<std::string>(), "fp32");
  // The plan, fixed: its own 16-bit format, nothing decided.
  const Result fixed = run(kUnderflowProne + "--steps 5 --loss-scale none --precision-plan " + s.path("plan.json"));
  EXPECT_EQ(fixed.status, 0) << fixed.err;
  EXPECT_EQ(fixed.err.find("precision:"), std::string::npos) << fixed.err;
  std::ofstream(s.path("bad.json")) << "{\"low\": \"fp16\", \"layers\": {\"fc9\": \"fp32\"}}";
  const Result bad = run(kUnderflowProne + "--steps 5 --precision-plan " + s.path("bad.json"));
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("fc9"), std::string::npos) << bad.err;
}

}  // namespace

// Settings that contradict each other or would do nothing (tools/mantissa/settings_agreement.h): each is
// one line and exit status 2 before any training; the harmless ones (an interval past the run) are named
// and the run goes on; a resumed checkpoint past --steps is refused; a changed --steps under the cosine
// schedule is named; compare refuses a precision given twice.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "cli_support.h"

namespace {

TEST(SettingsAgreement, ContradictionsAndFlagsThatDoNothingAreRefusedAtStart) {
  Scratch s;
  write_image_set(s.path("small"), 1, 8, 8, 3);  // 800 training images
  write_image_set(s.path("one"), 1, 8, 8, 1);    // every label 0
  const std::string mlp = "train --model mlp --steps 5 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {mlp + "--epochs 2", "--epochs and --steps both say how long to train"},
      {mlp + "--warmup 10", "--warmup 10 is longer than the run (5 steps)"},
      {mlp + "--inject-nonfinite 3,9", "--inject-nonfinite 9 is past the run's last step (5)"},
      {mlp + "--data " + s.path("small") + " --batch-size 1000", "--batch-size 1000 is more than the 800 training images"},
      {mlp + "--data " + s.path("one"), "every training label is the same class"},
      {mlp + "--precision fp16 --init-scale 8 --min-scale 16", "--min-scale 16.000000 is above --init-scale 8.000000"},
      {mlp + "--fp8-recipe current", "--fp8-recipe applies only with --precision fp8"},
      {mlp + "--amax-history 4", "--amax-history applies only with --precision fp8"},
      {mlp + "--adaptive-every 10", "--adaptive-every applies only with --precision adaptive"},
      {mlp + "--init-scale 1024", "--init-scale applies only with --loss-scale dynamic (fp16's default); this run: no loss scaling"},
      {mlp + "--precision fp16 --loss-scale deepspeed --hysteresis 4", "--hysteresis applies only with --loss-scale dynamic"},
      {mlp + "--precision fp16 --loss-scale static:128 --growth-factor 4", "this run: --loss-scale static:128"},
      {mlp + "--momentum 0.5", "--momentum applies only with --optimizer sgd; this run: adamw"},
      {mlp + "--precision bf16 --stochastic-rounding", "--stochastic-rounding applies only with --mode low-precision-model"},
      {mlp + "--checkpoint-every 2", "--checkpoint-every applies only with --checkpoint-dir"},
      {mlp + "--metrics-append", "--metrics-append applies only with --metrics PATH"},
      {mlp + "--telemetry-every 5", "--telemetry-every applies only with --telemetry PATH"},
      {"train --model gpt --steps 2 --normalize 0.5,0.5", "--normalize applies only with an image model (mlp, cnn, segment); this run: gpt"},
      {mlp + "--keep 1", "--keep applies only with --checkpoint-dir"},
      {mlp + "--resume-allow lr", "--resume-allow applies only with --resume"},
      {mlp + "--n-layer 2", "--n-layer applies only with --model gpt; this run: mlp"},
      {mlp + "--width 16", "--width applies only with --model cnn or segment; this run: mlp"},
      {"train --model cnn --steps 5 --hidden 64", "--hidden applies only with --model mlp or lstm; this run: cnn"},
      {"train --model gpt --steps 5 --bptt 32", "--bptt applies only with --model lstm; this run: gpt"},
      {mlp + "--grad-reduce bf16", "--grad-reduce applies only with data parallel training"},
      {mlp + "--checksum-every 10", "--checksum-every applies only with data parallel training"},
      {"compare --model mlp --steps 5 --precisions fp32,bf16,fp32", "--precisions: 'fp32' is given twice"},
  };
  for (const auto& [args, says] : cases) expect_refused(args, {says}, 20);
  // What the user did not give never contradicts: the defaults of all these flags run.
  EXPECT_EQ(run(mlp + "--eval-every 5").status, 0);
}

TEST(SettingsAgreement, IntervalsPastTheRunAreNamedAndTheRunGoesOn) {
  const Result r = run("train --model mlp --steps 3 --eval-every 50 --update-stats-every 7");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("note: --eval-every 50 is past the run's last step (3): this run evaluates only after its last step"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("note: --update-stats-every 7 is past"), std::string::npos) << r.err;
}

TEST(SettingsAgreement, AResumedRunSaysWhatItsStepsMean) {
  Scratch s;
  const std::string ck = " --checkpoint-dir " + s.path("ck");
  const std::string mlp = "train --model mlp --hidden 16 --eval-every 4";
  ASSERT_EQ(run(mlp + " --steps 4" + ck).status, 0);
  // Already past --steps: nothing to train.
  const Result past = run(mlp + " --steps 2 --resume" + ck);
  EXPECT_EQ(past.status, 2) << past.err;
  EXPECT_NE(past.err.find("ckpt-00000004.safetensors is at step 4, past --steps 2: give --steps above 4"), std::string::npos)
      << past.err;
  // A longer run under the cosine schedule: its curve changes, and the run says so.
  const Result longer = run(mlp + " --steps 6 --resume" + ck);
  ASSERT_EQ(longer.status, 0) << longer.err;
  EXPECT_NE(longer.err.find("note: --steps 6, where the checkpoint's run had 4: the cosine learning-rate curve is stretched"),
            std::string::npos)
      << longer.err;
  // A fresh run into a directory of another run's checkpoints would prune them: refused.
  const Result fresh = run(mlp + " --steps 4" + ck);
  EXPECT_EQ(fresh.status, 2) << fresh.err;
  EXPECT_NE(fresh.err.find("holds another run's checkpoints (ckpt-00000006.safetensors and more)"), std::string::npos) << fresh.err;
  EXPECT_TRUE(std::filesystem::exists(s.path("ck/ckpt-00000004.safetensors")));
}

}  // namespace

// The mantissa command as a user runs it: output format, exit statuses, and one-line errors.
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "../common/test_seed.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/numeric/format.h"
#include "mantissa/numeric/recipes.h"
#include "mantissa/ops/fp8.h"
#include "cli_support.h"

namespace {



TEST(CastCommand, WritesInputRoundedValueAndBits) {
  const Result r = run("cast --to fp16", "1\n0.1\n65520\n-0\nnan\n-inf\n0x1.8p3\n  2.5e-8 \n");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out,
            "1\t1\t0x3c00\n"
            "0.1\t0.099975586\t0x2e66\n"
            "65520\tinf\t0x7c00\n"
            "-0\t-0\t0x8000\n"
            "nan\tnan\t0x7e00\n"
            "-inf\t-inf\t0xfc00\n"
            "0x1.8p3\t12\t0x4a00\n"
            "2.5e-8\t0\t0x0000\n");
  EXPECT_EQ(r.err, "");
}

TEST(CastCommand, EveryFormatNameAndBitWidth) {
  EXPECT_EQ(run("cast --to bf16", "3.14159265\n").out, "3.14159265\t3.140625\t0x4049\n");
  EXPECT_EQ(run("cast --to e4m3", "448.5\n").out, "448.5\t448\t0x7e\n");
  EXPECT_EQ(run("cast --to e4m3", "500\n").out, "500\tnan\t0x7f\n");
  EXPECT_EQ(run("cast --to e4m3 --saturate", "500\n").out, "500\t448\t0x7e\n");
  EXPECT_EQ(run("cast --to e5m2", "1e6\n").out, "1e6\tinf\t0x7c\n");
  EXPECT_EQ(run("cast --to fp32", "0.1\n").out, "0.1\t0.1\t0x3dcccccd\n");
  EXPECT_EQ(run("cast --to e5m10", "0.1\n").out, "0.1\t0.099975586\t0x2e66\n");
  EXPECT_EQ(run("cast --to e3m4", "1.03\n").out, "1.03\t1\t0x30\n");
  EXPECT_EQ(run("cast --to e5m20", "1\n").out, "1\t1\t0x0f00000\n");  // 26 bits: 7 hex digits
  EXPECT_EQ(run("cast --to bf16 --round zero", "1.0078\n").out, "1.0078\t1\t0x3f80\n");
}

TEST(CastCommand, StochasticRoundingRepeatsWithTheSeed) {
  std::string input;
  for (int i = 0; i < 200; ++i) input += "1.001\n";
  const Result a = run("cast --to bf16 --round stochastic --seed 5", input);
  const Result b = run("cast --to bf16 --round stochastic --seed 5", input);
  const Result c = run("cast --to bf16 --round stochastic --seed 6", input);
  EXPECT_EQ(a.status, 0);
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
  EXPECT_NE(a.out.find("\t1\t0x3f80"), std::string::npos);        // some round down
  EXPECT_NE(a.out.find("\t1.0078125\t0x3f81"), std::string::npos);  // some up
}

TEST(CastCommand, ABadLineStopsWithItsNumberAndKeepsTheLinesBefore) {
  const Result r = run("cast --to bf16", "1\n2\nabc\n4\n");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "1\t1\t0x3f80\n2\t2\t0x4000\n");
  EXPECT_EQ(lines(r.err), 1);
  EXPECT_NE(r.err.find("line 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("abc"), std::string::npos) << r.err;
  for (const char* bad : {"1.5x\n", "\n", "1 2\n", "--\n"}) {
    EXPECT_EQ(run("cast --to bf16", bad).status, 2) << bad;
  }
  // A line without end (standard input from /dev/zero) is refused at 4096 bytes, not read on.
  const Result endless = run("cast --to bf16", "1\n" + std::string(5000, '7'));
  EXPECT_EQ(endless.status, 2);
  EXPECT_EQ(endless.out, "1\t1\t0x3f80\n");
  EXPECT_NE(endless.err.find("line 2 of the input is longer than 4096 bytes"), std::string::npos) << endless.err;
}

TEST(CastCommand, BadFlagsGiveOneLineAndStatusTwo) {
  for (const char* args : {"cast --to fp64", "cast --to", "cast", "cast --to bf16 --round up",
                           "cast --to bf16 --seed", "cast --to bf16 --seed -x", "frobnicate", ""}) {
    const Result r = run(args, "1\n");
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(lines(r.err), 1) << args << ": " << r.err;
    EXPECT_EQ(r.out, "") << args;
  }
  EXPECT_NE(run("cast --to fp64", "1\n").err.find("unknown format 'fp64'"), std::string::npos);
}

TEST(FormatsCommand, ListsEveryFormatWithItsNumbers) {
  const Result r = run("formats e3m4");
  EXPECT_EQ(r.status, 0);
  for (const char* s : {"fp32", "fp16", "bf16", "e4m3", "e5m2", "e2m1", "e2m3", "e3m2", "e3m4", "65504", "448", "57344",
                        "3.38953e+38", "S.1111.111", "7.5", "28"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  }
  // The formats (a header, the named ones, the one asked for), then the recipe table's every row with the
  // spec of its operands as the products take them.
  const std::string formats = r.out.substr(0, r.out.find("\n\n") + 1);
  EXPECT_EQ(lines(formats), 1 + static_cast<int>(mantissa::named_formats().size()) + 1) << r.out;
  std::size_t widest = 6;  // "recipe"
  for (const mantissa::QuantRecipe recipe : mantissa::QuantRecipe::all()) widest = std::max(widest, recipe.name().size());
  for (const mantissa::QuantRecipe recipe : mantissa::QuantRecipe::all()) {
    const mantissa::QuantOptions o{.recipe = recipe};
    const std::string row = std::string(recipe.name()) + std::string(widest - recipe.name().size() + 1, ' ') +
                            o.spec(mantissa::Fp8Operand::input).str();
    EXPECT_NE(r.out.find("\n" + row), std::string::npos) << row << "\n" << r.out;
  }
}

TEST(InfoCommand, ReportsKernelsAndThePathOfEachFamilyAndDtype) {
  const Result r = run("info --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto info = nlohmann::json::parse(r.out);
  EXPECT_TRUE(info["conversion_kernels"]["portable"].get<bool>());
  EXPECT_TRUE(info.contains("onednn_version") && info.contains("amx_bf16"));
  for (const char* kind : {"matmul", "convolution", "eltwise", "layer_norm", "softmax", "reorder"}) {
    for (const char* t : {"f32", "bf16", "f16"}) {
      EXPECT_FALSE(info["paths"][kind][t].get<std::string>().empty()) << kind << " " << t;
    }
    // oneDNN runs every family in f32 on every x86-64 CPU.
    EXPECT_TRUE(info["onednn"][kind]["f32"].get<bool>()) << kind;
  }
}

TEST(InfoCommand, SaysWhichFallbackRunsWhereTheCpuIsCappedToAvx2) {
  // oneDNN 2.6 has no bf16 below AVX-512: the capped run reports the f32-block and loop paths.
  const Result r = run("info --json", "", "ONEDNN_MAX_CPU_ISA=AVX2 MANTISSA_ISA=avx2");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto info = nlohmann::json::parse(r.out);
  EXPECT_NE(info["conversion_kernels_active"], "avx512");
  EXPECT_NE(info["conversion_kernels_active"], "avx512_bf16");
  EXPECT_FALSE(info["onednn"]["matmul"]["bf16"].get<bool>());
  EXPECT_FALSE(info["onednn"]["convolution"]["bf16"].get<bool>());
  EXPECT_EQ(info["paths"]["matmul"]["bf16"], "oneDNN f32 on blocks converted to f32, rounded once");
  EXPECT_EQ(info["paths"]["convolution"]["bf16"], "oneDNN f32, operands converted as they change layout, rounded once");
  EXPECT_EQ(info["paths"]["layer_norm"]["bf16"], "loops in f32, rounded once");
}

TEST(BenchCommand, MatmulAndMlpReportTheirFiguresAsJson) {
  // Tiny shapes: this checks what is reported, not how fast (timings are never asserted).
  const Result mm = run("bench matmul --m 64 --k 32 --n 48 --repeat 1 --dtype bf16 --json");
  ASSERT_EQ(mm.status, 0) << mm.err;
  for (const char* key : {"\"forward\"", "\"backward_data\"", "\"backward_weights\"", "\"gflops\"",
                          "\"peak_gflops\"", "\"fraction_of_peak\"", "\"peak_bytes\""}) {
    EXPECT_NE(mm.out.find(key), std::string::npos) << key;
  }
  const Result mlp = run("bench mlp --layers 2 --width 32 --batch 8 --steps 2 --json");
  ASSERT_EQ(mlp.status, 0) << mlp.err;
  for (const char* key : {"\"ms_per_step\"", "\"outside_onednn_fraction\"", "\"kernel_fraction\""}) {
    EXPECT_NE(mlp.out.find(key), std::string::npos) << key;
  }
  for (const char* bad : {"bench matmul --dtype e4m3", "bench matmul --m 0", "bench", "bench mlp --steps"}) {
    const Result r = run(bad);
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_EQ(lines(r.err), 1) << bad << ": " << r.err;
  }
}

// Runs in a scratch directory kept for the test's files.

TEST(BenchCommand, ModelStepsReportEveryFigureForEachPrecisionAndMode) {
  Scratch s;
  // A tiny GPT in fp32 and bf16 (both master-weight modes): what is reported, never how fast.
  const Result r = run("bench --model gpt-small --data " + s.text("pack my box with five dozen liquor jugs", 200) +
                       " --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch-size 4 --steps 2 --warmup 1"
                       " --precision fp32,bf16 --json --export " + s.path("init.safetensors"));
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("runs").size(), 3u);
  EXPECT_GT(j.at("copy_gbps").get<double>(), 0);
  for (const nlohmann::json& run : j.at("runs")) {
    for (const char* key : {"ms_per_step", "ms_min", "ms_max", "items_per_second", "model_gflops", "peak_gflops",
                            "fraction_of_peak", "data_ms_per_batch", "first_loss", "loss_scale"}) {
      EXPECT_TRUE(run.contains(key)) << key;
    }
    EXPECT_GT(run.at("ms_per_step").get<double>(), 0);
    EXPECT_GT(run.at("flops_per_step").get<double>(), 0);
    for (const char* category : {"parameters", "gradients", "activations", "optimizer_state", "total"}) {
      EXPECT_GT(run.at("peak_bytes").at(category).get<double>(), 0) << category;
    }
    EXPECT_TRUE(run.at("time_fraction").contains("attention"));
    EXPECT_TRUE(run.at("time_fraction").contains("optimizer"));
    // Bandwidth for the parts without products only; AdamW reads and writes each f32 weight, m and v and
    // reads each gradient: 7 x the f32 weights' bytes at least, every step.
    EXPECT_TRUE(run.at("gbps").contains("norm"));
    EXPECT_FALSE(run.at("gbps").contains("matmul"));
    EXPECT_FALSE(run.at("gbps").contains("attention"));
    EXPECT_GT(run.at("bytes_per_step").at("matmul").get<double>(), 0);
    // On the CPU nothing crosses to or from a device, and nothing waits for one.
    for (const char* count : {"to_host", "from_host", "waits"}) {
      EXPECT_EQ(run.at("host_device_per_step").at(count).get<double>(), 0) << count;
    }
    if (run.at("precision") == "fp32") {
      EXPECT_GE(run.at("bytes_per_step").at("optimizer").get<double>(), 7 * run.at("peak_bytes").at("parameters").get<double>());
    }
    // The same model, weights and batch: the first loss agrees to bf16's rounding.
    EXPECT_NEAR(run.at("first_loss").get<double>(), j.at("runs")[0].at("first_loss").get<double>(), 0.02);
    if (run.at("precision") != "fp32") {
      EXPECT_TRUE(run.contains("speedup_vs_fp32"));
    }
  }
  for (const char* file : {"init-f32.safetensors", "init-bf16.safetensors", "init-bf16-lpm.safetensors"}) {
    EXPECT_TRUE(std::filesystem::exists(s.path(file))) << file;
  }
  // One precision gives one flat object; the CNN reports images and runs on Fashion-MNIST.
  const Result cnn = run("bench --model cnn --width 4 --batch-size 8 --steps 1 --warmup 0 --precisions fp16 "
                         "--mode low-precision-model --json");
  ASSERT_EQ(cnn.status, 0) << cnn.err;
  const nlohmann::json c = nlohmann::json::parse(cnn.out);
  EXPECT_EQ(c.at("mode"), "low-precision-model");
  EXPECT_TRUE(c.at("time_fraction").contains("conv"));
  for (const char* bad : {"bench --model resnet", "bench --model cnn --precisions fp4", "bench --model cnn --steps 0",
                          "bench --model cnn --mode fast", "bench --model gpt-wide --data /nonexistent"}) {
    const Result e = run(bad);
    EXPECT_NE(e.status, 0) << bad;
    EXPECT_EQ(lines(e.err), 1) << bad << ": " << e.err;
  }
}

// A precision name means in bench what it means in train (issue 49): mxfp8, mxfp4 and nvfp4 time steps
// in that recipe (bench read them as bf16 and timed "bf16 autocast" twice), and a recipe that would
// quantize no layer of the model (the CNN's one linear layer is its head, kept bf16) is refused in one
// line before anything is timed, never run as bf16 under its name.
TEST(BenchCommand, EveryPrecisionNameRunsItsRecipeOrIsRefused) {
  Scratch s;
  const std::string tiny = "bench --model gpt-small --data " + s.text("pack my box with five dozen liquor jugs", 200) +
                           " --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch-size 4 --steps 1 --warmup 0 --json"
                           " --mode autocast --precisions ";
  for (const std::string name : {"mxfp8", "mxfp4", "nvfp4"}) {
    const Result r = run(tiny + name);
    ASSERT_EQ(r.status, 0) << name << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out).at("precision"), "fp8-" + name) << r.out.substr(0, 300);
  }
  const Result two = run(tiny + "bf16,mxfp8");
  ASSERT_EQ(two.status, 0) << two.err;
  const nlohmann::json runs = nlohmann::json::parse(two.out).at("runs");
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].at("precision"), "bf16");
  EXPECT_EQ(runs[1].at("precision"), "fp8-mxfp8");
  for (const char* name : {"mxfp8", "nvfp4", "fp8"}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Result r = run(std::string("bench --model cnn --steps 1 --precisions bf16,") + name);
    EXPECT_EQ(r.status, 2) << name << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << name << ": " << r.err;
    EXPECT_NE(r.err.find("quantizes no layer of this model"), std::string::npos) << r.err;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30)) << name << ": timed something first?";
  }
}

// --device: what cannot run is refused in one line before any data is read: a name that is no device
// (status 2), and cuda where no GPU can be used, with the reason `info` gives (status 1). Where a GPU is
// usable, tests/gpu trains on it instead.
TEST(TrainCommand, TheDeviceFlagRefusesWhatCannotRunInOneLine) {
  const Result bad = run("train --model mlp --steps 1 --device tpu");
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.err, "mantissa: --device: 'tpu' is not cpu or cuda\n");
  const auto info = nlohmann::json::parse(run("info --json").out);
  const std::string reason = info["cuda"]["unavailable"].get<std::string>();
  EXPECT_EQ(info["cuda"]["built"].get<bool>(), !info["cuda"]["versions"].get<std::string>().empty());
  if (reason.empty()) GTEST_SKIP() << "a GPU is usable here";
  const Result r = run("train --model mlp --steps 1 --device cuda");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "mantissa: --device cuda: " + reason + "\n");
}

TEST(TrainCommand, TrainsOnFashionMnistAndWritesMetricsAndSummary) {
  Scratch s;
  const Result r = run("train --model mlp --steps 60 --eval-every 30 --lr 3e-3 --precision fp16 --inject-nonfinite 10,20 "
                       "--metrics " + s.path("m.jsonl") + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* key : {"\"final_val_accuracy\"", "\"final_val_loss\"", "\"wall_seconds\"", "\"skipped_steps\":2",
                          "\"steps\":60", "\"peak_bytes\""}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
  const std::string m = slurp(s.path("m.jsonl"));
  EXPECT_EQ(lines(m), 63);  // the run record, 60 steps and 2 evaluations
  EXPECT_FALSE(std::filesystem::exists(s.path("m.jsonl.partial")));
  for (const char* key : {"\"loss_scale\"", "\"grad_norm\"", "\"underflow_fraction\"", "\"throughput\"",
                          "\"nonfinite\"", "\"val_accuracy\"", "\"peak_bytes\":{\"activations\":", "\"lr\""}) {
    EXPECT_NE(m.find(key), std::string::npos) << key;
  }
  EXPECT_NE(m.find("{\"grad_norm\":"), std::string::npos);
  EXPECT_NE(m.find("\"skipped\":true"), std::string::npos);
  // The accuracy after 60 steps is well above chance (10%).
  const auto at = r.out.find("\"final_val_accuracy\":");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stod(r.out.substr(at + 21)), 0.6);
}


double final_accuracy(const std::string& summary) {
  return nlohmann::json::parse(summary).at("final_val_accuracy").get<double>();
}

TEST(TrainCommand, ImageModelsTakeTheirShapeFromTheData) {
  Scratch s;
  // Three channels of 12x10 pixels and five classes (chance: 20%).
  write_image_set(s.path("rgb"), 3, 12, 10, 5);
  for (const char* model : {"mlp", "cnn"}) {
    const Result r = run(std::string("train --model ") + model + " --data " + s.path("rgb") +
                         (model == std::string("mlp") ? " --hidden 32" : " --width 8") + " --steps 40 --batch-size 32 --eval-every 40 --lr 1e-2 --precision bf16 --json"
                         " --checkpoint-dir " + s.path(std::string("ckpt-") + model));
    ASSERT_EQ(r.status, 0) << model << ": " << r.err;
    EXPECT_GT(final_accuracy(r.out), 0.6) << model << ": " << r.out;
  }
  // The checkpoint records the sizes; resuming on other data says which differ.
  write_image_set(s.path("gray"), 1, 8, 8, 3);
  const Result other = run("train --model mlp --data " + s.path("gray") + " --hidden 32 --steps 60 --batch-size 32 --precision bf16"
                           " --checkpoint-dir " + s.path("ckpt-mlp") + " --resume");
  EXPECT_EQ(other.status, 2);
  EXPECT_EQ(lines(other.err), 1) << other.err;
  EXPECT_NE(other.err.find("image size (CxHxW) 3x12x10 (this run: 1x8x8), classes 5 (this run: 3)"), std::string::npos)
      << other.err;
  // Images the CNN cannot pool twice.
  write_image_set(s.path("tiny"), 1, 3, 3, 2);
  const Result tiny = run("train --model cnn --data " + s.path("tiny") + " --steps 2");
  EXPECT_EQ(tiny.status, 2);
  EXPECT_EQ(lines(tiny.err), 1) << tiny.err;
  EXPECT_NE(tiny.err.find("at least 4x4 pixels (it pools twice by 2); these are 3x3"), std::string::npos) << tiny.err;
  // The MLP has no such limit.
  EXPECT_EQ(run("train --model mlp --data " + s.path("tiny") + " --steps 2 --eval-every 2").status, 0);
}

TEST(TrainCommand, TheScaleBacksOffAtInjectedOverflowsAsEachRecipeSays) {
  // Overflows injected at steps 5, 6 and 7 of an fp16 run. GradScaler (dynamic): each halves the scale.
  // DeepSpeed (hysteresis 2, re-armed only on growth): the first is tolerated, then each halves it.
  Scratch s;
  const auto scales = [&](const std::string& recipe) {
    const Result r = run("train --model mlp --steps 9 --eval-every 9 --precision fp16 --inject-nonfinite 5,6,7 "
                         "--loss-scale " + recipe + " --metrics " + s.path(recipe + ".jsonl"));
    EXPECT_EQ(r.status, 0) << r.err;
    std::vector<double> out;
    std::vector<bool> skipped;
    std::istringstream lines_in(slurp(s.path(recipe + ".jsonl")));
    for (std::string line; std::getline(lines_in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (!j.contains("loss_scale")) continue;  // an evaluation
      out.push_back(j.at("loss_scale").get<double>());
      skipped.push_back(j.at("skipped").get<bool>());
    }
    EXPECT_EQ(skipped, (std::vector<bool>{false, false, false, false, true, true, true, false, false})) << recipe;
    return out;
  };
  // The scale each step's gradients carried.
  EXPECT_EQ(scales("dynamic"), (std::vector<double>{65536, 65536, 65536, 65536, 65536, 32768, 16384, 8192, 8192}));
  EXPECT_EQ(scales("deepspeed"), (std::vector<double>{65536, 65536, 65536, 65536, 65536, 65536, 32768, 16384, 16384}));
}

TEST(TrainCommand, TrainsAGptOnAnyTextFile) {
  Scratch s;
  const Result r = run("train --model gpt --data " + s.text("the quick brown fox jumps over the lazy dog", 400) +
                       " --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch-size 8 --steps 20 --eval-every 10 "
                       "--eval-batches 2 --lr 3e-3 --precision bf16 --mode low-precision-model --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"final_val_accuracy\":null"), std::string::npos) << r.out;
}

// GPT-2's GELU (the tanh form) is a setting of the model: it trains, a checkpoint records it (resuming
// with the other form is refused, naming it), and an unknown form is a one-line error.
TEST(TrainCommand, TheGptsGeluFormIsAChoiceACheckpointKeeps) {
  Scratch s;
  const std::string data = s.text("the quick brown fox jumps over the lazy dog", 400), dir = s.path("ckpt");
  const std::string gpt = "train --model gpt --data " + data +
                          " --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch-size 8 --eval-every 10 --eval-batches 2 "
                          "--checkpoint-dir " + dir;
  const Result tanh = run(gpt + " --steps 10 --gelu tanh --json");
  ASSERT_EQ(tanh.status, 0) << tanh.err;
  const Result erf = run(gpt + " --steps 20 --resume");
  EXPECT_EQ(erf.status, 2);
  EXPECT_NE(erf.err.find("--gelu tanh (this run: erf)"), std::string::npos) << erf.err;
  EXPECT_EQ(run(gpt + " --steps 20 --resume --gelu tanh").status, 0);
  const Result bad = run("train --model gpt --gelu sigmoid --steps 1");
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_EQ(lines(bad.err), 1) << bad.err;
}

TEST(TrainCommand, BadInputGivesOneLineAndKeepsExistingFiles) {
  Scratch s;
  std::ofstream(s.path("old.jsonl")) << "precious\n";
  for (const char* args : {"train --model resnet", "train --precision fp4", "train --loss-scale static:abc",
                           "train --mode low-precision-model", "train --steps 0", "train --optimizer lion",
                           "train --inject-nonfinite 3,x", "train --steps"}) {
    const Result r = run(std::string(args) + " --metrics-append --metrics " + s.path("old.jsonl"));
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << args << ": " << r.err;
  }
  const Result missing = run("train --data " + s.path("nowhere") + " --metrics-append --metrics " + s.path("old.jsonl"));
  EXPECT_EQ(missing.status, 2);
  EXPECT_EQ(lines(missing.err), 1) << missing.err;
  EXPECT_NE(missing.err.find("nowhere"), std::string::npos) << missing.err;
  EXPECT_EQ(slurp(s.path("old.jsonl")), "precious\n");
  EXPECT_FALSE(std::filesystem::exists(s.path("old.jsonl.partial")));
}

// The "loss" field of every step line of a metrics file, as written (so equality is bit-equality).
std::vector<std::string> losses(const std::string& metrics) {
  std::vector<std::string> out;
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find("\"loss\":");
    if (at == std::string::npos || line.find("val_loss") != std::string::npos) continue;
    out.push_back(line.substr(at, line.find(',', at) - at));
  }
  return out;
}

TEST(TrainCommand, ResumeContinuesBitIdentically) {
  Scratch s;
  for (const std::string& model : std::vector<std::string>{"mlp --precision fp16 --inject-nonfinite 25",
                                  "gpt --data " + s.path("t.txt") + " --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 "
                                  "--batch-size 4 --eval-batches 1 --precision bf16 --mode low-precision-model"}) {
    {
      std::ofstream f(s.path("t.txt"));
      for (int i = 0; i < 300; ++i) f << "a stitch in time saves nine, " << i << "\n";
    }
    const std::string dir = s.path("ckpt");
    std::filesystem::remove_all(dir);
    std::filesystem::remove(s.path("a.jsonl"));  // metrics are appended
    std::filesystem::remove(s.path("b.jsonl"));
    const std::string base = "train --model " + model + " --steps 30 --eval-every 30 --checkpoint-every 10 --checkpoint-dir " + dir;
    const Result whole = run(base + " --metrics " + s.path("a.jsonl"));
    ASSERT_EQ(whole.status, 0) << whole.err;
    std::filesystem::remove(dir + "/ckpt-00000030.safetensors");
    std::filesystem::remove(dir + "/ckpt-00000020.safetensors");  // "interrupted" after step 10
    const Result resumed = run(base + " --resume --metrics " + s.path("b.jsonl"));
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    const std::vector<std::string> a = losses(slurp(s.path("a.jsonl")));
    const std::vector<std::string> b = losses(slurp(s.path("b.jsonl")));
    ASSERT_EQ(a.size(), 30U);
    ASSERT_EQ(b.size(), 20U);
    EXPECT_EQ(std::vector<std::string>(a.begin() + 10, a.end()), b) << model;
  }
}

TEST(TrainCommand, KilledAtRandomMomentsWhileCheckpointingItResumesBitIdentically) {
  // A checkpoint every step, and kill -9 at seeded random moments (during steps, writes, fsyncs and
  // pruning alike); each restart resumes from the newest checkpoint. The last checkpoint must equal,
  // byte for byte, that of a run never interrupted, and no damaged checkpoint may ever be picked up.
  Scratch s;
  const std::string flags = "train --model mlp --hidden 64 --precision fp16 --steps 600 --eval-every 600 "
                            "--checkpoint-every 1 --keep 2 --checkpoint-dir ";
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(run(flags + s.path("whole")).status, 0);
  const double whole = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::uint64_t seed = mantissa::testing::test_seed();
  std::printf("kill timings seed %llu (MANTISSA_TEST_SEED=N replays one, =random draws one)\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const std::string killed = s.path("killed");
  const auto has_checkpoint = [&] {
    for (const auto& e : std::filesystem::directory_iterator(killed)) {
      if (e.path().extension() == ".safetensors") return true;
    }
    return false;
  };
  int kills = 0;
  // A machine busier than when `whole` was measured can finish a run before any kill: then start over,
  // with the kill times scaled down by half, a few times.
  for (double scale = 1; kills == 0 && scale > 0.05; scale /= 2) {
    std::filesystem::remove_all(killed);
    std::filesystem::create_directories(killed);
    for (int attempt = 0; attempt < 40; ++attempt) {
      const bool resume = has_checkpoint();
      // Between 20% and 70% of an uninterrupted run's time: the first attempt is killed, and later ones,
      // with less left to do, finish in the end.
      const double after = scale * whole * (0.2 + 0.5 * static_cast<double>(rng() % 1000) / 1000);
      const std::string cmd = "timeout -s KILL " + std::to_string(after) + " " + std::string(MANTISSA_CLI) + " " +
                              flags + killed + (resume ? " --resume" : "") + " >/dev/null 2>" + s.path("err");
      const int raw = std::system(cmd.c_str());
      const int status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
      if (status == 0) break;
      ASSERT_EQ(status, 137) << "not killed but failed: " << slurp(s.path("err"));  // timeout's code for KILL
      ++kills;
    }
  }
  std::printf("killed %d times, then finished\n", kills);
  EXPECT_GT(kills, 0) << "never killed: the runs were faster than the kill times";
  const std::string last = "/ckpt-00000600.safetensors";
  ASSERT_TRUE(std::filesystem::exists(killed + last)) << "never finished";
  EXPECT_EQ(slurp(killed + last), slurp(s.path("whole") + last)) << "after " << kills << " kills";
}

TEST(TrainCommand, MismatchedOrDamagedCheckpointsAreRefusedAndKept) {
  Scratch s;
  const std::string dir = s.path("ckpt");
  ASSERT_EQ(run("train --model mlp --steps 10 --eval-every 10 --checkpoint-dir " + dir).status, 0);
  const std::string file = dir + "/ckpt-00000010.safetensors";
  ASSERT_TRUE(std::filesystem::exists(file));
  const Result other = run("train --model mlp --hidden 128 --steps 20 --checkpoint-dir " + dir + " --resume");
  EXPECT_EQ(other.status, 2);
  EXPECT_EQ(lines(other.err), 1) << other.err;
  EXPECT_NE(other.err.find("written by a run with --hidden 256 (this run: 128)"), std::string::npos) << other.err;
  const auto size = std::filesystem::file_size(file);
  std::filesystem::resize_file(file, size - 100);
  const Result damaged = run("train --model mlp --steps 20 --checkpoint-dir " + dir + " --resume");
  EXPECT_EQ(damaged.status, 2);
  EXPECT_EQ(lines(damaged.err), 1) << damaged.err;
  EXPECT_NE(damaged.err.find("ckpt-00000010.safetensors"), std::string::npos) << damaged.err;
  EXPECT_TRUE(std::filesystem::exists(file));  // left for the user to inspect
  const Result none = run("train --model mlp --steps 20 --checkpoint-dir " + s.path("empty") + " --resume");
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("no checkpoint"), std::string::npos) << none.err;
}

TEST(TrainCommand, ResumeNamesChangedTrainingSettingsUnlessAllowed) {
  Scratch s;
  const std::string dir = s.path("ckpt");
  const std::string mlp = "train --model mlp --precision bf16 --mode low-precision-model ";
  ASSERT_EQ(run(mlp + "--steps 4 --eval-every 4 --lr 1e-3 --checkpoint-dir " + dir).status, 0);
  const Result changed = run(mlp + "--steps 8 --eval-every 8 --lr 2e-3 --clip 1 --grad-accum 2 "
                             "--loss-scale static:8 --stochastic-rounding --checkpoint-dir " + dir + " --resume");
  EXPECT_EQ(changed.status, 2);
  EXPECT_EQ(lines(changed.err), 1) << changed.err;
  for (const char* what : {"--lr 0.001 (this run: 0.002)", "--clip 0 (this run: 1)", "--grad-accum 1 (this run: 2)",
                           "--stochastic-rounding off (this run: on)", "--loss-scale none (this run: static:8)"}) {
    EXPECT_NE(changed.err.find(what), std::string::npos) << what << " in " << changed.err;
  }
  const Result allowed = run(mlp + "--steps 8 --eval-every 8 --lr 2e-3 --resume-allow lr --checkpoint-dir " + dir + " --resume");
  EXPECT_EQ(allowed.status, 0) << allowed.err;
  EXPECT_EQ(run(mlp + "--steps 8 --resume-allow hidden --checkpoint-dir " + dir + " --resume").status, 2);  // usage
}

TEST(TrainCommand, Fp8TrainsWithEachRecipeReportsItsCountersAndKeepsItsRecipeOnResume) {
  Scratch s;
  for (const char* recipe : {"delayed", "current", "block"}) {
    const std::string metrics = s.path(std::string("m-") + recipe);
    const Result r = run("train --model mlp --precision fp8 --fp8-recipe " + std::string(recipe) +
                         " --steps 3 --eval-every 3 --batch-size 32 --metrics " + metrics);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("fp8 in 1 of 3 layers (" + std::string(recipe) + "): fc1; bf16 in 2: fc0 (first layer), fc2 (last layer)"),
              std::string::npos) << r.err;
    const std::string m = slurp(metrics);
    EXPECT_NE(m.find("\"fp8\":{\"quantized\":"), std::string::npos) << m;
  }
  const Result all = run("train --model mlp --precision fp8 --fp8-first-last fp8 --steps 1 --eval-every 1");
  EXPECT_NE(all.err.find("fp8 in 3 of 3 layers (delayed): fc0, fc1, fc2"), std::string::npos) << all.err;
  for (const char* bad : {"--fp8-recipe tensorwise", "--fp8-format e5m2", "--amax-history 0", "--fp8-margin 99",
                          "--fp8-first-last maybe", "--fp8-bf16-layers fc7"}) {
    const Result r = run("train --model mlp --precision fp8 --steps 1 " + std::string(bad));
    EXPECT_NE(r.status, 0) << bad;
    EXPECT_EQ(lines(r.err), 1) << bad << ": " << r.err;
  }
  const std::string dir = s.path("ckpt");
  ASSERT_EQ(run("train --model mlp --precision fp8 --steps 2 --eval-every 2 --checkpoint-dir " + dir).status, 0);
  const Result other = run("train --model mlp --precision fp8 --fp8-recipe block --steps 4 --checkpoint-dir " + dir + " --resume");
  EXPECT_NE(other.status, 0);
  EXPECT_EQ(lines(other.err), 1) << other.err;
  EXPECT_NE(other.err.find("fp8 delayed"), std::string::npos) << other.err;
  EXPECT_EQ(run("train --model mlp --precision fp8 --steps 4 --eval-every 4 --checkpoint-dir " + dir + " --resume").status, 0);
}

// A plan file picks each fp8 layer's recipe: the run's, or a layer's own. The start line says so, the
// checkpoint keeps it, and a resume by another recipe is refused in one line.
TEST(TrainCommand, APlanFileCarriesTheRecipesAndResumeKeepsThem) {
  Scratch s;
  const auto plan = [&](const char* name, const char* fc1) {
    std::ofstream(s.path(name)) << R"({"low": "bf16", "fp8": {"recipe": "mxfp8"}, "layers": {"fc0": "bf16", "fc1": )" << fc1
                                << R"(, "fc2": "fp8"}})";
    return " --precision-plan " + s.path(name);
  };
  const std::string nvfp4 = plan("nvfp4.json", R"({"level": "fp8", "recipe": "nvfp4"})");
  const std::string dir = " --checkpoint-dir " + s.path("ckpt");
  const Result r = run("train --model mlp --steps 2 --eval-every 2 --batch-size 32" + nvfp4 + dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("bf16 autocast: mxfp8 in 2 of 3 layers: fc1 [nvfp4], fc2; bf16 in 1: fc0"), std::string::npos) << r.err;
  const Result other = run("train --model mlp --steps 4 --batch-size 32 --resume" + plan("mxfp8.json", "\"fp8\"") + dir);
  EXPECT_NE(other.status, 0);
  EXPECT_EQ(lines(other.err), 1) << other.err;
  EXPECT_NE(other.err.find("another precision plan"), std::string::npos) << other.err;
  const Result same = run("train --model mlp --steps 4 --eval-every 4 --batch-size 32 --resume" + nvfp4 + dir);
  EXPECT_EQ(same.status, 0) << same.err;
  const Result typo = run("train --model mlp --steps 2 --batch-size 32" + plan("typo.json", R"({"level": "fp8", "recipe": "nvfp5"})"));
  EXPECT_EQ(typo.status, 2);
  EXPECT_EQ(lines(typo.err), 1) << typo.err;
  EXPECT_NE(typo.err.find("layer \"fc1\""), std::string::npos) << typo.err;
}

// Every name --precision takes, from the recipe table (a recipe added to it is tested here unasked), and
// whether it quantizes products.
namespace {
std::vector<std::string> precision_names() {
  std::vector<std::string> names{"fp32", "bf16", "fp16", "fp8"};
  for (const mantissa::QuantRecipe r : mantissa::QuantRecipe::all()) {
    if (r.info().microscaled()) names.emplace_back(r.name());
  }
  names.emplace_back("adaptive");
  return names;
}
bool quantizes(const std::string& precision) {
  const mantissa::QuantRecipe* r = mantissa::QuantRecipe::find(precision);
  return precision == "fp8" || (r != nullptr && r->info().microscaled());
}
}  // namespace

// The step records of a --metrics file that say what a run computed: each step's loss, loss scale,
// gradient norm and quantizer counters (wall times and throughput left out).
namespace {
std::vector<std::string> computed_steps(const std::string& metrics) {
  std::vector<std::string> out;
  std::istringstream in(slurp(metrics));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("step") || !j.contains("loss")) continue;
    nlohmann::json kept;
    for (const char* key : {"step", "loss", "loss_scale", "grad_norm", "fp8", "fp8_layers"}) {
      if (j.contains(key)) kept[key] = j.at(key);
    }
    out.push_back(kept.dump());
  }
  return out;
}
}  // namespace

// A layer put in FP8 by a plan file runs as the same layer put there by the flags, bit for bit, for every
// recipe: losses, scales, gradient norms, counters (issue 49: a plan's delayed recipe ran as current
// scaling, and a plan run recorded no counters, because the trainer's per-step FP8 bookkeeping asked the
// run-wide flag, which a plan leaves unset). The MLP's fc1 is the layer the flags' default puts in FP8
// (the first and the last stay bf16).
TEST(TrainCommand, APlanFilesLayerRunsBitForBitAsTheFlagsSameLayerForEveryRecipe) {
  Scratch s;
  const std::string common = "train --model mlp --steps 6 --eval-every 6 --batch-size 32 --metrics ";
  for (const mantissa::QuantRecipe r : mantissa::QuantRecipe::all()) {
    const std::string recipe(r.name());
    const std::string plan = s.path(recipe + ".json");
    std::ofstream(plan) << R"({"low": "bf16", "fp8": {"recipe": ")" << recipe
                        << R"("}, "layers": {"fc0": "bf16", "fc1": "fp8", "fc2": "bf16"}})";
    const Result by_plan = run(common + s.path(recipe + "-plan.jsonl") + " --precision bf16 --precision-plan " + plan);
    ASSERT_EQ(by_plan.status, 0) << recipe << ": " << by_plan.err;
    const Result by_flags = run(common + s.path(recipe + "-flags.jsonl") + " --precision fp8 --fp8-recipe " + recipe);
    ASSERT_EQ(by_flags.status, 0) << recipe << ": " << by_flags.err;
    const std::vector<std::string> a = computed_steps(s.path(recipe + "-plan.jsonl"));
    const std::vector<std::string> b = computed_steps(s.path(recipe + "-flags.jsonl"));
    ASSERT_EQ(a.size(), 6u) << recipe;
    EXPECT_NE(a.front().find("\"fp8_layers\":{\"fc1\""), std::string::npos) << recipe << ": " << a.front();
    EXPECT_EQ(a, b) << recipe;
  }
}

// Every precision name, through each door that takes it, runs what was asked (issue 49): the plan each
// door records (train's and compare's --json) holds the levels and the recipe the name means, and the
// two doors record the same plan; bench times a step under the same name. A door that read a name as
// something else (bench read mxfp8 as bf16) fails here. The MLP: fc0, fc1, fc2; a quantized recipe puts
// fc1 in it (the first and the last stay bf16).
TEST(Doors, EveryPrecisionNameRunsWhatItNamesThroughEveryDoor) {
  const std::string mlp = " --model mlp --steps 1 --eval-every 1 --batch-size 16 --json --quiet";
  for (const std::string& name : precision_names()) {
    const Result trained = run("train --precision " + name + mlp);
    ASSERT_EQ(trained.status, 0) << name << ": " << trained.err;
    const nlohmann::json plan = nlohmann::json::parse(trained.out).at("precision_plan");
    const nlohmann::json& layers = plan.at("layers");
    const bool quantized = quantizes(name);
    const std::string low = name == "fp16" ? "fp16" : "bf16";
    EXPECT_EQ(plan.at("low"), low) << name;
    EXPECT_EQ(layers.at("fc0"), name == "fp32" ? "fp32" : low) << name;
    EXPECT_EQ(layers.at("fc1"), name == "fp32" ? "fp32" : quantized ? name : low) << name;  // a quantized layer by its recipe's word
    EXPECT_EQ(layers.at("fc2"), name == "fp32" ? "fp32" : low) << name;
    if (quantized) {
      EXPECT_EQ(plan.at("quantized").at("recipe"), name == "fp8" ? "delayed" : name) << name;
    }
    const Result compared = run("compare --no-plot --precisions " + name + mlp);
    ASSERT_EQ(compared.status, 0) << name << ": " << compared.err;
    EXPECT_EQ(nlohmann::json::parse(compared.out).at("runs").at(0).at("precision_plan"), plan) << name;
  }
  // A recipe that would put no layer of the model in it is refused, never run as bf16 under its name (the
  // CNN's one linear layer is its head, which stays bf16), unless a flag puts the head in it.
  for (const std::string name : {"fp8", "mxfp8", "nvfp4"}) {
    const Result r = run("train --model cnn --steps 1 --width 4 --batch-size 8 --precision " + name);
    EXPECT_EQ(r.status, 2) << name << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << name << ": " << r.err;
    EXPECT_NE(r.err.find("puts no layer of this model in it"), std::string::npos) << name << ": " << r.err;
  }
  EXPECT_EQ(run("train --model cnn --steps 1 --width 4 --batch-size 8 --eval-every 1 --precision mxfp8 --fp8-first-last fp8").status, 0);
  // compare refuses it before its first run, naming itself and the precision.
  const Result compared = run("compare --model cnn --steps 1 --width 4 --batch-size 8 --no-plot --precisions bf16,mxfp8");
  EXPECT_EQ(compared.status, 2) << compared.err;
  EXPECT_EQ(lines(compared.err), 1) << compared.err;
  EXPECT_EQ(compared.err.find("== bf16"), std::string::npos) << compared.err;
  EXPECT_NE(compared.err.find("compare --precisions mxfp8: mxfp8 puts no layer of this model in it"), std::string::npos) << compared.err;
  Scratch s;
  const std::string bench = "bench --model gpt-small --data " + s.text("pack my box with five dozen liquor jugs", 200) +
                            " --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --batch-size 4 --steps 1 --warmup 0 --json"
                            " --mode autocast --fp8-recipe delayed --precisions ";
  for (const std::string& name : precision_names()) {
    if (name == "adaptive") continue;  // (bench times fixed precisions)
    const Result r = run(bench + name);
    ASSERT_EQ(r.status, 0) << name << ": " << r.err;
    const std::string want = name == "fp8" ? "fp8-delayed" : quantizes(name) ? "fp8-" + name : name;
    EXPECT_EQ(nlohmann::json::parse(r.out).at("precision"), want) << name;
  }
}

// The checkpoint door: every precision name's checkpoint records the plan its run recorded, and a resume
// from it runs and records that same plan (issue 49: a resume resolves its precision from the flags and
// the checkpoint alike, or is refused).
TEST(Doors, AResumeRunsAndRecordsThePlanItsCheckpointWasSavedWith) {
  Scratch s;
  for (const std::string& name : precision_names()) {
    const std::string dir = s.path("ck-" + name);
    const std::string mlp = " --model mlp --batch-size 16 --eval-every 1 --json --quiet --precision " + name + " --checkpoint-dir " + dir;
    const Result first = run("train --steps 1" + mlp);
    ASSERT_EQ(first.status, 0) << name << ": " << first.err;
    const nlohmann::json plan = nlohmann::json::parse(first.out).at("precision_plan");
    const mantissa::Safetensors ckpt = mantissa::read_safetensors(dir + "/ckpt-00000001.safetensors");
    // (An adaptive run's plan is its controller's, saved with the controller's state.)
    const nlohmann::json saved = name == "adaptive" ? nlohmann::json::parse(ckpt.metadata.at("adaptive_precision")).at("plan")
                                                    : nlohmann::json::parse(ckpt.metadata.at("precision_plan"));
    EXPECT_EQ(saved, plan) << name;
    const Result resumed = run("train --steps 2 --resume" + mlp);
    ASSERT_EQ(resumed.status, 0) << name << ": " << resumed.err;
    EXPECT_EQ(nlohmann::json::parse(resumed.out).at("precision_plan"), plan) << name;
  }
}

// A misspelled command or flag gets the nearest name the command has, in the one line that refuses it.
TEST(Cli, MisspelledCommandsAndFlagsGetTheNearestName) {
  expect_refused("trian --steps 1", {"'trian' is not a command (did you mean train?)", "the commands: formats, cast, train"});
  expect_refused("xyzzy", {"'xyzzy' is not a command; the commands:"});
  expect_refused("train --stpes 3", {"--stpes is no flag of train (did you mean --steps?)"});
  expect_refused("compare --precisons bf16,fp16", {"(did you mean --precisions?)"});
  expect_refused("inspect x.jsonl --nonsense-flag", {"--nonsense-flag is no flag of inspect (see inspect --help)"});
  // train --help: in sections, the five flags most runs set first.
  const Result help = run("train --help");
  ASSERT_EQ(help.status, 0);
  const auto start = help.out.find("Start here:");
  ASSERT_NE(start, std::string::npos) << help.out;
  EXPECT_LT(start, help.out.find("Precision:"));
  for (const char* flag : {"--model", "--data", "--precision", "--steps", "--batch-size"}) {
    EXPECT_LT(help.out.find(std::string("  ") + flag + " "), help.out.find("Precision:")) << flag;
  }
  for (const char* section : {"Loss scaling:", "Checkpoints and weights:", "Output:"}) EXPECT_NE(help.out.find(section), std::string::npos);
  const Result v = run("--version");
  EXPECT_EQ(v.status, 0);
  EXPECT_EQ(v.out.rfind("mantissa 0.", 0), 0u) << v.out;
}

// One spelling per concept across the commands, the old ones still read with a note naming the current:
// a list of precisions is --precisions (bench's --precision was its old name), a switch is on or off
// (bench's --overlap took 1 and 0), a dtype is fp32, bf16 or fp16 (bench took f32 and f16), and a refused
// resume names the checkpoint's precision as the flags do.
TEST(Cli, OneSpellingPerConceptWithTheOldOnesNamed) {
  const std::string tiny = "bench --model cnn --width 4 --batch-size 8 --steps 1 --warmup 0 --mode autocast --json ";
  const Result current = run(tiny + "--precisions bf16");
  ASSERT_EQ(current.status, 0) << current.err;
  EXPECT_EQ(current.err.find("old spelling"), std::string::npos) << current.err;
  const Result old = run(tiny + "--precision bf16");
  ASSERT_EQ(old.status, 0) << old.err;
  EXPECT_NE(old.err.find("note: --precision is the old spelling of --precisions"), std::string::npos) << old.err;
  EXPECT_EQ(nlohmann::json::parse(old.out).at("precision"), nlohmann::json::parse(current.out).at("precision"));
  const Result overlap = run(tiny + "--overlap 0");
  ASSERT_EQ(overlap.status, 0) << overlap.err;
  EXPECT_NE(overlap.err.find("note: --overlap 0 is the old spelling: --overlap off"), std::string::npos) << overlap.err;
  expect_refused(tiny + "--overlap maybe", {"--overlap: 'maybe' is not on or off"});
  expect_refused("train --master-weights yes", {"--master-weights: 'yes' is not on or off"});
  for (const char* dtype : {"fp16", "f16", "float16"}) {
    const Result mm = run(std::string("bench matmul --m 16 --k 16 --n 16 --repeat 1 --json --dtype ") + dtype);
    EXPECT_EQ(mm.status, 0) << dtype << ": " << mm.err;
  }
  expect_refused("bench matmul --dtype e4m3", {"--dtype: precision 'e4m3' is not fp32, bf16 or fp16"});
  // A resume that differs in precision says fp16, as --precision does (not the dtype's f16).
  Scratch s;
  ASSERT_EQ(run("train --model mlp --hidden 16 --steps 1 --precision fp16 --checkpoint-dir " + s.path("c")).status, 0);
  const Result resumed = run("train --model mlp --hidden 16 --steps 2 --precision bf16 --resume --checkpoint-dir " + s.path("c"));
  EXPECT_EQ(resumed.status, 2);
  EXPECT_NE(resumed.err.find("fp16"), std::string::npos) << resumed.err;
  for (auto at = resumed.err.find("f16"); at != std::string::npos; at = resumed.err.find("f16", at + 1)) {
    EXPECT_TRUE(at > 0 && (resumed.err[at - 1] == 'b' || resumed.err[at - 1] == 'p')) << resumed.err;  // bf16 and fp16 only
  }
}

TEST(TrainCommand, WarmupAppliesToTheConstantScheduleToo) {
  Scratch s;
  const Result r = run("train --model mlp --steps 6 --eval-every 6 --lr 1e-3 --schedule constant --warmup 4 --metrics " +
                       s.path("m.jsonl"));
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<double> lrs;
  std::istringstream in(slurp(s.path("m.jsonl")));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("lr")) lrs.push_back(j.at("lr").get<double>());
  }
  const std::vector<double> want{0.25e-3, 0.5e-3, 0.75e-3, 1e-3, 1e-3, 1e-3};
  ASSERT_EQ(lrs.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(lrs[i], want[i], 1e-12) << i;
}

TEST(TrainCommand, OutOfRangeValuesAreOneLineErrorsNeverCrashesOrSilentResults) {
  // Each was a crash (SIGFPE, SIGSEGV) or a silently wrong run before it was checked.
  for (const char* args : {"train --model gpt --n-head 0", "train --model cnn --width 0",
                           "train --steps 99999999999999999999", "train --epochs 99999999999999999999",
                           "train --lr inf", "train --weight-decay nan", "train --momentum 1",
                           "train --model gpt --eval-batches 0", "train --model gpt --block-size 0",
                           "train --threads -3", "train --precision fp16 --loss-scale static:1e300",
                           "train --lr 1e300", "train --weight-decay 1e300", "train --loss-weight 1e300",
                           "train --precision fp16 --backoff-factor 1e-300", "train --data ''", "train --loss-scale ''",
                           "paper --quick --models ''",
                           "train --model gpt --n-head 3", "train --resume-allow hidden",
                           "bench matmul --m 4611686018427387904"}) {
    const Result r = run(std::string(args) + " --steps 1");
    EXPECT_TRUE(r.status == 1 || r.status == 2) << args << ": status " << r.status;
    EXPECT_EQ(lines(r.err), 1) << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("mantissa: ", 0), 0u) << args << ": " << r.err;
  }
}

// Every numeric flag of every command goes through the library's one number parser (number_flags.h):
// the flags are read off each command's help (so a flag added later is covered), and each is given
// texts that CLI11 alone took as other numbers (010 as eight, 0x10 as sixteen, -1 as 2^64 - 1) or
// refused with a generic message. Each must be one line naming the flag, status 2.
TEST(NumberFlags, EveryNumericFlagOfEveryCommandIsReadAsADecimal) {
  // "  --steps INT=500   Optimizer steps": the flag, then its type (INT, UINT, FLOAT, or another).
  const auto numeric_flag = [](const std::string& line, std::string& flag, std::string& type) {
    std::istringstream words(line);
    std::string value;
    if (!(words >> flag >> value) || flag.rfind("--", 0) != 0 || line.rfind("  ", 0) != 0) return false;
    type = value.substr(0, value.find_first_of("=:"));
    return type == "INT" || type == "UINT" || type == "FLOAT";
  };
  int flags = 0;
  for (const std::string command : {"train", "compare", "paper", "inspect x.jsonl", "cast --to bf16", "formats", "info",
                                    "bench", "bench matmul", "bench mlp"}) {
    const Result help = run(command + " --help");
    ASSERT_EQ(help.status, 0) << command;
    std::istringstream lines_of(help.out);
    for (std::string line, flag, type; std::getline(lines_of, line);) {
      if (!numeric_flag(line, flag, type)) continue;
      ++flags;
      std::vector<std::string> bad = {"0x10", "5abc"};  // (an empty text: Flags.AnEmptyValueIsRefusedByEveryOption)
      bad.push_back(type == "FLOAT" ? "0x1p-3" : "1.5");
      if (type == "UINT") bad.push_back("-1");
      if (type == "FLOAT") bad.push_back("nan");
      for (const std::string& value : bad) {
        const Result r = run(command + " " + flag + " " + value);
        EXPECT_EQ(r.status, 2) << command << " " << flag << " " << value << ": " << r.err;
        EXPECT_EQ(lines(r.err), 1) << command << " " << flag << " " << value << ": " << r.err;
        EXPECT_NE(r.err.find(flag + ": '"), std::string::npos) << command << " " << flag << " " << value << ": " << r.err;
        EXPECT_NE(r.err.find("decimal"), std::string::npos) << command << " " << flag << " " << value << ": " << r.err;
      }
    }
  }
  EXPECT_GT(flags, 80);  // the help's format changed if none were found
  // And a leading zero is decimal: ten steps, not eight.
  const Result ten = run("train --model mlp --steps 010 --eval-every 100 --json");
  ASSERT_EQ(ten.status, 0) << ten.err;
  EXPECT_NE(ten.out.find("\"steps\":10"), std::string::npos) << ten.out;
}

// The options of `command`'s help that take a value, with its type: "  --steps INT=500  ..." gives
// ("--steps", "INT"), "  --data TEXT  ..." ("--data", "TEXT"); flags without a value are left out.
namespace {
std::vector<std::pair<std::string, std::string>> value_options(const std::string& command) {
  const Result help = run(command + " --help");
  EXPECT_EQ(help.status, 0) << command;
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream lines_of(help.out);
  for (std::string line, flag, value; std::getline(lines_of, line);) {
    std::istringstream words(line);
    if (line.rfind("  --", 0) != 0 || !(words >> flag >> value)) continue;
    const std::string type = value.substr(0, value.find_first_of("=:"));
    const auto upper = [](char c) { return std::isupper(static_cast<unsigned char>(c)) || c == '_'; };
    if (!type.empty() && std::all_of(type.begin(), type.end(), upper)) out.emplace_back(flag, type);
  }
  return out;
}
}  // namespace

// Every real-valued flag of the training commands has a declared range (mantissa/train/setting_ranges.h,
// src/train/run_options.cpp's real_settings): a finite value that cannot train, 1e300, is refused in one
// line naming the flag. A FLOAT flag added without a range fails here.
TEST(Flags, EveryRealFlagOfTheTrainingCommandsHasARange) {
  int reals = 0;
  for (const std::string command : {"train", "compare"}) {
    for (const auto& [flag, type] : value_options(command)) {
      if (type != "FLOAT") continue;
      ++reals;
      const Result r = run(command + " --model mlp --steps 1 " + flag + " 1e300");
      EXPECT_EQ(r.status, 2) << command << " " << flag << ": " << r.err;
      EXPECT_EQ(lines(r.err), 1) << command << " " << flag << ": " << r.err;
      EXPECT_NE(r.err.find(flag), std::string::npos) << command << " " << flag << ": " << r.err;
    }
  }
  EXPECT_GT(reals, 20);  // the help's format changed if none were found
}

// An empty text where a value is expected is refused, by every option of every command (the routing in
// number_flags.cpp), never taken as the default: `--data ''` trained on Fashion-MNIST, `paper --models ''`
// ran the whole suite.
TEST(Flags, AnEmptyValueIsRefusedByEveryOption) {
  int options = 0;
  for (const std::string command : {"train", "compare", "paper", "inspect x.jsonl", "cast --to bf16", "formats", "info",
                                    "bench", "bench matmul", "bench mlp", "export x.safetensors --to pytorch y.safetensors"}) {
    for (const auto& [flag, type] : value_options(command)) {
      ++options;
      const Result r = run(command + " " + flag + " ''");
      EXPECT_EQ(r.status, 2) << command << " " << flag << ": " << r.err;
      EXPECT_EQ(lines(r.err), 1) << command << " " << flag << ": " << r.err;
      EXPECT_NE(r.err.find("empty"), std::string::npos) << command << " " << flag << ": " << r.err;
    }
  }
  EXPECT_GT(options, 150);
}

// A thread count inside the documented bound that the address space cannot hold stacks for is refused,
// naming the cap (OpenMP aborted the process: "Thread creation failed").
TEST(Flags, ThreadCountsAreCappedByWhatTheProcessCanStart) {
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "AddressSanitizer maps terabytes of shadow memory at start: no sanitized process runs under prlimit --as";
#endif
  Scratch s;
  for (const std::string command : {"train --model mlp --steps 1", "bench matmul", "bench mlp"}) {
    const std::string cmd = "prlimit --as=8589934592 " + std::string(MANTISSA_CLI) + " " + command +
                            " --threads 4096 >/dev/null 2>" + s.path("err");
    const int raw = std::system(cmd.c_str());
    const std::string err = slurp(s.path("err"));
    EXPECT_EQ(WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, 2) << command << ": " << err;
    EXPECT_EQ(lines(err), 1) << command << ": " << err;
    EXPECT_NE(err.find("at most"), std::string::npos) << command << ": " << err;
    EXPECT_NE(err.find("address space limit"), std::string::npos) << command << ": " << err;
  }
  // OMP_NUM_THREADS is the same count by another door (the one OpenMP takes when --threads is not given).
  const int raw = std::system(("OMP_NUM_THREADS=4096 prlimit --as=8589934592 " + std::string(MANTISSA_CLI) +
                               " train --model mlp --steps 1 >/dev/null 2>" + s.path("err")).c_str());
  const std::string err = slurp(s.path("err"));
  EXPECT_EQ(WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, 2) << err;
  EXPECT_EQ(lines(err), 1) << err;
  EXPECT_NE(err.find("OMP_NUM_THREADS"), std::string::npos) << err;
}

// The environment the kernels read is checked as the flags are: a cap that names no instruction set
// (a typo) left the kernels uncapped, silently.
TEST(Flags, AnInstructionSetCapThatNamesNoneIsRefused) {
  const Result r = run("train --model mlp --steps 1", "", "MANTISSA_ISA=avx3");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("MANTISSA_ISA: 'avx3' is not one of portable, avx2, avx512, avx512_bf16"), std::string::npos) << r.err;
}

TEST(Output, AFailedWriteToStandardOutputIsAnError) {
  const int raw = std::system((std::string(MANTISSA_CLI) + " formats > /dev/full 2>/dev/null").c_str());
  EXPECT_EQ(WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, 1);
}

TEST(TrainCommand, MetricsAreAppendedLiveToARegularFileOnly) {
  Scratch s;
  const std::string m = s.path("m.jsonl");
  { std::ofstream(m) << "{\"mine\":1}\n"; }
  // A file that holds records already takes another run's only when told (--metrics-append).
  const Result refused = run("train --model mlp --steps 3 --eval-every 3 --metrics " + m);
  EXPECT_EQ(refused.status, 2);
  EXPECT_EQ(lines(refused.err), 1) << refused.err;
  EXPECT_NE(refused.err.find("--metrics-append"), std::string::npos) << refused.err;
  ASSERT_EQ(run("train --model mlp --steps 3 --eval-every 3 --metrics-append --metrics " + m).status, 0);
  const std::string after = slurp(m);
  EXPECT_EQ(after.rfind("{\"mine\":1}\n", 0), 0u);  // what was there is kept
  EXPECT_EQ(lines(after), 1 + 1 + 3 + 1);  // theirs, the run record, 3 steps, 1 evaluation
  // Every record carries its wall time; the run record says which run (docs/metrics.md).
  std::istringstream records(after.substr(after.find('\n') + 1));
  std::string line;
  std::getline(records, line);
  const auto run_record = nlohmann::json::parse(line);
  EXPECT_EQ(run_record.at("record"), "run");
  for (const char* key : {"version", "start_time", "machine", "config", "data", "precision_plan", "first_step"}) {
    EXPECT_TRUE(run_record.contains(key)) << key << ": " << line;
  }
  while (std::getline(records, line)) EXPECT_TRUE(nlohmann::json::parse(line).at("wall_time").is_number()) << line;
  // inspect sums a metrics file up per run.
  const std::string two = s.path("two.jsonl");
  ASSERT_EQ(run("train --model mlp --steps 2 --eval-every 2 --metrics " + two).status, 0);
  ASSERT_EQ(run("train --model mlp --steps 3 --eval-every 3 --metrics-append --metrics " + two).status, 0);
  const Result summary = run("inspect " + two);
  EXPECT_EQ(summary.status, 0) << summary.err;
  EXPECT_NE(summary.out.find("metrics of 2 runs"), std::string::npos) << summary.out;
  EXPECT_NE(summary.out.find("run 2: mlp fp32, started "), std::string::npos) << summary.out;
  EXPECT_NE(summary.out.find("steps 1..3 (0 skipped)"), std::string::npos) << summary.out;
  for (const char* bad : {"/dev/full", "/tmp"}) {
    const Result r = run(std::string("train --steps 1 --metrics ") + bad);
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  }
  // A killed run keeps the lines of the steps it finished (each is flushed as it is written).
  const std::string k = s.path("killed.jsonl");
  // (Killed once its first line is there, however long loading the data took: up to 120 s.)
  (void)std::system(("(" + std::string(MANTISSA_CLI) + " train --model mlp --steps 1000000 --metrics " + k +
                     " >/dev/null 2>&1 & pid=$!; i=0; while [ ! -s " + k + " ] && [ $i -lt 1200 ]; do sleep 0.1; "
                     "i=$((i+1)); done; sleep 0.5; kill -KILL $pid; wait $pid) 2>/dev/null").c_str());
  EXPECT_GT(lines(slurp(k)), 0);
}

TEST(TrainCommand, ResumeRefusesCheckpointsWithMissingWrongOrNonFiniteState) {
  // Each of these resumed before (with zeros for the missing moments, val loss 65 instead of 2.2; with a
  // summary of -995 steps; with NaN weights); each is now one line naming the file and what is wrong, and
  // the checkpoint is left as it was.
  Scratch s;
  const std::string good = s.path("good"), file = "/ckpt-00000010.safetensors";
  const std::string run_flags = "train --model mlp --precision bf16 --mode low-precision-model --eval-every 20 ";
  ASSERT_EQ(run(run_flags + "--steps 10 --checkpoint-dir " + good).status, 0);
  const std::string editor = std::string("python3 ") + MANTISSA_SOURCE_DIR + "/tests/io/edit_checkpoint.py ";
  const auto scaler = [](const std::string& scale, int skipped, int steps) {
    return "{\"floor_overflows\":0,\"growth_tracker\":0,\"hysteresis_left\":1,\"scale\":" + scale +
           ",\"skipped\":" + std::to_string(skipped) + ",\"steps\":" + std::to_string(steps) + "}";
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"drop-prefix optim/", "'master.0' is missing"},
      {"drop-prefix optim/m.", "'m.0' is missing"},
      {"retype optim/m.0 BF16", "'m.0' is bf16, this optimizer keeps f32"},
      {"set-meta step -995", "step -995 is not a step"},
      {"set-meta step 1e3", "metadata 'step': '1e3' is not a decimal integer"},
      {"set-meta data_position 99999999", "batch order: position out of range"},
      {"nan model/fc0.weight", "'model/fc0.weight' holds NaN"},
      {"nan optim/master.0", "'optim/master.0' holds NaN"},
      // The meaning, past the bytes: a second moment below 0, counters that disagree, a scale f32 cannot hold.
      {"set-first optim/v.0 -1", "'v.0' holds -1.000000 at element 0, where a second moment is at least 0"},
      {"set-meta optim_step 7", "its counters disagree: step 10, the loss scaler's 10 steps with 0 skipped, the optimizer's 7"},
      {"set-meta loss_scaler '" + scaler("\"1e39\"", 0, 10) + "'", "saved scale 1e+39 is not a positive number f32 holds"},
      {"set-meta loss_scaler '" + scaler("\"0\"", 0, 10) + "'", "is not a positive number f32 holds"},
      {"set-meta loss_scaler '" + scaler("\"1\"", 11, 10) + "'", "count of skipped steps (11) exceeds its steps"}};
  for (const auto& [edit, message] : cases) {
    const std::string dir = s.path("bad");
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    ASSERT_EQ(std::system((editor + good + file + " " + dir + file + " " + edit).c_str()), 0) << edit;
    const auto before = slurp(dir + file);
    const Result r = run(run_flags + "--steps 20 --checkpoint-dir " + dir + " --resume");
    EXPECT_EQ(r.status, 2) << edit << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << edit << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << edit << ": " << r.err;
    EXPECT_NE(r.err.find(file.substr(1)), std::string::npos) << edit << ": " << r.err;
    EXPECT_EQ(slurp(dir + file), before) << edit;
  }
}

TEST(CompareCommand, EachPrecisionCheckpointsApartAndABadPlotPathStopsAtStart) {
  Scratch s;
  const std::string dir = s.path("ck");
  ASSERT_EQ(run("compare --model mlp --steps 4 --eval-every 4 --precisions fp32,bf16 --no-plot --checkpoint-dir " + dir).status, 0);
  for (const char* p : {"fp32", "bf16"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + p + "/ckpt-00000004.safetensors")) << p;  // fp16 overwrote fp32 before
  }
  const Result bad = run("compare --model mlp --steps 100000 --plot " + s.path("no/such/dir.svg"));
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--plot"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("does not exist"), std::string::npos) << bad.err;
  EXPECT_EQ(bad.err.find("=="), std::string::npos) << "trained before failing: " << bad.err;
}

TEST(TrainCommand, CheckpointsAreOrderedByStepNumberAndOnlyRegularFilesCount) {
  Scratch s;
  const std::string dir = s.path("ck");
  ASSERT_EQ(run("train --model mlp --steps 10 --eval-every 10 --checkpoint-dir " + dir).status, 0);
  const std::string ten = dir + "/ckpt-00000010.safetensors";
  // Past step 99,999,999 the names grow a digit: as strings, 100000000 sorts before 99999999.
  std::filesystem::copy_file(ten, dir + "/ckpt-99999999.safetensors");
  std::filesystem::copy_file(ten, dir + "/ckpt-100000000.safetensors");
  ASSERT_EQ(::mkfifo((dir + "/ckpt-999999999.safetensors").c_str(), 0600), 0);  // a pipe is no checkpoint
  const Result r = run("train --model mlp --steps 20 --eval-every 20 --keep 2 --checkpoint-dir " + dir + " --resume");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("resumed from " + dir + "/ckpt-100000000.safetensors"), std::string::npos) << r.err;  // the newest by number
  // The checkpoint just written is never pruned for names past it (an earlier run's, left to be
  // overwritten): --keep 2 counts those up to step 20.
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt-00000020.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt-00000010.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt-100000000.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt-99999999.safetensors"));
}

TEST(CompareCommand, RunsEachPrecisionAndDrawsTheCurves) {
  Scratch s;
  const Result r = run("compare --model mlp --steps 30 --eval-every 30 --precisions fp32,bf16,fp16 --json --plot " +
                       s.path("c.svg"));
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* key : {"\"precision\":\"fp32\"", "\"precision\":\"bf16\"", "\"precision\":\"fp16\"",
                          "\"throughput_ratio\"", "\"peak_ratio\"", "\"val_accuracy\"", "\"skipped_steps\""}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
  const std::string svg = slurp(s.path("c.svg"));
  EXPECT_EQ(svg.rfind("<svg", 0), 0U);
  std::size_t polylines = 0;
  for (auto at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++polylines;
  EXPECT_EQ(polylines, 6U);  // a loss curve and a scale trace per precision
  EXPECT_EQ(run("compare --precisions fp32,fp64x --steps 2").status, 2);
}

// The microscaled recipes side by side with bf16 and fp8 in one compare, each saying what it runs.
TEST(CompareCommand, RunsTheMicroscaledRecipesBesideBf16AndFp8) {
  const Result r = run("compare --model gpt --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --batch-size 4 --steps 3 "
                       "--eval-every 3 --eval-batches 1 --precisions bf16,fp8,mxfp8,nvfp4 --json --no-plot");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* key : {R"("precision":"bf16")", R"("precision":"fp8")", R"("precision":"mxfp8")", R"("precision":"nvfp4")"}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
  const Result ablated = run("train --model gpt --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --batch-size 4 --steps 2 "
                             "--eval-every 2 --eval-batches 1 --precision nvfp4 --nvfp4-no-rht --nvfp4-no-sr --nvfp4-1d-weights");
  ASSERT_EQ(ablated.status, 0) << ablated.err;
  EXPECT_NE(ablated.err.find("weights 1x16, RHT off, gradients nearest"), std::string::npos) << ablated.err;
  EXPECT_EQ(run("train --steps 2 --precision mxfp8 --nvfp4-no-sr").status, 2);  // an nvfp4 flag without nvfp4
  // In a compare, a precision's flags are for the runs of that precision: the bf16 run does not refuse them.
  const Result both = run("compare --model gpt --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --batch-size 4 --steps 2 "
                          "--eval-every 2 --eval-batches 1 --precisions bf16,nvfp4 --nvfp4-no-rht --fp8-margin 1 --no-plot");
  EXPECT_EQ(both.status, 0) << both.err;
  EXPECT_EQ(run("compare --steps 2 --precisions bf16,mxfp8 --nvfp4-no-rht --no-plot").status, 2);
}

TEST(TrainCommand, AnIndependentReaderChecksACheckpoint) {
  // A bf16 low-precision-model run: python (json, struct) checks names, dtypes, shapes, metadata, and
  // that each bf16 weight is its f32 master weight rounded to nearest even.
  Scratch s;
  const std::string dir = s.path("ckpt");
  ASSERT_EQ(run("train --model mlp --steps 12 --eval-every 12 --precision bf16 --mode low-precision-model "
                "--checkpoint-dir " + dir).status, 0);
  const std::string cmd = std::string("python3 ") + MANTISSA_SOURCE_DIR + "/tests/io/check_checkpoint.py " + dir +
                          "/ckpt-00000012.safetensors";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(Help, EverySubcommandHasIt) {
  for (const char* args : {"--help", "formats --help", "cast --help", "info --help", "bench --help",
                           "bench matmul --help", "bench mlp --help", "train --help", "compare --help"}) {
    const Result r = run(args);
    EXPECT_EQ(r.status, 0) << args;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << args << r.out;
  }
  EXPECT_NE(run("cast --help").out.find("--saturate"), std::string::npos);
}

}  // namespace

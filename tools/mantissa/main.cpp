// The `mantissa` command: parses the subcommand and its flags, runs it, and turns every error into one
// line on standard error: exit status 2 for a bad flag or input, 3 for a training run stopped because it
// stalled (--stop-on-stall), 1 for a failure (bad data, a failed write, standard output included).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <new>
#include <string>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"mantissa: mixed-precision training of neural networks"};
  app.require_subcommand(1);
  std::map<CLI::App*, mantissa::cli::Run> runs;
  auto add = [&](const char* name, const char* about, auto adder) {
    CLI::App* sub = app.add_subcommand(name, about);
    runs[sub] = adder(*sub);
  };
  add("formats", "Print the properties of every number format", mantissa::cli::add_formats);
  add("cast", "Round fp32 values read from standard input into a format", mantissa::cli::add_cast);
  add("train", "Train a model (mlp, cnn, segment, gpt, lstm) on real data in fp32, bf16 or fp16", mantissa::cli::add_train);
  add("compare", "Train the same model in several precisions and compare them side by side", mantissa::cli::add_compare);
  add("paper", "The mixed-precision paper's experiments: each model in fp32, bf16, fp16 with and without loss scaling "
               "and master weights, as a table", mantissa::cli::add_paper);
  add("inspect", "Summarize a run's numerics telemetry: tensors closest to underflow and overflow, the gradient histogram",
      mantissa::cli::add_inspect);
  add("info", "What this machine's kernels can do: instruction sets, AMX, oneDNN's dtypes", mantissa::cli::add_info);
  add("bench", "Benchmarks: whole training steps per precision (--model), matmul against the measured peak, an MLP step", mantissa::cli::add_bench);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    // Subcommand help comes through here too, with exit code 0.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "mantissa: %s\n", e.what());
    return mantissa::cli::kBadInput;
  }
  // What a command printed must have reached standard output (a full disk, a closed pipe): else fail.
  const auto flushed = [](int status) {
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::fprintf(stderr, "mantissa: writing standard output failed: %s\n", std::strerror(errno));
      return status == 0 ? 1 : status;
    }
    return status;
  };
  try {
    for (CLI::App* sub : app.get_subcommands()) return flushed(runs.at(sub)());
  } catch (const mantissa::train::TrainingStalled& e) {  // --stop-on-stall: a distinct status
    std::fprintf(stderr, "mantissa: stopped: %s\n", e.what());
    return mantissa::cli::kStalled;
  } catch (const mantissa::LossScaleCollapse& e) {
    std::fprintf(stderr, "mantissa: stopped: %s\n", e.what());
    return mantissa::cli::kStalled;
  } catch (const std::invalid_argument& e) {  // a bad flag value or input: a usage error
    std::fprintf(stderr, "mantissa: %s\n", e.what());
    return mantissa::cli::kBadInput;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mantissa: out of memory (the sizes asked for need more than this machine has)\n");
    return 1;
  } catch (const std::exception& e) {  // a bad data file, a failed write, ...
    std::fprintf(stderr, "mantissa: %s\n", e.what());
    return 1;
  }
  return 0;
}
